"""Derive the windowed spec-decode values from counter deltas (formulas in schema.py).

No data is not zero: a ratio whose denominator is 0 (idle), or that rests on fewer than
`min_draft_tokens` draft tokens, is omitted, never served as 0 or NaN. Rates may be 0 when idle.
Per-position acceptance divides by the draft tokens proposed at the position where the server
exports them (exact), otherwise by the drafts (a lower bound when drafts vary in length).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .advisor import UNKNOWN_METHOD_DRAFT_COST, advise
from .names import CounterKey, Family, MetricName, Schema, SeriesKey
from .normalise import Snapshot
from .window_store import WindowStore

__all__ = ["DEFAULT_DRAFT_COST", "Sample", "SeriesFigures", "derive", "derive_series", "derive_v0", "figures"]

# Cost of drafting one token relative to a target step, for the advisor gauges (--draft-cost-ratio).
DEFAULT_DRAFT_COST = UNKNOWN_METHOD_DRAFT_COST  # one default, owned by advisor
# A gauge sample: (metric name, label values in the metric's label order, value).
Sample = tuple[MetricName, tuple[str, ...], float]


@dataclass(frozen=True)
class SeriesFigures:
    """Windowed deltas of one (model_name, engine) series; None where the counter is absent."""

    seconds: float
    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    generation: float | None
    accepted_by_position: dict[str, float]
    k: int
    # Draft tokens proposed at each position, where the server exports them (names.Family.DRAFTED_PER_POS).
    drafted_by_position: dict[str, float] = field(default_factory=dict)
    steps: float | None = None  # engine steps (forward passes)


def figures(store: WindowStore, snap: Snapshot, series: SeriesKey, keys: list[CounterKey] | None = None,
            k: int | None = None) -> SeriesFigures | None:
    """Deltas of every counter of `series` over one common interval (replicas summed), or None
    before 2 polls. `keys` (store.series_keys(series)) and `k` may be given when the caller has
    them for every series at once."""
    if keys is None:
        keys = store.series_keys(series)
    span = store.span(keys)
    if span is None:
        return None
    start, end = span
    totals: dict[tuple[Family, str], float] = {}
    for key in keys:
        value = store.delta(key, start, end)
        if value is not None:
            total = (key.family, key.position)
            totals[total] = totals.get(total, 0.0) + value
    per_position, drafted = Family.ACCEPTED_PER_POS, Family.DRAFTED_PER_POS
    by_pos = {pos: v for (family, pos), v in totals.items() if family == per_position}
    drafted_by_pos = {pos: v for (family, pos), v in totals.items() if family == drafted}
    return SeriesFigures(
        seconds=end - start,
        drafts=totals.get((Family.DRAFTS, "")),
        draft_tokens=totals.get((Family.DRAFT_TOKENS, "")),
        accepted=totals.get((Family.ACCEPTED_TOKENS, "")),
        generation=totals.get((Family.GENERATION_TOKENS, "")),
        accepted_by_position=dict(sorted(by_pos.items(), key=lambda kv: int(kv[0]))),
        k=len(snap.positions(series)) if k is None else k,
        drafted_by_position=drafted_by_pos,
        steps=totals.get((Family.ENGINE_STEPS, "")),
    )


def derive(store: WindowStore, snap: Snapshot, min_draft_tokens: float,
           draft_cost: float = DEFAULT_DRAFT_COST) -> list[Sample]:
    if snap.schema == Schema.V0:
        return derive_v0(snap)
    if not snap.windowed:
        return []  # no counters (SGLang's gauges, a diffusion model, no spec decoding)
    out: list[Sample] = []
    # Grouped once: asking the store and the snapshot per series is quadratic in the series count
    # (16 engines x 3 models: 48 series of ~40 counters each).
    keys_by_series, k_by_series = store.keys_by_series(), snap.k_by_series
    for series in snap.series_keys():
        fig = figures(store, snap, series, keys_by_series.get(series, []), k_by_series.get(series, 0))
        if fig is None:
            continue
        out.extend(derive_series(series, fig, min_draft_tokens, draft_cost))
    return out


def derive_series(series: SeriesKey, f: SeriesFigures, min_draft_tokens: float,
                  draft_cost: float = DEFAULT_DRAFT_COST) -> list[Sample]:
    out: list[Sample] = []

    def emit(name: MetricName, value: float, labels: tuple[str, ...] = series) -> None:
        out.append((name, labels, value))

    def emit_ratio(name: MetricName, num: float, den: float, labels: tuple[str, ...] = series) -> None:
        # Omit rather than lie: outside [0, 1] means the counters are inconsistent.
        if den > 0 and 0 <= num <= den:
            emit(name, num / den, labels)

    sec = f.seconds
    D, T, A, G = f.drafts, f.draft_tokens, f.accepted, f.generation
    if T is not None:
        emit(MetricName.WINDOW_DRAFT_TOKENS, T)
        emit(MetricName.DRAFT_TOKENS_PER_SECOND, T / sec)
    emit(MetricName.WINDOW_SECONDS, sec)
    if A is not None:
        emit(MetricName.ACCEPTED_TOKENS_PER_SECOND, A / sec)
    if D is not None:
        emit(MetricName.DRAFTS_PER_SECOND, D / sec)
    if G is not None:
        emit(MetricName.GENERATION_TOKENS_PER_SECOND, G / sec)
    if T is not None and A is not None and A <= T:
        emit(MetricName.REJECTED_TOKENS_PER_SECOND, (T - A) / sec)
    if f.k:
        emit(MetricName.NUM_SPECULATIVE_TOKENS, float(f.k))

    if T is None and D is not None and A is not None:
        # No draft-token counter (TGI): only the mean acceptance length, guarded on steps, each of
        # which carried at least one draft token.
        if D > 0 and min_draft_tokens <= D:
            emit(MetricName.MEAN_ACCEPTANCE_LENGTH, 1 + A / D)
        return out
    enough = T is not None and T > 0 and min_draft_tokens <= T
    if not enough or A is None:
        return out
    emit_ratio(MetricName.ACCEPTANCE_RATIO, A, T)
    if G is not None:
        emit_ratio(MetricName.DRAFT_OUTPUT_RATIO, A, G)
    if D is None or D <= 0:
        return out  # no drafts counter (vLLM 0.8.3-0.8.4, TensorRT-LLM): acceptance only
    if D * max(f.k, 1) >= A or not f.k:
        emit(MetricName.MEAN_ACCEPTANCE_LENGTH, 1 + A / D)
    if D * f.k >= T or not f.k:
        emit(MetricName.MEAN_DRAFT_LENGTH, T / D)
    emit_ratio(MetricName.DRAFTED_EFFICIENCY_RATIO, D + A, D + T)
    if f.k:
        emit_ratio(MetricName.EFFICIENCY_RATIO, D + A, D * (f.k + 1))
    curve = []
    for position, accepted in f.accepted_by_position.items():
        # Exact where the server counts the drafts that reached the position; otherwise every draft
        # is in the denominator, also those too short to reach it: a lower bound (schema.py).
        reached = f.drafted_by_position.get(position) if f.drafted_by_position else D
        if reached is not None:
            emit_ratio(MetricName.POSITION_ACCEPTANCE_RATIO, accepted, reached, (*series, position))
        # The advisor's curve stays per draft (its sum is the mean accepted length): ΔA_pos / ΔD.
        curve.append(accepted / D)
    if curve and len(curve) == f.k and all(0 <= p <= 1 for p in curve):
        advice = advise(curve, draft_cost)
        emit(MetricName.ESTIMATED_SPEEDUP, advice.current_speedup)
        emit(MetricName.RECOMMENDED_K, float(advice.recommended_k))
        emit(MetricName.RECOMMENDED_K_ESTIMATED_SPEEDUP, advice.speedup[advice.recommended_k])
    return out


# V0's lifetime gauges and the served gauge each is passed through as.
_V0_GAUGES = {Family.V0_ACCEPTANCE_RATE: MetricName.ACCEPTANCE_RATIO,
              Family.V0_EFFICIENCY: MetricName.EFFICIENCY_RATIO}


def derive_v0(snap: Snapshot) -> list[Sample]:
    """V0 publishes lifetime ratios as gauges; its counters are unusable (sum-of-sums)."""
    out: list[Sample] = []
    for (family, series), value in sorted(snap.gauges.items()):
        name = _V0_GAUGES.get(family)
        if name and 0 <= value <= 1:
            out.append((name, series, value))
    return out
