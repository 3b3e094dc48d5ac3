"""The demo as a person sees it: typed into a real terminal (tmux send-keys), read off the screen
(capture-pane), with the real stack — the exporter, Prometheus with the generated rules,
Alertmanager with the generated routing — around the SIMULATED vLLM process tree
(vllm_spec_lab.fakes.vllm_cache: an API server and an engine-core child, found where the demo finds the
real venv; its acceptance follows the traffic as the real tiny model's does: 87.5 % healthy, 45 %
in the warning band, 0 % degraded) and short phases. That the page lands in the degraded phase on a
REAL vLLM is tests/stack/test_e2e.py's to show. One run:

- the live screen: phase line, acceptance with bars, per-position acceptance, advisor, alerts,
  notification lines in one format using the terminal width, ports and the log folder; no
  start-up transient (SpecDecodeExporterAbsent) and no SpecDecodeVllmUnreachable blip, ever;
- after the phases (--watch keeps it running) Ctrl-C, typed as keys, ends it: the verdict screen
  says AS EXPECTED with per-phase acceptance and alert timing, the exit code is 0, and nothing the
  demo started is left running.
Prints the screens it judged, for the log.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import pytest

from support.policy import require_tool
from support.proctree import descendants, survivors
from support.prom import require_binary
from vllm_spec_lab.demo import DEFAULT_PHASE_SECONDS
from vllm_spec_lab.exporter_process import SCRIPT
from vllm_spec_lab.fakes.vllm_cache import SERVER_MODULE, make_fake_cache
from vllm_spec_lab.monitoring import ALERTMANAGER_BIN, PROMETHEUS_BIN
from vllm_spec_lab.waiting import wait_until

pytestmark = [pytest.mark.server, pytest.mark.prometheus]
# The default phase length: long enough for the page to land in the degraded phase and
# the resolve in the healthy one with the lab's fast alert windows (30 s / 10 s, critical held 30 s).
PHASE_SECONDS = DEFAULT_PHASE_SECONDS
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
    """The first screen matching `pattern`; every screen read is appended to `seen`."""
    def showing() -> str | None:
        seen.append(tmux.screen())
        return seen[-1] if re.search(pattern, seen[-1]) else None
    return wait_until(showing, timeout, interval=2, what=f"{pattern!r} on screen",
                      failure=lambda: f"last screen:\n{seen[-1]}")


def _environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw if item)


def _fake_api_server(tree: dict[int, str]) -> int:
    """The simulated vLLM's API server among the demo's processes (its command names vLLM's module)."""
    for pid in tree:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if SERVER_MODULE in command and "vllm.entrypoints.openai.api_server" in command:
            return pid
    raise AssertionError(f"no simulated vLLM API server among the demo's processes {sorted(tree)}")


def test_demo_in_a_terminal_live_screen_verdict_and_ctrl_c(tmp_path):
    require_tool("tmux", "scripts/bootstrap.sh installs it when run as root")
    require_binary(PROMETHEUS_BIN)
    require_binary(ALERTMANAGER_BIN)
    cache = make_fake_cache(tmp_path / "cache")
    tmux = Tmux()
    seen: list[str] = []
    try:
        tmux("new-session", "-d", "-s", "demo", "-x", str(COLUMNS), "-y", str(ROWS), "bash --norc --noprofile")
        shell = int(tmux("display-message", "-p", "-t", "demo", "#{pane_pid}").strip())
        tmux("send-keys", "-t", "demo", f"VLLM_SPEC_EXPORTER_CACHE={cache} {SCRIPT} demo "
                                        f"--phase-seconds {PHASE_SECONDS} --watch; echo DEMO-EXIT=$?", "Enter")
        first = wait_for_screen(tmux, r"phase 1/4: healthy \(temperature 0\)", 120, seen)
        wait_for_screen(tmux, r"acceptance\s+\d+\.\d% █", 120, seen)
        # The warning band (phase 2) warns in chat; the collapse (phase 3) pages critical.
        band = wait_for_screen(tmux, r"warning band \+\d+ s\s+chat\s+FIRING\s+SpecDecodeAcceptanceLow",
                               2 * PHASE_SECONDS + 60, seen)
        degraded = wait_for_screen(tmux, r"degraded \+\d+ s\s+pager\s+FIRING\s+SpecDecodeAcceptanceCritical",
                                   2 * PHASE_SECONDS + 60, seen)
        tree = descendants(shell)  # the demo, the warden, vLLM's whole tree, exporter, Prometheus, ...
        vllm_environment = _environment(_fake_api_server(tree))
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
    # vLLM at INFO: started so, and no DEBUG lines in its log.
    assert vllm_environment.get("VLLM_LOGGING_LEVEL") == "INFO", vllm_environment.get("VLLM_LOGGING_LEVEL")
    assert " DEBUG " not in Path(logs[1]).read_text(errors="replace")

    # Ctrl-C on the real stack: everything it started is gone.
    assert len(tree) >= 7, tree  # demo, warden, vLLM API server + engine core, exporter, Prometheus, AM
    wait_until(lambda: not survivors(tree), 30, interval=0.5, what="every process of the demo gone",
               failure=lambda: f"survived: {survivors(tree)}")
