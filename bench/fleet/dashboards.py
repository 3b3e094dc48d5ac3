"""Every dashboard's load as Grafana sends it (vllm_spec_lab.grafana_render.grafana_request: 1 h
range, the step of each panel's width, variables at All; first the hidden ranking variables'
queries, whose servers the crowded panels then read: each a row `variable crowd_<name>`, counted
in the dashboard's total), each record-reading query beside its raw baseline, fastest of `repeat`
timings; and each dashboard drawn by Grafana's own components in
headless Chromium (tools/grafana-render), time to a settled page."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.error import HTTPError
from urllib.parse import urlencode
from urllib.request import urlopen

from fleet.bundle import Bundle, expand_records, record_exprs
from fleet.servers import log
from vllm_spec_lab import grafana_render, processes
from vllm_spec_lab.grafana_query import VariableQuery, resolve_variables


@dataclass
class QueryTime:
    """One panel target's timing: its own query (fastest of the repeats) and, when it reads a
    recording rule, the raw baseline's; an error in any repeat is kept."""

    dashboard: str
    panel: str
    seconds: float
    series: int
    raw_seconds: float | None = None  # the same panel from raw counters (None: reads no record, or failed)
    error: str = ""
    raw_error: str = ""  # the raw baseline query's error (the panel's own query ran)
    panel_type: str = ""  # timeseries, stat, table, ...: a table lists every server on purpose
    raw_timings: int = 0  # how many times the raw baseline was timed (fewer than --repeat: RAW_DECIDED)


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
    except OSError as error:  # a timeout (300 s) or a dropped connection: this query's error, not the run's
        data = {"status": "error", "error": f"{type(error).__name__}: {error}"}
    elapsed = time.perf_counter() - started
    if data.get("status") != "success":
        return elapsed, 0, str(data.get("error", "failed"))[-300:]  # the reason ends the message
    return elapsed, len(data["data"]["result"]), ""


# A raw baseline that took at least RAW_DECIDED_SECONDS and RAW_DECIDED times its panel's query of
# the same round (back to back) is timed no more: the verdict is decided, and at 5,000 pods one raw
# timing can take minutes. Both conditions: a load burst on one short timing decides nothing.
RAW_DECIDED = 3.0
RAW_DECIDED_SECONDS = 10.0


def dashboard_load(url: str, end: float, scrape_interval: int, bundle: Bundle, repeat: int = 1,
                   raw_baseline: bool = True) -> list[QueryTime]:
    """Every query of every dashboard, as Grafana sends it over the last hour: the ranking
    variables' (load_variables, no baseline), then every panel target's; for targets that read a
    recording rule, also the same query with the records expanded (the baseline).
    Each is timed `repeat` times, the panel's query and its baseline in turn, and the fastest kept:
    one timing on a shared machine measures whatever else ran in that second as much as the query
    (neither server caches results here: Prometheus has no result cache, and the lab starts
    VictoriaMetrics with -search.disableCache). A baseline far slower than its panel in one round is
    not timed again (RAW_DECIDED); each row says how many raw timings it kept. Without
    `raw_baseline` no baseline is timed (a before/after comparison of dashboards, --no-raw)."""
    exprs = record_exprs(bundle)
    out = []
    for name, model in bundle.dashboards.items():
        variables, rows = load_variables(url, model, end, repeat)
        out += [QueryTime(name, f"variable {v.name}", v.seconds, len(v.options), error=v.error, panel_type="variable")
                for v in rows]
        for panel in grafana_render.dashboard_files.iter_panels(model):
            for target in panel.get("targets", []):
                request = grafana_render.grafana_request(panel, target, end - 3600, end, scrape_interval, variables)
                raw = expand_records(request.expr, exprs.__getitem__)
                timed, raw_timed = [], []  # (seconds, series, error) of each repeat
                decided = not raw_baseline or raw == request.expr  # no baseline: nothing to time
                for _ in range(max(1, repeat)):
                    timed.append(time_query(url, request, request.expr))
                    if not decided:
                        raw_timed.append(time_query(url, request, raw))
                        (seconds, _, _), (raw_seconds, _, _) = timed[-1], raw_timed[-1]
                        decided = raw_seconds >= max(RAW_DECIDED_SECONDS, RAW_DECIDED * seconds)
                error = next((e for _, _, e in timed if e), "")  # any failure stays
                raw_error = next((e for _, _, e in raw_timed if e), "")
                raw_seconds = min(s for s, _, _ in raw_timed) if raw_timed and not raw_error else None
                out.append(QueryTime(name, panel.get("title", ""), min(s for s, _, _ in timed), timed[0][1],
                                     raw_seconds, error, raw_error, panel.get("type", ""), len(raw_timed)))
    return out


def load_variables(url: str, model: dict, end: float, repeat: int) -> tuple[dict[str, str], list[VariableQuery]]:
    """The dashboard's query_result variables (the crowded panels' rankings) refreshed as Grafana
    does before its panels run, `repeat` times: the values of the first refresh (the panels' queries
    read them) and each variable's query with the fastest of its timings (an error in any stays)."""
    refreshes = [resolve_variables(url, model, end - 3600, end, timeout=300) for _ in range(max(1, repeat))]
    fastest = [min(timings, key=lambda v: v.seconds) for timings in zip(*(r.queries for r in refreshes), strict=True)]
    errors = [next((v.error for v in timings if v.error), "") for timings in zip(*(r.queries for r in refreshes),
                                                                                  strict=True)]
    return refreshes[0].values, [replace(v, error=e) for v, e in zip(fastest, errors, strict=True)]


def browser_draw(url: str, end: float, scrape_interval: int, workdir: Path,
                 dashboards: dict[str, dict]) -> dict[str, float]:
    """Seconds from opening each dashboard to a settled page in headless Chromium (the renderer)."""
    if grafana_render.missing_tools() is not None:
        raise RuntimeError(f"browser: {grafana_render.missing_tools()}")
    dist = grafana_render.bundle(workdir / "dist")
    shots, start = [], end - 3600
    for name, model in dashboards.items():
        results = grafana_render.dashboard_results(url, model, start, end, scrape_interval, timeout=300)
        file_name = name.replace("@", "-at-")
        shots.append(grafana_render.Shot(file_name, model, start, end, results, workdir / f"{file_name}.png"))
    try:
        grafana_render.draw(dist, shots, workdir, niceness=0)
    except processes.ChildExitError:  # shoot.mjs exits 1 when a page did not settle; its report says which
        log(f"browser: a dashboard did not settle within the renderer's {grafana_render.PAGE_BOUND_SECONDS} s "
            f"(reported as {grafana_render.PAGE_BOUND_SECONDS}+)")
    out = {}
    for name in dashboards:
        report = workdir / f"{name.replace('@', '-at-')}.report.json"
        draw_ms = json.loads(report.read_text()).get("drawMs") if report.exists() else None
        out[name] = draw_ms / 1000 if draw_ms is not None else math.inf  # not drawn within the bound
    return out

