"""The figures and tables: episodes of each alert, time to page and to resolve for malign
scenarios, false pages for benign ones, both sources side by side, the header of a run.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
from pathlib import Path

from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import alert_rules

from .promtool import ACCEPTANCE, DIRECT, PREVIOUS_COMMIT, PROMTOOLS, ROOT, RULE_SETS, Run, Timeline, bundle_config
from .scenarios import Scenario


def episodes(times: list[float], eval_s: int) -> list[tuple[float, float]]:
    """Contiguous firing runs: (first firing eval, first eval no longer firing)."""
    runs: list[tuple[float, float]] = []
    for t in times:
        if runs and t - runs[-1][1] < eval_s / 2:
            runs[-1] = (runs[-1][0], t + eval_s)
        else:
            runs.append((t, t + eval_s))
    return runs


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    return f"{sign}{int(seconds // 60)}m{int(seconds % 60):02d}s"


def _runs(timeline: Timeline, eval_s: int, name: str, instance: str | None = None) -> list[tuple[float, float]]:
    times = sorted(t for (n, i), ts in timeline.items() if n == name and (instance is None or i == instance)
                   for t in ts)
    return episodes(sorted(set(times)), eval_s)


def malign_figures(s: Scenario, timeline: Timeline, eval_s: int) -> dict[str, str]:
    bad = s.bad_instance
    out: dict[str, str] = {}
    assert s.onset is not None
    for label, name, onset in (("warn", alert_rules.ACCEPTANCE_LOW, s.onset),
                               ("page", alert_rules.ACCEPTANCE_CRITICAL, s.page_onset or s.onset)):
        runs = _runs(timeline, eval_s, name, bad)
        before = [r for r in runs if r[0] < s.onset]
        after = [r for r in runs if r[1] > s.onset]
        out[label] = _fmt(after[0][0] - onset) if after else "never"
        if before:
            out[label] += f" ({len(before)} before onset)"
    ends = [r[1] for name in ACCEPTANCE for r in _runs(timeline, eval_s, name, bad) if r[1] > s.onset]
    if s.recovery is not None:
        out["resolve"] = _fmt(max(ends) - s.recovery) if ends else "-"
    if s.vanish is not None:
        out["end after vanish"] = _fmt(max(ends) - s.vanish) if ends else "-"
    if bad is not None:
        others = sum(len(_runs(timeline, eval_s, name, i)) for (name, i) in set(timeline)
                     if name in ACCEPTANCE and i != bad)
        out["other pods alerted"] = str(others)
    for name in s.expect:
        runs = _runs(timeline, eval_s, name)
        out[name.removeprefix("SpecDecode")] = _fmt(runs[0][0] - (s.vanish or s.onset)) if runs else "never"
    return out


def benign_figures(s: Scenario, timeline: Timeline, eval_s: int) -> str:
    """`pages / warnings` per simulated day (warnings include the scenario's `quiet` alerts)."""
    days = s.hours / 24
    pages = len(_runs(timeline, eval_s, alert_rules.ACCEPTANCE_CRITICAL)) / days
    warns = sum(len(_runs(timeline, eval_s, name)) for name in (alert_rules.ACCEPTANCE_LOW, *s.quiet)) / days
    return f"{pages:.3g} / {warns:.3g}"


def _cell(values: dict[str, str]) -> str:
    """One figure on both promtools: `x` when they agree, `x (2.42: y)` when they differ; `·` not run."""
    first = values.get("3", values.get("2", "·"))
    if "3" in values and "2" in values and values["2"] != values["3"]:
        return f"{first} (2.42: {values['2']})"
    return first


def compare_sources(results: dict[tuple[str, Run], Timeline], chosen: list[Scenario], intervals: list[int],
                    promtools: list[str]) -> str:
    """Pages of the sidecar's rules (new) and of the sidecar-less ones (direct), per scenario,
    alert and pod: every firing episode, and the largest difference between the two in seconds."""
    direct_alerts = {a["alert"] for a in alert_rules.all_alerts(MixinConfig().with_overrides({"source": "vllm"}))}
    lines = ["| scenario | scrape | promtool | alert | pod | sidecar (new) | direct | largest difference |",
             "|---|---|---|---|---|---|---|---|"]
    worst, compared = 0.0, 0
    for s in chosen:
        for iv in intervals:
            for p in promtools:
                new_run, direct_run = Run("new", iv, p), Run(DIRECT, iv, p)
                if (s.name, new_run) not in results or (s.name, direct_run) not in results:
                    continue  # a cell not run by default (benign scenarios on Prometheus 3's promtool)
                new, direct = results[(s.name, new_run)], results[(s.name, direct_run)]
                eval_s = new_run.evaluation_s
                keys = sorted({k for k in (*new, *direct) if k[0] in direct_alerts})
                for name, instance in keys:
                    a, b = _runs(new, eval_s, name, instance), _runs(direct, eval_s, name, instance)
                    compared += 1
                    if len(a) == len(b):
                        diff = max((abs(x - y) for ra, rb in zip(a, b, strict=True)
                                    for x, y in zip(ra, rb, strict=True)), default=0.0)
                        worst, shown = max(worst, diff), f"{diff:g} s"
                    else:
                        worst, shown = math.inf, "episodes differ"
                    def fmt(runs: list[tuple[float, float]]) -> str:
                        return ", ".join(f"{_fmt(x)}–{_fmt(y)}" for x, y in runs) or "none"
                    lines.append(f"| {s.name} | {iv} s | {p} | {name} | {instance} | {fmt(a)} | {fmt(b)} | {shown} |")
    lines.append(f"\n{compared} (scenario, alert, pod) timelines; largest difference between the two sources: "
                 f"{worst:g} s")
    return "\n".join(lines)


def render_tables(results: dict[tuple[str, Run], Timeline], all_scenarios: list[Scenario],
                  intervals: list[int], promtools: list[str]) -> str:
    versions = ", ".join(f"{_promtool_version(PROMTOOLS[p])}" for p in promtools)
    columns = [(rs, iv) for rs in RULE_SETS for iv in intervals]
    head = "| Scenario | Simulated | " + " | ".join(f"{rs} {iv} s" for rs, iv in columns) + " |"
    rule = "|---|---|" + "---|" * len(columns)
    lines = [
        f"Measured by `bench/alert_quality.py` at {', '.join(f'{i} s' for i in intervals)} scrapes on promtool "
        f"{versions} (a cell shows Prometheus 3's figure, and 2.42's in brackets where it differs). **new** = "
        "these rules: the committed bundle at 15 s and 30 s scrapes (its groups evaluate every 15 s), the bundle "
        "generated with `--set scrape_interval=60s` at 60 s; **previous** = the rules at "
        f"`{PREVIOUS_COMMIT}` (windows fixed for 15 s); **baseline** = mixin style `rate[5m]`, `for: 10m`; both "
        "evaluated at the scrape interval. Times are from onset (recovery, series vanishing) to the alert's first "
        "(last) firing evaluation; Alertmanager's group_wait comes on top. `·` = not run by default (the "
        "previous rules at 15 s equal the new ones for acceptance; the previous rules at 30 s and 60 s, the "
        "baseline at 60 s, benign scenarios on Prometheus 3's promtool; `--full` runs every cell).",
        "",
        "**Benign scenarios: false alerts per simulated day** (pages = critical / warnings)",
        "",
        head, rule,
    ]
    for s in (x for x in all_scenarios if x.benign):
        cells = [_cell({p: benign_figures(s, results[(s.name, Run(rs, iv, p))], Run(rs, iv, p).evaluation_s)
                        for p in promtools if (s.name, Run(rs, iv, p)) in results}) for rs, iv in columns]
        lines.append(f"| {s.name} | {s.hours:g} h | " + " | ".join(cells) + " |")
    lines += ["", "**Malign scenarios** (warn = warning fires, page = critical fires)", "",
              head.replace("| Simulated |", "| Figure |"), rule]
    for s in (x for x in all_scenarios if not x.benign):
        figures = {(rs, iv, p): malign_figures(s, results[(s.name, Run(rs, iv, p))], Run(rs, iv, p).evaluation_s)
                   for rs, iv in columns for p in promtools if (s.name, Run(rs, iv, p)) in results}
        keys = list(figures[(RULE_SETS[0], intervals[0], promtools[0])])
        for i, key in enumerate(keys):
            name = s.name if i == 0 else ""
            cells = [_cell({p: figures[(rs, iv, p)].get(key, "-") for p in promtools if (rs, iv, p) in figures})
                     for rs, iv in columns]
            lines.append(f"| {name} | {key} | " + " | ".join(cells) + " |")
    notes = [f"- *{s.name}*: {s.note}" for s in all_scenarios if s.note]
    for iv in intervals:
        w = bundle_config(iv).windows
        notes.append(f"- new rules at {iv} s: fast {w.fast_long}/{w.fast_short}, slow {w.slow_long}/{w.slow_short}, "
                     f"held warning {w.warning_hold} / critical {w.critical_hold} / slow {w.slow_hold}, evaluated "
                     f"every {w.evaluation_interval}.")
    cfg = MixinConfig()
    notes.append(f"- confidence {cfg.confidence_label}, overdispersion {cfg.acceptance_overdispersion:g}.")
    lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


def _promtool_version(promtool: Path) -> str:
    out = subprocess.run([str(promtool), "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"version (\S+)", out)
    return match.group(1) if match else "?"


def header(args: argparse.Namespace) -> str:
    """The table's title, the command that reproduces it and the commit it measured."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    command = ".venv/bin/python bench/alert_quality.py --write" + (f" --max-hours {args.max_hours:g}"
                                                                 if args.max_hours else "")
    return ("# Alert quality: the acceptance alerts on simulated scenarios\n\n"
            "<!-- Written by bench/alert_quality.py --write; do not edit. -->\n\n"
            f"Reproduce: `{command}` (≈ 15 min on 2 cores). Measured at commit `{commit}`"
            + (" with uncommitted changes" if dirty else "") + ".\n\n")

