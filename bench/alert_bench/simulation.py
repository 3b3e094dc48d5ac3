"""The counters a pod writes, draft by draft at the scrape interval: Poisson drafts in requests of
lognormal length, each request with its own acceptance (logit offset), tokens accepted as a prefix.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from .scenarios import H, Pod, Scenario


def _alpha_table(k: int) -> list[float]:
    """Per-token acceptance alpha for each expected ratio r in 0..1 (1001 points): the prefix
    model gives E[accepted]/k = (alpha + ... + alpha^k) / k."""
    table = []
    for i in range(1001):
        r, lo, hi = i / 1000, 0.0, 1.0
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if sum(mid ** j for j in range(1, k + 1)) / k < r else (lo, mid)
        table.append((lo + hi) / 2)
    return table


_ALPHA = {k: _alpha_table(k) for k in (2, 4)}


@dataclass
class _Request:
    drafts_left: int
    offset: float  # logit offset of this request's acceptance


@dataclass
class _Counters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    generation: float = 0.0
    resets: float = 0.0
    samples: dict[str, list[str]] = field(default_factory=lambda: {
        "drafts": [], "draft_tokens": [], "accepted": [], "generation": [], "resets": [],
        "up": [], "target_up": [], "enabled": [], "running": []})


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


def _poisson(rng: random.Random, mean: float) -> int:
    if mean <= 0:
        return 0
    if mean > 50:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, n, prod = math.exp(-mean), 0, rng.random()
    while prod > limit:
        n += 1
        prod *= rng.random()
    return n


def simulate(pod: Pod, scenario: Scenario, rng: random.Random, step_s: int) -> _Counters:
    c = _Counters()
    request: _Request | None = None
    steps = int(scenario.hours * H / step_s)
    for i in range(steps + 1):
        t = i * step_s
        if pod.restart_at is not None and t - step_s < pod.restart_at <= t:
            c.drafts = c.draft_tokens = c.accepted = c.generation = 0.0
            c.resets += 1
        if i:
            k = pod.k(t)
            n = _poisson(rng, pod.drafts_per_s(t) * step_s)
            paused = pod.pause_above is not None and pod.batch(t) > pod.pause_above
            spec_off = (pod.spec_off_at is not None and t >= pod.spec_off_at) or paused
            mean = _logit(pod.acceptance(t))
            accepted = 0
            for _ in range(0 if spec_off else n):
                if request is None or request.drafts_left <= 0:
                    tokens = rng.lognormvariate(math.log(pod.request_tokens), 0.6)
                    request = _Request(max(1, round(tokens / (1 + 4 * pod.acceptance(t)))),
                                       rng.gauss(0, pod.sigma))
                request.drafts_left -= 1
                ratio = 1 / (1 + math.exp(-(mean + request.offset)))
                alpha = _ALPHA[k][round(ratio * 1000)]
                a = 0
                while a < k and rng.random() < alpha:
                    a += 1
                accepted += a
            if not spec_off:
                c.drafts += n
                c.draft_tokens += n * k
                c.accepted += accepted
            c.generation += n + accepted + (n * 3 if spec_off else 0)
        gone = pod.vanish_at is not None and t >= pod.vanish_at
        exporter_down = pod.exporter_down_at is not None and t >= pod.exporter_down_at
        target_down = pod.target_down_at is not None and t >= pod.target_down_at
        spec_off = pod.spec_off_at is not None and t >= pod.spec_off_at
        s = c.samples
        s["running"].append("stale" if no_counters_at(pod, t) else f"{pod.batch(t):g}")
        no_counters = gone or exporter_down or target_down
        for key, value in (("drafts", c.drafts), ("draft_tokens", c.draft_tokens), ("accepted", c.accepted)):
            s[key].append("stale" if no_counters else f"{value:g}")
        s["generation"].append("stale" if no_counters else f"{c.generation:g}")
        s["resets"].append("stale" if gone or exporter_down else f"{c.resets:g}")
        s["up"].append("stale" if gone else ("0" if exporter_down else "1"))
        s["target_up"].append("stale" if gone or exporter_down else ("0" if target_down else "1"))
        s["enabled"].append("stale" if no_counters else ("0" if spec_off else "1"))
    return c


def no_counters_at(pod: Pod, t: float) -> bool:
    return any(at is not None and t >= at for at in (pod.vanish_at, pod.exporter_down_at, pod.target_down_at))

