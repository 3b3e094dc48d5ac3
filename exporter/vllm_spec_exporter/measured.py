"""The measured speed-up against a baseline server, and the histogram arithmetic it reads.

Where the same model is served with and without speculation, the speed-up users feel is

    measured_speedup = baseline time per output token / speculative time per output token

from vLLM's `request_time_per_output_token_seconds` histogram (per request: decode time over the
tokens after the first, so per *token* with or without speculation). `inter_token_latency_seconds`
is per emitted *chunk*: with speculation one step emits several tokens, so its ratio compares step
times, not speeds; callers show it labelled as such, never as the speed-up. The end-to-end time per
output token (request latency over output tokens) adds what TPOT leaves out: queueing and prefill.

Histograms are read as deltas over a window: `_sum` and `_count` give the mean, the cumulative
`_bucket` counts a quantile, interpolated linearly within the bucket exactly as Prometheus'
`histogram_quantile` does (the lowest bucket starts at 0, a rank in the `+Inf` bucket returns the
highest finite bound). No observations, a missing or non-positive time: None, never 1 or 0.
The PromQL side (mixin/rules/measured.py's records) defines the same mean and ratio over the same
series: quantities.histogram_mean and quantities.measured_speedup.

Both servers should run comparable loads: a busy baseline beside an idle speculative server
measures the batch, not speculation; `check --baseline` and the rules show each side's running
batch beside the ratio.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

__all__ = ["bucket_deltas", "end_to_end_seconds_per_token", "histogram_mean", "histogram_quantile",
           "measured_speedup"]


def measured_speedup(baseline_tpot_seconds: float | None, speculative_tpot_seconds: float | None) -> float | None:
    """Baseline time per output token over the speculative one (> 1: speculation is faster).

    None when either is missing, non-positive or not finite: a ratio of nothing is no ratio."""
    if baseline_tpot_seconds is None or speculative_tpot_seconds is None:
        return None
    if not (0 < baseline_tpot_seconds < math.inf and 0 < speculative_tpot_seconds < math.inf):
        return None
    return baseline_tpot_seconds / speculative_tpot_seconds


def histogram_mean(sum_delta: float | None, count_delta: float | None) -> float | None:
    """Mean observation over a window: Δ_sum / Δ_count; None without observations."""
    if sum_delta is None or count_delta is None or not count_delta > 0 or not math.isfinite(sum_delta):
        return None
    return sum_delta / count_delta


def end_to_end_seconds_per_token(latency_sum_delta: float | None, tokens_sum_delta: float | None) -> float | None:
    """Request latency per output token over the requests finished in a window: Δ
    `e2e_request_latency_seconds_sum` / Δ `request_generation_tokens_sum` (queueing, prefill and
    decode, weighted by tokens). Its baseline-over-speculative ratio is the speed-up a client with a
    fixed concurrency sees in tokens/s; TPOT's leaves out the time before the first token."""
    return histogram_mean(latency_sum_delta, tokens_sum_delta)


def _bound(le: str | float) -> float:
    return math.inf if le in ("+Inf", "Inf", "inf") else float(le)


def bucket_deltas(first: Mapping[str, float], last: Mapping[str, float]) -> list[tuple[float, float]]:
    """(upper bound, cumulative count increase) per bucket, sorted by bound, from two readings of
    one histogram's `_bucket` series keyed by their `le` text. A bucket missing from either reading
    is left out; a decrease (the server restarted) counts the new value, as rate() does."""
    out = []
    for le, value in last.items():
        before = first.get(le)
        if before is None:
            continue
        out.append((_bound(le), value - before if value >= before else value))
    return sorted(out)


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative `(upper bound, count)` buckets, as Prometheus computes it.

    Needs a `+Inf` bucket and at least two buckets; None without observations. Counts that go down
    from one bound to the next (a scrape torn between buckets) are raised to the previous count,
    as Prometheus does."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must lie within [0, 1], got {q:g}")
    ordered = sorted(buckets)
    if len(ordered) < 2 or ordered[-1][0] != math.inf:
        return None
    counts = []
    for _, count in ordered:
        counts.append(max(count, counts[-1]) if counts else count)
    total = counts[-1]
    if not total > 0:
        return None
    rank = q * total
    index = next(i for i, count in enumerate(counts) if count >= rank)
    if index == len(ordered) - 1:
        return ordered[-2][0]  # the rank lies in +Inf: the highest finite bound
    upper = ordered[index][0]
    if index == 0 and upper <= 0:
        return upper
    lower = ordered[index - 1][0] if index > 0 else 0.0
    below = counts[index - 1] if index > 0 else 0.0
    within = counts[index] - below
    if within <= 0:  # only at q = 0 over an empty first bucket: Prometheus divides 0 by 0 (NaN)
        return None
    return lower + (upper - lower) * (rank - below) / within
