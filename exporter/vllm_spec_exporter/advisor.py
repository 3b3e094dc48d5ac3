"""The k advisor: from the per-position acceptance curve, which number of speculative tokens pays best?

With p_i the share of drafts whose token at 0-based position i was accepted (prefix acceptance, so
p_0 >= p_1 >= ...), a drafter proposing k' <= k tokens emits per target step on average

    E(k') = 1 + sum_{i < k'} p_i            (the 1 is the bonus / recovered token)

and, if drafting one token costs c target steps (c ~ 0 for n-gram lookup, ~0.05-0.2 for a draft
model), the expected speed-up over no speculation is

    S(k') = E(k') / (1 + c * k').

Positions beyond the current k were never drafted, so the data can justify *lowering* k (down to 0:
turn speculation off); raising it is only ever a suggestion to try ("the last position is still
accepted often"). The model counts drafting cost but not the target's extra verification work, so
S is an upper bound; with c = 0 (n-gram) it never falls below 1.
For a constant per-token acceptance a, p_i = a^(i+1) and E(k) = (1 - a^(k+1)) / (1 - a).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_COMPUTE_BOUND_TOKENS", "DEFAULT_DRAFT_COST", "Advice", "advise", "batch_per_step",
           "expected_tokens_per_step", "speedup_at_load", "speedup_bound"]

# Draft cost per proposed token relative to one target forward step: rough, documented defaults.
# The one place these numbers live: `serve`, `check` and the demo read them from here.
DEFAULT_DRAFT_COST = {
    "ngram": 0.0,  # a lookup in the prompt, no model
    "suffix": 0.0,
    "eagle": 0.05,  # one small head on the target's hidden states
    "eagle3": 0.05,
    "mtp": 0.05,
    "draft_model": 0.1,  # a separate small model, e.g. 1B drafting for 8B-70B
}
# When the method is not known: the cost of the common learned drafters (EAGLE, MTP).
UNKNOWN_METHOD_DRAFT_COST = DEFAULT_DRAFT_COST["eagle"]


def draft_cost_for(method: str | None) -> float:
    """The default draft cost of a speculative method (vLLM's `method` name); unknown: EAGLE's."""
    return DEFAULT_DRAFT_COST.get(method or "", UNKNOWN_METHOD_DRAFT_COST)


def draft_cost_help() -> str:
    """'0 for ngram, 0.05 for eagle, ...': the defaults in words, for --help texts."""
    return ", ".join(f"{cost:g} for {method}" for method, cost in DEFAULT_DRAFT_COST.items())


@dataclass(frozen=True)
class Advice:
    current_k: int
    recommended_k: int
    tokens_per_step: dict[int, float]  # E(k') for k' = 0..k (0: speculation off)
    speedup: dict[int, float]  # S(k')
    gain_vs_current: float  # S(recommended) / S(current)
    try_raising: bool  # the last drafted position is still accepted above the raise threshold
    draft_cost: float

    @property
    def current_speedup(self) -> float:
        return self.speedup[self.current_k]


def expected_tokens_per_step(position_acceptance: list[float], k: int) -> float:
    return 1.0 + sum(position_acceptance[:k])


def speedup_bound(drafts: float, draft_tokens: float, accepted: float, draft_cost: float) -> float | None:
    """S at the drafts actually made, from three counters' deltas (no per-position data needed):

        S = (1 + accepted / drafts) / (1 + c * draft_tokens / drafts) = (D + A) / (D + c * T)

    tokens per step over the cost of a step plus its drafting. With a static k every draft holds k
    tokens (T = k * D) and A is the sum of the per-position accepted counts, so S equals
    Advice.current_speedup; with dynamic k or n-gram misses the drafts are shorter than k and S
    charges the tokens actually drafted. The sidecar-less dashboards compute the same in PromQL
    (mixin/rules/quantities.speedup_bound). None without drafts."""
    if draft_cost < 0:
        raise ValueError(f"draft cost ratio must be >= 0, got {draft_cost}")
    if drafts <= 0:
        return None
    return (drafts + accepted) / (drafts + draft_cost * draft_tokens)


# Tokens per forward pass from which the target's step time grows with the tokens verified (the
# rules' compute_bound_tokens knob and `check --compute-bound-tokens` default to it).
DEFAULT_COMPUTE_BOUND_TOKENS = 256


def speedup_at_load(generated: float, draft_tokens: float, accepted: float, batch: float, draft_cost: float,
                    compute_bound_tokens: float = DEFAULT_COMPUTE_BOUND_TOKENS) -> float | None:
    """S at the current load: what speculation emits per request-step over what such a step costs
    compared with a plain one, at a running batch of `batch` requests.

    Every request in a step emits its accepted drafts plus one token the target sampled, so the
    request-steps of a window number R = generated - accepted, whether they drafted or not (a
    step of dynamic k = 0, an n-gram miss or a prefill drafts nothing and counts only here; vLLM's
    drafts counter sees drafting steps alone). On llama-server R equals its decode count exactly;
    on vLLM it reads about one or two request-steps low per finished request (accepted tokens past
    a request's end are counted as accepted, not generated), so G / R and L read a few per cent
    high for short requests. Per request-step the server emits G / R tokens and
    verifies L = draft_tokens / R draft tokens. A plain decode step handles `batch` tokens, a
    speculative one batch x (1 + L); below `compute_bound_tokens` tokens a step takes about the
    same time whatever it holds (reading the weights dominates), above it its time grows with the
    tokens. So a speculative step costs

        cost(B) = max(N, B (1 + L)) / max(N, B) + c L        (N = compute_bound_tokens)

    plain steps, and S(B) = (G / R) / cost(B). When every step drafts (R = drafts) and the batch
    is small, S(B) is speedup_bound; as the batch grows the verified drafts stop being free and
    S(B) falls, below 1 where speculation costs more than it saves. L is averaged over the window:
    exact when drafting varies between the requests of a step (n-gram misses), optimistic when
    whole steps alternate between k = 0 and k > 0 past N (cost is convex in L there). An estimate: each request's
    first token (from its prefill) counts as a step, attention's cost growing with context is not
    counted. The rules compute the same in PromQL (mixin/rules/quantities.speedup_at_load). None
    without draft tokens (nothing speculated: no estimate, never 1) or without steps."""
    if draft_cost < 0 or compute_bound_tokens <= 0 or batch < 0:
        raise ValueError(f"need draft cost >= 0, compute-bound tokens > 0 and batch >= 0, got {draft_cost}, "
                         f"{compute_bound_tokens}, {batch}")
    steps = generated - accepted
    if draft_tokens <= 0 or steps <= 0:
        return None
    draft_length = draft_tokens / steps
    cost = (max(compute_bound_tokens, batch * (1 + draft_length)) / max(compute_bound_tokens, batch)
            + draft_cost * draft_length)
    return (generated / steps) / cost


def batch_per_step(generated: float, accepted: float, steps: float) -> float | None:
    """The running batch: request-steps per engine step, R / steps with R = generated - accepted
    (speedup_at_load says why R counts request-steps). Counted every step, so no sampling misses
    it, whatever the requests' length: a running-requests gauge read every few seconds jumps
    between 0 and the concurrency for short requests, and vLLM answers /metrics from the event
    loop that streams the tokens, so a read tends to land between bursts. The mean batch of the
    steps taken (an idle engine takes none), a request's prefill step counted as one. None without
    steps. The rules compute the same in PromQL (mixin/rules/quantities.batch_per_step)."""
    if steps <= 0:
        return None
    return max(generated - accepted, 0.0) / steps


def advise(position_acceptance: list[float], draft_cost: float, raise_threshold: float = 0.7) -> Advice:
    """`position_acceptance[i]` = p_i for i = 0..k-1 (k >= 1), each within [0, 1]."""
    k = len(position_acceptance)
    if k == 0:
        raise ValueError("no draft positions: the target exposes no per-position acceptance")
    if draft_cost < 0:
        raise ValueError(f"draft cost ratio must be >= 0, got {draft_cost}")
    if any(not 0 <= p <= 1 for p in position_acceptance):
        raise ValueError(f"position acceptance must lie within [0, 1], got {position_acceptance}")
    # k' = 0 is "no speculation": one token per step at speed-up 1, the baseline every k' must beat.
    tokens = {kk: expected_tokens_per_step(position_acceptance, kk) for kk in range(0, k + 1)}
    speedup = {kk: tokens[kk] / (1 + draft_cost * kk) for kk in tokens}
    # Ties go to the smaller k: the same gain for less drafting work and less wasted verification.
    best = max(speedup, key=lambda kk: (round(speedup[kk], 9), -kk))
    return Advice(
        current_k=k,
        recommended_k=best,
        tokens_per_step=tokens,
        speedup=speedup,
        gain_vs_current=speedup[best] / speedup[k],
        try_raising=best == k and position_acceptance[-1] >= raise_threshold,
        draft_cost=draft_cost,
    )
