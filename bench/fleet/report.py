"""What a run prints and writes: one summary per (backend, bundle, fleet size) (`summary`, also
the --json that tests/stack/test_fleet_scale.py reads) and one table per backend and bundle."""

from __future__ import annotations

import math
import os
from typing import Any

from fleet.measure import Result
from vllm_spec_lab.grafana_render import PAGE_BOUND_SECONDS


def _group_shares(groups: dict[str, tuple[float, float]]) -> dict[str, dict[str, float]]:
    """{group: (seconds, interval)} as the JSON keeps it: seconds, interval and their share."""
    return {g: {"seconds": s, "interval": i, "share": s / i} for g, (s, i) in groups.items()}


def summary(result: Result) -> dict[str, Any]:
    """The figures one table row shows (also written by --json, read by tests/stack/test_fleet_scale.py)."""
    dashboards: dict[str, dict[str, Any]] = {}
    for q in result.queries:
        d = dashboards.setdefault(q.dashboard, {"queries": 0, "total": 0.0, "slowest": 0.0, "slowest_panel": "",
                                                "errors": 0, "max_series": 0, "max_series_panel": "",
                                                "record_queries": 0, "record_total": 0.0, "raw_total": 0.0,
                                                "raw_slowest": 0.0, "raw_errors": 0, "rec_slower": 0,
                                                "worst_rec_over_raw": 0.0, "worst_rec_over_raw_panel": ""})
        d["queries"] += 1
        d["total"] += q.seconds
        d["errors"] += bool(q.error)
        d["raw_errors"] += bool(q.raw_error)
        if q.seconds > d["slowest"]:
            d["slowest"], d["slowest_panel"] = q.seconds, q.panel
        if q.series > d["max_series"]:
            d["max_series"], d["max_series_panel"] = q.series, q.panel
        if q.raw_seconds is not None:
            d["record_queries"] += 1
            d["record_total"] += q.seconds
            d["raw_total"] += q.raw_seconds
            d["raw_slowest"] = max(d["raw_slowest"], q.raw_seconds)
            # Per panel: is the recording-rule path ever slower than its raw baseline (the target)?
            d["rec_slower"] += q.seconds > q.raw_seconds
            if q.seconds / q.raw_seconds > d["worst_rec_over_raw"]:
                d["worst_rec_over_raw"], d["worst_rec_over_raw_panel"] = q.seconds / q.raw_seconds, q.panel
    for name, seconds in result.draw_seconds.items():
        dashboards.setdefault(name, {})["draw"] = seconds
    worst_group = max(result.rule_groups.items(), key=lambda kv: kv[1][0] / kv[1][1], default=("", (0.0, 1.0)))
    return {"backend": result.backend, "source": result.source, "pods": result.pods, "series": result.series,
            "series_per_pod": result.series_per_pod, "head_series": result.head_series, "rss_mb": result.rss_mb,
            "series_seen": result.series_seen, "series_live": result.series_live,
            "compaction_seconds": result.compaction_seconds,
            "load_seconds": result.load_seconds, "cpu_cores": result.cpu_cores,
            "rule_groups": _group_shares(result.rule_groups),
            "rules_total_share": sum(s / i for s, i in result.rule_groups.values()),
            "rule_groups_concurrent": _group_shares(result.rule_groups_concurrent),
            "rule_costs": result.rule_costs, "rules_before": result.rules_before,
            "rule_medians": result.rule_medians, "rule_medians_before": result.rule_medians_before,
            "rule_groups_before": _group_shares(result.rule_groups_before),
            "rule_costs_before": result.rule_costs_before, "cpu_cores_before": result.cpu_cores_before,
            "rule_groups_again": _group_shares(result.rule_groups_again),
            "rule_medians_again": result.rule_medians_again, "rule_costs_again": result.rule_costs_again,
            "cpu_cores_again": result.cpu_cores_again,
            "worst_group": worst_group[0], "dashboards": dashboards,
            "queries": [vars(q) for q in result.queries]}


COSTLIEST_RULES = 3  # rules shown per group
NOT_DRAWN = f"{PAGE_BOUND_SECONDS}+"  # a dashboard the renderer gave up on (its bound, in s)


def _watches(r: dict[str, Any]) -> tuple[tuple[str, str, str, str], ...]:
    """(label, worst key, median key, CPU key) of each watch of one row's rule groups (none: "")."""
    return (("", "rule_groups", "rule_medians", "cpu_cores"),
            (", concurrent-rule-eval", "rule_groups_concurrent", "", ""),
            (f", rules of {r.get('rules_before')}", "rule_groups_before", "rule_medians_before", "cpu_cores_before"),
            (", own rules again (drift)", "rule_groups_again", "rule_medians_again", "cpu_cores_again"))


def _shares(groups: dict[str, dict[str, float]]) -> str:
    """`.group 0.123s (0.82%)` for each of {group: {"seconds", "share"}}, by name."""
    return ", ".join(f"{g.removeprefix('vllm-spec-decode')} {v['seconds']:.3f}s ({v['share'] * 100:.2f}%)"
                     for g, v in sorted(groups.items()))


def print_table(rows: list[dict[str, Any]]) -> None:
    backend = f"{rows[0]['backend']}, {rows[0]['source']} bundle"
    print(f"\n{backend}: series, memory, rule evaluation (share of the interval) and dashboard load "
          "(1 h range; recording-rule panels vs the same panels from raw counters)")
    print(f"{'pods':>6}{'series/pod':>11}{'series':>9}{'head':>9}{'RSS MB':>8}{'CPU':>6}{'rules %':>8}"
          f"{'worst group %':>15}"
          f"  {'dashboard':<9}{'queries':>8}{'total s':>8}{'slowest s':>10}{'rec s':>7}{'raw s':>7}"
          f"{'raw slowest':>12}{'max series':>11}{'draw s':>7}")
    for r in rows:
        worst = r["rule_groups"].get(r["worst_group"], {"share": 0.0})
        first = True
        for name, d in sorted(r["dashboards"].items()):
            head = (f"{r['pods']:>6}{r['series_per_pod']:>11.1f}{r['series']:>9}{r['head_series']:>9}"
                    f"{r['rss_mb']:>8.0f}{r['cpu_cores']:>6.2f}{r['rules_total_share'] * 100:>8.2f}"
                    f"{worst['share'] * 100:>15.2f}") if first else " " * 72
            draw = (f"{'-':>7}" if "draw" not in d else f"{NOT_DRAWN:>7}" if math.isinf(d["draw"])
                    else f"{d['draw']:>7.2f}")
            print(f"{head}  {name:<9}{d.get('queries', 0):>8}{d.get('total', 0):>8.2f}{d.get('slowest', 0):>10.3f}"
                  f"{d.get('record_total', 0):>7.2f}{d.get('raw_total', 0):>7.2f}{d.get('raw_slowest', 0):>12.3f}"
                  f"{d.get('max_series', 0):>11}{draw}")
            first = False
    print("rule groups (worst evaluation, share of the interval):")
    for r in rows:
        for label, worst, _, _ in _watches(r):
            if r.get(worst):
                print(f"  {r['pods']:>6} pods{label}: {_shares(r[worst])}")
    if any(r.get("rule_medians") for r in rows):
        print("rule groups (median evaluation, share of the interval; the server's CPU, cores, meanwhile):")
    for r in rows:
        for label, worst, median, cores in _watches(r):
            if median and r.get(median):
                medians = {g: {"seconds": s, "share": s / r[worst][g]["interval"]}
                           for g, s in r[median].items() if g in r[worst]}
                cpu = "-" if r.get(cores) is None else f"{r[cores]:.2f}"
                print(f"  {r['pods']:>6} pods{label} (CPU {cpu}): {_shares(medians)}")
    print(f"costliest rules (median evaluation; the {COSTLIEST_RULES} of each group):")
    for r in rows:
        runs = (("", r.get("rule_costs", {})), (f" @{r.get('rules_before')}", r.get("rule_costs_before", {})),
                (" again", r.get("rule_costs_again", {})))
        for label, costs in runs:
            for group, rules in sorted(costs.items()):
                top = sorted(rules.items(), key=lambda kv: -kv[1])[:COSTLIEST_RULES]
                print(f"  {r['pods']:>6} pods{label} {group.removeprefix('vllm-spec-decode')}: "
                      + ", ".join(f"{name} {seconds:.3f}s" for name, seconds in top))
    print("slowest panel / most series per dashboard:")
    for r in rows:
        for name, d in sorted(r["dashboards"].items()):
            if "slowest_panel" in d:
                print(f"  {r['pods']:>6} pods {name}: slowest {d['slowest_panel']!r}, most series "
                      f"{d['max_series']} in {d['max_series_panel']!r}, {d['errors']} query errors; "
                      f"records slower than raw in {d['rec_slower']} of {d['record_queries']} queries (worst "
                      f"×{d['worst_rec_over_raw']:.2f}, {d['worst_rec_over_raw_panel']!r}), "
                      f"{d['raw_errors']} raw baseline errors")


def load_average() -> str:
    return "{:.1f} {:.1f} {:.1f} (1, 5, 15 min)".format(*os.getloadavg())
