"""The speed-up measured against a baseline: what users feel, not a model of it.

Where the same model is served with and without speculation (a canary, a fleet in transition, a
server whose config says `method="none"`), the speed-up is the ratio of the time each takes per
output token. vLLM measures that per request in `vllm:request_time_per_output_token_seconds`
(decode time / (generated tokens - 1)): per *token*, whatever speculation emits in one step. Its
`vllm:inter_token_latency_seconds` (`vllm:time_per_output_token_seconds` before 0.11) records one
sample per *output event*, and with speculation one event carries every accepted token of a step:
its mean rises with acceptance while each token comes sooner, so it never measures the speed-up.

Contract (the rules compute the same in PromQL: mixin/rules/quantities.measured_speedup):

- `mean_seconds(sum_increase, count_increase)` is a histogram's mean over a window: the increase of
  its `_sum` over the increase of its `_count`; None when no observation ended in the window (an
  idle server has no latency, never 0).
- `measured_speedup(baseline_tpot_seconds, speculative_tpot_seconds)` is baseline time per output
  token over the speculative server's: above 1 speculation makes each token come sooner. None when
  either side is missing (no baseline: no measurement, never 1 and never 0). A negative, zero or
  non-finite time is not a measurement: ValueError naming the argument.

Both servers should run comparable loads: a busy baseline beside an idle speculative server
measures the batch, not speculation. The rules record each side's running batch beside the ratio.
"""

from __future__ import annotations

import math

__all__ = ["mean_seconds", "measured_speedup"]


def mean_seconds(sum_increase: float | None, count_increase: float | None) -> float | None:
    """A histogram's mean over a window from the increases of its `_sum` and `_count`; None when
    either is missing or nothing was observed (count 0)."""
    if sum_increase is None or count_increase is None:
        return None
    for name, value in (("sum increase", sum_increase), ("count increase", count_increase)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"histogram {name} must be a finite number >= 0, got {value}")
    return sum_increase / count_increase if count_increase > 0 else None


def measured_speedup(baseline_tpot_seconds: float | None, speculative_tpot_seconds: float | None) -> float | None:
    """Baseline time per output token / the speculative server's (seconds each); None when either
    is missing. Raises ValueError on a time that is not a finite number > 0."""
    if baseline_tpot_seconds is None or speculative_tpot_seconds is None:
        return None
    for name, value in (("baseline", baseline_tpot_seconds), ("speculative", speculative_tpot_seconds)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} time per output token must be a finite number of seconds > 0, got {value}")
    return baseline_tpot_seconds / speculative_tpot_seconds
