"""Provenance of the measured artifacts: what was made by running something (a browser drawing the
dashboards, a benchmark of the alerts) is committed like a generated file, and this check reports
it stale when what it was made from has changed since.

    .venv/bin/python tools/measured.py        # exit 1 naming each stale artifact and its remake command

scripts/test.sh runs it after pytest (keeping pytest's exit code), so CI fails on a stale picture
or table as it does on a stale generated file. It is a repository tool, not package code: the
artifacts and the commands that remake them exist only in a checkout.

A `Measured` names an artifact's outputs, the inputs it was made from (committed files or folders:
every file below, sorted) and its record, a small JSON file under `measured/`. The tool that makes the
artifact calls `write_record` after writing the outputs; the record holds the sha256 of every input
and output. `stale(root)` compares the record with the tree and says, in one line per artifact,
which inputs changed (or which output was edited by hand) and the command that remakes it.

The inputs are the committed files an artifact reads, not the code that measures: a refactor of
a benchmark does not invalidate its figures, a change of the rules does.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import NamedTuple

__all__ = ["ALERT_QUALITY", "MEASURED", "PREVIEWS", "SPEEDUP_ESTIMATE", "Measured", "digests", "main", "stale",
           "write_record"]

ROOT = Path(__file__).resolve().parent.parent


class Measured(NamedTuple):
    """One measured artifact: paths relative to the checkout's root."""

    name: str
    remake: str  # the command that remakes it
    record: str
    outputs: tuple[str, ...]
    inputs: tuple[str, ...]


PREVIEWS = Measured(
    name="dashboard pictures",
    remake=".venv/bin/python tools/render_dashboard_previews.py",
    record="measured/dashboard-previews.json",
    outputs=("dashboards/preview.png", "dashboards/preview-overview.png", "dashboards/preview-fleet.png"),
    # The dashboards and the rules they read (the replay renders both for its own scrape interval
    # from the same generators), the capture replayed, and Grafana's components that draw.
    inputs=("dashboards/vllm-spec-decode-overview.json", "dashboards/vllm-spec-decode-fleet.json",
            "alerts/prometheus_rules.yaml", "tests/fixtures/vllm-0.32.0/ngram", "tools/grafana-render/src",
            "tools/grafana-render/package-lock.json"),
)
ALERT_QUALITY = Measured(
    name="alert-quality table",
    remake=".venv/bin/python bench/alert_quality.py --write",
    record="measured/alert-quality.json",
    outputs=("bench/alert-quality.md",),
    # The rules it measured (the 60 s bundle comes from the same generators).
    inputs=("alerts/prometheus_rules.yaml", "alerts/prometheus_alerts.yaml"),
)
SPEEDUP_ESTIMATE = Measured(
    name="speed-up estimate table",
    remake=".venv/bin/python bench/speedup_estimate.py --write",
    record="measured/speedup-estimate.json",
    outputs=("bench/speedup-estimate.md",),
    # The model it measured (the estimate, the batch) and the calibration fitted with it.
    inputs=("exporter/vllm_spec_exporter/advisor.py", "exporter/vllm_spec_exporter/calibrate.py"),
)
MEASURED = (PREVIEWS, ALERT_QUALITY, SPEEDUP_ESTIMATE)


def digests(root: Path, paths: tuple[str, ...]) -> dict[str, str]:
    """{path: sha256} of every file named or below a named folder ("missing" for what is absent)."""
    digests: dict[str, str] = {}
    for rel in paths:
        path = root / rel
        found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in found:
            key = file.relative_to(root).as_posix()
            digests[key] = hashlib.sha256(file.read_bytes()).hexdigest() if file.is_file() else "missing"
    return digests


def write_record(root: Path, measured: Measured) -> Path:
    """Record what `measured` was just made from; call it after writing the outputs."""
    record = {"artifact": measured.name, "remake": measured.remake,
              "inputs": digests(root, measured.inputs), "outputs": digests(root, measured.outputs)}
    path = root / measured.record
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path


def stale(root: Path) -> list[str]:
    """One line per measured artifact whose record no longer matches the tree."""
    problems = []
    for measured in MEASURED:
        path = root / measured.record
        if not path.is_file():
            problems.append(f"{measured.name}: no record {measured.record}; remake with `{measured.remake}`")
            continue
        record = json.loads(path.read_text())
        for kind, paths, what in (("inputs", measured.inputs, "changed since it was made"),
                                  ("outputs", measured.outputs, "differ from what was made (edited by hand?)")):
            now, then = digests(root, paths), record.get(kind, {})
            changed = sorted(p for p in now.keys() | then.keys() if now.get(p) != then.get(p))
            if changed:
                shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
                problems.append(f"{measured.name}: {shown} {what}; remake with `{measured.remake}`")
    return problems


def main() -> int:
    problems = stale(ROOT)
    if problems:
        print("stale measured artifacts:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(f"{len(MEASURED)} measured artifacts are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
