"""`vllm_spec_lab.httpd.LoopbackServer`: the one way the lab and the tests serve HTTP in-process."""

from __future__ import annotations

import threading
from urllib.error import URLError
from urllib.request import urlopen

import pytest

from vllm_spec_lab import ports
from vllm_spec_lab.httpd import LoopbackServer, QuietHandler


class Slow(QuietHandler):
    release = threading.Event()  # set by the test that uses it, fresh for each run

    def do_GET(self) -> None:
        if self.path == "/slow":
            self.release.wait(30)  # held until another request was answered meanwhile
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_handler_is_served_on_loopback_a_thread_per_request_until_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Slow, "release", threading.Event())
    with LoopbackServer(Slow) as server:
        assert server.url == f"http://127.0.0.1:{server.port}"
        slow = threading.Thread(target=lambda: urlopen(server.url + "/slow", timeout=10).read())
        slow.start()
        # Served one at a time, this would wait for /slow, which waits for it: a timeout error.
        assert urlopen(server.url + "/quick", timeout=20).read() == b"/quick"
        Slow.release.set()
        slow.join()
    with pytest.raises(URLError):
        urlopen(server.url + "/", timeout=5)
    server.stop()  # a second stop is a no-op


def test_a_wsgi_app_is_served() -> None:
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ["PATH_INFO"].encode()]

    with LoopbackServer.wsgi(app) as server:
        assert urlopen(server.url + "/metrics", timeout=10).read() == b"/metrics"


def test_the_port_comes_from_the_workers_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ports.RANGE_VARIABLE, "32400-32409")
    with LoopbackServer(Slow) as server:
        assert 32400 <= server.port <= 32409
