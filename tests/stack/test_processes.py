"""`vllm_spec_lab.processes`, the one owner of child processes: a SIGKILLed test run leaves nothing.

The proof uses real process trees. An inner `python -m pytest` runs a generated test that starts,
through the same classes the suite uses, every server this machine has: the simulated vLLM tree
(an API server and an "engine core" that does not watch its parent, vllm_spec_lab/fakes/vllm_cache.py),
the real exporter, Prometheus, Alertmanager, VictoriaMetrics and vmalert, llama-server, node
driving a real Chromium through playwright-core (which puts Chromium in a process group of its
own), and a child whose grandchild escapes into a session of its own. Once every server
answers, the runner is SIGKILLed: no handler, no `finally`, no fixture teardown runs. Every process
of its tree, recorded by pid and start time while it ran, must be gone and its private TMPDIR
empty — only the parent-death signal and the warden (vllm_spec_lab/warden.py) can do that.

The demo's endings are proven in tests/stack/test_demo.py; this file proves the test side and the
API's own contract (readiness, log tail, stop).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.policy import in_ci, require
from support.proctree import descendants, survivors, wait_gone
from vllm_spec_lab import processes
from vllm_spec_lab.binaries import VICTORIA_METRICS_BIN, VMALERT_BIN, have_binary
from vllm_spec_lab.fakes.vllm_cache import make_fake_cache
from vllm_spec_lab.grafana_render import CHROMIUM, node_modules
from vllm_spec_lab.llamacpp import ensure_tiny_llama_gguf, install_dir, tiny_gguf_path
from vllm_spec_lab.monitoring import ALERTMANAGER_BIN, PROMETHEUS_BIN
from vllm_spec_lab.ports import free_port
from vllm_spec_lab.venv import VENV_DIR_NAME, ensure_vllm_venv

pytestmark = pytest.mark.server  # starts every kind of server the lab has

UP = "EVERYTHING-IS-UP"

# The inner test. Each server is started exactly as the suite starts it; the fixture-free
# ExitStack unwinds them only if the test ends normally, which it never does here.
INNER_TEST = '''
import contextlib, os, sys, time
from pathlib import Path

from vllm_spec_lab import processes
from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.llamacpp import LlamaServer
from vllm_spec_lab.monitoring import Alertmanager, Prometheus
from vllm_spec_lab.ports import free_port
from vllm_spec_lab.server import VllmServer
from vllm_spec_lab.victoria import VictoriaMetrics, VMAlert

ESCAPER = """
import subprocess, time
subprocess.Popen(["sleep", "600"], start_new_session=True)  # no parent-death signal, another group
print("escaped", flush=True)
time.sleep(600)
"""
CHROMIUM_DRIVER = """
const { chromium } = require(process.env.PLAYWRIGHT_CORE);
const { mkdtempSync } = require('node:fs');
const { tmpdir } = require('node:os');
const { join } = require('node:path');
(async () => {
  const profile = mkdtempSync(join(tmpdir(), 'chromium-profile-'));
  await chromium.launchPersistentContext(profile, { executablePath: process.env.CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] });
  console.log('chromium up');
  setInterval(() => {}, 1000);
})();
"""
AM_CONFIG = "route:\\n  receiver: none\\nreceivers:\\n  - name: none\\n"


def test_start_everything_then_wait_to_be_killed(tmp_path):
    env = os.environ
    started = []
    with contextlib.ExitStack() as stack:
        vllm = stack.enter_context(VllmServer(Path(env["FAKE_VLLM_PYTHON"]), "target",
                                              served_model_name="tiny-llama", startup_timeout_s=60))
        started.append("vllm")
        stack.enter_context(ExporterProcess(vllm.url))
        started.append("exporter")
        am = stack.enter_context(Alertmanager(AM_CONFIG))
        stack.enter_context(Prometheus({"vllm": [vllm.url.split("//")[1]]}, alertmanager_url=am.url))
        started += ["alertmanager", "prometheus"]
        if env.get("WITH_VICTORIA"):
            vm = stack.enter_context(VictoriaMetrics({"vllm": [vllm.url.split("//")[1]]}))
            rules = tmp_path / "rules.yml"
            rules.write_text("groups:\\n  - name: g\\n    rules:\\n      - record: r\\n        expr: vector(1)\\n")
            stack.enter_context(VMAlert(vm.url, [rules]))
            started += ["victoria-metrics", "vmalert"]
        if env.get("LLAMA_SERVER"):
            stack.enter_context(LlamaServer(Path(env["LLAMA_SERVER"]), Path(env["LLAMA_GGUF"]), free_port(),
                                            tmp_path / "llama"))
            started.append("llama-server")
        if env.get("PLAYWRIGHT_CORE"):
            log = tmp_path / "chromium-driver.log"
            stack.enter_context(processes.spawn(["node", "-e", CHROMIUM_DRIVER], name="chromium-driver", log=log,
                                                private_tmp=True, ready_timeout=90,
                                                ready=lambda: "chromium up" in log.read_text(errors="replace")))
            started.append("chromium")
        escaper = stack.enter_context(processes.spawn([sys.executable, "-c", ESCAPER], name="escaper"))
        escaper.wait_ready(lambda: "escaped" in escaper.log_text(), 20)
        print("STARTED " + " ".join(started), flush=True)
        print("EVERYTHING-IS-UP", flush=True)
        time.sleep(600)

'''


def components() -> tuple[dict[str, str], list[str]]:
    """The inner run's environment additions for the optional servers, and what is missing."""
    extra: dict[str, str] = {}
    missing = [name for name in (PROMETHEUS_BIN, ALERTMANAGER_BIN) if not have_binary(name)]
    if have_binary(VICTORIA_METRICS_BIN) and have_binary(VMALERT_BIN):
        extra["WITH_VICTORIA"] = "1"
    else:
        missing.append("victoria-metrics/vmalert")
    llama = install_dir() / "bin" / "llama-server"
    gguf = tiny_gguf_path()
    if llama.exists() and not gguf.exists():
        # Made on first use (test_llamacpp's fixture too): on several workers this test may run first.
        gguf = ensure_tiny_llama_gguf(ensure_vllm_venv())
    if llama.exists() and gguf.exists():
        extra |= {"LLAMA_SERVER": str(llama), "LLAMA_GGUF": str(gguf)}
    else:
        missing.append("llama-server (scripts/bootstrap.sh builds it)")
    modules = node_modules()
    if modules is not None and Path(CHROMIUM).exists():
        extra |= {"PLAYWRIGHT_CORE": str(modules / "playwright-core"), "CHROMIUM": CHROMIUM}
    else:
        missing.append("node_modules/Chromium (scripts/bootstrap.sh)")
    return extra, missing


def read_until(proc: subprocess.Popen[bytes], marker: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    while marker not in seen:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise AssertionError(f"{marker!r} not shown (exit {proc.poll()}):\n{seen.decode(errors='replace')}")
        chunk = proc.stdout.read()
        if chunk:
            seen += chunk
        else:
            time.sleep(0.1)
    return seen


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """An empty folder with a short path: Chromium's singleton socket path must fit 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="vse-p-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_sigkilled_test_run_leaves_no_process_and_no_folder(tmp_path: Path, short_tmp: Path) -> None:
    extra, missing = components()
    # Locally the proof runs with what is installed (Prometheus and Alertmanager at least); CI has everything.
    if missing and (in_ci() or PROMETHEUS_BIN in missing or ALERTMANAGER_BIN in missing):
        require(f"the SIGKILL proof needs {', '.join(map(str, missing))} (scripts/bootstrap.sh test)")
    tmp = short_tmp  # every temporary folder of the inner run lands here
    run = tmp_path / "run"
    run.mkdir()
    (run / "pytest.ini").write_text("[pytest]\n")  # rootdir: none of the suite's config or plugins
    (run / "test_inner.py").write_text(textwrap.dedent(INNER_TEST))
    cache = make_fake_cache(tmp_path / "cache")
    env = {**os.environ, **extra, "TMPDIR": str(tmp),
           "FAKE_VLLM_PYTHON": str(cache / VENV_DIR_NAME / "bin" / "python")}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider",
                             f"--basetemp={tmp_path / 'basetemp'}", "test_inner.py"],
                            cwd=run, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        shown = read_until(proc, UP.encode(), timeout=240).decode(errors="replace")
        time.sleep(1.5)  # the warden's descendant snapshots (every 0.5 s) have seen the escapees
        tree = descendants(proc.pid)
        commands = " ".join(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").replace("\0", " ")
                            for pid in tree if Path(f"/proc/{pid}/cmdline").exists())
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    started = shown.split("STARTED ", 1)[1].split("\n", 1)[0].split()
    expected = ["vllm", "exporter", "alertmanager", "prometheus"]
    expected += ["victoria-metrics", "vmalert"] if "WITH_VICTORIA" in extra else []
    expected += ["llama-server"] if "LLAMA_SERVER" in extra else []
    expected += ["chromium"] if "PLAYWRIGHT_CORE" in extra else []
    assert started == expected, shown
    needles = ["warden.py", "vllm_spec_lab.fakes.vllm_server", "while True", "serve --target", PROMETHEUS_BIN,
               ALERTMANAGER_BIN, "sleep 600"]
    needles += ["victoria-metrics", "vmalert"] if "WITH_VICTORIA" in extra else []
    needles += ["llama-server"] if "LLAMA_SERVER" in extra else []
    needles += ["--headless", "node -e"] if "PLAYWRIGHT_CORE" in extra else []
    for needle in needles:
        assert needle in commands, f"{needle!r} not in the recorded tree: {commands[:3000]}"
    alive, left = wait_gone(tree, tmp, timeout=60)
    assert not alive, f"survived the runner's SIGKILL ({len(tree)} recorded): {alive}"
    assert not left, f"temporary folders left in TMPDIR: {left}"


# --- the API's own contract ------------------------------------------------------------------------


def test_spawn_waits_for_a_url_and_stop_takes_the_group(tmp_path: Path) -> None:
    port = free_port()
    server = [sys.executable, "-c", "import http.server, subprocess, sys; "
              "subprocess.Popen(['sleep', '600']); "
              f"http.server.HTTPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler).serve_forever()"]
    with processes.spawn(server, name="http", cwd=tmp_path, log=tmp_path / "http.log",
                         ready=f"http://127.0.0.1:{port}/", ready_timeout=20) as child:
        assert child.ready_seconds is not None and child.running()
        tree = descendants(os.getpid())
        members = {pid for pid in tree if os.getpgid(pid) == child.pid}
        assert len(members) == 2, tree  # the server and its `sleep`
    assert not child.running()
    assert survivors({pid: tree[pid] for pid in members}) == []


def test_a_child_that_dies_at_start_up_names_its_exit_code_and_last_lines(tmp_path: Path) -> None:
    script = "import sys\nfor i in range(100): print(f'line {i}')\nprint('fatal: no model', flush=True)\nsys.exit(3)"
    started = time.monotonic()
    with pytest.raises(processes.ChildStartError) as error:
        processes.spawn([sys.executable, "-c", script], name="vLLM", ready="http://127.0.0.1:9/", ready_timeout=60)
    assert time.monotonic() - started < 10
    message = str(error.value)
    assert message.startswith("vLLM exited with code 3 during start-up; last lines of "), message
    assert message.endswith("fatal: no model") and "line 61" in message and "line 60" not in message, message


def test_a_child_never_ready_is_stopped_and_its_own_log_folder_removed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    with pytest.raises(processes.ChildStartError, match=r"^sleeper not ready within 1 s; last lines .*\n.*waiting"):
        processes.spawn([sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(600)"],
                        name="sleeper", ready=lambda: False, ready_timeout=1)
    assert list(tmp_path.iterdir()) == []


def test_run_returns_output_and_fails_with_the_tail(tmp_path: Path) -> None:
    assert processes.run([sys.executable, "-c", "print('hello')"], name="hello", timeout=30) == "hello\n"
    with pytest.raises(processes.ChildExitError, match=r"^bad exited with code 2; last lines .*\n.*oops"):
        processes.run([sys.executable, "-c", "import sys; print('oops'); sys.exit(2)"], name="bad", timeout=30)
    with pytest.raises(processes.ChildExitError, match=r"^slow still running after 1 s"):
        processes.run([sys.executable, "-c", "import time; time.sleep(600)"], name="slow", timeout=1)


def test_background_children_and_theirs_run_at_a_lower_priority() -> None:
    """The load the lab drives (vLLM, llama-server, esbuild, node) yields the CPU to what watches
    it: its processes at a higher niceness, and its session's scheduling group too (with autogroup
    scheduling a new session is a group of its own, weighed by the group's niceness alone)."""
    code = ("import os, pathlib, subprocess, sys\n"
            "group = pathlib.Path('/proc/self/autogroup')\n"
            "print(os.nice(0), group.read_text().split()[-1] if group.exists() else 'none')\n"
            "sys.stdout.flush()\n"
            "subprocess.run([sys.executable, '-c', 'import os; print(os.nice(0))'])\n")
    own = os.nice(0)
    background = min(19, own + processes.BACKGROUND)
    autogroup = Path("/proc/self/autogroup")
    group = str(processes.BACKGROUND) if autogroup.exists() else "none"
    plain_group = "0" if autogroup.exists() else "none"
    assert processes.run([sys.executable, "-c", code], name="nice", timeout=30,
                         niceness=processes.BACKGROUND).split() == [str(background), group, str(background)]
    assert processes.run([sys.executable, "-c", code], name="plain", timeout=30).split() == [str(own), plain_group,
                                                                                           str(own)]


def test_stop_reaches_a_descendant_that_left_the_group(tmp_path: Path) -> None:
    """As playwright does with Chromium: a child that puts its own child in a new group."""
    script = ("import subprocess, time; p = subprocess.Popen(['sleep', '600'], start_new_session=True); "
              "print(p.pid, flush=True); time.sleep(600)")
    child = processes.spawn([sys.executable, "-c", script], name="escaper", log=tmp_path / "escaper.log",
                            ready=lambda: (tmp_path / "escaper.log").read_text().strip(), ready_timeout=20)
    escaped = int(child.log_text().split()[0])
    recorded = {escaped: descendants(os.getpid())[escaped]}
    assert os.getpgid(escaped) != child.pid
    child.stop()
    assert survivors(recorded) == []
