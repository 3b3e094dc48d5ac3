"""What the run prints at its end, collected while it runs: tests push rows here, the plugin
(support/plugin.py) prints them in `pytest_terminal_summary`. Nothing here imports a test module.

- FAULTS: tests/sidecar/test_faults.py, one row per injected fault (fault, expected, observed, passed);
- VMALERT_DIFFERENCES: tests/generate/test_alerts_vmalert_tool.py, every explained difference between
  vmalert-tool and promtool (file, test, check at time, reason);
- FALLBACK_NOTES: support/prom.require_version, each version-pinned check that ran on Debian 12's
  servers because bootstrap fell back (debian-testing/FALLBACK);
- VLLM_STARTS: every real vLLM started in this run (support/servers.py counts them per process;
  xdist workers send their rows to the controller: `rows`, `add_rows`);
- VLLM_STOPS: how the shared vLLM's process tree went at its stop (support/plugin.py).
"""

from __future__ import annotations

from typing import NamedTuple

FAULTS: list[tuple[str, str, str, bool]] = []
VMALERT_DIFFERENCES: list[tuple[str, str, str, str]] = []
FALLBACK_NOTES: list[str] = []


class VllmStart(NamedTuple):
    """One real vLLM start: the test that needed it (its id) and its start-up time (None: failed)."""

    requested_by: str
    startup_seconds: float | None


VLLM_STARTS: list[VllmStart] = []
VLLM_STOPS: list[str] = []


def rows() -> dict[str, list]:
    """Every registry's rows as plain lists and tuples (an xdist worker sends them to the controller)."""
    return {"FAULTS": list(FAULTS), "VMALERT_DIFFERENCES": list(VMALERT_DIFFERENCES),
            "FALLBACK_NOTES": list(FALLBACK_NOTES), "VLLM_STOPS": list(VLLM_STOPS),
            "VLLM_STARTS": [tuple(start) for start in VLLM_STARTS]}


def add_rows(sent: dict[str, list]) -> None:
    """Add the rows `rows()` returned in another process to this one's registries."""
    FAULTS.extend(tuple(row) for row in sent.get("FAULTS", ()))
    VMALERT_DIFFERENCES.extend(tuple(row) for row in sent.get("VMALERT_DIFFERENCES", ()))
    FALLBACK_NOTES.extend(sent.get("FALLBACK_NOTES", ()))
    VLLM_STOPS.extend(sent.get("VLLM_STOPS", ()))
    VLLM_STARTS.extend(VllmStart(*row) for row in sent.get("VLLM_STARTS", ()))


def write_summary(write) -> None:
    """Print every registry that has rows, with `write(line, **markup)` (the terminal reporter's)."""
    if FALLBACK_NOTES:
        write("")
        write(f"DEBIAN TESTING FALLBACK: {len(FALLBACK_NOTES)} version-pinned checks ran on Debian 12's "
              f"servers instead of Prometheus 3.x / Alertmanager 0.3x ({FALLBACK_NOTES[0]})",
              red=True, bold=True)
    if VMALERT_DIFFERENCES:
        write("")
        write("vmalert-tool unittest vs promtool: every difference, explained")
        for file, test, check, reason in VMALERT_DIFFERENCES:
            write(f"{file:32} {test[:40]:40} {check[:70]:70} {reason}")
    if FAULTS:
        write("")
        write("fault injection against the exporter process")
        write(f"{'fault':<36} {'observed':<78} pass")
        for fault, _expected, observed, passed in FAULTS:
            write(f"{fault:<36} {observed[:78]:<78} {'yes' if passed else 'NO'}")
    if VLLM_STARTS:
        write("")
        write(f"real vLLM servers started in this run: {len(VLLM_STARTS)}")
        for start in VLLM_STARTS:
            took = f"{start.startup_seconds:.0f} s" if start.startup_seconds is not None else "failed"
            write(f"  {start.requested_by}: start-up {took}")
        for stop in VLLM_STOPS:
            write(f"  {stop}")
