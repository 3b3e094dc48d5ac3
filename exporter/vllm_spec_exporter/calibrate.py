"""Calibration: `compute_bound_tokens` and `draft_cost_ratio` from the user's own measurements.

The speed-up at load (advisor.speedup_at_load) prices a speculative step, relative to a plain
step at the same running batch B, as

    cost(B) = max(N, B (1 + L)) / max(N, B) + c L

with N = compute_bound_tokens (tokens per forward pass up to which a step takes the same time
whatever it holds), L the draft tokens verified per request-step and c = draft_cost_ratio (the
time to draft one token, in plain steps). Both knobs are properties of the hardware, the model and
the drafter; these functions read them from measured step times:

* `compute_bound_tokens(points)`: from plain (no speculation) step times at several batches. The
  cost model says a plain step takes t(B) = a max(N, B): flat up to N tokens, then proportional.
  The fit tries N on a fine geometric grid from the smallest to the largest batch measured (and
  "flat over all of them") and keeps the least squares one (relative errors). When the step time
  grows already from the smallest batch measured (a CPU, where a step is never memory-bound), N is
  not identifiable below that batch: it returns that batch, marked `at_most`. When the step time
  stays flat over every batch measured, N is at least the largest: it returns that batch, marked
  `at_least`. At least two distinct batches are needed.
* `draft_cost_ratio(...)`: from one speculative step time t_spec at batch B and the plain step
  time t_plain at batch B_p (the same B by default), and L. The plain step costs max(N, B_p), the
  speculative one max(N, B (1 + L)) + c L max(N, B) (the model's cost(B) in plain steps at B), so

      c = (t_spec / t_plain x max(N, B_p) - max(N, B (1 + L))) / (L max(N, B))

  which at B_p = B is (t_spec / t_plain - growth - 1) / L, growth = max(N, B (1 + L)) / max(N, B) - 1:
  what verifying the L extra tokens costs by the model (0 while B (1 + L) <= N). Clipped at 0: a
  step measured faster than the model's verification cost leaves no time for drafting (noise, or a
  model of verification that is too pessimistic). None without drafts. Each side's own batch
  matters: a server running fewer requests has cheaper steps, whatever it drafts.

* `compute_bound_from_free_drafts(...)`: when drafting costs nothing (n-gram lookup, c = 0), one
  run with and without speculation gives N: r = t_spec / t_plain = max(N, V) / max(N, B_p) with
  V = B (1 + L) the tokens a speculative step verifies. Where V > B_p, N = V / r while
  B_p <= N <= V; r <= 1 means N >= V (`at_least`), r >= V / B_p means N <= B_p (`at_most`). Where
  V <= B_p (the plain server ran as many tokens a step as the speculative one verifies) N cannot
  be read: None.

Step times come from vLLM itself: the mean inter-token latency (`inter_token_latency_seconds`, one
observation per request per step that emitted tokens) is the step time a request sees, with or
without speculation; or wall seconds over engine steps (Δ`iteration_tokens_total_count`) while the
server is busy. L is Δdraft_tokens / (Δgenerated − Δaccepted), as in the speed-up at load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ComputeBound", "compute_bound_from_free_drafts", "compute_bound_tokens", "draft_cost_ratio",
           "step_seconds", "to_set"]

GRID_STEPS = 400  # candidate N between the smallest and the largest batch: 1 % apart over 1..64


@dataclass(frozen=True)
class ComputeBound:
    """A fitted N. `kind`: "fitted" (step time flat up to N, then growing), "at_most" (growing from
    the smallest batch measured: N is that batch or less), "at_least" (flat over every batch
    measured: N is that batch or more). `seconds_per_token` is the fit's a: t(B) = a max(N, B)."""

    tokens: float
    kind: str
    seconds_per_token: float


def to_set(bound: ComputeBound, configured: float) -> int:
    """The `compute_bound_tokens` knob's value (a count >= 1) given a measured bound and the value
    configured now: the fitted N, or the configured one where it lies within a one-sided bound."""
    measured = max(1, round(bound.tokens))
    if bound.kind == "at_most":
        return max(1, min(round(configured), measured))
    if bound.kind == "at_least":
        return max(round(configured), measured)
    return measured


def _fit(points: Sequence[tuple[float, float]], n: float) -> tuple[float, float]:
    """(a, squared error) of t = a max(n, B), least squares in relative terms (each point weighs by
    its own time, so a slow large batch does not outweigh the fast small ones)."""
    xs = [max(n, b) / t for b, t in points]  # t_i ≈ a x_i t_i  =>  1 ≈ a (x_i), x_i = max(n, B)/t_i
    a = sum(xs) / sum(x * x for x in xs)
    return a, sum((a * x - 1) ** 2 for x in xs)


def compute_bound_tokens(points: Sequence[tuple[float, float]]) -> ComputeBound:
    """N from plain (batch, step seconds) points; ValueError with fewer than two distinct batches or a
    non-positive value."""
    if any(not (0 < b < math.inf and 0 < t < math.inf) for b, t in points):
        raise ValueError(f"every point needs a batch > 0 and a step time > 0, got {list(points)}")
    batches = sorted({b for b, _ in points})
    if len(batches) < 2:
        raise ValueError("compute_bound_tokens needs plain step times at two batches or more")
    low, high = batches[0], batches[-1]
    grid = [low * (high / low) ** (i / GRID_STEPS) for i in range(GRID_STEPS + 1)]
    candidates = [*grid, math.inf]  # inf: flat over every batch (t = a N, a N fitted as one number)
    best: tuple[float, float, float] | None = None  # (error, n, a)
    for n in candidates:
        if n == math.inf:
            mean = sum(t for _, t in points) / len(points)
            error = sum((t / mean - 1) ** 2 for _, t in points)
            fit = (error, n, mean / batches[-1])
        else:
            a, error = _fit(points, n)
            fit = (error, n, a)
        if best is None or fit[0] < best[0] - 1e-12:
            best = fit
    assert best is not None
    _, n, a = best
    if n >= high:  # flat over every batch measured (at the largest batch the model is already flat)
        return ComputeBound(high, "at_least", a)
    if n == low:
        return ComputeBound(n, "at_most", a)
    return ComputeBound(n, "fitted", a)


def draft_cost_ratio(plain_step_seconds: float, speculative_step_seconds: float, batch: float,
                     draft_length: float, compute_bound: float, plain_batch: float | None = None) -> float | None:
    """c from the step times of the same model with and without speculation, the speculative
    server's batch `batch` and draft tokens per request-step `draft_length` (L), the plain server's
    batch `plain_batch` (default: `batch`) and N = `compute_bound`; None when L is 0 (nothing
    drafted: no cost to measure) or a time or batch is missing. Never negative."""
    plain_batch = batch if plain_batch is None else plain_batch
    if not (0 < plain_step_seconds < math.inf and 0 < speculative_step_seconds < math.inf):
        return None
    if not (draft_length > 0 and batch > 0 and plain_batch > 0 and compute_bound > 0):
        return None
    plain_cost = max(compute_bound, plain_batch)  # in units of a token's time beyond N
    verify_cost = max(compute_bound, batch * (1 + draft_length))
    excess = speculative_step_seconds / plain_step_seconds * plain_cost - verify_cost
    return max(0.0, excess / (draft_length * max(compute_bound, batch)))


def step_seconds(busy_seconds: float, steps: float) -> float | None:
    """Engine step time from the wall seconds the server was busy and its steps meanwhile
    (Δ`iteration_tokens_total_count`); None without steps."""
    if not (steps > 0 and 0 < busy_seconds < math.inf):
        return None
    return busy_seconds / steps


def compute_bound_from_free_drafts(plain_step_seconds: float, speculative_step_seconds: float, batch: float,
                                   draft_length: float, plain_batch: float | None = None) -> ComputeBound | None:
    """N from one run with and without a drafter that costs nothing (c = 0), at the speculative
    server's batch `batch` and the plain one's `plain_batch` (default: the same); None without drafts
    or a time, or where the plain steps held as many tokens as the speculative ones verify.
    `seconds_per_token` is the plain step time over max(N, plain batch)."""
    plain_batch = batch if plain_batch is None else plain_batch
    if not (0 < plain_step_seconds < math.inf and 0 < speculative_step_seconds < math.inf):
        return None
    if not (draft_length > 0 and batch > 0 and plain_batch > 0):
        return None
    verified = batch * (1 + draft_length)
    if verified <= plain_batch:
        return None
    ratio = speculative_step_seconds / plain_step_seconds
    if ratio <= 1:
        return ComputeBound(verified, "at_least", plain_step_seconds / verified)
    if ratio >= verified / plain_batch:
        return ComputeBound(plain_batch, "at_most", plain_step_seconds / plain_batch)
    n = verified / ratio
    return ComputeBound(n, "fitted", plain_step_seconds / n)
