"""Which processes a test started, and which of them are still alive (Linux /proc).

A process is recorded by pid *and* start time, so a recycled pid never counts as a survivor;
zombies hold no memory, port or file and do not count either.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def process_table() -> dict[int, tuple[int, str, str]]:
    """{pid: (ppid, state, start time)} from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        table[int(entry)] = (int(fields[1]), fields[0], fields[19])
    return table


def descendants(root: int) -> dict[int, str]:
    """{pid: start time} of every live descendant of `root`."""
    table = process_table()
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, state, started) in table.items():
            if ppid == parent and pid not in found and state != "Z":
                found[pid] = started
                frontier.append(pid)
    return found


def survivors(recorded: dict[int, str]) -> list[str]:
    table = process_table()
    alive = []
    for pid, started in recorded.items():
        entry = table.get(pid)
        if entry and entry[2] == started and entry[1] != "Z":
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
                alive.append(f"{pid} {command!r}")
            except OSError:
                pass
    return alive


def wait_gone(recorded: dict[int, str], tmp: Path, timeout: float = 40) -> tuple[list[str], list[str]]:
    deadline = time.monotonic() + timeout
    while True:
        alive, left = survivors(recorded), sorted(p.name for p in tmp.iterdir())
        if (not alive and not left) or time.monotonic() > deadline:
            return alive, left
        time.sleep(0.2)


