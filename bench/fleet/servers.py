"""The servers the bench measures, as the lab runs them but with the bench's storage, limits and
scrape job; what it reads from them (rule group timings, the fleet's series, CPU and memory of a
process); and the one way it runs a tool (`run`: a failure raises with the tool's stderr)."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlencode
from urllib.request import urlopen

from fleet.history import LiveTarget
from fleet.synth import Fleet
from vllm_spec_lab.monitoring import Prometheus, http_get_json
from vllm_spec_lab.victoria import VictoriaMetrics, VMAlert


def prometheus3(data: Path, live: LiveTarget, step: int, rule_files: Iterable[Path],
                features: tuple[str, ...] = ()) -> Prometheus:
    """Prometheus on a data folder that survives a restart (backfilled blocks), scraping the live
    target and evaluating the generated rules; limits raised for 5,000 pods' raw baseline queries and
    promtool's rule backfill (a range query per rule over the whole history: at 1,000 pods on a
    loaded machine one took over the default 2 minutes, and Prometheus answered 503)."""
    return Prometheus(rule_files=rule_files, scrape_interval=f"{step}s", evaluation_interval=f"{step}s",
                      scrape_configs=[live.scrape_config(step)], data_path=data,
                      extra_args=["--storage.tsdb.retention.time=30d", "--query.max-samples=500000000",
                                  "--query.timeout=1h", *(f"--enable-feature={f}" for f in features)])


def victoria_metrics(data: Path, live: LiveTarget, step: int) -> VictoriaMetrics:
    return VictoriaMetrics(scrape_interval=f"{step}s", scrape_configs=[live.scrape_config(step)], data_path=data,
                           extra_args=["-retentionPeriod=30d", "-search.maxSamplesPerQuery=2000000000",
                                       "-search.maxQueryDuration=1h",
                                       "-search.maxUniqueTimeseries=100000000", "-loggerLevel=ERROR"])


def overlapping_blocks(data: Path) -> int:
    """How many of the TSDB's blocks start inside the span of an earlier one (backfilled blocks do
    until Prometheus' vertical compaction merges them; maxTime is exclusive). Blocks being written
    or deleted (`*.tmp-for-creation`, `*.tmp-for-deletion`) are not counted, nor one deleted while
    this reads."""
    spans = []
    for meta in data.glob("*/meta.json"):
        if ".tmp" in meta.parent.name:
            continue
        try:
            block = json.loads(meta.read_text())
        except FileNotFoundError:
            continue
        spans.append((block["minTime"], block["maxTime"]))
    spans.sort()
    overlapping, reach = 0, None  # reach: the latest end of the blocks before
    for start, end in spans:
        overlapping += reach is not None and start < reach
        reach = end if reach is None else max(reach, end)
    return overlapping


def wait_for_compaction(data: Path, limit: float, alive: Callable[[], bool]) -> float:
    """Seconds until no backfilled block overlaps another. A real Prometheus holds records and raw
    series in the same compacted blocks; dozens of small overlapping ones (promtool writes one per
    rule) would slow every query that reads records, and merging them costs CPU that must not
    overlap the measurements. Raises after `limit` seconds, or when the server is gone."""
    started = time.monotonic()
    while (left := overlapping_blocks(data)) and time.monotonic() - started < limit:
        if not alive():
            raise RuntimeError("prometheus: exited while compacting the backfilled blocks")
        time.sleep(5)
    if left:
        raise RuntimeError(f"prometheus: {left} blocks still overlap after {limit:.0f} s")
    return time.monotonic() - started


def rule_name(rule: dict[str, Any]) -> str:
    """A rule of /api/v1/rules (Prometheus' or vmalert's) named by its record or alert and its own
    labels: the band counts are three rules of one record name."""
    labels = ",".join(f'{k}="{v}"' for k, v in sorted((rule.get("labels") or {}).items()))
    return rule["name"] + (f"{{{labels}}}" if labels else "")


def rule_times(prom: Prometheus) -> dict[str, tuple[float, float, str, dict[str, float]]]:
    """{group: (evaluation seconds, interval seconds, last evaluation, {rule: its seconds})} from
    Prometheus' /api/v1/rules."""
    return {g["name"]: (g["evaluationTime"], g["interval"], g["lastEvaluation"],
                        {rule_name(r): r.get("evaluationTime", 0.0) for r in g["rules"]})
            for g in prom.rule_groups()}


def vmalert_iteration_seconds(alert: VMAlert) -> dict[str, tuple[float, int]]:
    """{group: (sum of evaluation seconds, evaluations)} from vmalert's own metrics."""
    with urlopen(f"{alert.url}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, list[float]] = {}
    for name, group, value in re.findall(
            r'^vmalert_iteration_duration_seconds_(sum|count)\{[^}]*group="([^"]+)"[^}]*\} (\S+)$', text, re.M):
        out.setdefault(group, [0.0, 0.0])[0 if name == "sum" else 1] = float(value)
    return {g: (s, int(c)) for g, (s, c) in out.items()}


def rfc3339(unix: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


def log(message: str) -> None:
    """Progress on stderr (the tables go to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cpu_seconds(*pids: int) -> float:
    """User + system CPU seconds used so far by these processes."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed ({result.returncode}): {result.stderr[-2000:]}")
    return result


def series_seen(url: str, fleet: Fleet, job: str, after: float | None = None) -> int:
    """How many of the fleet's series the server holds now: equal to the synthesised count when
    the live scrape continues the history's series (a label only the scrape adds would double it).
    With `after` (unix seconds), only those with a sample newer than that: the live scrape's.
    One query a family: timestamp() drops the name, and both servers refuse a result in which two
    families' series would then collide."""
    total = 0
    for name in fleet.names():
        selector = f'{{__name__="{name}", job="{job}"}}'
        query = f"count({selector})" if after is None else f"count(timestamp({selector}) > {after:.0f})"
        result = http_get_json(f"{url}/api/v1/query?{urlencode({'query': query})}")["data"]["result"]
        total += int(float(result[0]["value"][1])) if result else 0
    return total


class RuleWatch(NamedTuple):
    """What watching a server's rule groups measured: each group's worst evaluation, each rule's
    median one (which rules make a group slow), and the CPU the server used meanwhile (whether a
    watch slower than another did more work or waited more: on two cores the groups, the scrape
    and everything else on the machine share them)."""

    worst: dict[str, float]  # group: worst evaluation seconds
    median: dict[str, float]  # group: median evaluation seconds
    rules: dict[str, dict[str, float]]  # group: {rule: median evaluation seconds}
    cores: float = math.nan  # the server's CPU seconds per second during the watch (with_cores)

    def shares(self, intervals: dict[str, float]) -> dict[str, tuple[float, float]]:
        """{group: (worst evaluation s, interval s)}: what Result keeps and report prints as a share."""
        return {g: (s, intervals[g]) for g, s in self.worst.items()}


def with_cores(watch: Callable[[], RuleWatch], *pids: int) -> RuleWatch:
    """watch(), with the CPU seconds per second the processes `pids` (the server: Prometheus, or
    VictoriaMetrics and vmalert) used while it ran."""
    cpu, wall = cpu_seconds(*pids), time.monotonic()
    watched = watch()
    return watched._replace(cores=(cpu_seconds(*pids) - cpu) / (time.monotonic() - wall))


def evaluations_wanted(intervals: dict[str, float], cycles: int) -> dict[str, int]:
    """Evaluations to count of each group: as many as `cycles` of the most frequent groups'
    interval hold, at least 1 and at most `cycles`. Every group is then watched over about the same
    span: with --cycles 8 the direct k group (once a minute) counts 2 against the 15 s groups' 8,
    and with the default 4 it counts 1, its first after the start (warm_ups)."""
    if not intervals:
        return {}
    shortest = min(intervals.values())
    return {g: max(1, min(cycles, math.ceil(cycles * shortest / i))) for g, i in intervals.items()}


def warm_ups(wanted: dict[str, int]) -> dict[str, int]:
    """Evaluations of each group not counted after a (re)start: the first, which warms caches,
    except in a group of which the span holds one evaluation (waiting for a second would make the
    watch a minute longer for a group that costs a fraction of its interval)."""
    return {g: 1 if n > 1 else 0 for g, n in wanted.items()}


def _watch_deadline(intervals: dict[str, float], wanted: dict[str, int]) -> float:
    """When a watch gives up: every group's wanted evaluations and 3 more intervals, plus a minute."""
    return time.monotonic() + max((wanted[g] + 3) * i for g, i in intervals.items()) + 60


def _known(group: str, wanted: dict[str, int]) -> str:
    """`group`, a group the server evaluates, returned as it is when the watched rule files hold it;
    raises RuntimeError naming it when they do not (it would be watched for a guessed number of
    evaluations)."""
    if group not in wanted:
        raise RuntimeError(f"the server evaluates rule group {group!r}, which the watched rule files do not hold")
    return group


def _watched(times: dict[str, list[float]], per_rule: dict[str, dict[str, list[float]]]) -> RuleWatch:
    """The RuleWatch of each group's and each rule's timed evaluations."""
    return RuleWatch({g: max(t) for g, t in times.items()}, {g: statistics.median(t) for g, t in times.items()},
                     {g: {r: statistics.median(t) for r, t in rules.items()} for g, rules in per_rule.items()})


def watch_rule_groups(read, intervals: dict[str, float], cycles: int) -> RuleWatch:
    """The worst and the median evaluation time of each group, and each rule's median, over its
    evaluations_wanted fresh evaluations (after its warm_ups)."""
    wanted = evaluations_wanted(intervals, cycles)
    skipped = warm_ups(wanted)
    times: dict[str, list[float]] = {}
    per_rule: dict[str, dict[str, list[float]]] = {}
    seen: dict[str, set[str]] = {}
    deadline = _watch_deadline(intervals, wanted)
    while time.monotonic() < deadline:
        for group, (seconds, _, last, rules) in read().items():
            if last.startswith("0001"):
                continue  # not evaluated yet
            if last not in seen.setdefault(group, set()) and len(times.get(group, [])) < wanted[_known(group, wanted)]:
                seen[group].add(last)
                if len(seen[group]) > skipped[group]:
                    times.setdefault(group, []).append(seconds)
                    for rule, rule_seconds in rules.items():
                        per_rule.setdefault(group, {}).setdefault(rule, []).append(rule_seconds)
        if all(len(times.get(g, [])) >= n for g, n in wanted.items()):
            break
        time.sleep(1)
    return _watched(times, per_rule)


def watch_vmalert(alert: VMAlert, intervals: dict[str, float], cycles: int) -> RuleWatch:
    """The worst and median evaluation time of each group over its evaluations_wanted evaluations
    after its warm_ups (vmalert's running sum and count, read often enough that each evaluation
    shows as its own increment), and each rule's median (its `evaluationTime` in vmalert's
    /api/v1/rules). Called right after vmalert starts: a group counted from its first evaluation
    (no warm-up) is then the mean of the evaluations since the start, the first only, or a few."""
    wanted = evaluations_wanted(intervals, cycles)
    skipped = warm_ups(wanted)
    times: dict[str, list[float]] = {}
    seen: dict[str, tuple[float, int]] = {}
    per_rule: dict[str, dict[str, list[float]]] = {}
    rule_seen: dict[tuple[str, str], set[str]] = {}
    deadline = _watch_deadline(intervals, wanted)
    while time.monotonic() < deadline and not all(len(times.get(g, [])) >= n for g, n in wanted.items()):
        for group, (total, count) in vmalert_iteration_seconds(alert).items():
            before_total, before_count = seen.get(group, (0.0, 0))
            if count > before_count:
                counted = before_count >= skipped[_known(group, wanted)]  # the first warms caches
                if counted and len(times.get(group, [])) < wanted[group]:
                    times.setdefault(group, []).append((total - before_total) / (count - before_count))
                seen[group] = (total, count)
        for group in alert.rule_groups():
            for rule in group["rules"]:
                key, last = (group["name"], rule_name(rule)), rule.get("lastEvaluation", "0001")
                if last.startswith("0001") or last in rule_seen.setdefault(key, set()):
                    continue
                rule_seen[key].add(last)
                kept = per_rule.get(key[0], {}).get(key[1], [])
                if len(rule_seen[key]) > skipped[_known(key[0], wanted)] and len(kept) < wanted[key[0]]:
                    per_rule.setdefault(key[0], {}).setdefault(key[1], []).append(rule["evaluationTime"])
        time.sleep(0.25)
    return _watched(times, per_rule)
