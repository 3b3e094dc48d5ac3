"""The oracle on REAL llama.cpp captures (tests/fixtures/capture_llamacpp.py, llama-server b11434):
for every interval between two scrapes, llama.cpp's own per-request log lines sum to its counter
deltas, and the exporter's windowed values over that interval equal those sums exactly."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.paths import FIXTURES
from vllm_spec_exporter.derive import derive
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse
from vllm_spec_exporter.window_store import WindowStore
from vllm_spec_lab.llamacpp import DRAFT_LOG, MODEL_NAME, NGRAM_K

ROOT = FIXTURES / "llamacpp-b11434"
NGRAM = ROOT / "ngram"
pytestmark = pytest.mark.skipif(not (NGRAM / "index.json").exists(), reason="llama.cpp fixtures not captured")
SERIES = (MODEL_NAME, "")


def counters(text: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name + (f"/{s.labels['position']}" if "position" in s.labels else "")] = s.value
    return out


def intervals() -> list[tuple[int, list[tuple[int, int, float]]]]:
    """[(i, [(accepted, drafted, mean len) per request logged between scrape i and i+1])]"""
    if not (NGRAM / "index.json").exists():
        return []
    index = json.loads((NGRAM / "index.json").read_text())
    found: dict[int, list] = {i: [] for i in range(len(index["scrapes"]) - 1)}
    for line in (NGRAM / "speclog.txt").read_text().splitlines():
        if not line.strip():
            continue
        span, text = line.split("\t", 1)
        m = DRAFT_LOG.search(text)
        found[int(span.split("->")[0])].append((int(m.group(2)), int(m.group(3)), float(m.group(4))))
    return sorted(found.items())


def scrape(i: int) -> str:
    return (NGRAM / f"scrape-{i:03d}.prom").read_text()


def test_capture_is_what_the_readme_says():
    index = json.loads((NGRAM / "index.json").read_text())
    assert "11434" in index["llama_server_version"]
    assert "--metrics" in index["command"] and "ngram-simple" in index["command"]
    assert [m["id"] for m in index["models"]["data"]] == [MODEL_NAME]


@pytest.mark.parametrize(("i", "requests"), intervals())
def test_log_lines_sum_to_counter_deltas(i, requests):
    before, after = counters(scrape(i)), counters(scrape(i + 1))
    accepted = sum(a for a, _, _ in requests)
    drafted = sum(t for _, t, _ in requests)
    assert after["llamacpp:spec_decode_num_accepted_tokens_total"] - before.get(
        "llamacpp:spec_decode_num_accepted_tokens_total", 0) == accepted
    assert after["llamacpp:spec_decode_num_draft_tokens_total"] - before.get(
        "llamacpp:spec_decode_num_draft_tokens_total", 0) == drafted
    per_pos = sum(after.get(f"llamacpp:spec_decode_num_accepted_tokens_per_pos_total/{p}", 0)
                  - before.get(f"llamacpp:spec_decode_num_accepted_tokens_per_pos_total/{p}", 0)
                  for p in range(NGRAM_K))
    assert per_pos == accepted  # every accepted token was accepted at some position


@pytest.mark.parametrize(("i", "requests"), [(i, r) for i, r in intervals() if i > 0 and r])
def test_exporter_window_over_an_interval_equals_the_log(i, requests):
    store = WindowStore(window_seconds=600)
    for t, text in ((0.0, scrape(i)), (10.0, scrape(i + 1))):
        snap = normalise(parse(text), default_model=MODEL_NAME)
        store.observe(t, snap)
    assert snap.engine_family == "llamacpp" and snap.schema == "llamacpp"
    out = {(name, labels): value for name, labels, value in derive(store, snap, min_draft_tokens=0)}
    accepted = sum(a for a, _, _ in requests)
    drafted = sum(t for _, t, _ in requests)
    if drafted:
        assert out[("vllm_spec_decode_acceptance_ratio", SERIES)] == pytest.approx(accepted / drafted, rel=1e-12)
    before, after = counters(scrape(i)), counters(scrape(i + 1))
    drafts = after["llamacpp:spec_decode_num_drafts_total"] - before["llamacpp:spec_decode_num_drafts_total"]
    if drafts:
        assert out[("vllm_spec_decode_mean_acceptance_length", SERIES)] == pytest.approx(1 + accepted / drafts)
        if len(requests) == 1:  # the log's own mean length, to its printed precision
            assert out[("vllm_spec_decode_mean_acceptance_length", SERIES)] == pytest.approx(requests[0][2], abs=0.006)
    assert out[("vllm_spec_decode_num_speculative_tokens", SERIES)] == NGRAM_K


def test_spec_off_capture_is_reported_as_off():
    text = sorted((ROOT / "spec_off").glob("scrape-*.prom"))[-1].read_text()
    assert re.search(r"^llamacpp:spec_decode_num_drafts_total 0$", text, re.M)
    snap = normalise(parse(text), default_model=MODEL_NAME)
    assert snap.engine_family == "llamacpp" and snap.schema == "none" and snap.spec_enabled is False
