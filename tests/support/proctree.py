"""Which processes a test started, and which of them are still alive (Linux /proc).

A process is recorded by pid *and* start time, so a recycled pid never counts as a survivor;
zombies hold no memory, port or file and do not count either. The /proc reading is the warden's
own (`vllm_spec_lab.warden`): the tests judge with the same eyes the clean-up uses, and a
descendant that moved to a group or session of its own (Chromium under playwright) still counts.
"""

from __future__ import annotations

import time
from pathlib import Path

from vllm_spec_lab.warden import still_alive, tree


def descendants(root: int) -> dict[int, str]:
    """{pid: start time} of every live descendant of `root` (not `root` itself)."""
    found = tree((root,))
    found.pop(root, None)
    return found


def survivors(recorded: dict[int, str]) -> list[str]:
    """"pid command" of each recorded process still alive."""
    alive = []
    for pid in still_alive(recorded):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
            alive.append(f"{pid} {command!r}")
        except OSError:
            pass
    return alive


def wait_gone(recorded: dict[int, str], tmp: Path, timeout: float = 40) -> tuple[list[str], list[str]]:
    """Wait up to `timeout` s for the recorded processes to die and `tmp` to empty; returns what
    is still there (survivors, leftover names in `tmp`)."""
    deadline = time.monotonic() + timeout
    while True:
        alive, left = survivors(recorded), sorted(p.name for p in tmp.iterdir())
        if (not alive and not left) or time.monotonic() > deadline:
            return alive, left
        time.sleep(0.2)
