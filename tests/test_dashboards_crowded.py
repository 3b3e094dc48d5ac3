"""Queries.crowded on a real PromQL engine (promtool's rule-test evaluator): a per-server panel
keeps every series of a selected server (up to cfg.panel_all_series_up_to), and over a fleet
only the worst cfg.panel_worst_k and the best cfg.panel_best_k (bench/fleet_scale.py measured 1,000
lines per panel at 1,000 pods before)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.request import Request, urlopen

import pytest
import yaml

from support.prom import require_binary, run_tool
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.promql import Queries
from vllm_spec_lab.monitoring import PROMTOOL_BIN
from vllm_spec_lab.victoria import VictoriaMetrics

pytestmark = pytest.mark.prometheus

EXPR = 'max by (instance) (acceptance{instance=~"$instance"})'


def run_case(tmp_path: Path, servers: int, selected: str, high_is_bad: bool) -> list[str]:
    """The instances the crowded query returns over `servers` servers whose acceptance is their
    index / 100, with the instance variable set to `selected` (a regex, `.+` for All)."""
    cfg = MixinConfig()
    expr = Queries(cfg).crowded(EXPR.replace("$instance", selected), high_is_bad=high_is_bad)
    series = [{"series": f'acceptance{{instance="s{i:02d}"}}', "values": f"{i / 100}x2"} for i in range(servers)]
    (tmp_path / "empty.yaml").write_text("groups: []\n")
    values = range(servers) if selected == ".+" else [int(selected[1:])]
    expected = list(values)
    if len(expected) > cfg.panel_all_series_up_to:
        worst, best = (expected[-cfg.panel_worst_k:], expected[:cfg.panel_best_k]) if high_is_bad else \
            (expected[:cfg.panel_worst_k], expected[-cfg.panel_best_k:])
        expected = sorted({*worst, *best})
    test = {"rule_files": ["empty.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": expr, "eval_time": "1m", "exp_samples": [
            {"labels": f'{{instance="s{i:02d}"}}', "value": i / 100} for i in expected]}]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    result = run_tool([require_binary(PROMTOOL_BIN), "test", "rules", "test.yaml"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    return [f"s{i:02d}" for i in expected]


@pytest.mark.parametrize("high_is_bad", [False, True])
def test_a_fleet_shows_the_worst_and_best_few(tmp_path: Path, high_is_bad: bool) -> None:
    cfg = MixinConfig()
    shown = run_case(tmp_path, 60, ".+", high_is_bad)
    assert len(shown) == cfg.panel_worst_k + cfg.panel_best_k


def test_up_to_the_limit_everything_is_shown(tmp_path: Path) -> None:
    limit = MixinConfig().panel_all_series_up_to
    assert len(run_case(tmp_path, limit, ".+", False)) == limit


def test_a_selected_server_shows_everything(tmp_path: Path) -> None:
    assert run_case(tmp_path, 60, "s17", False) == ["s17"]


def test_the_expectation_can_fail(tmp_path: Path) -> None:
    """The checker is not vacuous: claiming every series of a 60-server fleet is shown fails."""
    cfg = MixinConfig()
    with pytest.raises(AssertionError):
        _claim_all(tmp_path, cfg)


def _claim_all(tmp_path: Path, cfg: MixinConfig) -> None:
    expr = Queries(cfg).crowded(EXPR.replace("$instance", ".+"))
    (tmp_path / "empty.yaml").write_text("groups: []\n")
    test = {"rule_files": ["empty.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": f'acceptance{{instance="s{i:02d}"}}', "values": f"{i / 100}x2"} for i in range(60)],
        "promql_expr_test": [{"expr": expr, "eval_time": "1m", "exp_samples": [
            {"labels": f'{{instance="s{i:02d}"}}', "value": i / 100} for i in range(60)]}]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    result = run_tool([require_binary(PROMTOOL_BIN), "test", "rules", "test.yaml"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.server
def test_victoriametrics_ranks_records_younger_than_its_default_step() -> None:
    """On VictoriaMetrics an instant query's subquery defaults to a 5-minute step, aligned: with
    the series only 2 minutes old at the query time, that one point held nothing, the ranking
    was empty, and a 5,000-pod fleet's panel drew every server (bench/fleet_scale.py, 5,000 pods).
    The query as Grafana sends it (instant, no step) must still pick the worst and best few."""
    cfg = MixinConfig()
    servers = 60
    end = (int(time.time()) // 300) * 300 - 150  # 2.5 minutes past a 5-minute boundary, in the past
    stamps = [(end - 120 + 15 * i) * 1000 for i in range(9)]  # samples from 2 minutes before
    lines = "".join(json.dumps({"metric": {"__name__": "acceptance", "instance": f"s{i:02d}"},
                                "values": [i / 100] * len(stamps), "timestamps": stamps}) + "\n"
                    for i in range(servers))
    expr = Queries(cfg).crowded(EXPR.replace("$instance", ".+"))
    with VictoriaMetrics() as vm:
        urlopen(Request(f"{vm.url}/api/v1/import", data=lines.encode(), method="POST"), timeout=30).read()
        urlopen(f"{vm.url}/internal/force_flush", timeout=30).read()
        whole = vm.query("acceptance", at=end)
        shown = vm.query(expr, at=end)
    assert len(whole) == servers  # the data is there
    assert sorted(s["metric"]["instance"] for s in shown) == [
        f"s{i:02d}" for i in (*range(cfg.panel_worst_k), *range(servers - cfg.panel_best_k, servers))]
