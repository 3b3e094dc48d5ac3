"""fetch.py against a misbehaving target: every failure has a reason, nothing hangs, nothing leaks."""

from __future__ import annotations

import gzip
import time

import pytest

from vllm_spec_exporter.fetch import ACCEPT, Credentials, Fetcher, FetchError, metrics_url
from vllm_spec_lab.fakes.badtarget import BadTarget
from vllm_spec_lab.ports import free_port

GOOD = b'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 1.0\n'


@pytest.fixture
def target():
    with BadTarget() as t:
        yield t


def fetcher(url: str, timeout: float = 1.0, max_bytes: int = 1 << 20, **kwargs) -> Fetcher:
    return Fetcher(url, timeout, max_bytes, **kwargs)


def reason_of(f: Fetcher) -> tuple[str, str]:
    with pytest.raises(FetchError) as info:
        f.get_metrics()
    return info.value.reason, str(info.value)


def test_metrics_url_forms():
    assert metrics_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("https://h:1/custom/metrics") == "https://h:1/custom/metrics"
    for bad in ("127.0.0.1:8000", "ftp://h/x", "http://"):
        with pytest.raises(ValueError, match="http"):
            metrics_url(bad)
    with pytest.raises(ValueError, match="credentials"):
        metrics_url("http://user:secret@h:8000")


def test_asks_for_the_classic_text_format(target):
    target.set(target.body(GOOD))
    assert fetcher(target.url).get_metrics() == GOOD.decode()
    head = target.requests[-1].decode().lower()
    assert head.startswith("get /metrics ")
    assert f"accept: {ACCEPT}".lower() in head


def test_connection_refused_is_connect():
    port = free_port()
    assert reason_of(fetcher(f"http://127.0.0.1:{port}"))[0] == "connect"


def test_never_answering_is_timeout_within_the_deadline(target):
    target.set(target.hang())
    started = time.monotonic()
    assert reason_of(fetcher(target.url, timeout=0.5))[0] == "timeout"
    assert time.monotonic() - started < 2.5


def test_trickling_bytes_cannot_hold_a_poll_past_its_deadline(target):
    target.set(target.trickle(GOOD * 50, every=0.02))
    started = time.monotonic()
    reason, message = reason_of(fetcher(target.url, timeout=0.5))
    assert reason == "timeout" and "--timeout" in message
    assert time.monotonic() - started < 2.5


@pytest.mark.parametrize("status", ["500 Internal Server Error", "404 Not Found", "401 Unauthorized"])
def test_http_errors_name_the_status(target, status):
    target.set(target.status(status))
    reason, message = reason_of(fetcher(target.url))
    assert reason == "http_status" and status.split()[0] in message


def test_redirects_are_never_followed(target):
    target.set(target.status("302 Found", headers="Location: http://127.0.0.1:1/elsewhere\r\n"))
    assert reason_of(fetcher(target.url))[0] == "http_status"
    assert len(target.requests) == 1  # no second request anywhere


def test_declared_and_actual_size_caps(target):
    target.set(target.body(GOOD * 100))
    assert reason_of(fetcher(target.url, max_bytes=1000))[0] == "too_large"
    target.set(target.endless())
    started = time.monotonic()
    assert reason_of(fetcher(target.url, max_bytes=200_000, timeout=2))[0] == "too_large"
    assert time.monotonic() - started < 2


def test_gzip_bomb_is_capped_after_decompression(target):
    bomb = gzip.compress(b"#" * 5_000_000)
    target.set(target.body(bomb, extra_headers="Content-Encoding: gzip\r\n"))
    assert reason_of(fetcher(target.url, max_bytes=100_000))[0] == "too_large"


def test_connection_reset_is_connect(target):
    target.set(target.reset())
    assert reason_of(fetcher(target.url))[0] in ("connect", "parse")


def test_secrets_are_sent_but_never_in_errors_or_repr(target):
    token = "s3cr3t-token-value"
    f = fetcher(target.url, credentials=Credentials(bearer_token=token))
    target.set(target.status("401 Unauthorized"))
    _reason, message = reason_of(f)
    assert token in target.requests[-1].decode()
    assert token not in message and token not in repr(f.session.headers.get("User-Agent"))
    assert token not in repr(Credentials(bearer_token=token))


def test_basic_auth_header_is_sent(target):
    target.set(target.body(GOOD))
    fetcher(target.url, credentials=Credentials(basic_user="u", basic_password="p")).get_metrics()
    assert b"Authorization: Basic dTpw" in target.requests[-1]


def test_version_endpoint_is_optional(target):
    target.set(target.body(b'{"version": "0.32.0"}'))
    assert fetcher(target.url).get_version() == "0.32.0"
    target.set(target.status("404 Not Found"))
    assert fetcher(target.url).get_version() == ""
    target.set(target.body(b"<html>"))
    assert fetcher(target.url).get_version() == ""


def test_server_info_is_read_bounded_and_named(target):
    """vLLM's /server_info (the speculative config): JSON from the target's own host, with the same
    deadline and body cap as /metrics; a 404 (no dev mode) or a body that is not JSON is a FetchError."""
    f = fetcher(target.url + "/custom/metrics", max_bytes=4096)
    target.set(target.body(b'{"vllm_config": {"speculative_config": null}}'))
    assert f.get_server_info() == {"vllm_config": {"speculative_config": None}}
    assert target.requests[-1].startswith(b"GET /server_info?config_format=json ")
    target.set(target.status("404 Not Found"))
    with pytest.raises(FetchError, match="answered HTTP 404") as info:
        f.get_server_info()
    assert info.value.reason == "http_status"
    target.set(target.body(b"<html>"))
    with pytest.raises(FetchError, match="not JSON") as info:
        f.get_server_info()
    assert info.value.reason == "parse"
    target.set(target.body(b"[" + b"1," * 4096 + b"1]"))
    with pytest.raises(FetchError) as info:
        f.get_server_info()
    assert info.value.reason == "too_large"


def test_body_cut_short_is_a_broken_response(target):
    target.set(target.short_body(GOOD))
    reason, message = reason_of(fetcher(target.url))
    assert reason == "parse" and "broken response" in message


def test_stall_after_the_headers_is_a_timeout(target):
    target.set(target.stall_after_headers(GOOD * 20))
    started = time.monotonic()
    assert reason_of(fetcher(target.url, timeout=0.5))[0] == "timeout"
    assert time.monotonic() - started < 2.5


def test_headers_trickled_byte_by_byte_cannot_hold_a_poll_past_its_deadline(target):
    target.set(target.trickle_headers(every=0.1))  # each byte well inside the socket timeout
    f = fetcher(target.url, timeout=0.5)
    started = time.monotonic()
    reason, message = reason_of(f)
    assert reason == "timeout" and "no complete answer" in message
    assert time.monotonic() - started < 1.5
    # The abandoned request still hangs: no second request is stacked on the target meanwhile.
    assert reason_of(f) == ("timeout", f"GET {f.url}: the previous request still hangs; not sending another")
