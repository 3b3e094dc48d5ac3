"""The GPU run's figures: what one phase of traffic did, measured from two /metrics scrapes, and how
the measured speed-up compares with the bundle's estimate.

Contract. `deltas(before, after)` is every counter and histogram sum/count of two /metrics bodies,
summed over labels, as after − before; `phase_stats` turns a phase's traffic result and those
deltas into a `PhaseStats` (tokens/s, spec-decode counters, engine steps, step time, tokens per
step, mean inter-token latency); `compare` sets a speculative phase against the plain phase at the
same concurrency: the measured speed-up against advisor.speedup_at_load (at the default and at
the measured compute-bound tokens) and advisor.speedup_bound; `compute_bound_tokens` reads that
knee off the plain step-time table; `render_tables` writes results.json's figures as Markdown.
Pure: no GPU, server or vLLM (prometheus-client and the sidecar's advisor only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from vllm_spec_exporter import advisor

if TYPE_CHECKING:
    from vllm_spec_lab.traffic import Phase, PhaseResult

SPEC_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
}
GENERATED = "vllm:generation_tokens_total"
PROMPT = "vllm:prompt_tokens_total"
# Engine steps: one observation of the tokens-per-step histogram per step.
STEP_TOKENS = "vllm:iteration_tokens_total"
ITL = "vllm:inter_token_latency_seconds"


def counters(text: str) -> dict[str, float]:
    """Counter and histogram samples of a /metrics body, summed over labels: ``{sample name: value}``."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith(("_total", "_sum", "_count")) and not sample.name.endswith("_created"):
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def deltas(before: str, after: str) -> dict[str, float]:
    first, second = counters(before), counters(after)
    return {name: value - first.get(name, 0.0) for name, value in second.items()}


@dataclass
class PhaseStats:
    method: str
    concurrency: int
    requests: int
    max_tokens: int
    elapsed_s: float
    completion_tokens: int
    tokens_per_s: float
    generated: float
    drafts: float
    draft_tokens: float
    accepted: float
    steps: float  # engine steps (tokens-per-step histogram count)
    step_tokens: float  # tokens scheduled in those steps (histogram sum)
    step_time_s: float | None  # elapsed / steps
    tokens_per_step: float | None
    itl_mean_s: float | None
    failed: int = 0


def phase_stats(method: str, phase: Phase, result: PhaseResult, delta: dict[str, float]) -> PhaseStats:
    steps = delta.get(f"{STEP_TOKENS}_count", 0.0)
    step_tokens = delta.get(f"{STEP_TOKENS}_sum", 0.0)
    itl_count = delta.get(f"{ITL}_count", 0.0)
    return PhaseStats(
        method=method, concurrency=phase.concurrency, requests=result.requests_ok, max_tokens=phase.max_tokens,
        elapsed_s=result.elapsed_s, completion_tokens=result.completion_tokens,
        tokens_per_s=result.completion_tokens / result.elapsed_s if result.elapsed_s > 0 else 0.0,
        generated=delta.get(GENERATED, 0.0),
        drafts=delta.get(SPEC_COUNTERS["drafts"], 0.0),
        draft_tokens=delta.get(SPEC_COUNTERS["draft_tokens"], 0.0),
        accepted=delta.get(SPEC_COUNTERS["accepted"], 0.0),
        steps=steps, step_tokens=step_tokens,
        step_time_s=result.elapsed_s / steps if steps else None,
        tokens_per_step=step_tokens / steps if steps else None,
        itl_mean_s=delta.get(f"{ITL}_sum", 0.0) / itl_count if itl_count else None,
        failed=result.requests_failed,
    )


@dataclass
class Comparison:
    method: str
    concurrency: int
    plain_tokens_per_s: float
    spec_tokens_per_s: float
    measured_speedup: float
    acceptance: float | None
    estimate: float | None  # advisor.speedup_at_load at batch = concurrency, default compute-bound
    estimate_measured_n: float | None  # the same with the measured compute-bound tokens
    bound: float | None  # advisor.speedup_bound (tokens per step over draft cost)
    error: float | None  # estimate / measured - 1
    error_measured_n: float | None


def compare(plain: PhaseStats, spec: PhaseStats, draft_cost: float, measured_n: float | None) -> Comparison:
    measured = spec.tokens_per_s / plain.tokens_per_s if plain.tokens_per_s else float("nan")

    def at_load(n: float) -> float | None:
        return advisor.speedup_at_load(spec.generated, spec.draft_tokens, spec.accepted, spec.concurrency,
                                       draft_cost, compute_bound_tokens=n)

    estimate = at_load(advisor.DEFAULT_COMPUTE_BOUND_TOKENS)
    estimate_n = at_load(measured_n) if measured_n and measured_n > 0 else None
    bound = advisor.speedup_bound(spec.drafts, spec.draft_tokens, spec.accepted, draft_cost) if spec.drafts else None
    return Comparison(
        method=spec.method, concurrency=spec.concurrency, plain_tokens_per_s=plain.tokens_per_s,
        spec_tokens_per_s=spec.tokens_per_s, measured_speedup=measured,
        acceptance=spec.accepted / spec.draft_tokens if spec.draft_tokens else None,
        estimate=estimate, estimate_measured_n=estimate_n, bound=bound,
        error=estimate / measured - 1 if estimate is not None and measured else None,
        error_measured_n=estimate_n / measured - 1 if estimate_n is not None and measured else None,
    )


def compute_bound_tokens(rows: Sequence[tuple[float, float]], flat_batches: int = 2) -> float | None:
    """Where a plain decode step stops costing the same: ``rows`` are (tokens per step, step time),
    any order. The flat level is the mean of the ``flat_batches`` smallest; the growing line goes
    through the two largest; their crossing is the compute-bound token count. None when the
    largest steps are no slower than the flat level (the knee lies beyond the measured range)."""
    ordered = sorted(rows)
    if len(ordered) < flat_batches + 2:
        return None
    flat = sum(t for _, t in ordered[:flat_batches]) / flat_batches
    (b1, t1), (b2, t2) = ordered[-2], ordered[-1]
    if t2 <= t1 or t2 <= flat:
        return None
    slope = (t2 - t1) / (b2 - b1)
    return b2 - (t2 - flat) / slope


# ---------------------------------------------------------------- tables


def fmt(value: float | None, spec: str = ".2f") -> str:
    """A table cell: ``value`` formatted by ``spec``, or an en dash when there is none."""
    return "–" if value is None else format(value, spec)


def render_tables(results: dict[str, Any]) -> str:
    """Markdown: one speed-up table per method, then the plain step-time table."""
    lines = []
    n = results.get("compute_bound_tokens_measured")
    for method in ("ngram", "draft_model"):
        rows = [c for c in results.get("comparisons", []) if c["method"] == method]
        if not rows:
            continue
        lines += [
            f"### {method} (draft cost {results['draft_costs'][method]:g})", "",
            "| concurrency | plain tok/s | spec tok/s | measured speed-up | acceptance | estimate (N=256) | "
            f"error | estimate (N={fmt(n, '.0f')}) | error | tokens-per-step bound |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in rows:
            lines.append(
                f"| {c['concurrency']} | {c['plain_tokens_per_s']:.0f} | {c['spec_tokens_per_s']:.0f} | "
                f"{c['measured_speedup']:.2f} | {fmt(c['acceptance'], '.1%')} | {fmt(c['estimate'])} | "
                f"{fmt(c['error'], '+.0%')} | {fmt(c['estimate_measured_n'])} | {fmt(c['error_measured_n'], '+.0%')} | "
                f"{fmt(c['bound'])} |")
        lines.append("")
    plain = sorted((p for p in results.get("phases", []) if p["method"] == "spec_off"),
                   key=lambda p: p["concurrency"])
    if plain:
        lines += ["### Plain decode step time against batch", "",
                  "| concurrency | tok/s | steps | tokens per step | step time (ms) | mean ITL (ms) |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for p in plain:
            step_ms, itl_ms = (fmt(p[key] and 1000 * p[key]) for key in ("step_time_s", "itl_mean_s"))
            lines.append(f"| {p['concurrency']} | {p['tokens_per_s']:.0f} | {p['steps']:.0f} | "
                         f"{fmt(p['tokens_per_step'], '.1f')} | {step_ms} | {itl_ms} |")
        lines += ["", f"Compute-bound tokens implied: {fmt(n, '.0f')} (bundle default "
                      f"{advisor.DEFAULT_COMPUTE_BOUND_TOKENS})", ""]
    return "\n".join(lines)

