"""The one way the lab and the tests wait for something: `wait_until`.

Contract: poll `predicate` every `interval` seconds; return its first truthy value; when `timeout`
seconds pass without one, raise `TimeoutError` whose message names what was awaited (`what`, or
the predicate's name) and the predicate's last value — so a failed wait reads as a failed check
without a second assertion. `failure`, when given, is called at that moment and its text replaces
the last value: say there what the system looked like (firing alerts, a log tail).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.2, *,
               what: str | None = None, failure: Callable[[], str] | None = None) -> T:
    """The first truthy value of `predicate()` within `timeout` seconds, else TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            name = what or getattr(predicate, "__name__", "condition")
            detail = failure() if failure is not None else f"last value {value!r}"
            raise TimeoutError(f"{name} not met within {timeout:g} s: {detail}")
        time.sleep(interval)
