"""bench/fleet_scale.py --quick (100 pods, real Prometheus 3 and VictoriaMetrics + vmalert): the
tables it prints hold sane figures, for the exporter bundle (alerts/, dashboards/) on both backends
and the direct bundle (direct/: vLLM's own series) on Prometheus. Not a timing assertion: it checks
that every rule group was evaluated and timed, every dashboard query ran without error, the series
counts add up and the crowded per-server panels stayed readable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.paths import ROOT
from support.prom import require_binary
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_lab.binaries import TESTING_BIN_DIR


def run_quick(tmp_path: Path, *args: str) -> dict[str, list[dict[str, Any]]]:
    binaries = ("prometheus", "promtool") if "--no-vm" in args else ("prometheus", "promtool", "victoria-metrics",
                                                                      "vmalert")
    for binary in binaries:
        require_binary(str(TESTING_BIN_DIR / binary))
    out = tmp_path / "fleet.json"
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "fleet_scale.py"), "--quick", "--json", str(out),
                             *args], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(out.read_text())


def check_row(row: dict[str, Any], source: str, series_per_pod: tuple[float, float]) -> None:
    from fleet.bundle import Bundle

    bundle = Bundle.load(source)
    cfg = MixinConfig()
    backend = row["backend"]
    assert row["pods"] == 100 and row["source"] == source
    assert series_per_pod[0] <= row["series_per_pod"] <= series_per_pod[1], row["series_per_pod"]
    assert row["series"] == round(row["series_per_pod"] * 100)
    # The live scrape continues the history's series: the same label sets, not a second copy.
    assert row["series_seen"] == row["series"], (backend, row["series_seen"], row["series"])
    # ... and the live scrape reached every one of them (a sample after the history's end).
    assert row["series_live"] == row["series"], (backend, row["series_live"], row["series"])
    # Stored series: the synthesised ones plus the records, alerts' and scrape bookkeeping.
    assert row["head_series"] > row["series"], (row["head_series"], row["series"])
    assert 0 < row["rss_mb"] < 4000
    assert set(row["rule_groups"]) == {g["name"] for f in bundle.rules() for g in f["groups"]}, backend
    for name, group in row["rule_groups"].items():
        assert 0 < group["seconds"] < group["interval"], (backend, name, group)
    assert set(row["dashboards"]) == {"overview", "fleet"}
    for name, dashboard in row["dashboards"].items():
        assert dashboard["errors"] == 0, (backend, name, [q for q in row["queries"] if q["error"]])
        assert dashboard["queries"] > 10
        assert 0 < dashboard["slowest"] <= dashboard["total"]
        # The panels read records: each has its raw baseline measured beside it.
        assert dashboard["record_queries"] > 10, (backend, name, dashboard["record_queries"])
    # The ranking variables ran first, each once a dashboard, and are part of its load: the worst
    # and best few servers (the servers seen are the pods' own series on both bundles).
    variables = [q for q in row["queries"] if q["panel_type"] == "variable"]
    assert {q["panel"] for q in variables} >= {"variable crowd_acceptance_by_instance"}, variables
    assert all(q["series"] == cfg.panel_worst_k + cfg.panel_best_k for q in variables
               if q["panel"] == "variable crowd_acceptance_by_instance"), variables
    # 100 pods, All selected: the per-server acceptance panels keep the worst and best few.
    crowded = [q for q in row["queries"] if q["panel"] in ("Acceptance rate by instance", "Acceptance by server")]
    assert crowded and all(0 < q["series"] <= cfg.panel_worst_k + cfg.panel_best_k for q in crowded[:1]), crowded
    fleet_panel = [q for q in crowded if q["dashboard"] == "fleet"]
    assert all(q["series"] == cfg.panel_worst_k + cfg.panel_best_k for q in fleet_panel), fleet_panel
    # No panel but a table (which lists every server, worst first) draws one series per server.
    crowd = [(q["dashboard"], q["panel"], q["series"]) for q in row["queries"]
             if q["panel_type"] != "table" and q["series"] > cfg.panel_all_series_up_to]
    assert not crowd, (backend, crowd)


@pytest.mark.prometheus
@pytest.mark.server
def test_quick_fleet_tables_are_sane(tmp_path: Path) -> None:
    """Both backends, and `--rules-before HEAD` on each: the committed rules watched after the
    bundle's, then the bundle's again (A-B-A)."""
    summaries = run_quick(tmp_path, "--rules-before", "HEAD")
    for backend in ("prometheus", "victoriametrics"):
        (row,) = summaries[backend]
        check_row(row, "exporter", (40, 200))
        check_watched_again(row)


@pytest.mark.prometheus
@pytest.mark.server
def test_quick_direct_bundle_on_prometheus(tmp_path: Path) -> None:
    """The direct bundle reads vLLM's own series: 11 a (model, engine) pair (8 families, 4 positions).
    `--rules-before HEAD`: the committed rules watched after the bundle's, then the bundle's again
    (A-B-A), every group in each watch."""
    summaries = run_quick(tmp_path, "--source", "direct", "--no-vm", "--rules-before", "HEAD")
    assert set(summaries) == {"prometheus"}
    (row,) = summaries["prometheus"]
    check_row(row, "direct", (11, 11 * 3))
    check_watched_again(row)


def check_watched_again(row: dict[str, Any]) -> None:
    """`--rules-before HEAD`: every group timed in REV's watch and in the bundle's second watch."""
    assert row["rules_before"] == "HEAD"
    for watch in ("rule_groups_before", "rule_groups_again"):
        assert set(row[watch]) == set(row["rule_groups"]), (row["backend"], watch, row[watch])
        assert all(0 < g["seconds"] < g["interval"] for g in row[watch].values()), (row["backend"], watch)
    assert set(row["rule_medians_again"]) == set(row["rule_groups"])
    assert row["rule_costs_again"] and set(row["rule_costs_again"]) <= set(row["rule_groups"])
    # Each watch has the server's CPU beside it (whether a slower watch worked more or waited more).
    assert all(0 < row[cores] < 2 * (os.cpu_count() or 1) for cores in ("cpu_cores", "cpu_cores_before",
                                                                          "cpu_cores_again")), row["backend"]


def no_variables(url: str, model: dict, end: float, repeat: int) -> tuple[dict[str, str], list]:
    """The dashboards' ranking variables left at every server, none timed (no server here)."""
    return {}, []


def test_each_query_and_its_baseline_keep_the_fastest_of_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--repeat N`: every panel query and its raw baseline are timed N times, in turn, and the
    fastest of each is kept (timings here: a clock that only ever gets faster, per expression)."""
    from fleet import dashboards
    from fleet.bundle import Bundle

    bundle = Bundle.load("exporter")
    timed: list[str] = []

    def fake_time_query(url: str, request, expr: str) -> tuple[float, int, str]:
        timed.append(expr)
        return 1.0 / timed.count(expr), 2, ""

    monkeypatch.setattr(dashboards, "time_query", fake_time_query)
    monkeypatch.setattr(dashboards, "load_variables", no_variables)
    once = dashboards.dashboard_load("http://127.0.0.1:9", 2e9, 15, bundle, repeat=1)
    calls_once = len(timed)
    timed.clear()
    rows = dashboards.dashboard_load("http://127.0.0.1:9", 2e9, 15, bundle, repeat=3)
    assert len(rows) == len(once) and len(timed) == 3 * calls_once
    with_baseline = [row for row in rows if row.raw_seconds is not None]
    assert with_baseline, "no panel reads a recording rule"
    # A first timing is 1 s; only the third (or a later one, for an expression several panels share)
    # is 1/3 s or faster, so every row kept the fastest of its three.
    assert all(row.seconds <= 1 / 3 for row in rows) and all(row.raw_seconds <= 1 / 3 for row in with_baseline)
    assert any(row.seconds == 1.0 for row in once)  # timed once: the first, slow timing stays


def test_a_baseline_far_slower_than_its_panel_is_timed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A raw baseline more than RAW_DECIDED times slower than its panel's query is not repeated
    (the verdict cannot change; at 5,000 pods one raw timing takes minutes); the panel's own
    query still is."""
    from fleet import dashboards
    from fleet.bundle import Bundle

    bundle = Bundle.load("exporter")
    own_calls, baseline_calls = 0, 0

    def fake_time_query(url: str, request, expr: str) -> tuple[float, int, str]:
        nonlocal own_calls, baseline_calls
        baseline = expr != request.expr
        own_calls += not baseline
        baseline_calls += baseline
        return (10.0 if baseline else 1.0), 2, ""

    monkeypatch.setattr(dashboards, "time_query", fake_time_query)
    monkeypatch.setattr(dashboards, "load_variables", no_variables)
    rows = dashboards.dashboard_load("http://127.0.0.1:9", 2e9, 15, bundle, repeat=3)
    with_baseline = [row for row in rows if row.raw_seconds is not None]
    assert with_baseline and all(row.raw_seconds == 10.0 for row in with_baseline)
    assert own_calls == 3 * len(rows)
    assert baseline_calls == len(with_baseline)  # each baseline once: 10 s > 3 x 1 s


def test_overlapping_blocks_counts_every_block_inside_an_earlier_ones_span(tmp_path: Path) -> None:
    """The compaction wait ends only when no block overlaps another: one long block and two small
    ones inside it (a backfilled record block per rule) count 2, disjoint blocks 0."""
    from fleet.servers import overlapping_blocks

    def block(name: str, start: int, end: int) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "meta.json").write_text(json.dumps({"minTime": start, "maxTime": end}))

    block("a", 0, 100)
    block("b", 10, 20)
    block("c", 30, 40)
    assert overlapping_blocks(tmp_path) == 2
    for name in ("b", "c"):
        (tmp_path / name / "meta.json").unlink()
        (tmp_path / name).rmdir()
    block("d", 100, 200)  # Prometheus' ranges are half-open: touching is not overlapping
    assert overlapping_blocks(tmp_path) == 0


def test_a_group_evaluated_less_often_is_watched_over_the_same_span() -> None:
    """The direct k group evaluates once a minute beside 15 s groups: it counts the evaluations
    the 15 s groups' watch spans (never more than --cycles, never none), and skips its warm-up
    only when it counts more than one."""
    from fleet.servers import evaluations_wanted, warm_ups

    intervals = {"source": 15.0, "k": 60.0, "slow": 600.0}
    assert evaluations_wanted(intervals, 8) == {"source": 8, "k": 2, "slow": 1}
    assert warm_ups(evaluations_wanted(intervals, 8)) == {"source": 1, "k": 1, "slow": 0}
    assert evaluations_wanted(intervals, 2) == {"source": 2, "k": 1, "slow": 1}  # --quick
    assert warm_ups(evaluations_wanted(intervals, 2)) == {"source": 1, "k": 0, "slow": 0}
    assert evaluations_wanted({"a": 15.0, "b": 15.0}, 4) == {"a": 4, "b": 4}


def test_a_group_the_rule_files_do_not_hold_stops_the_watch() -> None:
    """A group the server evaluates but the watched rule files do not list (a bench wiring the
    wrong files) is an error naming it, not a group watched for a guessed number of evaluations."""
    from fleet.servers import watch_rule_groups

    def read() -> dict[str, tuple[float, float, str, dict[str, float]]]:
        return {"source": (0.1, 15.0, "2026-12-03T18:00:00Z", {}), "stray": (0.1, 15.0, "2026-12-03T18:00:00Z", {})}

    with pytest.raises(RuntimeError, match="'stray'"):
        watch_rule_groups(read, {"source": 15.0}, 2)


def test_a_bundle_generated_with_set_is_what_generate_renders(tmp_path: Path) -> None:
    """`--set scrape_interval=30s`: the bench measures the bundle an operator would generate for a
    30 s scrape (every group evaluated every 30 s but the once-a-minute k and fleet groups), file
    for file what `generate` renders, not the committed one."""
    from fleet.bundle import Bundle, render

    from vllm_spec_exporter.mixin.config import load_config
    from vllm_spec_exporter.mixin.generate import render_all

    cfg = load_config(sets=["scrape_interval=30s"])
    bundle = Bundle.load("direct", cfg, render(cfg, tmp_path))
    assert bundle.root == tmp_path / "direct"
    rendered = render_all(cfg)
    for path in bundle.rule_files:
        assert path.read_text() == rendered[path.relative_to(tmp_path).as_posix()], path
    intervals = bundle.group_intervals(15)
    once_a_minute = ("vllm-spec-decode.k", "vllm-spec-decode.fleet", "vllm-spec-decode.fleet.counts")
    assert [intervals.pop(name) for name in once_a_minute] == [60] * 3 and set(intervals.values()) == {30}, intervals
    assert set(bundle.dashboards) == {"overview", "fleet"}
    assert set(Bundle.load("direct").group_intervals(15).values()) == {15, 60}  # the committed one


def bench_options(*argv: str) -> tuple[Any, MixinConfig]:
    """fleet_scale's options as its parser would leave them for `argv`, then settled."""
    import argparse

    import fleet_scale

    args = argparse.Namespace(sets=[], interval=None, quick=False, rules_before=None, dashboards_before=None,
                              pods="100,1000,5000", history_minutes=75, cycles=4, no_browser=False, repeat=3)
    for option, value in zip(argv[::2], argv[1::2], strict=True):
        if option == "--set":
            args.sets.append(value)
        else:
            setattr(args, option.removeprefix("--").replace("-", "_"), value)
    return args, fleet_scale.settled(args)


def test_the_bench_scrapes_at_the_generated_scrape_interval_and_refuses_what_cannot_work() -> None:
    """--interval follows --set scrape_interval (and --quick's 5 s gives way to it); an explicit
    --interval wins. --set cannot pick the direct bundle (--source does) nor be compared with a
    revision's committed files."""
    assert bench_options()[0].interval == 15
    assert bench_options("--set", "scrape_interval=30s")[0].interval == 30
    assert bench_options("--quick", True)[0].interval == 5
    assert bench_options("--quick", True, "--set", "scrape_interval=30s")[0].interval == 30
    assert bench_options("--interval", 20, "--set", "scrape_interval=30s")[0].interval == 20
    refused = {("--set", "source=vllm"): "--source",
               ("--set", "scrape_interval=30s", "--rules-before", "HEAD"): "cannot be combined with --set",
               ("--set", "no_such_key=1"): "--set"}
    for argv, error in refused.items():
        with pytest.raises(SystemExit, match=error):
            bench_options(*argv)


def test_vmalert_reporting_a_group_the_rule_files_do_not_hold_stops_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same check in the vmalert watcher, which reads iteration counts from vmalert's metrics."""
    from fleet import servers

    class Alert:
        def rule_groups(self) -> list[dict[str, Any]]:
            return []

    monkeypatch.setattr(servers, "vmalert_iteration_seconds", lambda alert: {"stray": (0.1, 1)})
    with pytest.raises(RuntimeError, match="'stray'"):
        servers.watch_vmalert(Alert(), {"source": 15.0}, 2)  # type: ignore[arg-type]
