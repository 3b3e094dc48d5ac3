"""The exporter's own HTTP endpoint: /metrics, /healthz and a landing page.

Serving never touches the target: /metrics formats the poller's latest result, so a slow or hung
vLLM cannot block a scrape.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from . import __version__
from .poller import Poller
from .webconfig import WebConfig

__all__ = ["ExporterServer", "parse_listen", "serve_in_thread"]

log = logging.getLogger("vllm_spec_exporter")

_LANDING = """<!doctype html><html><head><title>vllm-spec-exporter</title></head><body>
<h1>vllm-spec-exporter {version}</h1>
<p>Watching <code>{target}</code>: is speculative decoding paying off?</p>
<ul><li><a href="metrics">/metrics</a></li><li><a href="healthz">/healthz</a></li></ul>
</body></html>
"""


class ExporterServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry, poller: Poller,
                 web_config: WebConfig | None = None) -> None:
        self.registry = registry
        self.poller = poller
        self.web_config = web_config or WebConfig()
        # The exposition is a pure function of the poller's latest (immutable) result, so it is
        # rendered once per poll and content type, not once per scrape: many concurrent scrapers
        # then cost almost nothing.
        self._rendered: tuple[object, dict[str, bytes]] = (None, {})
        self._render_lock = threading.Lock()
        if ":" in address[0]:  # an IPv6 literal such as ::1 (from --listen [::1]:9850)
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        if self.web_config.ssl_context is not None:
            # The handshake then runs in each request's thread, not in the accept loop, so a client
            # that connects and stalls cannot block other scrapers.
            self.socket = self.web_config.ssl_context.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False)

    def exposition(self, accept: str) -> tuple[str, bytes]:
        encoder, content_type = choose_encoder(accept)
        result = self.poller.current()
        with self._render_lock:
            owner, bodies = self._rendered
            if owner is not result:
                bodies = {}
                self._rendered = (result, bodies)
            body = bodies.get(content_type)
            if body is None:
                body = bodies[content_type] = encoder(self.registry)
        return content_type, body

    def healthy(self) -> tuple[bool, dict]:
        """Alive when the poll loop is making progress (whether or not vLLM is up: a liveness
        probe that failed with vLLM would restart the sidecar for nothing)."""
        poller = self.poller
        age = poller.seconds_since_last_poll()
        stalled = age is None or age > poller.stale_after
        result = poller.result
        body = {"status": "stalled" if stalled else "ok", "target_up": result.target_up,
                "schema": result.schema, "last_poll_age_seconds": age}
        if result.error_message:
            body["last_error"] = result.error_message
        return not stalled, body


class _Handler(BaseHTTPRequestHandler):
    server: ExporterServer
    server_version = "vllm-spec-exporter/" + __version__
    protocol_version = "HTTP/1.1"
    timeout = 30  # seconds a client may stall mid-request before its thread is freed
    # Headers and body go out in separate writes; without TCP_NODELAY, Nagle + delayed ACK add
    # ~40 ms to every keep-alive scrape.
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        web = self.server.web_config
        authorized = web.authorized(self.headers.get("Authorization"))
        if path == "/healthz" and not authorized:
            # Liveness probes (kubelet, compose) carry no credentials: answer them, with the status
            # only, never the target or its last error.
            ok, _ = self.server.healthy()
            body = json.dumps({"status": "ok" if ok else "stalled"}).encode() + b"\n"
            self._send(200 if ok else 503, "application/json", body)
            return
        if not authorized:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="vllm-spec-exporter"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/metrics":
            content_type, body = self.server.exposition(self.headers.get("Accept", ""))
            self._send(200, content_type, body)
        elif path == "/healthz":
            ok, body = self.server.healthy()
            self._send(200 if ok else 503, "application/json", json.dumps(body).encode() + b"\n")
        elif path == "/":
            page = _LANDING.format(version=__version__, target=_html(self.server.poller.fetcher.url))
            self._send(200, "text/html; charset=utf-8", page.encode())
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics\n")

    def do_HEAD(self) -> None:
        self.do_GET()

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen must be host:port, got {listen!r}")
    if int(port) > 65535:
        raise ValueError(f"--listen: port {port} is out of range (0-65535)")
    return host.strip("[]") or "0.0.0.0", int(port)


def serve_in_thread(server: ExporterServer) -> threading.Thread:
    # A short poll interval lets shutdown() return quickly on SIGTERM.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="http",
                              daemon=True)
    thread.start()
    return thread
