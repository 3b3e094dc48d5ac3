"""A misbehaving /metrics target on 127.0.0.1 for fault-injection tests.

Raw sockets, so it can do what a well-behaved HTTP library refuses to: hang, trickle bytes, cut a
body mid-line, stream forever. The mode can be switched while the exporter keeps polling.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

from vllm_spec_lab.ports import free_port

Behaviour = Callable[[socket.socket], None]


def http_response(body: bytes, status: str = "200 OK", content_type: str = "text/plain; version=0.0.4",
                  extra_headers: str = "", length: int | None = None) -> bytes:
    length = len(body) if length is None else length
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n"
            f"Connection: close\r\n{extra_headers}\r\n")
    return head.encode() + body


class BadTarget:
    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", free_port()))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._behaviour: Behaviour = self.body(b"# TYPE x gauge\n")
        self._stop = threading.Event()
        self.requests: list[bytes] = []  # raw request heads, to check what the exporter asked for
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def set(self, behaviour: Behaviour) -> None:
        self._behaviour = behaviour

    # --- behaviours ---------------------------------------------------------------------------
    @staticmethod
    def body(payload: bytes, **kwargs) -> Behaviour:
        return lambda conn: conn.sendall(http_response(payload, **kwargs))

    @staticmethod
    def status(code: str, headers: str = "") -> Behaviour:
        return lambda conn: conn.sendall(http_response(b"nope\n", status=code, extra_headers=headers))

    def hang(self) -> Behaviour:
        def run(conn: socket.socket) -> None:
            self._stop.wait(30)  # accept, read the request, never answer
        return run

    def trickle(self, payload: bytes, every: float = 0.05) -> Behaviour:
        def run(conn: socket.socket) -> None:
            conn.sendall(http_response(b"", length=len(payload)))
            for i in range(len(payload)):
                if self._stop.is_set():
                    return
                conn.sendall(payload[i:i + 1])
                time.sleep(every)
        return run

    @staticmethod
    def short_body(payload: bytes) -> Behaviour:
        """Declares more bytes than it sends, then closes: a connection cut mid-body."""
        return lambda conn: conn.sendall(http_response(payload, length=len(payload) + 500))

    def stall_after_headers(self, payload: bytes) -> Behaviour:
        def run(conn: socket.socket) -> None:
            conn.sendall(http_response(b"", length=len(payload)) + payload[: len(payload) // 2])
            self._stop.wait(30)
        return run

    def trickle_headers(self, every: float = 0.2) -> Behaviour:
        def run(conn: socket.socket) -> None:
            head = http_response(b"# TYPE x gauge\n")
            for i in range(len(head)):
                if self._stop.is_set():
                    return
                conn.sendall(head[i:i + 1])
                time.sleep(every)
        return run

    def endless(self) -> Behaviour:
        def run(conn: socket.socket) -> None:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
            line = b'vllm:num_requests_running{engine="0",model_name="m"} 1\n' * 1000
            deadline = time.monotonic() + 20
            while not self._stop.is_set() and time.monotonic() < deadline:
                conn.sendall(line)
        return run

    @staticmethod
    def reset() -> Behaviour:
        def run(conn: socket.socket) -> None:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        return run

    # --- plumbing -----------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            self.requests.append(head)
            self._behaviour(conn)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()

    def __enter__(self) -> BadTarget:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
