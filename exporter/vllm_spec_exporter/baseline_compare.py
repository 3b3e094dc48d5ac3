"""The comparison `check --baseline` makes: one model's figures on the speculative target and on a
baseline server (the same model served without speculation), over the same sampled window.

Pure: reads two snapshots of each server (the first and last poll) and the running batch seen at
each poll; no I/O. Per side: time per output token (TPOT, mean and p50/p90 from bucket deltas),
inter-token latency (per emitted chunk), output tokens/s and the running batch. The measured
speed-up is measured.measured_speedup(baseline TPOT, speculative TPOT); the ITL ratio compares
step times, not speeds, and is reported as such. A comparison that cannot be made says why in
`problem` (one line) and carries no ratio: never a fake 1 or 0.

Comparable load: the batch each server ran is shown, and `batch_warning` set when the two differ
by more than BATCH_MISMATCH_FACTOR (a busy server against an idle one measures the load, not
speculation). Calibration: the step times (mean ITL, one observation per request per step) give
draft_cost_ratio at the configured compute_bound_tokens (calibrate.draft_cost_ratio) and, when
drafting is free (n-gram), compute_bound_tokens itself (calibrate.compute_bound_from_free_drafts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from . import advisor, calibrate
from .measured import bucket_deltas, end_to_end_seconds_per_token, histogram_mean, histogram_quantile, measured_speedup
from .names import Family
from .normalise import Snapshot

__all__ = ["AGREEMENT_FACTOR", "BATCH_MISMATCH_FACTOR", "Comparison", "SideFigures", "compare", "side_figures"]

# Batches (running requests per engine, mean over the polls) further apart than this factor are not
# comparable load: the comparison still prints, under a warning.
BATCH_MISMATCH_FACTOR = 1.5
# The speed-up per output token and the ratio of tokens/s further apart than this: time outside
# decoding (queueing, prefill, the clients' own gaps) differs between the servers, and the
# per-token speed-up is not what clients receive. Said, never hidden.
AGREEMENT_FACTOR = 1.15
QUANTILES = (0.5, 0.9)


@dataclass(frozen=True)
class SideFigures:
    """One server's figures for one model over its sampled window (engines summed)."""

    seconds: float
    requests: float  # requests finished (TPOT observations)
    tpot_mean: float | None
    tpot_quantiles: dict[float, float | None]
    itl_mean: float | None  # per emitted chunk: the step time a request sees
    itl_quantiles: dict[float, float | None]
    output_tokens_per_second: float | None
    batch: float | None  # request-steps per engine step (the gauge's mean over the polls without a step count)
    steps: float | None  # engine steps (Δ iteration_tokens_total_count)
    draft_tokens: float | None = None  # the speculative side's counters' deltas
    accepted_tokens: float | None = None
    generation_tokens: float | None = None
    tpot_exposed: bool = True  # the server writes vllm:request_time_per_output_token_seconds at all
    e2e_per_token: float | None = None  # request latency per output token (queueing, prefill included)

    @property
    def draft_length(self) -> float | None:
        """L: draft tokens verified per request-step (advisor.speedup_at_load's)."""
        T, A, G = self.draft_tokens, self.accepted_tokens, self.generation_tokens
        if T is None or A is None or G is None or G - A <= 0:
            return None
        return T / (G - A)


@dataclass(frozen=True)
class Comparison:
    model: str
    target: SideFigures | None
    baseline: SideFigures | None
    speedup: float | None  # measured: baseline TPOT mean / speculative TPOT mean
    speedup_quantiles: dict[float, float | None]  # the same ratio of the bucket quantiles
    chunk_latency_ratio: float | None  # baseline ITL / speculative ITL: step times, not speed
    tokens_per_second_ratio: float | None
    batch_warning: str | None
    problem: str | None  # why no ratio could be measured (one line), else None
    end_to_end_speedup: float | None = None  # the same ratio of end-to-end time per output token
    agreement_warning: str | None = None  # the TPOT speed-up and the tokens/s ratio disagree
    draft_cost_ratio: float | None = None  # calibrated at compute_bound_tokens
    compute_bound: calibrate.ComputeBound | None = None  # calibrated when drafting is free


def _histogram(snap: Snapshot, family: Family, model: str) -> tuple[float | None, float | None, dict[str, float]]:
    total: dict[str, float] = {}
    buckets: dict[str, float] = {}
    for key, value in snap.histograms.items():
        if key.family == family and key.series.model_name == model:
            if key.part == "bucket":
                buckets[key.le] = buckets.get(key.le, 0.0) + value
            else:
                total[key.part] = total.get(key.part, 0.0) + value
    return total.get("sum"), total.get("count"), buckets


def _delta(before: float | None, after: float | None) -> float | None:
    if before is None or after is None:
        return None
    return after - before if after >= before else after  # a restart: the new count, as rate() does


def _counter(snap: Snapshot, family: Family, model: str) -> float | None:
    values = [v for k, v in snap.counters.items() if k.family == family and k.series.model_name == model]
    return sum(values) if values else None


def side_figures(first: Snapshot, last: Snapshot, seconds: float, model: str,
                 batches: Sequence[float]) -> SideFigures:
    """One side's figures between its first and last poll, `seconds` apart."""
    def latency(family: Family) -> tuple[float | None, float | None, dict[float, float | None]]:
        s0, c0, b0 = _histogram(first, family, model)
        s1, c1, b1 = _histogram(last, family, model)
        count = _delta(c0, c1)
        deltas = bucket_deltas(b0, b1)
        return (count, histogram_mean(_delta(s0, s1), count),
                {q: histogram_quantile(q, deltas) for q in QUANTILES})

    requests, tpot, tpot_q = latency(Family.TIME_PER_OUTPUT_TOKEN)
    _, itl, itl_q = latency(Family.INTER_TOKEN_LATENCY)
    steps = _delta(_counter(first, Family.ENGINE_STEPS, model), _counter(last, Family.ENGINE_STEPS, model))
    e2e = end_to_end_seconds_per_token(_delta(_histogram(first, Family.E2E_LATENCY, model)[0],
                                              _histogram(last, Family.E2E_LATENCY, model)[0]),
                                       _delta(_histogram(first, Family.REQUEST_GENERATION_TOKENS, model)[0],
                                              _histogram(last, Family.REQUEST_GENERATION_TOKENS, model)[0]))
    counts = {f: _delta(_counter(first, f, model), _counter(last, f, model))
              for f in (Family.GENERATION_TOKENS, Family.DRAFT_TOKENS, Family.ACCEPTED_TOKENS)}
    generated = counts[Family.GENERATION_TOKENS]
    rate = generated / seconds if generated is not None and seconds > 0 else None
    return SideFigures(seconds=seconds, requests=requests or 0.0, tpot_mean=tpot, tpot_quantiles=tpot_q,
                       itl_mean=itl, itl_quantiles=itl_q, output_tokens_per_second=rate,
                       batch=_batch(generated, counts[Family.ACCEPTED_TOKENS], steps, batches), steps=steps,
                       draft_tokens=counts[Family.DRAFT_TOKENS], accepted_tokens=counts[Family.ACCEPTED_TOKENS],
                       generation_tokens=generated,
                       tpot_exposed=_histogram(last, Family.TIME_PER_OUTPUT_TOKEN, model)[1] is not None,
                       e2e_per_token=e2e)


def _batch(generated: float | None, accepted: float | None, steps: float | None,
           gauge_readings: Sequence[float]) -> float | None:
    """Request-steps per engine step from the counters (advisor.batch_per_step, as `check` reads its
    own target), the running gauge's mean over the polls where the server serves no step count."""
    if generated is not None and steps:
        counted = advisor.batch_per_step(generated, accepted or 0.0, steps)
        if counted is not None:
            return counted
    return sum(gauge_readings) / len(gauge_readings) if gauge_readings else None


def batch_warning(target: float | None, baseline: float | None) -> str | None:
    """A line when the two batches are not comparable load, else None."""
    if target is None or baseline is None:
        return "the running batch of one server is unknown: the load may differ"
    low, high = sorted((target, baseline))
    if high == 0 or (low > 0 and high / low <= BATCH_MISMATCH_FACTOR):
        return None
    return (f"the servers ran different loads (batch {target:.1f} speculative, {baseline:.1f} baseline; "
            f"more than {BATCH_MISMATCH_FACTOR:g}x apart): send both the same traffic to compare speculation")


def agreement_warning(speedup: float | None, tokens_per_second_ratio: float | None) -> str | None:
    """A line when the per-token speed-up and the tokens/s ratio disagree, else None."""
    if speedup is None or tokens_per_second_ratio is None:
        return None
    low, high = sorted((speedup, tokens_per_second_ratio))
    if low > 0 and high / low <= AGREEMENT_FACTOR:
        return None
    return (f"the speed-up per output token ({speedup:.2f}x) and the tokens/s ratio ({tokens_per_second_ratio:.2f}x) "
            f"disagree by more than {AGREEMENT_FACTOR:g}x: time outside decoding (queueing, prefill, the clients' "
            "own gaps) differs between the servers; clients receive the tokens/s ratio")


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or not (0 < numerator < math.inf and 0 < denominator < math.inf):
        return None
    return numerator / denominator


def compare(model: str, target: SideFigures | None, baseline: SideFigures | None,
            compute_bound_tokens: float, free_drafts: bool, problem: str | None = None) -> Comparison:
    """The comparison of one model; `problem` (or one found here) leaves every ratio None.
    `free_drafts`: drafting costs nothing (n-gram), so compute_bound_tokens can be calibrated."""
    if problem is None and (target is None or baseline is None):
        problem = "MODEL MISMATCH — the model is not served by both servers"
    if problem is None and target is not None and baseline is not None:
        for name, side in (("speculative target", target), ("baseline", baseline)):
            if not side.tpot_exposed:
                problem = (f"NO TPOT HISTOGRAM ON THE {name.upper()} — it does not expose "
                           "vllm:request_time_per_output_token_seconds (vLLM before 0.11, or another engine)")
                break
            if side.tpot_mean is None:
                problem = (f"NO TRAFFIC ON THE {name.upper()} — no request finished there while sampling "
                           "(send both servers the same traffic, or sample longer)")
                break
    if problem is not None or target is None or baseline is None:
        return Comparison(model, target, baseline, None, {}, None, None, None, problem)
    quantiles = {q: measured_speedup(baseline.tpot_quantiles.get(q), target.tpot_quantiles.get(q)) for q in QUANTILES}
    cost = bound = None
    length = target.draft_length
    if target.batch and baseline.batch and length and baseline.itl_mean and target.itl_mean:
        # Each side at its own batch: a closed loop of the same concurrency runs fewer requests at a
        # time on the faster server.
        steps = (baseline.itl_mean, target.itl_mean, target.batch, length)
        if free_drafts:  # N first (c = 0 assumed), then c at the N to set: the excess beyond the bound
            bound = calibrate.compute_bound_from_free_drafts(*steps, plain_batch=baseline.batch)
            if bound is not None:
                compute_bound_tokens = calibrate.to_set(bound, compute_bound_tokens)
        cost = calibrate.draft_cost_ratio(*steps, compute_bound_tokens, plain_batch=baseline.batch)
    speedup = measured_speedup(baseline.tpot_mean, target.tpot_mean)
    throughput = _ratio(target.output_tokens_per_second, baseline.output_tokens_per_second)
    return Comparison(model, target, baseline, speedup, quantiles, _ratio(baseline.itl_mean, target.itl_mean),
                      throughput, batch_warning(target.batch, baseline.batch), None,
                      measured_speedup(baseline.e2e_per_token, target.e2e_per_token),
                      agreement_warning(speedup, throughput), cost, bound)
