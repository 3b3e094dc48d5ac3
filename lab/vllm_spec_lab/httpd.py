"""HTTP servers inside this process, on 127.0.0.1, serving from a thread: the fakes, the webhook,
the tests' replays and proxies, the benches' synthetic targets — one way to start and stop them.

`LoopbackServer(handler)` serves a `BaseHTTPRequestHandler` class; `LoopbackServer.wsgi(app)` a
WSGI app. Either binds a port from `ports.free_port()` (so parallel test workers never share one),
handles each request on its own daemon thread, keeps its access log off the test output, and
`stop()` shuts it down and closes the socket (idempotent; also on leaving a `with` block).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import ThreadingMixIn
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from .ports import free_port

__all__ = ["LoopbackServer", "QuietHandler", "QuietWSGIHandler", "ThreadingWSGIServer"]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler without an access log (test output stays readable)."""

    def log_message(self, *args: object) -> None:
        pass


class QuietWSGIHandler(WSGIRequestHandler):
    """wsgiref's request handler without an access log."""

    def log_message(self, *args: object) -> None:
        pass


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """wsgiref's server with a daemon thread per request (a slow client never blocks the others)."""

    daemon_threads = True


class LoopbackServer:
    """A server on 127.0.0.1:`port` (from `free_port`), serving from a daemon thread until `stop`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], *,
                 server_class: Callable[..., ThreadingHTTPServer | WSGIServer] = ThreadingHTTPServer,
                 port: int | None = None, app: WSGIApp | None = None) -> None:
        self._server = server_class(("127.0.0.1", free_port() if port is None else port), handler)
        self._server.daemon_threads = True  # type: ignore[union-attr]
        if app is not None:
            self._server.set_app(app)  # type: ignore[union-attr]
        self.port: int = self._server.server_port
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        self._stopped = False
        threading.Thread(target=self._server.serve_forever, name=f"httpd-{self.port}", daemon=True).start()

    @classmethod
    def wsgi(cls, app: WSGIApp, port: int | None = None) -> LoopbackServer:
        """Serve a WSGI app (e.g. prometheus_client's make_wsgi_app) the same way."""
        return cls(QuietWSGIHandler, server_class=ThreadingWSGIServer, port=port, app=app)

    def stop(self) -> None:
        """Stop serving and close the socket; a second call does nothing."""
        if not self._stopped:
            self._stopped = True
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
