"""Queries.crowded on a real PromQL engine (promtool's rule-test evaluator): a per-server panel
keeps every series of a selected server (up to cfg.panel_all_series_up_to), and over a fleet
only the worst cfg.panel_worst_k and the best cfg.panel_best_k (bench/fleet_scale.py measured 1,000
lines per panel at 1,000 pods before)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from support.prom import require_binary, run_tool
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.promql import Queries
from vllm_spec_lab.monitoring import PROMTOOL_BIN

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
