"""Render dashboards/preview.png: the main dashboard's panels drawn from REAL query results.

No Grafana server can run here, so this draws the panels with matplotlib instead. The data path is
real: a scripted fake vLLM (simulated traffic, vLLM 0.32's metric names) -> the real exporter ->
a real Prometheus with the generated alert rules -> each panel's own PromQL from the generated
dashboard, variables substituted as Grafana would. The scenario: acceptance 80 %, then a drop to
30 % (alerts fire), then recovery to 65 %.

    <python with matplotlib and this project installed> tools/render_dashboard_preview.py [--out PNG]

About three minutes. Needs /usr/bin/prometheus (Debian) and matplotlib (not a project dependency).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

from support.fakevllm import FakeVllm  # noqa: E402
from support.grafana import expand_variables  # noqa: E402
from vllm_spec_exporter.mixin import alerts, dashboard_files, overview  # noqa: E402
from vllm_spec_exporter.mixin.config import MixinConfig  # noqa: E402
from vllm_spec_lab.monitoring import Prometheus, free_port, http_get_json, wait_until  # noqa: E402

# Scenario phases: (seconds, acceptance). Drafts per second per series stay constant.
PHASES = ((60, 0.8), (70, 0.3), (50, 0.65))
DRAFTS_PER_SECOND = 40
RATE_INTERVAL = "15s"
# Short alert timings so the picture shows alerts firing within the scenario (defaults: minutes).
PREVIEW_ALERT_OVERRIDES = {"rate_window": "30s", "acceptance_low_for": "15s", "acceptance_critical_for": "15s"}

GRAFANA_COLORS = {"red": "#F2495C", "orange": "#FF9830", "green": "#73BF69", "blue": "#5794F2",
                  "purple": "#B877D9", "text": "#CCCCDC", "yellow": "#FADE2A"}
BACKGROUND = "#111217"
PANEL = "#181B1F"
TEXT = "#CCCCDC"
SERIES_COLORS = ["#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9", "#705DA0"]

TOP_ROW = ("Acceptance rate", "Tokens per step vs k+1", "Efficiency", "Speed-up (est.)", "Tokens/s",
           "Targets down", "Firing alerts")
CHARTS = (
    "Acceptance rate by model",
    "Tokens per step vs k+1 by model",
    "Acceptance by draft position",
    "Draft tokens: proposed, accepted, rejected",
    "Output tokens by source",
    "Time per output token vs tokens per step",
)


def legend(fmt: str, labels: dict[str, str]) -> str:
    for key, value in labels.items():
        fmt = fmt.replace("{{" + key + "}}", value)
    return fmt


def query_range(prom: Prometheus, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    params = {"query": expand_variables(expr, RATE_INTERVAL), "start": start, "end": end, "step": step}
    return http_get_json(f"{prom.url}/api/v1/query_range?{urlencode(params)}")["data"]["result"]


def threshold_color(panel: dict, value: float) -> str:
    color = "blue"
    for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]:
        if step["value"] is None or value >= step["value"]:
            color = step["color"]
    return GRAFANA_COLORS.get(color, color)


def mapped(panel: dict, value: float | None) -> tuple[str, str] | None:
    """(text, colour) from the panel's value mappings, as Grafana would apply them."""
    for mapping in panel["fieldConfig"]["defaults"].get("mappings", []):
        options = mapping["options"]
        if mapping["type"] == "special" and (value is None or math.isnan(value)):
            return options["result"]["text"], GRAFANA_COLORS["text"]
        if mapping["type"] == "range" and value is not None and options["from"] <= value <= options["to"]:
            return options["result"]["text"], GRAFANA_COLORS[options["result"]["color"]]
    return None


def format_value(panel: dict, value: float) -> str:
    unit = panel["fieldConfig"]["defaults"]["unit"]
    if unit == "percentunit":
        return f"{value:.1%}"
    if unit.startswith("count:"):
        return f"{value:,.0f} {unit.split(':', 1)[1]}"
    if unit.startswith("suffix:"):
        return f"{value:.2f}{unit.split(':', 1)[1]}"
    return f"{value:.2f}".rstrip("0").rstrip(".") if value % 1 else f"{value:.0f}"


def draw_stat(ax, panel: dict, prom: Prometheus) -> None:
    ax.set_axis_off()
    ax.add_patch(FancyBboxPatch((0, 0), 1, 1, boxstyle="round,pad=0,rounding_size=0.03", color=PANEL,
                                transform=ax.transAxes))
    ax.text(0.5, 0.9, panel["title"], ha="center", va="top", color=TEXT, fontsize=10, transform=ax.transAxes)
    lines = []
    for target in panel["targets"]:
        result = prom.query(expand_variables(target["expr"], RATE_INTERVAL))
        value = float(result[0]["value"][1]) if result else None
        name = legend(target.get("legendFormat", ""), result[0]["metric"] if result else {})
        if (text_color := mapped(panel, value)) is not None:
            lines.append((name, *text_color))
        elif value is None:
            lines.append((name, panel["fieldConfig"]["defaults"].get("noValue", "No data"), TEXT))
        else:
            lines.append((name, format_value(panel, value), threshold_color(panel, value)))
    background = panel["options"]["colorMode"] == "background"
    if background and len(lines) == 1:
        ax.add_patch(FancyBboxPatch((0.04, 0.06), 0.92, 0.66, boxstyle="round,pad=0,rounding_size=0.03",
                                    color=lines[0][2], alpha=0.9, transform=ax.transAxes))
    for i, (name, text, color) in enumerate(lines):
        y = 0.45 if len(lines) == 1 else 0.68 - i * 0.5 / max(1, len(lines) - 1)
        size = 22 if len(lines) == 1 else 13
        label = text if len(lines) == 1 else f"{name}: {text}"
        ax.text(0.5, y, label, ha="center", va="center", fontsize=size, fontweight="bold",
                color="white" if background and len(lines) == 1 else color, transform=ax.transAxes)


def style_axes(ax, title: str) -> None:
    ax.set_facecolor(PANEL)
    ax.set_title(title, color=TEXT, fontsize=10, loc="left")
    ax.tick_params(colors=TEXT, labelsize=7)
    for spine in ax.spines.values():
        spine.set_color("#2A2D33")
    ax.grid(color="#2A2D33", linewidth=0.5)


def draw_timeseries(ax, panel: dict, prom: Prometheus, start: float, end: float) -> None:
    style_axes(ax, panel["title"])
    defaults = panel["fieldConfig"]["defaults"]
    overrides = {o["matcher"]["options"]: o["properties"] for o in panel["fieldConfig"].get("overrides", [])
                 if o["matcher"]["id"] == "byName"}
    right = None
    stack_base = None
    color_index = 0
    for target in panel["targets"]:
        for series in query_range(prom, target["expr"], start, end, 2):
            name = legend(target.get("legendFormat", ""), series["metric"])
            xs = [float(t) - start for t, _ in series["values"]]
            ys = [float(v) for _, v in series["values"]]
            props = {p["id"]: p["value"] for p in overrides.get(name, [])}
            color = props.get("color", {}).get("fixedColor")
            color = GRAFANA_COLORS.get(color, color) if color else SERIES_COLORS[color_index % len(SERIES_COLORS)]
            color_index += 1
            axis = ax
            if props.get("custom.axisPlacement") == "right":
                right = right or ax.twinx()
                axis = right
                right.tick_params(colors=TEXT, labelsize=7)
            if defaults.get("custom", {}).get("stacking", {}).get("mode") == "normal":
                base = stack_base if stack_base is not None and len(stack_base) == len(ys) else [0.0] * len(ys)
                top = [b + y for b, y in zip(base, ys, strict=True)]
                axis.fill_between(xs, base, top, color=color, alpha=0.35, linewidth=0)
                axis.plot(xs, top, color=color, linewidth=1.5, label=name)
                stack_base = top
            else:
                axis.plot(xs, ys, color=color, linewidth=1.5, label=name)
    style = defaults.get("custom", {}).get("thresholdsStyle", {}).get("mode", "off")
    if style.startswith("dashed"):
        steps = defaults["thresholds"]["steps"]
        bounds = [defaults.get("min", 0.0)] + [step["value"] for step in steps[1:]] + [defaults.get("max", 1.0)]
        for index, step in enumerate(steps):
            color = GRAFANA_COLORS.get(step["color"], step["color"])
            if index:
                ax.axhline(step["value"], color=color, linestyle="--", linewidth=1)
            if style.endswith("+area"):
                ax.axhspan(bounds[index], bounds[index + 1], color=color, alpha=0.08, linewidth=0)
    if "min" in defaults:
        ax.set_ylim(bottom=defaults["min"])
    if "max" in defaults:
        ax.set_ylim(top=defaults["max"])
    if defaults["unit"] == "percentunit":
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set_xlabel("seconds", color=TEXT, fontsize=7)
    handles, labels = ax.get_legend_handles_labels()
    if right is not None:
        more_handles, more_labels = right.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    ax.legend(handles, labels, fontsize=7, facecolor=PANEL, labelcolor=TEXT, edgecolor="#2A2D33", loc="lower left")


def draw_bargauge(ax, panel: dict, prom: Prometheus) -> None:
    style_axes(ax, panel["title"])
    result = prom.query(expand_variables(panel["targets"][0]["expr"], RATE_INTERVAL))
    rows = sorted(((legend(panel["targets"][0]["legendFormat"], s["metric"]), float(s["value"][1])) for s in result),
                  reverse=True)
    names = [name for name, _ in rows]
    vals = [value for _, value in rows]
    ax.barh(names, vals, color=[threshold_color(panel, v) for v in vals])
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    for i, value in enumerate(vals):
        ax.text(min(value + 0.02, 0.85), i, f"{value:.0%}", va="center", color=TEXT, fontsize=8)


def run_scenario(out: Path) -> None:
    cfg = MixinConfig()
    model = overview.build(cfg)
    panels = {p["title"]: p for p in dashboard_files.iter_panels(model)}
    with tempfile.TemporaryDirectory() as tmp:
        alert_cfg = cfg.with_overrides(PREVIEW_ALERT_OVERRIDES)
        rule_files = []
        for rel, text in alerts.render(alert_cfg).items():
            if rel in ("alerts/prometheus_rules.yaml", "alerts/prometheus_alerts.yaml"):
                path = Path(tmp) / Path(rel).name
                path.write_text(text)
                rule_files.append(path)
        fake = FakeVllm(models=("tiny-llama",), engines=("0", "1"), k=4, latency_histograms=True)
        url = fake.start()
        port = free_port()
        exporter = subprocess.Popen(
            [str(Path(sys.executable).with_name("vllm-spec-exporter")), "serve", "--target", url, "--listen",
             f"127.0.0.1:{port}", "--interval", "1", "--timeout", "0.9", "--window", "30"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            scrape = {"vllm-spec-exporter": [f"127.0.0.1:{port}"], "vllm": [url.split("//", 1)[1]]}
            with Prometheus(scrape_targets=scrape, rule_files=rule_files) as prom:
                wait_until(prom.targets_up, timeout=30)
                start = time.time()
                for seconds, acceptance in PHASES:
                    print(f"acceptance {acceptance:.0%} for {seconds} s", flush=True)
                    fake.drive(DRAFTS_PER_SECOND, acceptance)
                    time.sleep(seconds)
                end = time.time()
                draw(model, panels, prom, start, end, out)
        finally:
            exporter.terminate()
            exporter.wait(timeout=10)
            fake.stop()


def draw(model: dict, panels: dict[str, dict], prom: Prometheus, start: float, end: float, out: Path) -> None:
    fig = plt.figure(figsize=(16, 12.5), facecolor=BACKGROUND)
    grid = fig.add_gridspec(4, 7, height_ratios=[0.55, 1, 1, 1], hspace=0.45, wspace=0.35)
    fig.suptitle(f"{model['title']}  (preview: simulated traffic, real exporter, real Prometheus, the "
                 "dashboard's own queries)", color=TEXT, fontsize=12)
    for column, title in enumerate(TOP_ROW):
        draw_stat(fig.add_subplot(grid[0, column]), panels[title], prom)
    slots = [grid[1, 0:4], grid[1, 4:7], grid[2, 0:3], grid[2, 3:7], grid[3, 0:3], grid[3, 3:7]]
    for slot, title in zip(slots, CHARTS, strict=True):
        ax = fig.add_subplot(slot)
        if panels[title]["type"] == "bargauge":
            draw_bargauge(ax, panels[title], prom)
        else:
            draw_timeseries(ax, panels[title], prom, start, end)
    fig.savefig(out, dpi=80, facecolor=BACKGROUND)
    print(f"wrote {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "dashboards" / "preview.png")
    args = parser.parse_args()
    run_scenario(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
