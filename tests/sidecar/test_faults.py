"""Fault injection against the real exporter process, with a table of what happened.

One exporter polls one misbehaving target (lab/vllm_spec_lab/fakes/badtarget.py). For every fault: the
exporter stays up and /metrics keeps answering, the health metrics and the log name the cause,
ratios are omitted rather than wrong, and it recovers by itself when the target heals. Healthy
bodies are real wire format, produced by prometheus_client with vLLM 0.32's families
(lab/vllm_spec_lab/fakes/vllm.py). The table is printed at the end of the pytest run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from support import report  # its FAULTS table is printed at the end of the run
from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.fakes.badtarget import BadTarget, http_response
from vllm_spec_lab.fakes.vllm import FakeVllm
from vllm_spec_lab.waiting import wait_until

SERIES = (("engine", "0"), ("model_name", "tiny-llama"))
MAX_RSS_MB = 80


@dataclass
class Rig:
    target: BadTarget
    fake: FakeVllm
    exporter: ExporterProcess

    def body(self, transform: Callable[[str], str] = lambda t: t) -> bytes:
        self.fake.step(40, 0.5)  # traffic between polls, so ratios exist when healthy
        return transform(generate_latest(self.fake.registry).decode()).encode()

    def serve(self, transform: Callable[[str], str] = lambda t: t) -> None:
        self.target.set(lambda conn: conn.sendall(http_response(self.body(transform))))

    def metrics(self):
        return self.exporter.metrics()

    def errors(self, reason: str) -> float:
        return self.metrics()["vllm_spec_exporter_scrape_errors_total"][(("reason", reason),)]

    def healthy(self) -> bool:
        m = self.metrics()
        return m["vllm_spec_exporter_target_up"][()] == 1 and SERIES in m.get("vllm_spec_decode_acceptance_ratio", {})


@pytest.fixture(scope="module")
def rig():
    with BadTarget() as target, FakeVllm(k=4) as fake:
        # Short but not razor-thin timings: a loaded 2-core CI machine must not fail a healthy poll.
        exporter = ExporterProcess(target.url, "--max-bytes", "2000000", interval=0.5, window=4,
                                   timeout=0.4, min_draft_tokens=1)
        r = Rig(target, fake, exporter)
        r.serve()
        exporter.start()
        assert wait_until(r.healthy, FAULT_SEEN_WITHIN)
        yield r
        exporter.stop()


# Limits, not expectations: a wait returns as soon as the exporter shows the fault (a poll or two);
# generous so that a 2-core machine at load 10 (the fast tier runs on every core) does not fail it.
FAULT_SEEN_WITHIN = 30


def _down_fault(name: str, reason: str, behaviour: Callable[[Rig], None]):
    def check(r: Rig) -> str:
        before = r.errors(reason)
        behaviour(r)
        assert wait_until(lambda: r.errors(reason) > before, FAULT_SEEN_WITHIN), f"no {reason} error counted"
        m = r.metrics()
        assert m["vllm_spec_exporter_target_up"][()] == 0
        assert "vllm_spec_decode_acceptance_ratio" not in m and "vllm_spec_decode_drafts_total" not in m
        return f"up=0, errors{{reason={reason}}}+, vLLM series omitted"

    return pytest.param(name, check, id=name)


def _busy_fault(name: str, behaviour: Callable[[Rig], None]):
    """A target that accepts the connection but answers late, right after answering: busy, not down
    (poller.BUSY_GRACE_SECONDS after its last answer, far beyond this test)."""
    def check(r: Rig) -> str:
        before = r.errors("timeout")
        behaviour(r)
        assert wait_until(lambda: r.errors("timeout") > before, FAULT_SEEN_WITHIN), "no timeout error counted"
        m = r.metrics()
        assert m["vllm_spec_exporter_target_up"][()] == 1
        assert "vllm_spec_decode_acceptance_ratio" not in m and "vllm_spec_decode_drafts_total" not in m
        return "up=1 (busy: accepts, answers late), errors{reason=timeout}+, vLLM series omitted"
    return pytest.param(name, check, id=name)


def _mangle_positions(text: str) -> str:
    return text.replace('position="2"', 'position="two"')


def _duplicate_series(text: str) -> str:
    dup = next(line for line in text.split("\n") if line.startswith("vllm:spec_decode_num_drafts_total{"))
    return text + dup + "\n"


def _nan_counter(text: str) -> str:
    return re.sub(r"(vllm:spec_decode_num_draft_tokens_total\{[^}]*\}) \S+", r"\1 NaN", text)


def _negative_counter(text: str) -> str:
    return re.sub(r"(vllm:spec_decode_num_drafts_total\{[^}]*\}) \S+", r"\1 -5.0", text)


def _quoted_model(text: str) -> str:
    return text.replace('model_name="tiny-llama"', 'model_name="tiny \\"llama\\"\\nv2"')


def _without_spec(text: str) -> str:
    return "\n".join(line for line in text.split("\n") if "spec_decode" not in line)


def _invalid_utf8(r: Rig) -> None:
    r.target.set(lambda conn: conn.sendall(http_response(b"# HELP junk \xff\xfe\xc3\x28 bytes\n" + r.body())))


def check_invalid_utf8(r: Rig) -> str:
    _invalid_utf8(r)
    time.sleep(1)
    assert wait_until(r.healthy, FAULT_SEEN_WITHIN)
    return "body decoded with replacement characters; spec series intact"


def check_nan_counter(r: Rig) -> str:
    before = r.errors("invalid_sample")
    r.serve(_nan_counter)

    def handled() -> bool:  # on every poll of the NaN body, not just one (a busy machine's poll may
        m = r.metrics()     # time out in between, which is up=0 for that poll alone)
        return (m["vllm_spec_exporter_scrape_errors_total"][(("reason", "invalid_sample"),)] > before
                and m["vllm_spec_exporter_target_up"][()] == 1
                and SERIES not in m.get("vllm_spec_decode_acceptance_ratio", {}))  # no denominator, no ratio

    assert wait_until(handled, FAULT_SEEN_WITHIN, failure=lambda: f"metrics: {r.metrics()}")
    return "sample dropped, errors{reason=invalid_sample}+, acceptance omitted"


def check_negative_counter(r: Rig) -> str:
    before = r.errors("invalid_sample")
    r.serve(_negative_counter)
    assert wait_until(lambda: r.errors("invalid_sample") > before, FAULT_SEEN_WITHIN)
    assert SERIES not in r.metrics().get("vllm_spec_decode_mean_acceptance_length", {})
    return "sample dropped, errors{reason=invalid_sample}+, length omitted"


def check_bad_position(r: Rig) -> str:
    before = r.errors("invalid_sample")
    r.serve(_mangle_positions)
    assert wait_until(lambda: r.errors("invalid_sample") > before, FAULT_SEEN_WITHIN)
    positions = {dict(k)["position"] for k in r.metrics().get("vllm_spec_decode_position_acceptance_ratio", {})}
    assert "two" not in positions and "2" not in positions
    return "position series dropped, errors{reason=invalid_sample}+"


def check_duplicates(r: Rig) -> str:
    body = r.body(_duplicate_series)  # one static body: its drafts line appears twice
    drafts = float(re.search(rb"vllm:spec_decode_num_drafts_total\{[^}]*\} (\S+)", body).group(1))
    r.target.set(BadTarget.body(body))
    assert wait_until(lambda: r.metrics().get("vllm_spec_decode_drafts_total", {}).get(SERIES) == drafts,
                      FAULT_SEEN_WITHIN)
    return "exact duplicate kept once (no double count)"


def check_quotes_newlines(r: Rig) -> str:
    r.serve(_quoted_model)
    quoted = (("engine", "0"), ("model_name", 'tiny "llama"\nv2'))
    assert wait_until(lambda: quoted in r.metrics().get("vllm_spec_decode_acceptance_ratio", {}), FAULT_SEEN_WITHIN)
    return "label unescaped and re-escaped correctly"


def check_k_change(r: Rig) -> str:
    r.fake.restart(k=2)
    r.serve()
    assert wait_until(lambda: r.metrics().get("vllm_spec_decode_num_speculative_tokens", {}).get(SERIES) == 2,
                      FAULT_SEEN_WITHIN)
    r.fake.restart(k=4)
    r.serve()
    assert wait_until(lambda: r.metrics().get("vllm_spec_decode_num_speculative_tokens", {}).get(SERIES) == 4,
                      FAULT_SEEN_WITHIN)
    return "k follows the target (4 -> 2 -> 4), stale positions forgotten"


def check_upgrade_drops_spec(r: Rig) -> str:
    r.serve(_without_spec)

    def handled() -> bool:
        m = r.metrics()
        return (m.get("vllm_spec_decode_enabled") == {(): 0.0} and m["vllm_spec_exporter_target_up"][()] == 1
                and "vllm_spec_decode_acceptance_ratio" not in m)

    assert wait_until(handled, FAULT_SEEN_WITHIN, failure=lambda: f"metrics: {r.metrics()}")
    return "enabled=0, schema=none, no ratios"


def check_restart_loop(r: Rig) -> str:
    before = r.metrics()["vllm_spec_exporter_target_restarts_total"][()]
    peak = 0.0
    r.fake.step(5000, 0.5)  # a long history, so a mishandled reset would show as a huge rate...
    time.sleep(5.5)  # ...once it has left the 4 s window
    for n in range(1, 4):
        r.fake.restart()
        r.serve()
        assert wait_until(lambda n=n: r.metrics()["vllm_spec_exporter_target_restarts_total"][()] >= before + n,
                          FAULT_SEEN_WITHIN)
        m = r.metrics()
        peak = max(peak, *m.get("vllm_spec_decode_draft_tokens_per_second", {SERIES: 0.0}).values())
        for name, series in m.items():
            if name.endswith(("_per_second", "_ratio")):
                assert all(v >= 0 for v in series.values()), name
    # Each poll adds 40 drafts x 4 tokens; every 0.5 s that is ~320 tok/s. Counting a 20,000-token
    # pre-restart history as growth would show thousands.
    assert peak < 2000, peak
    return f"3 restarts counted, rates stay bounded (peak {peak:.0f} tok/s), none negative"


FAULTS = [
    _down_fault("connection refused", "connect", lambda r: r.target.set(BadTarget.reset())),
    _busy_fault("accept, never answer", lambda r: r.target.set(r.target.hang())),
    _busy_fault("byte-by-byte trickle", lambda r: r.target.set(r.target.trickle(r.body(), 0.01))),
    _down_fault("HTTP 500", "http_status", lambda r: r.target.set(BadTarget.status("500 Internal Server Error"))),
    _down_fault("HTTP 404", "http_status", lambda r: r.target.set(BadTarget.status("404 Not Found"))),
    _down_fault("HTTP 401", "http_status", lambda r: r.target.set(BadTarget.status("401 Unauthorized"))),
    _down_fault("302 redirect loop", "http_status",
                lambda r: r.target.set(BadTarget.status("302 Found", f"Location: {r.target.url}/metrics\r\n"))),
    _down_fault("HTML page", "parse", lambda r: r.target.set(BadTarget.body(b"<html><body>login</body></html>\n",
                                                                            content_type="text/html"))),
    _down_fault("body cut short of Content-Length", "parse", lambda r: r.target.set(BadTarget.short_body(r.body()))),
    _busy_fault("stall after the headers", lambda r: r.target.set(r.target.stall_after_headers(r.body()))),
    _busy_fault("headers trickled byte by byte", lambda r: r.target.set(r.target.trickle_headers(0.1))),
    _down_fault("body truncated mid-line", "parse",
                lambda r: r.target.set(BadTarget.body(r.body()[:-7]))),
    _down_fault("huge body beyond the cap", "too_large",
                lambda r: r.target.set(BadTarget.body(b"# x\n" * 1_000_000))),
    _down_fault("endless stream", "too_large", lambda r: r.target.set(r.target.endless())),
    pytest.param("invalid UTF-8", check_invalid_utf8, id="invalid UTF-8"),
    pytest.param("NaN counter", check_nan_counter, id="NaN counter"),
    pytest.param("negative counter", check_negative_counter, id="negative counter"),
    pytest.param("non-integer position", check_bad_position, id="non-integer position"),
    pytest.param("duplicate series", check_duplicates, id="duplicate series"),
    pytest.param("quotes and newlines in labels", check_quotes_newlines, id="quotes and newlines"),
    pytest.param("k changes between polls", check_k_change, id="k changes"),
    pytest.param("upgrade drops spec metrics", check_upgrade_drops_spec, id="spec metrics dropped"),
    pytest.param("restart loop (counters to 0, x3)", check_restart_loop, id="restart loop"),
]


@pytest.mark.parametrize(("fault", "check"), FAULTS)
def test_fault(rig: Rig, fault: str, check):
    observed, passed = "", False
    try:
        observed = check(rig)
        assert rig.exporter.proc.poll() is None, "exporter died"
        # Heal: a good target again, and the exporter must recover by itself.
        rig.serve()
        assert wait_until(rig.healthy, FAULT_SEEN_WITHIN), "did not recover after the target healed"
        observed += "; recovered"
        passed = True
    finally:
        report.FAULTS.append((fault, "stays up, names the cause, omits ratios, recovers", observed or "FAILED", passed))


LOGGED_CAUSES = ("cannot connect", "no answer within", "not complete within", "HTTP 500", "HTTP 404", "HTTP 401",
                 "HTTP 302", "looks like HTML", "truncated", "exceeds", "not a finite", "position label",
                 "schema none", "counters were reset")


def test_logs_name_each_cause(rig: Rig):
    logs = rig.exporter.logs()
    missing = [cause for cause in LOGGED_CAUSES if cause not in logs]
    report.FAULTS.append(("(after all faults) log lines", "each cause named",
                        f"{len(LOGGED_CAUSES) - len(missing)}/{len(LOGGED_CAUSES)} named", not missing))
    assert not missing, logs[-3000:]


def test_memory_stays_bounded(rig: Rig):
    status = Path(f"/proc/{rig.exporter.proc.pid}/status").read_text()
    rss_mb = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024
    report.FAULTS.append(("(after all faults) memory", f"RSS <= {MAX_RSS_MB} MB", f"RSS {rss_mb:.1f} MB",
                        rss_mb <= MAX_RSS_MB))
    assert rss_mb <= MAX_RSS_MB
