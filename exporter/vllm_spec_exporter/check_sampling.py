"""How `check` samples a target: poll it for the duration, keep what answered, read the running
batch, and tell a busy server from an unreachable one.

Contract:

* A poll that does not answer within the per-poll deadline does not end the sample: its window
  is the polls that answered (the window store keeps their counters; deltas span the answered
  polls). Only a first poll that cannot connect at all (refused, unresolvable, TLS) or is answered
  with an HTTP error ends it at once: that server is down, not busy.
* A server that accepts a TCP connection but answers /metrics late is busy, not down: after a
  timed-out poll `check` opens (and closes) one connection to the target's port to tell the two
  apart (`Sampled.busy`).
* The batch the speed-up is estimated at is read from counters (`counter_batch`): request-steps
  per engine step over the window (advisor.batch_per_step). Where no engine serves the step count
  (llama.cpp, older vLLM) the mean of the running-requests gauge over the answered polls stands in
  (`gauge_batches`), and the report says which one it is. A gauge sampled every few seconds misses
  short requests: it jumps between 0 and the concurrency, and vLLM answers /metrics from the event
  loop that streams the tokens, so a poll tends to land between bursts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import advisor
from .derive import SeriesFigures
from .names import Family
from .normalise import Snapshot
from .poller import Poller, PollResult

__all__ = ["BATCH_COUNTER", "BATCH_GAUGE", "Sampled", "counter_batch", "running_per_engine", "sample"]

# Where a batch came from (the `--json` document's `at_load.batch_source`).
BATCH_COUNTER = "request_steps_per_step"
BATCH_GAUGE = "running_gauge"


@dataclass
class Sampled:
    """What `sample` saw. `answered` is the last poll that answered (None: none did)."""

    answered: PollResult | None = None
    polls: int = 0
    polls_answered: int = 0
    polls_timed_out: int = 0
    last_error: str = ""
    busy: bool = False  # some poll timed out while the target accepted connections
    gauge_batches: dict[str, list[float]] = field(default_factory=dict)  # model -> per answered poll


def running_per_engine(snap: Snapshot) -> dict[str, float]:
    """Model -> running requests per engine now (the engines' mean): one poll's batch."""
    running: dict[str, list[float]] = {}
    for (family, series), value in snap.gauges.items():
        if family == Family.REQUESTS_RUNNING:
            running.setdefault(series[0], []).append(value)
    return {model: sum(values) / len(values) for model, values in running.items()}


def counter_batch(total: SeriesFigures) -> float | None:
    """Running requests per engine step over the window (the engines' steps summed in `total`), or
    None where no engine serves the step count or it took no step."""
    if total.steps is None or total.generation is None or total.accepted is None:
        return None
    return advisor.batch_per_step(total.generation, total.accepted, total.steps)


def sample(poller: Poller, duration: float, interval: float,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Sampled:
    """Poll every `interval` seconds for `duration` seconds (a late answer delays the next poll,
    never overlaps it); see the module's contract."""
    seen = Sampled()
    started = clock()
    while True:
        timeouts_before = poller.errors["timeout"]
        result = poller.poll_once()
        seen.polls += 1
        if result.target_up and result.snapshot is not None:
            seen.answered = result
            seen.polls_answered += 1
            for model, batch in running_per_engine(result.snapshot).items():
                seen.gauge_batches.setdefault(model, []).append(batch)
        else:
            seen.last_error = result.error_message
            if poller.errors["timeout"] > timeouts_before:
                seen.polls_timed_out += 1
                seen.busy = seen.busy or result.busy or poller.fetcher.accepts_connections()
            elif seen.polls == 1:
                break  # refused, unresolvable or an HTTP error from the start: say so now
        left = duration - (clock() - started)
        if left <= 0:
            break
        sleep(min(interval, left))
    return seen
