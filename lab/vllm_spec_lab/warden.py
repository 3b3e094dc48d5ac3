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

A group is not always the whole tree: a child may put its own children in groups of their own
(playwright starts Chromium with `detached: true`, a new group), and once their parent dies they
are orphans no group kill reaches. So every SNAPSHOT_SECONDS the warden records each live
descendant of the registered groups (pid and start time, so a recycled pid is never hit), and at
the end it signals the recorded ones still alive along with the groups.

It lives in its own session, so Ctrl-C or a closed terminal, which signal the program's process
group, never reach it before the program has had its chance to clean up; it ignores SIGINT and
SIGHUP, and SIGTERM makes it clean up at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import sys
import time
from collections.abc import Iterable

GRACE_SECONDS = float(os.environ.get("VLLM_SPEC_EXPORTER_WARDEN_GRACE", "10"))
SNAPSHOT_SECONDS = 0.5


class _Terminated(Exception):
    pass


def process_table() -> dict[int, tuple[int, int, str, str]]:
    """{pid: (ppid, pgid, state, start time)} of every process, from /proc (empty without /proc)."""
    table = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
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
        if len(fields) >= 20:
            table[int(entry)] = (int(fields[1]), int(fields[2]), fields[0], fields[19])
    return table


def live_members(pgid: int) -> list[int]:
    """Pids of the group's members that are not zombies (a zombie holds no memory and no port)."""
    if not os.path.isdir("/proc"):  # fall back to "the group exists"
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    return [pid for pid, (_, group, state, _) in process_table().items() if group == pgid and state != "Z"]


def tree(roots: Iterable[int], groups: Iterable[int] = (),
         table: dict[int, tuple[int, int, str, str]] | None = None) -> dict[int, str]:
    """{pid: start time} of the live (non-zombie) processes in `roots`, in `groups`, and of every
    descendant of those, whatever group or session it moved to."""
    table = process_table() if table is None else table
    roots, groups = set(roots), set(groups)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    frontier = [pid for pid in table if pid in roots or table[pid][1] in groups]
    found: dict[int, str] = {}
    while frontier:
        pid = frontier.pop()
        if pid in found or pid not in table:
            continue
        if table[pid][2] != "Z":
            found[pid] = table[pid][3]
        frontier.extend(children.get(pid, ()))
    return found


def still_alive(recorded: dict[int, str], table: dict[int, tuple[int, int, str, str]] | None = None) -> list[int]:
    """The recorded pids that are alive and still the same process (same start time, no zombie)."""
    table = process_table() if table is None else table
    return [pid for pid, started in recorded.items()
            if pid in table and table[pid][3] == started and table[pid][2] != "Z"]


def kill_groups(groups: set[int], grace: float, strays: dict[int, str] | None = None) -> None:
    """SIGTERM to every group and every recorded stray, up to `grace` s, then SIGKILL the rest."""
    strays = strays or {}
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    _signal_pids(still_alive(strays), signal.SIGTERM)
    deadline = time.monotonic() + grace
    alive = {g for g in groups if live_members(g)}
    left = still_alive(strays)
    while (alive or left) and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = {g for g in alive if live_members(g)}
        left = still_alive(strays)
    for pgid in alive:
        _signal_group(pgid, signal.SIGKILL)
    _signal_pids(still_alive(strays), signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def on_term(*_: object) -> None:
        raise _Terminated

    signal.signal(signal.SIGTERM, on_term)
    groups: set[int] = set()
    dirs: set[str] = set()
    seen: dict[int, str] = {}  # every descendant of the groups seen alive (see the docstring)
    stdin = sys.stdin.fileno()
    pending = b""
    next_snapshot = time.monotonic() + SNAPSHOT_SECONDS
    try:
        while True:
            readable, _, _ = select.select([stdin], [], [], max(0.0, next_snapshot - time.monotonic()))
            if readable:
                chunk = os.read(stdin, 65536)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                for raw in lines:
                    _apply(raw, groups, dirs)
            if time.monotonic() >= next_snapshot:
                next_snapshot = time.monotonic() + SNAPSHOT_SECONDS
                if groups:  # forget the dead (bounded memory), add what appeared
                    table = process_table()
                    seen = {pid: seen[pid] for pid in still_alive(seen, table)} | tree((), groups, table)
    except _Terminated:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish the clean-up once started
    seen.update(tree((), groups))
    kill_groups(groups, GRACE_SECONDS, seen)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)
    return 0


def _apply(raw: bytes, groups: set[int], dirs: set[str]) -> None:
    try:
        message = json.loads(raw)
        op = message["op"]
    except (ValueError, KeyError, TypeError):
        return
    if op == "group":
        groups.add(int(message["id"]))
    elif op == "ungroup":
        groups.discard(int(message["id"]))
    elif op == "dir":
        dirs.add(str(message["path"]))
    elif op == "undir":
        dirs.discard(str(message["path"]))


if __name__ == "__main__":
    sys.exit(main())
