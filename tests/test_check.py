"""`vllm-spec-exporter check` as a command against a simulated vLLM (tests/support/fakevllm.py).

A real-vLLM run of the same command is in test_real_vllm.py.
"""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from support.exporter import SCRIPT
from support.fakevllm import FakeVllm


def run_check(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), "check", "--target", url, "--duration", "2s", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("acceptance", "code", "word"), [(0.8, 0, "HEALTHY"), (0.3, 1, "BELOW 50%")])
def test_verdict_and_exit_code_follow_acceptance(acceptance, code, word):
    with FakeVllm(engines=("0", "1"), k=4) as fake:
        url = fake.start()
        fake.drive(50, acceptance)
        done = run_check(url, "--color", "never")
    assert done.returncode == code, done.stdout + done.stderr
    assert f"verdict: {word}" in done.stdout, done.stdout
    assert "engines 0, 1 · k=4" in done.stdout and "position  3" in done.stdout


def test_json_report_sums_engines_before_dividing():
    with FakeVllm(engines=("0", "1"), k=4) as fake:
        url = fake.start()
        fake.step(10, 1.0, engine="0")  # before sampling: not counted
        fake.drive(40, 0.5)
        data = json.loads(run_check(url, "--json").stdout)
    model = data["models"][0]
    w = model["window"]
    assert model["spec_decode_acceptance_ratio"] == pytest.approx(w["accepted_tokens"] / w["draft_tokens"])
    assert model["spec_decode_mean_acceptance_length"] == pytest.approx(1 + w["accepted_tokens"] / w["drafts"])
    assert model["advisor"]["current_k"] == 4
    assert data["exit_code"] == 0 and data["schema"] == "v1"


def test_spec_off_idle_and_down_cannot_be_judged():
    with FakeVllm(spec_enabled=False) as fake:
        done = run_check(fake.start())
        assert done.returncode == 3 and "SPEC DECODING OFF" in done.stdout
    with FakeVllm() as fake:
        done = run_check(fake.start())
        assert done.returncode == 3 and "NO TRAFFIC" in done.stdout
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = run_check(f"http://127.0.0.1:{port}")
    assert done.returncode == 3 and "TARGET DOWN" in done.stdout


def test_bad_duration_is_a_usage_error():
    done = subprocess.run([str(SCRIPT), "check", "--duration", "soon"], capture_output=True, text=True)
    assert done.returncode == 2 and "--duration" in done.stderr
