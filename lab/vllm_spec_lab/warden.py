"""The warden: a tiny supervisor that cleans up after a program however that program ends.

Run by `processes.py` as ``python -I -S warden.py`` (standard library only, so it starts in tens of
milliseconds and does not depend on where this package lives). It reads JSON lines on stdin:

    {"op": "group", "id": 1234}     a process group the program started (pgid = the child's pid)
    {"op": "ungroup", "id": 1234}   the program stopped that group itself
    {"op": "dir", "path": "/tmp/x"} a temporary folder the program made
    {"op": "undir", "path": ...}    the program removed it itself

The program holds the only write end of that pipe (non-inheritable), so stdin reaches EOF exactly
when the program is gone — by a clean exit, an exception, any signal, SIGKILL included. Then the
warden sends SIGTERM to every group still registered, waits up to GRACE_SECONDS for their last live
member to go, sends SIGKILL to what remains, removes every registered folder and exits.

It lives in its own session, so Ctrl-C or a closed terminal, which signal the program's process
group, never reach it before the program has had its chance to clean up; it ignores SIGINT and
SIGHUP, and SIGTERM makes it clean up at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time

GRACE_SECONDS = float(os.environ.get("VLLM_SPEC_EXPORTER_WARDEN_GRACE", "10"))


class _Terminated(Exception):
    pass


def live_members(pgid: int) -> list[int]:
    """Pids of the group's members that are not zombies (a zombie holds no memory and no port)."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc: fall back to "the group exists"
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so split after
        # the last ')'.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) >= 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def kill_groups(groups: set[int], grace: float) -> None:
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    alive = {g for g in groups if live_members(g)}
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = {g for g in alive if live_members(g)}
    for pgid in alive:
        _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def on_term(*_: object) -> None:
        raise _Terminated

    signal.signal(signal.SIGTERM, on_term)
    groups: set[int] = set()
    dirs: set[str] = set()
    try:
        for raw in sys.stdin.buffer:
            try:
                message = json.loads(raw)
                op = message["op"]
            except (ValueError, KeyError, TypeError):
                continue
            if op == "group":
                groups.add(int(message["id"]))
            elif op == "ungroup":
                groups.discard(int(message["id"]))
            elif op == "dir":
                dirs.add(str(message["path"]))
            elif op == "undir":
                dirs.discard(str(message["path"]))
    except _Terminated:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish the clean-up once started
    kill_groups(groups, GRACE_SECONDS)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
