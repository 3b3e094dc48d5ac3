"""The one owner of child processes and temporary folders: nothing the lab or the tests start
outlives the program that started it.

Every child goes through `spawn` (servers: vLLM, llama-server, the exporter, Prometheus,
Alertmanager, VictoriaMetrics, vmalert, dockerd, the fake vLLM tree) or `run` (tools that run to
completion but start children of their own: node driving Chromium), and every temporary folder
through `TempDir`:

    with spawn([binary, "--port", str(port)], name="Prometheus", log=path,
               ready=f"http://127.0.0.1:{port}/-/ready", ready_timeout=30) as child:
        ...                      # child.pid, child.log_tail(), child.poll()
    # left the block: the whole process group is gone and struck off the warden's list

A child that exits or is not ready in time raises `ChildStartError` ("Prometheus exited with code 1
during start-up; last lines of …: …") after it has been stopped. The webhook receiver is a thread
of the program, not a child: nothing to own.

Three layers, because each covers what the one before cannot:

1. Own process group (``start_new_session``). Ctrl-C and a closed terminal signal only the
   program, which then stops its children; and `stop` takes a whole tree down with one
   ``killpg`` (vLLM forks engine-core processes that are not our children).
2. ``PR_SET_PDEATHSIG`` = SIGTERM (Linux ``prctl``, set in the child between fork and exec): the
   kernel signals the direct child when the thread that started it dies, SIGKILL included.
   That thread is the caller's, so spawn from a thread that lives as long as the child (the main
   thread, as the demo and the tests do).
3. The warden (`warden.py`): one tiny supervisor per program, reading a pipe whose only write end
   the program holds. When the program is gone, however it ended, the warden kills every group
   still registered (SIGTERM, then SIGKILL after a grace) — grandchildren included, which layer 2
   cannot reach — and removes every registered folder.

`ChildProcess.stop` is the orderly path: SIGTERM to the group, a grace period, SIGKILL to what is
left, then the group is struck off the warden's list.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

from .warden import kill_groups, tree

WARDEN_SCRIPT = Path(__file__).with_name("warden.py")
_PR_SET_PDEATHSIG = 1

# The niceness of the lab's load: the engines it drives (vLLM, llama-server) and batch tools
# (esbuild, Chromium's node driver; playwright starts the browser in a session of its own, which
# keeps the default). On a machine of few cores the load can take every core (a CPU vLLM under
# traffic: 99 % of two); what watches it in real time (exporter, Prometheus, VictoriaMetrics,
# vmalert, Alertmanager) keeps the default priority, so a scrape or an evaluation is less often
# late because the load ran instead.
BACKGROUND = 5  # CFS weight 335 against 1,024: a quarter of a core contended with one peer, all of an idle one

try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
    _prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
except (OSError, AttributeError):  # not Linux: layers 1 and 3 still hold
    _prctl = None


def _die_with_parent(parent_pid: int, niceness: int = 0):
    """A preexec_fn: resolved before fork, so the child makes few calls (prctl, and when asked to
    run at a lower priority, nice and one write)."""

    def preexec() -> None:
        if niceness:
            os.nice(niceness)  # the process, and everything it starts
            # The child is a new session, so with autogroup scheduling (most desktop and server
            # kernels) a group of its own, weighed against the others at the group's niceness: 0
            # unless set here. Absent or refused (no autogroup): the process niceness stands alone.
            with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as group:
                group.write(str(niceness))
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class _Warden:
    """The warden process of this program (one per pid: a forked child gets its own)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self._dirs: set[str] = set()
        self._proc = self._start()

    @staticmethod
    def _start() -> subprocess.Popen[bytes]:
        # -I -S: no site-packages, no environment: the script needs the standard library only.
        return subprocess.Popen([sys.executable, "-I", "-S", str(WARDEN_SCRIPT)], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    @property
    def process_id(self) -> int:
        return self._proc.pid

    def _send(self, op: str, change: Callable[[], None], **fields: object) -> None:
        line = (json.dumps({"op": op, **fields}) + "\n").encode()
        with self._lock:
            change()  # under the lock: servers stop from several threads, and a restart replays the sets
            for _attempt in range(2):
                try:
                    assert self._proc.stdin is not None
                    self._proc.stdin.write(line)
                    self._proc.stdin.flush()
                    return
                except (BrokenPipeError, ValueError):  # somebody killed the warden: start another
                    self._proc = self._start()
                    for pgid in self._groups:
                        self._proc.stdin.write((json.dumps({"op": "group", "id": pgid}) + "\n").encode())  # type: ignore[union-attr]
                    for path in self._dirs:
                        self._proc.stdin.write((json.dumps({"op": "dir", "path": path}) + "\n").encode())  # type: ignore[union-attr]

    def track_group(self, pgid: int) -> None:
        self._send("group", lambda: self._groups.add(pgid), id=pgid)

    def untrack_group(self, pgid: int) -> None:
        self._send("ungroup", lambda: self._groups.discard(pgid), id=pgid)

    def track_dir(self, path: str) -> None:
        self._send("dir", lambda: self._dirs.add(path), path=path)

    def untrack_dir(self, path: str) -> None:
        self._send("undir", lambda: self._dirs.discard(path), path=path)


_warden: _Warden | None = None
_warden_lock = threading.Lock()


def warden() -> _Warden:
    global _warden
    with _warden_lock:
        if _warden is None or _warden.pid != os.getpid():
            _warden = _Warden()
        return _warden


ReadyProbe = str | Callable[[], object] | None


class ChildStartError(RuntimeError):
    """A child exited, or never became ready, during start-up; the message ends with its log tail."""


class ChildExitError(RuntimeError):
    """A run-to-completion child (`run`) exited non-zero or overran its time; message: log tail."""


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True when GET `url` answers 200 (any error, refusal or other status: False)."""
    try:
        with urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except (URLError, OSError, ValueError):
        return False


class ChildProcess:
    """One started child: its process group, its log, and the way to stop it.

    Contract: from `spawn` until `stop` the child's group is on the warden's list, so it dies with
    this program however the program ends. `stop` is idempotent and leaves nothing of the tree
    still linked to the child running (SIGTERM to the group and to descendants that left it,
    `grace` seconds, SIGKILL to what is left; see `stop` for orphans). The log stays readable after
    `stop`: when it lived in a temporary folder of its own (``spawn(log=None)``), its text is kept
    in memory before that folder goes.
    """

    def __init__(self, popen: subprocess.Popen[bytes], name: str, log_path: Path, own_dir: TempDir | None,
                 grace: float) -> None:
        self.popen = popen
        self.name = name
        self.log_path = log_path
        self.grace = grace
        self._own_dir = own_dir
        self._final_log: str | None = None
        self._stopped = False
        self.ready_seconds: float | None = None  # set by wait_ready

    @property
    def pid(self) -> int:
        """The child's pid, which is also its process group's id."""
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def running(self) -> bool:
        return not self._stopped and self.popen.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child itself to exit (raises subprocess.TimeoutExpired)."""
        return self.popen.wait(timeout)

    def log_text(self) -> str:
        if self._final_log is not None:
            return self._final_log
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the log, or "(empty log)"."""
        return "\n".join(self.log_text().rstrip().splitlines()[-lines:]) or "(empty log)"

    def wait_ready(self, ready: ReadyProbe, timeout: float, interval: float = 0.2) -> float:
        """Poll `ready` (a URL answering 200, or a callable returning something truthy) until it
        holds; returns the seconds waited. On an exit or a timeout the child is stopped and
        `ChildStartError` names it, its exit code or the limit, and its last log lines."""
        started = time.monotonic()
        probe: Callable[[], object] = (lambda: http_ok(ready)) if isinstance(ready, str) else ready  # type: ignore[assignment]
        try:
            while True:
                code = self.popen.poll()
                if code is not None:
                    raise ChildStartError(self._failure(f"exited with code {code} during start-up"))
                if ready is None or probe():
                    self.ready_seconds = time.monotonic() - started
                    return self.ready_seconds
                if time.monotonic() - started >= timeout:
                    raise ChildStartError(self._failure(f"not ready within {timeout:.0f} s"))
                time.sleep(interval)
        except BaseException:
            self.stop()
            raise

    def _failure(self, what: str) -> str:
        return f"{self.name} {what}; last lines of {self.log_path}:\n{self.log_tail()}"

    def stop(self, grace: float | None = None) -> int | None:
        """SIGTERM to the group, up to `grace` s for it to go, then SIGKILL; returns the exit code.

        Reaches the group and every descendant still linked to it, in or out of the group. A
        descendant orphaned earlier (its parent died, it was re-parented to init) is not linked any
        more: the warden's periodic snapshots hold it, and the warden ends it when the program goes."""
        if self._stopped:
            return self.popen.returncode
        self._stopped = True
        grace = self.grace if grace is None else grace
        pgid = self.popen.pid
        # Descendants that left the group (playwright's Chromium) go too; recorded before anything
        # exits, as an orphan's parent link is lost.
        strays = tree((), {pgid})
        kill_groups({pgid}, grace, strays)
        # Members that outlived the leader (vLLM's engine core) or ignored SIGTERM: always sweep.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        self.popen.wait()
        warden().untrack_group(pgid)
        if self._own_dir is not None:
            self._final_log = self.log_text()
            self._own_dir.cleanup()
        return self.popen.returncode

    def __enter__(self) -> ChildProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn(argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None, cwd: Path | None = None,
          log: Path | None = None, ready: ReadyProbe = None, ready_timeout: float = 30.0, interval: float = 0.2,
          grace: float = 10.0, pass_fds: Sequence[int] = (), private_tmp: bool = False,
          niceness: int = 0) -> ChildProcess:
    """Start `argv` under all three layers, its stdout and stderr appended to `log` (default: a
    file in a temporary folder of its own, removed by `stop`); then wait for `ready` (a URL
    answering 200, or a callable) up to `ready_timeout` s. A child that exits or is not ready in
    time is stopped and `ChildStartError` carries its log tail. `env` replaces the environment
    (None: inherit); `pass_fds` stay open in the child (e.g. a lock it must hold);
    `private_tmp` points the child's TMPDIR at that own folder, so the temporary files of a tool
    that cannot clean up when killed (node's Chromium profile) go with it. `niceness` > 0 runs
    the child (and its children) at a lower CPU priority: see `BACKGROUND`."""
    keeper = warden()
    own_dir = None
    slug = name.replace(" ", "-").replace("/", "-")
    if log is None or private_tmp:
        own_dir = TempDir(f"vse-{slug}-")
    if log is None:
        log = own_dir.path / f"{slug}.log"  # type: ignore[union-attr]
    if private_tmp:
        env = {**(os.environ if env is None else env), "TMPDIR": str(own_dir.path)}  # type: ignore[union-attr]
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(log, "ab") as handle:
            popen = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                                     env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
                                     pass_fds=tuple(pass_fds), preexec_fn=_die_with_parent(os.getpid(), niceness))
    except BaseException:
        if own_dir is not None:
            own_dir.cleanup()
        raise
    keeper.track_group(popen.pid)
    child = ChildProcess(popen, name, log, own_dir, grace)
    if ready is not None:
        child.wait_ready(ready, ready_timeout, interval)
    return child


def run(argv: Sequence[str], *, name: str, timeout: float, env: Mapping[str, str] | None = None,
        cwd: Path | None = None, log: Path | None = None, private_tmp: bool = False, niceness: int = 0) -> str:
    """Run `argv` to completion as a tracked child (a tool that starts its own children, e.g. node
    driving Chromium); returns its output. Exit non-zero or running past `timeout` s: the whole
    group is stopped and `ChildExitError` carries the log tail."""
    with spawn(argv, name=name, env=env, cwd=cwd, log=log, private_tmp=private_tmp, niceness=niceness) as child:
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.stop()
            raise ChildExitError(f"{name} still running after {timeout:.0f} s; last lines of "
                                 f"{child.log_path}:\n{child.log_tail()}") from None
        child.stop()  # grandchildren it left behind go with its group
        if code != 0:
            raise ChildExitError(f"{name} exited with code {code}; last lines of {child.log_path}:\n{child.log_tail()}")
        return child.log_text()


class TempDir:
    """A temporary folder the warden removes should the program die before `cleanup()`."""

    def __init__(self, prefix: str, parent: Path | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        self._done = False
        warden().track_dir(str(self.path))

    def cleanup(self) -> None:
        if self._done:
            return
        self._done = True
        shutil.rmtree(self.path, ignore_errors=True)
        warden().untrack_dir(str(self.path))
