"""`vllm-spec-exporter demo` and `LocalStack`: nothing they start outlives them, however they end.

Each case runs the real command (or a real LocalStack in a driver process) with real children:
the exporter, Prometheus and Alertmanager (when installed), the warden, and — standing in for vLLM,
whose 3.5 GB venv and CPU cost these tests do not need — a SIMULATED vLLM that is a real process
tree (an API server plus an "engine core" child that does not watch its parent; see
lab/vllm_spec_lab/fakes/vllm_cache.py). The demo finds it exactly where it finds the real venv
(VLLM_SPEC_EXPORTER_CACHE). Every process in the tree is recorded by pid and start time while the
demo runs; after the ending, none may be alive (zombies hold nothing and do not count) and the
private TMPDIR must be empty. The real vLLM case is tests/stack/test_demo_tmux.py.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.proctree import descendants, wait_gone
from support.prom import have_binary
from vllm_spec_lab.exporter_process import SCRIPT
from vllm_spec_lab.fakes.vllm import FakeVllm
from vllm_spec_lab.fakes.vllm_cache import make_fake_cache
from vllm_spec_lab.monitoring import ALERTMANAGER_BIN, PROMETHEUS_BIN

# The demo and LocalStack start the exporter, Prometheus, Alertmanager and the simulated vLLM.
pytestmark = pytest.mark.server
DEMO = [str(SCRIPT.with_name("vllm-spec-lab")), "demo"]  # the lab's own command (run.sh's main job)
RUNNING = b"phase 1/4"  # the live screen is up: everything has been started


def read_until(fd: int, marker: bytes, timeout: float = 90) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"{marker!r} not shown within {timeout} s:\n{seen.decode(errors='replace')}")
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"output ended before {marker!r}:\n{seen.decode(errors='replace')}")
            seen += chunk
    return seen


@pytest.fixture
def sandbox(tmp_path):
    """A fake vLLM cache and a private TMPDIR (every temporary folder the demo makes lands there)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cache = make_fake_cache(tmp_path / "cache")
    env = {**os.environ, "VLLM_SPEC_EXPORTER_CACHE": str(cache), "TMPDIR": str(tmp)}
    return env, tmp


def expected_tree_size() -> int:
    # the warden, the exporter, the fake API server and its engine core (+ Prometheus, Alertmanager)
    return 4 + (2 if have_binary(PROMETHEUS_BIN) and have_binary(ALERTMANAGER_BIN) else 0)


def assert_nothing_left(tree: dict[int, str], tmp: Path, ending: str) -> None:
    """No process of the recorded tree and no temporary folder survives `ending`."""
    alive, left = wait_gone(tree, tmp)
    assert not alive, f"survived {ending}: {alive}"
    assert not left, f"temporary folders left after {ending}: {left}"


def start_demo(env: dict[str, str], sighup: signal.Handlers = signal.SIG_DFL,
               ) -> tuple[subprocess.Popen, dict[int, str], bytes]:
    """The demo with SIGHUP's disposition set to `sighup` whatever this test run inherited: under
    `nohup` (SIGHUP ignored) the demo rightly ignores a hang-up, which is not the case under test."""
    proc = subprocess.Popen([*DEMO, "--phase-seconds", "600", "--refresh", "0.5"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, sighup))
    try:
        shown = read_until(proc.stdout.fileno(), RUNNING)
    except BaseException:
        proc.kill()
        raise
    tree = descendants(proc.pid)
    assert len(tree) >= expected_tree_size(), (tree, shown.decode(errors="replace"))
    return proc, tree, shown


@pytest.mark.parametrize(("ending", "codes"), [
    ("SIGINT", {130}),
    ("SIGTERM", {143}),
    ("SIGHUP", {129}),
    ("closed pipe", {141}),  # `demo | head`: the reader goes away, the next screen update fails
    ("closed pipe, then SIGINT", {130, 141}),  # `demo | tee log` and Ctrl-C: tee dies first
    ("SIGKILL", {-9}),  # no handler runs: the parent-death signal and the warden clean up
])
def test_demo_leaves_nothing_behind(sandbox, ending, codes):
    env, tmp = sandbox
    proc, tree, _ = start_demo(env)
    try:
        if ending.startswith("closed pipe"):
            proc.stdout.close()
            if ending.endswith("SIGINT"):
                proc.send_signal(signal.SIGINT)
        else:
            proc.send_signal(getattr(signal, ending))
        wait_for_exit(proc, ending)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_nothing_left(tree, tmp, ending)
    assert proc.returncode in codes, proc.returncode


def test_demo_started_under_nohup_ignores_a_hang_up(sandbox):
    """`nohup demo &`: a closed terminal must not end it (SIGHUP ignored), SIGTERM still does."""
    env, tmp = sandbox
    proc, tree, _ = start_demo(env, sighup=signal.SIG_IGN)
    try:
        proc.send_signal(signal.SIGHUP)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3)
        proc.send_signal(signal.SIGTERM)
        wait_for_exit(proc, "SIGTERM after an ignored SIGHUP")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_nothing_left(tree, tmp, "SIGTERM")
    assert proc.returncode == 143, proc.returncode


def wait_for_exit(proc: subprocess.Popen, ending: str, timeout: float = 60) -> None:
    """The demo must exit within `timeout` of `ending`; if not, the failure shows what it printed
    while stopping (which server was slow to stop, see LocalStack.stop)."""
    sent = time.monotonic()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        printed = b""
        if proc.stdout is not None and not proc.stdout.closed:
            os.set_blocking(proc.stdout.fileno(), False)
            printed = proc.stdout.read() or b""
        tail = printed.decode(errors="replace")[-3000:]
        pytest.fail(f"the demo did not exit within {timeout:.0f} s of {ending}; it printed last:\n{tail}")
    print(f"{ending}: the demo exited {time.monotonic() - sent:.1f} s after")


def test_demo_start_up_crash_reports_and_kills_the_crashed_servers_children(sandbox):
    env, tmp = sandbox
    env = {**env, "FAKE_VLLM_FAIL_AT_START": "1"}
    proc = subprocess.Popen([*DEMO, "--phase-seconds", "600"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: dict[int, str] = {}
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        seen.update(descendants(proc.pid))  # catches the engine core while it lives
        time.sleep(0.05)
    out = proc.stdout.read().decode(errors="replace")
    assert proc.returncode == 1, out
    assert "demo failed: vLLM exited with code 1 during start-up" in out and "simulated start-up crash" in out
    assert "Traceback" not in out
    alive, left = wait_gone(seen, tmp)
    assert not alive and not left, (alive, left)


DRIVER = """
import sys, time
from vllm_spec_lab.pipeline import LocalStack, StackOptions
with LocalStack(StackOptions()) as stack:
    print("STACK-IS-UP", flush=True)
    sys.stdin.readline()  # the test has recorded the process tree
    if sys.argv[1] == "raise":
        raise RuntimeError("a test failed")
    time.sleep(600)
"""


@pytest.mark.parametrize("ending", ["raise", "SIGKILL"])
def test_local_stack_leaves_nothing_behind(sandbox, ending):
    """LocalStack as the tests use it: an exception unwinds it; a killed test process (the parent
    dies) is cleaned up by the parent-death signal and the warden."""
    env, tmp = sandbox
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, ending], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        read_until(proc.stdout.fileno(), b"STACK-IS-UP")
        tree = descendants(proc.pid)
        assert len(tree) >= expected_tree_size(), tree
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        if ending == "SIGKILL":
            proc.kill()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_nothing_left(tree, tmp, ending)
    assert proc.returncode == (1 if ending == "raise" else -9)


def test_demo_watches_an_existing_server_and_stops_on_ctrl_c(tmp_path):
    with FakeVllm(k=4) as fake:
        url = fake.start()
        fake.drive(40, 0.75)
        env = {**os.environ, "VLLM_SPEC_EXPORTER_CACHE": str(tmp_path), "COLUMNS": "160"}
        proc = subprocess.Popen([str(SCRIPT), "demo", "--target", url, "--no-monitoring", "--refresh", "1"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            # Ctrl-C once the live screen shows the server, not after a fixed sleep: on a loaded machine
            # the demo may still be starting, and that is another case than the one under test.
            shown = read_until(proc.stdout.fileno(), b"position  3")
            proc.send_signal(signal.SIGINT)
            rest, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        out = (shown + rest).decode(errors="replace")
    assert proc.returncode == 0, out
    assert "watching an existing server (no traffic; Ctrl-C to stop)" in out
    assert "acceptance" in out and "75.0%" in out and "position  3" in out
    assert "stopping everything the demo started" in out and out.rstrip().endswith("done.")
