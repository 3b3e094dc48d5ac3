"""Each spec-decode quantity, defined once in PromQL: a ratio of sums of counters.

A `Quantity` is `offset + sum(numerator) / sum(denominator)` over the source layer's counters
(sources.py); `Quantity.expr(read)` writes it given how to read one counter's aggregate, so a
recording rule, an evidence ratio and a dashboard panel all divide the same sums the same way.
derive.py computes each from the same counters' deltas in Python; the tests evaluate both on real
vLLM output and require them equal. Ratios divide separately aggregated numerators and
denominators (never an average of ratios), and the denominator is guarded with `> 0`, so an idle
server gives no sample, not NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .sources import (
    ACCEPTED,
    ACCEPTED_BY_POSITION,
    DRAFT_TOKENS,
    DRAFTED_AT_POSITION,
    DRAFTS,
    GENERATED,
    SourceCounter,
)

__all__ = [
    "ACCEPTANCE",
    "DRAFTED_EFFICIENCY",
    "DRAFT_OUTPUT_SHARE",
    "MEAN_ACCEPTANCE_LENGTH",
    "MEAN_DRAFT_LENGTH",
    "POSITION_ACCEPTANCE",
    "QUANTITIES",
    "Quantity",
    "batch_per_step",
    "end_to_end_seconds_per_token",
    "histogram_mean",
    "measured_speedup",
    "speedup_at_load",
    "speedup_bound",
]


@dataclass(frozen=True)
class Quantity:
    """A derived quantity: `offset + sum(numerator) / sum(denominator)`, each a sum of counters
    (the denominator's terms weighted by `denominator_weights`, 1 each when empty).

    `expr(read)` writes it in PromQL given how to read one counter's aggregate (a record, a sum of
    records, an increase), so a record, an evidence ratio and a dashboard panel all use the same
    definition. derive.py computes the same quantity from the same counters' deltas in Python.
    """

    numerator: tuple[SourceCounter, ...]
    denominator: tuple[SourceCounter, ...]
    offset: int = 0
    denominator_weights: tuple[float, ...] = ()

    def expr(self, read: Callable[[SourceCounter], str], matching: str = "", separator: str = "\n") -> str:
        """PromQL of the quantity; `matching` joins a `position` numerator to its denominator."""
        def total(counters: tuple[SourceCounter, ...], weights: tuple[float, ...] = ()) -> str:
            terms = [read(c) if w == 1 else f"{w:.10g} * {read(c)}"
                     for c, w in zip(counters, weights or (1,) * len(counters), strict=True)]
            text = " + ".join(terms)
            return f"({text})" if len(counters) > 1 else text
        operator = f"/ {matching}" if matching else "/"
        denominator = total(self.denominator, self.denominator_weights)
        ratio = f"{total(self.numerator)}{separator}{operator}{separator}({denominator} > 0)"
        return f"{self.offset} + {ratio}" if self.offset else ratio


ACCEPTANCE = Quantity((ACCEPTED,), (DRAFT_TOKENS,))
# Mean acceptance length counts the bonus token the target emits with every verification.
MEAN_ACCEPTANCE_LENGTH = Quantity((ACCEPTED,), (DRAFTS,), offset=1)
# Accepted at each position over drafted at it: exact where the server exports drafts per position,
# elsewhere over drafts, the lower bound vLLM's own docs compute (sources.DRAFTED_AT_POSITION). Both
# sides carry the `position` label: they divide one to one.
POSITION_ACCEPTANCE = Quantity((ACCEPTED_BY_POSITION,), (DRAFTED_AT_POSITION,))
DRAFTED_EFFICIENCY = Quantity((DRAFTS, ACCEPTED), (DRAFTS, DRAFT_TOKENS))
DRAFT_OUTPUT_SHARE = Quantity((ACCEPTED,), (GENERATED,))
MEAN_DRAFT_LENGTH = Quantity((DRAFT_TOKENS,), (DRAFTS,))


def speedup_bound(draft_cost: float) -> Quantity:
    """Speed-up (est.) at the drafts actually made, for a draft costing `draft_cost` target steps
    per token: tokens per step / (1 + cost x mean draft length) = (D + A) / (D + cost x T).
    advisor.speedup_bound is the same in Python (and equals the advisor's current speed-up at a
    static k); an upper bound: the target's extra verification work is not counted."""
    return Quantity((DRAFTS, ACCEPTED), (DRAFTS, DRAFT_TOKENS), denominator_weights=(1, draft_cost))


QUANTITIES = {
    "acceptance": ACCEPTANCE,
    "mean_acceptance_length": MEAN_ACCEPTANCE_LENGTH,
    "position_acceptance": POSITION_ACCEPTANCE,
    "drafted_efficiency": DRAFTED_EFFICIENCY,
    "draft_output_share": DRAFT_OUTPUT_SHARE,
    "mean_draft_length": MEAN_DRAFT_LENGTH,
}


def batch_per_step(read: Callable[[SourceCounter], str], steps: str) -> str:
    """PromQL of advisor.batch_per_step: request-steps (generated - accepted) per engine step, the
    mean running batch of the steps taken. `steps` (engine steps per second, matching the counters'
    labels one to one) is guarded with `> 0`: an idle engine takes no steps and gives no sample. A
    server without an accepted-tokens counter (no speculation: a baseline) accepted none, as
    `check --baseline` reads it: its request-steps are its generated tokens."""
    generated = read(GENERATED)
    return f"clamp_min({generated} - ({read(ACCEPTED)} or 0 * {generated}), 0)\n/\n({steps} > 0)"


def speedup_at_load(read: Callable[[SourceCounter], str], batch: str, draft_cost: float,
                    compute_bound_tokens: int) -> str:
    """PromQL of advisor.speedup_at_load: tokens per request-step over the cost of a speculative
    step at the running batch `batch` (an expression matching the counters' labels one to one),
    relative to a plain step, with R = generated - accepted the request-steps:
    `(G / R) / (clamp_min(B (1 + T / R), N) / clamp_min(B, N) + c T / R)`. R is guarded with
    `> 0` and the draft tokens too: an idle server, or one that drafted nothing, gives no sample."""
    generated, draft_tokens, accepted = read(GENERATED), read(DRAFT_TOKENS), read(ACCEPTED)
    per_step = f"(({generated} - {accepted}) > 0)"
    draft_length = f"({draft_tokens} > 0) / {per_step}"
    verified = f"clamp_min({batch} * (1 + {draft_length}), {compute_bound_tokens})"
    # Both denominators are positive by construction (at least N, at least 1); the `> 0` filters
    # keep every division in the rules guarded the one way the rules' lint checks.
    plain = f"(clamp_min({batch}, {compute_bound_tokens}) > 0)"
    cost = f"{verified}\n/\n{plain}" + (f"\n+ {draft_cost:.10g} * {draft_length}" if draft_cost else "")
    return f"({generated} / {per_step})\n/\n(\n{cost} > 0)"


def histogram_mean(total: str, count: str) -> str:
    """PromQL of measured.histogram_mean: a latency histogram's mean, the rate of its `_sum` over the
    rate of its `_count` (each already aggregated alike); no sample where nothing was observed."""
    return f"{total}\n/\n({count} > 0)"


def end_to_end_seconds_per_token(latency_sum: str, tokens: str) -> str:
    """PromQL of measured.end_to_end_seconds_per_token: request latency per output token, the rate of
    the end-to-end latency's `_sum` over the rate of the output tokens' `_sum` (vLLM's
    `request_generation_tokens`: the same finished requests), each already aggregated alike; no
    sample where no token was counted."""
    return histogram_mean(latency_sum, tokens)


def measured_speedup(baseline_tpot: str, speculative_tpot: str, matching: str) -> str:
    """PromQL of measured.measured_speedup: the baseline's time per output token over the
    speculative server's, joined by `matching` (e.g. `on (job, model_name) group_right ()`, the
    speculative side's labels kept). Absent without a baseline (never 1, never 0); a zero time,
    which no histogram mean gives, is guarded all the same."""
    return f"({baseline_tpot} > 0)\n/ {matching}\n(({speculative_tpot}) > 0)"
