"""Alert quality: the acceptance alerts on independent, realistic scenarios, at 15, 30 and 60 s
scrape intervals, on Prometheus 3's and 2.42's promtool, side by side with the previous rules
(from git) and a mixin-style `rate[5m]` / `for: 10m` baseline.

Every scenario is simulated draft by draft at the scrape interval and run through Prometheus' own
rule engine (`promtool test rules`) on rules generated from MixinConfig:

* **new**: the rules `vllm-spec-exporter generate` writes today: the committed bundle at 15 s and
  30 s scrapes (its groups pin a 15 s evaluation), the bundle rendered with
  `--set scrape_interval=60s` at 60 s (60 s evaluation);
* **previous**: `alerts/prometheus_{rules,alerts}.yaml` at commit PREVIOUS_COMMIT, read from git
  (the evidence rules with windows fixed for 15 s), evaluated at the scrape interval;
* **baseline**: the new files with the two acceptance alerts replaced by what a typical mixin
  writes: `rate(accepted[5m]) / rate(draft_tokens[5m]) < T`, `for: 10m`, no volume guard,
  evaluated at the scrape interval;
* **direct** (`--rules new,direct`): the same bundle with source=vllm (no sidecar), fed the same
  simulated counters as vLLM's own series (`vllm:`, `vllm_`, `ray_vllm:`, `ray_vllm_` rotated over
  the pods, job `vllm`, the sidecar's target_up as vLLM's `up`); it prints both sources' pages
  side by side and their largest difference (never part of the README's table).

The simulator: drafts arrive as a Poisson stream; they belong to requests (lognormal length), and
each request has its own acceptance (logit offset ~ N(0, sigma) around the scenario's mean), so
traffic is over-dispersed like a real prompt mix; within a draft, tokens are accepted as a prefix
(token i+1 only after token i), with a per-token probability solved so the expected acceptance
ratio is the request's. The promtool test expects "no alert" at every evaluation; each firing
alert shows up as a failure and is parsed into a timeline. Alertmanager's group_wait (30 s by
default) comes on top of every time-to-page. Nothing here asserts a time; it prints figures.

    .venv/bin/python bench/alert_quality.py            # print the tables (≈ 15 min on 2 cores)
    .venv/bin/python bench/alert_quality.py --write    # also store them for alerts/README.md
    .venv/bin/python bench/alert_quality.py --intervals 60 --promtools 3 --only collapse   # a quick look
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
# The bench's parts, beside this script (bench/ is sys.path[0] when it runs).
from alert_bench.promtool import (  # noqa: E402
    DIRECT,
    INTERVALS,
    PROMTOOLS,
    RULE_SETS,
    Run,
    Timeline,
    bundle_config,
    planned,
    run_promtool,
    test_file,
    write_rule_sets,
)
from alert_bench.report import benign_figures, compare_sources, header, malign_figures, render_tables  # noqa: E402
from alert_bench.scenarios import Scenario, scenarios  # noqa: E402

import measured  # noqa: E402  (tools/measured.py: the record of what the table was made from)

TABLE = ROOT / measured.ALERT_QUALITY.outputs[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"store the tables in {TABLE.relative_to(ROOT)}")
    parser.add_argument("--only", default="", help="run scenarios whose name contains this text")
    parser.add_argument("--rules", default=",".join(RULE_SETS), help="comma-separated rule sets to run")
    parser.add_argument("--intervals", default=",".join(map(str, INTERVALS)), help="scrape intervals (s)")
    parser.add_argument("--promtools", default="3,2", help="promtool majors: 3 (Debian testing's), 2 (/usr/bin)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="every rule set x interval x promtool (hours)")
    parser.add_argument("--max-hours", type=float, default=0,
                        help="simulate each scenario at most this long (0: as defined; per-day rates stay per day)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="MixinConfig override for the new rules (tuning; --write refuses it)")
    args = parser.parse_args()
    chosen = [s for s in scenarios() if args.only in s.name]
    if args.max_hours:
        chosen = [dataclasses.replace(s, hours=min(s.hours, args.max_hours)) for s in chosen]
    sets = [r for r in args.rules.split(",") if r]
    intervals = [int(i) for i in args.intervals.split(",") if i]
    promtools = [p for p in args.promtools.split(",") if p]
    for p in promtools:
        if not os.access(PROMTOOLS[p], os.X_OK):
            raise SystemExit(f"promtool {p}.x not found at {PROMTOOLS[p]} (run scripts/bootstrap.sh)")
    overrides = dict(item.split("=", 1) for item in args.sets)
    with tempfile.TemporaryDirectory(prefix="alert-quality-") as tmp:
        workdir = Path(tmp)
        dirs = {iv: write_rule_sets(workdir / f"{iv}s", bundle_config(iv).with_overrides(overrides))
                for iv in intervals}
        jobs = [(s, Run(rs, iv, p)) for s in chosen for rs in sets for iv in intervals for p in promtools
                if planned(s, rs, iv, p, args.full)]
        # Longest first, so two workers finish together.
        jobs.sort(key=lambda job: -job[0].hours * 3600 / job[1].evaluation_s)

        def run(job: tuple[Scenario, Run]) -> Timeline:
            s, r = job
            slug = re.sub(r"\W+", "_", f"{s.name}_{r.rules}_{r.scrape_s}_{r.promtool}")
            return run_promtool(test_file(s, dirs[r.scrape_s][r.rules], r), workdir / f"{slug}.yaml",
                                PROMTOOLS[r.promtool])

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            timelines = list(pool.map(run, jobs))
    results = {(s.name, r): tl for (s, r), tl in zip(jobs, timelines, strict=True)}
    if DIRECT in sets and "new" in sets:
        print(compare_sources(results, chosen, intervals, promtools))
        return 0
    if set(sets) != set(RULE_SETS):
        for s, r in jobs:
            tl = results[(s.name, r)]
            figures = benign_figures(s, tl, r.evaluation_s) if s.benign else malign_figures(s, tl, r.evaluation_s)
            print(f"{s.name} | {r.rules} {r.scrape_s} s promtool {r.promtool}: {figures}", flush=True)
        return 0
    table = render_tables(results, chosen, intervals, promtools)
    print(table)
    if args.write:
        if args.only or args.sets:
            raise SystemExit("--write needs every scenario and the default config (drop --only/--set)")
        if args.max_hours:
            table += (f"\nRun with `--max-hours {args.max_hours:g}` on a shared machine: every scenario simulated "
                      f"at most {args.max_hours:g} h (false alerts still per simulated day).\n")
        rules = measured.digests(ROOT, measured.ALERT_QUALITY.inputs)
        table += ("\nRules measured: " + ", ".join(f"`{Path(path).name}` sha256 `{digest[:16]}`"
                                                   for path, digest in sorted(rules.items()))
                  + f" (recorded in `{measured.ALERT_QUALITY.record}`: `tools/measured.py` fails when they "
                  "change).\n")
        TABLE.write_text(header(args) + table)
        measured.write_record(ROOT, measured.ALERT_QUALITY)
        print(f"wrote {TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
