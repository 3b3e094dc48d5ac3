"""One backend, one fleet size: load the history, backfill the records, start the server on it
with the bundle's rules, watch the rule groups, and time the dashboards (and draw them).

`Plan` is what to measure; `Result` what was measured (figures only: `report` shapes them)."""

from __future__ import annotations

import http.client
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.request import urlopen

from fleet.bundle import Bundle, expanded_rules_file, rule_group_intervals
from fleet.dashboards import QueryTime, browser_draw, dashboard_load
from fleet.history import SLICE_SAMPLES, LiveTarget, vm_import_lines, write_openmetrics
from fleet.servers import (
    RuleWatch,
    log,
    prometheus3,
    rfc3339,
    rss_mb,
    rule_times,
    run,
    series_seen,
    victoria_metrics,
    wait_for_compaction,
    watch_rule_groups,
    watch_vmalert,
    with_cores,
)
from fleet.synth import Fleet
from vllm_spec_lab.binaries import TESTING_BIN_DIR as BIN
from vllm_spec_lab.monitoring import Prometheus, http_get_json
from vllm_spec_lab.victoria import VMAlert


@dataclass
class Result:
    """What one (backend, bundle, fleet size) measured. Figures only; `report` shapes them."""

    backend: str
    source: str  # the bundle: exporter or direct
    pods: int
    series: int
    series_per_pod: float
    head_series: int
    rss_mb: float
    load_seconds: float  # backfill or import of the history
    cpu_cores: float = 0.0  # the server's CPU seconds per second while its rules were watched (scrape + rules)
    rule_groups: dict[str, tuple[float, float]] = field(default_factory=dict)  # group: (worst s, interval s)
    queries: list[QueryTime] = field(default_factory=list)
    draw_seconds: dict[str, float] = field(default_factory=dict)
    series_seen: int = 0  # the fleet's series the server held after its rules were watched
    series_live: int = 0  # of those, the ones the live scrape had reached (a sample after the history)
    compaction_seconds: float = 0.0  # Prometheus merging the backfilled blocks (not measured meanwhile)
    rule_groups_concurrent: dict[str, tuple[float, float]] = field(default_factory=dict)  # with concurrent-rule-eval
    rule_medians: dict[str, float] = field(default_factory=dict)  # group: median evaluation s
    rule_costs: dict[str, dict[str, float]] = field(default_factory=dict)  # group: {rule: median s}
    # Another revision's rules on the same server, watched after everything else (--rules-before)
    rules_before: str = ""
    rule_groups_before: dict[str, tuple[float, float]] = field(default_factory=dict)
    rule_medians_before: dict[str, float] = field(default_factory=dict)
    rule_costs_before: dict[str, dict[str, float]] = field(default_factory=dict)
    cpu_cores_before: float | None = None
    # ... then the bundle's own rules once more (A-B-A): how far the same rules drift between two
    # watches of one run, one estimate of the drift under a before/after difference.
    rule_groups_again: dict[str, tuple[float, float]] = field(default_factory=dict)
    rule_medians_again: dict[str, float] = field(default_factory=dict)
    rule_costs_again: dict[str, dict[str, float]] = field(default_factory=dict)
    cpu_cores_again: float | None = None

    def keep_rules(self, watched: RuleWatch) -> None:
        """Each group's median and each rule's median of the bundle's own rules."""
        self.rule_costs, self.rule_medians = watched.rules, watched.median

    def keep_rules_before(self, rev: str, watched: RuleWatch, intervals: dict[str, float]) -> None:
        """What another revision's rules measured on the same server (--rules-before)."""
        self.rules_before = rev
        self.rule_groups_before = watched.shares(intervals)
        self.rule_costs_before, self.rule_medians_before = watched.rules, watched.median
        self.cpu_cores_before = watched.cores

    def keep_rules_again(self, watched: RuleWatch, intervals: dict[str, float]) -> None:
        """The bundle's own rules watched again after another revision's (A-B-A)."""
        self.rule_groups_again, self.rule_medians_again = watched.shares(intervals), watched.median
        self.rule_costs_again, self.cpu_cores_again = watched.rules, watched.cores


@dataclass
class Plan:
    """What to measure: one fleet size on one bundle, and how."""

    pods: int
    step: int  # scrape and evaluation interval, seconds
    history: int  # seconds of backfilled history
    cycles: int  # rule evaluations to watch
    browser: bool
    work: Path
    bundle: Bundle
    repeat: int = 1  # each dashboard query timed this many times, the fastest kept
    raw: bool = True  # also time each record-reading panel with its records expanded (the baseline)
    # Wait for Prometheus to merge the backfilled blocks before measuring (its compaction loop runs
    # once a minute); --quick checks the path, not the figures, and skips the wait.
    settle: bool = True
    # Also watch the rule groups with Prometheus' concurrent rule evaluation (a feature flag in 3.x:
    # rules of a group that read no other rule of it run in parallel), after everything else.
    concurrent_rules: bool = False
    # Also watch these rule files (another revision's, --rules-before) on the same server, after
    # everything else, then the bundle's own rules again: rule groups before/after a rule change in
    # the same run, and the drift of the same rules between two watches (A-B-A).
    rules_before: tuple[str, tuple[Path, ...]] | None = None
    start: int = 0  # the history's first second (unix)

    @property
    def end(self) -> int:
        return self.start + self.history


def catch_up(load: Callable[[int, int], None], start: int, end: int, step: int) -> int:
    """load(start, end), then load the time that passed meanwhile, until less than two steps are
    left (the 5-minute lookback covers those and the server's start); returns the end loaded. At
    5,000 pods a backfill took 9 minutes and a replay 5.5: without this, a dashboard's last hour
    held that gap (up to a sixth of the samples missing; on VictoriaMetrics only in the records, an
    unfair comparison with the raw baseline), and a ranking over the last 5 minutes could find no
    record at all."""
    while True:
        load(start, end)
        now = int(time.time()) // step * step
        if now - end < 2 * step:
            return end
        if now - end >= end - start:  # loading runs slower than time passes: it would never end
            raise RuntimeError(f"loading {end - start} s of history took longer than that; the gap cannot close")
        start, end = end, now


def measure_prometheus(fleet: Fleet, plan: Plan, live: LiveTarget) -> Result:
    work = plan.work / "prometheus"
    work.mkdir()
    history = work / "history.om"
    started = time.perf_counter()
    data = work / "data"
    # In time slices of at most ~SLICE_SAMPLES samples: promtool holds its input in memory, and 5,000
    # pods' hour is ~20 GB of text. Slices cover disjoint times, so their blocks never overlap.
    per_step = len(fleet.series)
    slice_seconds = max(plan.step, SLICE_SAMPLES // per_step * plan.step)
    samples = 0

    def backfill(start: int, end: int) -> None:
        nonlocal samples
        for begin in range(start, end, slice_seconds):
            samples += write_openmetrics(fleet, plan.start, begin, min(begin + slice_seconds, end), plan.step, history)
            run([str(BIN / "promtool"), "tsdb", "create-blocks-from", "openmetrics", str(history), str(data)])
            history.unlink()

    end = catch_up(backfill, plan.start, plan.end, plan.step)
    load = time.perf_counter() - started
    log(f"prometheus: {samples:,} samples backfilled in {load:.0f} s, up to {time.time() - end:.0f} s ago")
    prom = prometheus3(data, live, plan.step, plan.bundle.rule_files)
    try:
        prom.start(timeout=900)
        log("prometheus: started on the history; backfilling the records")
        # The records' history: one pass over the rules with every record expanded (promtool does
        # not evaluate a record of a record in the same pass). The rules evaluate live from this
        # start on, so the records have no gap either.
        blocks = work / "rule-blocks"
        run([str(BIN / "promtool"), "tsdb", "create-blocks-from", "rules", f"--start={plan.start}",
             f"--end={end}", f"--url={prom.url}", f"--eval-interval={plan.step}s",
             f"--output-dir={blocks}", str(expanded_rules_file(work / "expanded.yaml", plan.bundle))], timeout=3600)
        prom.stop()
        for block in blocks.iterdir():
            shutil.move(str(block), data / block.name)
        prom = prometheus3(data, live, plan.step, plan.bundle.rule_files)
        prom.start(timeout=900)
        compaction = 0.0
        if plan.settle:
            log("prometheus: restarted with the records; waiting for their blocks to be compacted")
            compaction = wait_for_compaction(data, 3600, lambda: prom.proc is not None and prom.proc.running())
            log(f"prometheus: compacted in {compaction:.0f} s")
        log("prometheus: watching rule evaluations")
        assert prom.proc is not None
        intervals = plan.bundle.group_intervals(plan.step)

        def watch(server: Prometheus, intervals: dict[str, float] = intervals) -> RuleWatch:
            """{group: worst evaluation s}, each rule's median over the plan's cycles, the CPU used."""
            assert server.proc is not None
            return with_cores(lambda: watch_rule_groups(lambda: rule_times(server), intervals, plan.cycles),
                              server.proc.pid)

        def restarted(server: Prometheus, files: tuple[Path, ...], features: tuple[str, ...] = ()) -> Prometheus:
            """`server` stopped, and a Prometheus on the same data evaluating `files` started."""
            server.stop()
            fresh = prometheus3(data, live, plan.step, files, features=features)
            fresh.start(timeout=900)
            return fresh

        watched = watch(prom)
        rule_groups, cores = watched.shares(intervals), watched.cores
        log("prometheus: dashboards")
        result = Result("Prometheus 3", plan.bundle.source, fleet.pods, len(fleet.series), fleet.series_per_pod,
                        prom.head_series(), rss_mb(prom.proc.pid), load, cores, rule_groups)
        result.compaction_seconds = compaction
        result.keep_rules(watched)
        result.series_seen = series_seen(prom.url, fleet, plan.bundle.job)
        result.series_live = series_seen(prom.url, fleet, plan.bundle.job, after=end)
        result.queries = dashboard_load(prom.url, time.time(), plan.step, plan.bundle, plan.repeat, plan.raw)
        if plan.browser:
            log("prometheus: drawing the dashboards in the browser")
            try:
                result.draw_seconds = browser_draw(prom.url, time.time(), plan.step, work, plan.bundle.dashboards)
            except (RuntimeError, subprocess.SubprocessError, OSError, KeyError) as error:
                log(f"browser: {error}")  # the table shows no draw time; the other figures stand
        if plan.concurrent_rules:
            prom = restarted(prom, plan.bundle.rule_files, features=("concurrent-rule-eval",))
            log("prometheus: restarted with concurrent-rule-eval; watching rule evaluations")
            result.rule_groups_concurrent = watch(prom).shares(intervals)
        if plan.rules_before:
            rev, files = plan.rules_before
            prom = restarted(prom, files)
            log(f"prometheus: restarted with the rules of {rev}; watching rule evaluations")
            before_intervals = rule_group_intervals(files, plan.step)
            result.keep_rules_before(rev, watch(prom, before_intervals), before_intervals)
            prom = restarted(prom, plan.bundle.rule_files)
            log("prometheus: restarted with the bundle's rules again; watching rule evaluations")
            result.keep_rules_again(watch(prom), intervals)
        return result
    finally:
        prom.stop()


def measure_victoriametrics(fleet: Fleet, plan: Plan, live: LiveTarget) -> Result:
    work = plan.work / "victoriametrics"
    work.mkdir()
    vm = victoria_metrics(work / "data", live, plan.step)
    intervals = plan.bundle.group_intervals(plan.step)
    alert: VMAlert | None = None
    try:
        vm.start(timeout=120)
        started = time.perf_counter()
        host = vm.url.split("//", 1)[1]
        conn = http.client.HTTPConnection(host, timeout=3600)
        conn.request("POST", "/api/v1/import", body=vm_import_lines(fleet, plan.start, plan.end, plan.step),
                     encode_chunked=True, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status >= 300:
            raise RuntimeError(f"VictoriaMetrics import: {response.status} {response.read()[:500]!r}")
        conn.close()
        urlopen(f"{vm.url}/internal/force_flush", timeout=600).read()
        load = time.perf_counter() - started
        log(f"victoriametrics: history imported in {load:.0f} s; replaying the records")
        expanded = expanded_rules_file(work / "expanded.yaml", plan.bundle)

        def replay(start: int, end: int) -> None:
            done = run([str(BIN / "vmalert"), f"-datasource.url={vm.url}", f"-remoteWrite.url={vm.url}",
                 f"-rule={expanded}", f"-evaluationInterval={plan.step}s",
                 "-rule.evalDelay=0s", f"-replay.timeFrom={rfc3339(start)}", f"-replay.timeTo={rfc3339(end)}",
                 "-replay.disableProgressBar", "-replay.rulesDelay=0s",  # no chained records: all expanded
                 # VictoriaMetrics answers the replay's queries and ingests its output at once: at 1,000
                 # pods the default 30 s of send timeout and retries dropped 2 M samples; at 5,000 batches
                 # of 10,000 series x 1,000 samples were refused outright.
                 "-remoteWrite.sendTimeout=5m", "-remoteWrite.retryMaxTime=30m", "-remoteWrite.maxQueueSize=5000000",
                 "-remoteWrite.maxBatchSize=1000",  # series a request, each with up to 1,000 replayed samples
                 "-loggerLevel=ERROR", "-httpListenAddr=127.0.0.1:0"], timeout=3600)
            if "dropping" in done.stderr:  # vmalert logs a lost remote-write batch at ERROR and goes on
                raise RuntimeError(f"vmalert replay lost records: {done.stderr[-500:]}")
            urlopen(f"{vm.url}/internal/force_flush", timeout=600).read()

        # The raw series have no gap (VictoriaMetrics scraped the live target during the import); the
        # records are replayed up to the live vmalert's start.
        catch_up(replay, plan.start, plan.end, plan.step)

        def started_vmalert(files: tuple[Path, ...]) -> VMAlert:
            """A live vmalert evaluating `files` against the server (starting stops it if it fails)."""
            fresh = VMAlert(vm.url, files, evaluation_interval=f"{plan.step}s", extra_args=["-loggerLevel=ERROR"])
            fresh.start(timeout=60)
            return fresh

        def watch(server: VMAlert, intervals: dict[str, float] = intervals) -> RuleWatch:
            """{group: worst evaluation s}, each rule's median over the plan's cycles, the CPU used."""
            assert vm.proc is not None and server.proc is not None
            return with_cores(lambda: watch_vmalert(server, intervals, plan.cycles), vm.proc.pid, server.proc.pid)

        alert = started_vmalert(plan.bundle.rule_files)
        log("victoriametrics: watching rule evaluations")
        assert vm.proc is not None and alert.proc is not None
        watched = watch(alert)
        series = int(http_get_json(f"{vm.url}/api/v1/series/count")["data"][0])
        result = Result("VictoriaMetrics", plan.bundle.source, fleet.pods, len(fleet.series), fleet.series_per_pod,
                        series, rss_mb(vm.proc.pid) + rss_mb(alert.proc.pid), load,
                        watched.cores, watched.shares(intervals))
        result.keep_rules(watched)
        result.series_seen = series_seen(vm.url, fleet, plan.bundle.job)
        result.series_live = series_seen(vm.url, fleet, plan.bundle.job, after=plan.end)
        result.queries = dashboard_load(vm.url, time.time(), plan.step, plan.bundle, plan.repeat, plan.raw)
        if plan.rules_before:
            rev, files = plan.rules_before
            alert.stop()
            alert = started_vmalert(files)
            log(f"victoriametrics: vmalert restarted with the rules of {rev}; watching rule evaluations")
            before_intervals = rule_group_intervals(files, plan.step)
            result.keep_rules_before(rev, watch(alert, before_intervals), before_intervals)
            alert.stop()
            alert = started_vmalert(plan.bundle.rule_files)
            log("victoriametrics: vmalert restarted with the bundle's rules again; watching rule evaluations")
            result.keep_rules_again(watch(alert), intervals)
        return result
    finally:
        if alert is not None:
            alert.stop()
        vm.stop()


