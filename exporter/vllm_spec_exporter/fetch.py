"""Fetch the target's /metrics: bounded in time and size, never redirected, credentials hidden.

Only the configured target is ever contacted; nothing in an incoming request changes the URL.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import requests
import urllib3

__all__ = ["ACCEPT", "Credentials", "FetchError", "Fetcher", "metrics_url"]

# The classic text format keeps vLLM's colon names intact; OpenMetrics negotiation would escape
# them to underscores in prometheus_client >= 0.2x (client_python#1177).
ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
_CHUNK = 64 * 1024


class FetchError(Exception):
    """A failed fetch; `reason` is one of names.SCRAPE_ERROR_REASONS."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Credentials:
    bearer_token: str | None = field(default=None, repr=False)
    basic_user: str | None = None
    basic_password: str | None = field(default=None, repr=False)


def metrics_url(target: str) -> str:
    """`http://host:8000` -> `http://host:8000/metrics`; an explicit path is kept."""
    parts = urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--target must be an http(s) URL like http://127.0.0.1:8000, got {target!r}")
    if parts.query or parts.fragment:
        # A query string is where tokens hide, and the URL is logged: vLLM needs none.
        raise ValueError("--target must not carry a query string; credentials belong in files or env")
    if parts.username is not None or parts.password is not None:
        # A URL ends up in logs and error messages; credentials belong in files or env.
        raise ValueError("--target must not carry credentials; use --bearer-token-file or "
                         "--basic-auth-user with --basic-auth-password-file")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class Fetcher:
    """Fetches the one configured target's /metrics (and /version), bounded in time and size.

    Invariants: only the URLs fixed at construction (`url`, and `version_url`, `models_url`,
    `props_url`, `server_info_url` on the same host) are ever requested;
    redirects are never followed; each exchange (DNS, connect, headers, body) has a hard deadline
    of `timeout` seconds and a body cap of `max_bytes`, and any failure is a FetchError whose
    `reason` is a names.SCRAPE_ERROR_REASONS value; at most one request is in flight (a hung one
    blocks new requests instead of piling up threads); credentials never appear in messages.
    Used by one thread at a time: the poller's.
    """

    def __init__(self, target: str, timeout: float, max_bytes: int,
                 credentials: Credentials | None = None, ca_file: str | None = None,
                 insecure: bool = False, client_cert: str | None = None,
                 client_key: str | None = None) -> None:
        self.url = metrics_url(target)
        parts = urlsplit(self.url)
        self.version_url = urlunsplit((parts.scheme, parts.netloc, "/version", "", ""))
        self.models_url = urlunsplit((parts.scheme, parts.netloc, "/v1/models", "", ""))
        self.props_url = urlunsplit((parts.scheme, parts.netloc, "/props", "", ""))
        self.server_info_url = urlunsplit((parts.scheme, parts.netloc, "/server_info", "config_format=json", ""))
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._worker: threading.Thread | None = None
        self.session = requests.Session()
        self.session.trust_env = False  # no proxies or .netrc from the environment
        self.session.headers.update({"Accept": ACCEPT, "Accept-Encoding": "identity",
                                     "User-Agent": "vllm-spec-exporter"})
        creds = credentials or Credentials()
        if creds.bearer_token:
            self.session.headers["Authorization"] = f"Bearer {creds.bearer_token}"
        elif creds.basic_user is not None:
            self.session.auth = (creds.basic_user, creds.basic_password or "")
        self.session.verify = False if insecure else (ca_file or True)
        if client_cert:
            self.session.cert = (client_cert, client_key) if client_key else client_cert

    def get_metrics(self) -> str:
        body = self._bounded(lambda: self._get(self.url, self.max_bytes), f"GET {self.url}", self.timeout)
        return body.decode("utf-8", errors="replace")

    def get_version(self) -> str:
        """The server's version: vLLM's GET /version, else llama.cpp's `build_info` from GET /props
        (`b11434-…`), or "" when the server does not say."""
        for url, key, limit in ((self.version_url, "version", 4096), (self.props_url, "build_info", 1 << 20)):
            try:
                raw = self._bounded(lambda url=url, limit=limit: self._get(url, limit), f"GET {url}",
                                    min(self.timeout, 1.0))
                body = json.loads(raw)
            except (FetchError, ValueError):
                continue
            version = body.get(key, "") if isinstance(body, dict) else ""
            if isinstance(version, str) and 0 < len(version) < 64:
                return version
        return ""

    def get_model_name(self) -> str:
        """The one model an OpenAI-compatible server lists at GET /v1/models, or "" (none, several,
        or no such endpoint): for engines whose metrics carry no model_name label."""
        try:
            raw = self._bounded(lambda: self._get(self.models_url, 65536), f"GET {self.models_url}",
                                min(self.timeout, 1.0))
            body = json.loads(raw)
            models = body.get("data") if isinstance(body, dict) else None
            if isinstance(models, list) and len(models) == 1 and isinstance(models[0], dict):
                name = models[0].get("id", "")
                return name if isinstance(name, str) and len(name) < 256 else ""
        except (FetchError, ValueError):
            pass
        return ""

    def get_server_info(self) -> object:
        """vLLM's `GET /server_info?config_format=json` as parsed JSON (served only with
        VLLM_SERVER_DEV_MODE=1: otherwise HTTP 404), bounded by the timeout and --max-bytes.
        Raises FetchError, reason `parse` for a body that is not JSON."""
        body = self._bounded(lambda: self._get(self.server_info_url, self.max_bytes), f"GET {self.server_info_url}",
                             self.timeout)
        try:
            return json.loads(body)
        except ValueError as error:
            raise FetchError("parse", f"GET {self.server_info_url}: not JSON: {_short(error)}") from None

    def _bounded(self, request: Callable[[], bytes], what: str, budget: float) -> bytes:
        """Run `request` with a hard deadline for the whole exchange: socket timeouts bound each
        read, but not a server trickling its headers byte by byte or a slow DNS lookup. A request
        past its budget is abandoned (its daemon thread ends with its socket timeout) and no new one
        is sent while it still hangs, so a hung target costs at most one thread."""
        if self._worker is not None and self._worker.is_alive():
            raise FetchError("timeout", f"{what}: the previous request still hangs; not sending another")
        box: dict[str, object] = {}

        def work() -> None:
            try:
                box["value"] = request()
            except BaseException as error:  # handed to the caller below
                box["error"] = error

        worker = threading.Thread(target=work, name="fetch", daemon=True)
        self._worker = worker
        worker.start()
        worker.join(budget + 0.25)  # a little grace: socket timeouts give the better message
        if worker.is_alive():
            raise FetchError("timeout", f"{what}: no complete answer within {budget:g} s (--timeout)")
        error = box.get("error")
        if isinstance(error, FetchError):
            raise error
        if error is not None:
            raise FetchError("parse", f"{what}: unexpected error: {_short(error)}")  # type: ignore[arg-type]
        return box["value"]  # type: ignore[return-value]

    def _get(self, url: str, max_bytes: int) -> bytes:
        deadline = time.monotonic() + self.timeout
        try:
            with self.session.get(url, stream=True, timeout=self.timeout, allow_redirects=False) as resp:
                if resp.status_code != 200:
                    raise FetchError("http_status", f"GET {url} answered HTTP {resp.status_code}")
                declared = resp.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise FetchError("too_large", f"GET {url}: body of {declared} bytes exceeds "
                                                  f"the {max_bytes}-byte cap (--max-bytes)")
                chunks, size = [], 0
                while True:
                    # read1 returns what has arrived, so a server trickling bytes cannot hold a
                    # read open past the deadline.
                    chunk = resp.raw.read1(_CHUNK, decode_content=True)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > max_bytes:
                        raise FetchError("too_large", f"GET {url}: body exceeds the {max_bytes}-byte "
                                                      "cap (--max-bytes)")
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise FetchError("timeout", f"GET {url}: body not complete within "
                                                    f"{self.timeout:g} s (--timeout)")
                return b"".join(chunks)
        except FetchError:
            raise
        except (requests.exceptions.Timeout, urllib3.exceptions.ReadTimeoutError):
            raise FetchError("timeout", f"GET {url}: no answer within {self.timeout:g} s (--timeout)") from None
        except requests.exceptions.SSLError as e:
            raise FetchError("connect", f"GET {url}: TLS error: {_short(e)}") from None
        except requests.exceptions.ConnectionError as e:
            text = _short(e)
            reason = "timeout" if "timed out" in text.lower() else "connect"
            raise FetchError(reason, f"GET {url}: cannot connect: {text}") from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            # Broken chunked encoding, a protocol error, a decoding error: the body is unusable.
            raise FetchError("parse", f"GET {url}: broken response: {_short(e)}") from None

    def accepts_connections(self, timeout: float = 2.0) -> bool:
        """Whether the target's host accepts a TCP connection on its port now (closed at once): after
        a timed-out poll, tells a busy server (it accepts, answers late) from an unreachable one."""
        parts = urlsplit(self.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((parts.hostname or "", port), timeout=min(timeout, self.timeout)):
                return True
        except OSError:
            return False

    def close(self) -> None:
        self.session.close()


def _short(error: BaseException) -> str:
    """The innermost cause, one line: urllib3's wrapped messages are long and repetitive."""
    while error.__context__ is not None and str(error.__context__):
        error = error.__context__
    return " ".join(str(error).split())[:200]
