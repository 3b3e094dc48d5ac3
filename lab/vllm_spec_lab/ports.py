"""Loopback ports for the lab's servers (and the tests' own): `free_port()`, the one place a port
is chosen.

Why a range: parallel test workers share the machine's loopback. When a server of one worker stops,
a scraper of that worker may still have its address (a Prometheus or VictoriaMetrics being stopped,
an Alertmanager still resending); if the kernel then hands the same port to a server of another
worker, that server answers a stranger — a capture replay advances one capture too many, a
webhook records pages that are not its own (seen: VictoriaMetrics' scrapes in a Prometheus 3
test). With `VLLM_SPEC_LAB_PORTS="LO-HI"` in the environment (the test plugin gives each worker
its own range, below the kernel's ephemeral range, so the kernel's own choices never land in it),
`free_port()` hands out that range's ports in turn from a random start: no two workers of a run
share a port, and a port comes back to the same process only after the whole range has gone round.
A child process (a demo a test starts) inherits the range and keeps its own turn from its own random
start, so it rarely meets a port its parent used moments ago (a port in use is always skipped).
Two test runs at once (two checkouts) use the same ranges and lose that guarantee between them.
Without the variable, the kernel chooses (the demo, a one-process test run).
"""

from __future__ import annotations

import os
import random
import socket
import threading

__all__ = ["RANGE_VARIABLE", "PortRange", "free_port", "worker_range"]

RANGE_VARIABLE = "VLLM_SPEC_LAB_PORTS"
# Below Linux's default ephemeral range (32768-60999), so bind(port 0) never returns one of these;
# shared out evenly among a run's workers. (32000-32767 stays free for tests of this module.)
WORKER_PORTS = (16000, 31999)
MAX_PORTS_A_WORKER = 2000  # a range goes round in a few minutes at most: plenty


class PortRange:
    """The ports LO..HI, handed out in turn (thread-safe), skipping any that is taken right now."""

    def __init__(self, low: int, high: int) -> None:
        if not 1024 <= low <= high <= 65535:
            raise ValueError(f"{RANGE_VARIABLE}: {low}-{high} is not a port range within 1024-65535")
        self.low, self.high = low, high
        # Not the global generator: Hypothesis seeds that one inside fuzz examples.
        self._next = random.SystemRandom().randint(low, high)
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            for _ in range(self.high - self.low + 1):
                port, self._next = self._next, self._next + 1 if self._next < self.high else self.low
                if _bindable(port):
                    return port
        raise OSError(f"{RANGE_VARIABLE}={self.low}-{self.high}: every port in the range is in use")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _parse(text: str) -> PortRange:
    low, separator, high = text.partition("-")
    if not (separator and low.strip().isdigit() and high.strip().isdigit()):
        raise ValueError(f"{RANGE_VARIABLE}={text!r}: expected LOW-HIGH, e.g. 16000-16999")
    return PortRange(int(low), int(high))


_ranges: dict[str, PortRange] = {}
_ranges_lock = threading.Lock()


def free_port() -> int:
    """A 127.0.0.1 TCP port nothing listens on right now: from `VLLM_SPEC_LAB_PORTS` when it is
    set, else the kernel's choice."""
    text = os.environ.get(RANGE_VARIABLE, "").strip()
    if not text:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    with _ranges_lock:
        ports = _ranges.get(text) or _ranges.setdefault(text, _parse(text))
    return ports.take()


def worker_range(index: int, workers: int) -> str:
    """The `VLLM_SPEC_LAB_PORTS` value of worker `index` (0 … workers - 1) of a parallel run:
    disjoint ranges, at most MAX_PORTS_A_WORKER ports each."""
    if not 0 <= index < workers:
        raise ValueError(f"worker {index} of {workers}: no such worker")
    first, last = WORKER_PORTS
    each = min(MAX_PORTS_A_WORKER, (last - first + 1) // workers)
    if each < 10:
        raise ValueError(f"{workers} workers: fewer than 10 ports each in {WORKER_PORTS[0]}-{WORKER_PORTS[1]}")
    low = first + index * each
    return f"{low}-{low + each - 1}"
