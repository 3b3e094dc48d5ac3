"""`vllm-spec-exporter check` as a command against a simulated vLLM (lab/vllm_spec_lab/fakes/vllm.py).

A real-vLLM run of the same command is in test_real_vllm.py.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from vllm_spec_lab.exporter_process import SCRIPT
from vllm_spec_lab.fakes.vllm import FakeVllm
from vllm_spec_lab.ports import free_port


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
    # The simulation serves no /server_info and runs no vLLM process: only k is known, from its positions.
    assert ("speculation: method unknown, k 4, verification unknown, dynamic k unknown (from metrics)"
            in done.stdout), done.stdout


def test_check_prints_the_speculative_config_it_is_given():
    with FakeVllm(k=4) as fake:
        url = fake.start()
        fake.drive(50, 0.8)
        done = run_check(url, "--json", "--speculative-config",
                         '{"method": "ngram", "num_speculative_tokens": 4, "rejection_sample_method": "fly"}')
    assert json.loads(done.stdout)["speculative_config"] == {
        "method": "ngram", "k": "4", "verification": "fly", "lossy": "true", "dynamic_k": "false", "source": "flag"}


def test_json_report_sums_engines_before_dividing():
    import threading
    import time

    with FakeVllm(engines=("0", "1"), k=4) as fake:
        url = fake.start()
        stop = threading.Event()

        def traffic():  # engine 0: 3x the drafts at 100 %; engine 1: 1x at 0 %
            while not stop.wait(0.1):
                fake.step(6, 1.0, engine="0")
                fake.step(2, 0.0, engine="1")

        thread = threading.Thread(target=traffic, daemon=True)
        thread.start()
        time.sleep(0.3)
        try:
            data = json.loads(run_check(url, "--json").stdout)
        finally:
            stop.set()
            thread.join()
    model = data["models"][0]
    # Summed: 6*4 accepted of 8*4 drafted = 0.75. Averaging the engines' ratios would give 0.5.
    assert model["spec_decode_acceptance_ratio"] == pytest.approx(0.75, abs=0.03)
    w = model["window"]
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
    port = free_port()
    done = run_check(f"http://127.0.0.1:{port}")
    assert done.returncode == 3 and "TARGET DOWN" in done.stdout


@pytest.mark.parametrize("duration", ["soon", "inf", "nans", "0.5s", "2d"])
def test_bad_duration_is_a_usage_error(duration):
    done = subprocess.run([str(SCRIPT), "check", "--duration", duration], capture_output=True, text=True)
    assert done.returncode == 2 and "--duration" in done.stderr


def test_check_reaches_a_protected_target_with_credentials_from_a_file(tmp_path):
    from vllm_spec_lab.fakes.badtarget import BadTarget

    token_file = tmp_path / "token"
    token_file.write_text("check-secret\n")
    with BadTarget() as target:
        target.set(target.status("401 Unauthorized"))
        done = run_check(target.url, "--bearer-token-file", str(token_file))
    assert done.returncode == 3 and "TARGET DOWN" in done.stdout and "HTTP 401" in done.stdout
    assert any(b"Authorization: Bearer check-secret" in r for r in target.requests)
    assert "check-secret" not in done.stdout + done.stderr


def test_target_with_a_query_string_is_refused():
    done = subprocess.run([str(SCRIPT), "check", "--target", "http://127.0.0.1:8000/metrics?token=abc"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "query string" in done.stderr and "abc" not in done.stderr
