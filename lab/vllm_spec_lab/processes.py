"""Child processes and temporary folders that never outlive the program that made them.

Every server the lab starts (vLLM, the exporter, Prometheus, Alertmanager) goes through `spawn`,
and every temporary folder through `temp_dir`. Three layers, because each covers what the one
before cannot:

1. Own process group (``start_new_session``). Ctrl-C and a closed terminal signal only the
   program, which then stops its children in order; and `stop` takes a whole tree down with one
   ``killpg`` (vLLM forks engine-core processes that are not our children).
2. ``PR_SET_PDEATHSIG`` = SIGTERM (Linux ``prctl``, set in the child between fork and exec): the
   kernel signals the direct child when the thread that started it dies, SIGKILL included.
   That thread is the caller's, so spawn from a thread that lives as long as the child (the main
   thread, as the demo and the tests do).
3. The warden (`warden.py`): one tiny supervisor per program, reading a pipe whose only write end
   the program holds. When the program is gone, however it ended, the warden kills every group
   still registered (SIGTERM, then SIGKILL after a grace) — grandchildren included, which layer 2
   cannot reach — and removes every registered folder.

`stop` is the orderly path: SIGTERM to the group, a grace period, SIGKILL to what is left, then
the group is struck off the warden's list.
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
from collections.abc import Mapping, Sequence
from pathlib import Path

from .warden import live_members

WARDEN_SCRIPT = Path(__file__).with_name("warden.py")
_PR_SET_PDEATHSIG = 1

try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
    _prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
except (OSError, AttributeError):  # not Linux: layers 1 and 3 still hold
    _prctl = None


def _die_with_parent(parent_pid: int):
    """A preexec_fn: resolved before fork, so the child only makes one foreign call."""

    def preexec() -> None:
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

    def _send(self, op: str, **fields: object) -> None:
        line = (json.dumps({"op": op, **fields}) + "\n").encode()
        with self._lock:
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
        self._groups.add(pgid)
        self._send("group", id=pgid)

    def untrack_group(self, pgid: int) -> None:
        self._groups.discard(pgid)
        self._send("ungroup", id=pgid)

    def track_dir(self, path: str) -> None:
        self._dirs.add(path)
        self._send("dir", path=path)

    def untrack_dir(self, path: str) -> None:
        self._dirs.discard(path)
        self._send("undir", path=path)


_warden: _Warden | None = None
_warden_lock = threading.Lock()


def warden() -> _Warden:
    global _warden
    with _warden_lock:
        if _warden is None or _warden.pid != os.getpid():
            _warden = _Warden()
        return _warden


def spawn(cmd: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start `cmd` with stdout and stderr appended to `log_path`, under all three layers."""
    keeper = warden()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(env) if env is not None else None, start_new_session=True,
                                preexec_fn=_die_with_parent(os.getpid()))
    keeper.track_group(proc.pid)
    return proc


def stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM to the process group, up to `grace` seconds for it to go, then SIGKILL the rest."""
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    while live_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    # Members that outlived the leader (vLLM's engine core) or ignored SIGTERM: always sweep.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    proc.wait()
    warden().untrack_group(pgid)


class TempDir:
    """A temporary folder the warden removes should the program die before `cleanup()`."""

    def __init__(self, prefix: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        self._done = False
        warden().track_dir(str(self.path))

    def cleanup(self) -> None:
        if self._done:
            return
        self._done = True
        shutil.rmtree(self.path, ignore_errors=True)
        warden().untrack_dir(str(self.path))
