"""The scenarios the alerts are judged on: pods (acceptance, traffic, batch and what happens to them
over time) and whether an alert is wanted (malign) or not (benign), with when it should start and end.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from vllm_spec_exporter.mixin.rules import alert_rules

H, M = 3600.0, 60.0

Mean = Callable[[float], float]  # t (s) -> value


@dataclass(frozen=True)
class Pod:
    """One server: mean acceptance(t), drafts/s(t), and what happens to it."""

    instance: str
    acceptance: Mean
    drafts_per_s: Mean
    k: Callable[[float], int] = lambda _t: 4
    sigma: float = 0.5  # per-request spread of acceptance, logit scale
    request_tokens: float = 200.0  # median output tokens per request
    restart_at: float | None = None  # vLLM restart: counters back to 0
    vanish_at: float | None = None  # pod deleted: every series stale from here
    spec_off_at: float | None = None  # drafts stop, output continues
    target_down_at: float | None = None  # exporter cannot reach vLLM: spec series gone, target_up 0
    exporter_down_at: float | None = None  # Prometheus cannot scrape the exporter: up 0, all gone
    batch: Callable[[float], float] = lambda _t: 4.0  # requests in the running batch
    pause_above: float | None = None  # dynamic k: k = 0 (no drafts, not counted) above this batch
    # An SGLang --speculative-adaptive server: what the exporter serves for it (no spec counter,
    # SGLang has none; the engine's last-batch gauges and its active tier), tier 0 (0 draft steps,
    # 1 verify token, its own acceptance gauge at 0) above this batch, else 3 steps.
    sglang_tier0_above: float | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    hours: float
    pods: tuple[Pod, ...]
    benign: bool
    onset: float | None = None  # malign: when it starts (s)
    recovery: float | None = None  # acceptance healthy again (s)
    vanish: float | None = None  # series gone (s): alerts must end
    bad_instance: str | None = None  # the only pod that may alert
    expect: tuple[str, ...] = ()  # alerts that should fire (besides acceptance)
    quiet: tuple[str, ...] = ()  # more alerts that must stay quiet (benign: counted as warnings)
    page_onset: float | None = None  # malign: the page's own onset when it differs (slow decline)
    note: str = ""
    seed: int = 11


def const(v: float) -> Mean:
    return lambda _t: v


def step(before: float, after: float, at: float, until: float | None = None) -> Mean:
    return lambda t: after if at <= t < (until if until is not None else math.inf) else before


def _dips(t: float) -> float:
    # every 30 min one dip to 10 %, cycling 60 s, 90 s, 120 s
    cycle = int(t // (30 * M))
    length = (60, 90, 120)[cycle % 3]
    return 0.1 if 20 * M <= t % (30 * M) < 20 * M + length else 0.75


def _night_volume(t: float) -> float:
    # bursty night traffic: 1..12 draft tokens/s (k=4: 0.25..3 drafts/s), changing every 2 min
    return random.Random(int(t // 120) * 7919).choice([0.25, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0])


def _decline(t: float) -> float:
    # 0.75 → 0.30 linearly from 10m to 70m
    return 0.75 - 0.45 * min(max((t - 10 * M) / (60 * M), 0.0), 1.0)


def _decline_crossing(level: float) -> float:
    return 10 * M + 60 * M * (0.75 - level) / 0.45


def _dips_from_55(t: float) -> float:
    # every 30 min one 2-minute dip to 0 %, from a healthy 55 %
    return 0.0 if 20 * M <= t % (30 * M) < 22 * M else 0.55


def _load_waves(t: float) -> float:
    # a batch of 8 for 30 minutes of every hour (dynamic k pauses drafting), else 2
    return 8.0 if 20 * M <= t % H < 50 * M else 2.0


HIGH = 25.0  # drafts/s of a busy server (100 draft tokens/s at k=4)


def scenarios() -> list[Scenario]:
    p = Pod
    fleet_ok = tuple(p(f"10.0.0.{i}:9400", const(0.75), const(5.0)) for i in range(1, 10))
    return [
        # --- benign --------------------------------------------------------------------------------
        Scenario("steady 75 %, busy", 12, (p("a", const(0.75), const(HIGH)),), benign=True),
        Scenario("hovering at 55 %, busy", 24, (p("a", const(0.55), const(10.0)),), benign=True),
        Scenario("idle (series at 0)", 2, (p("a", const(0.75), const(0.0)),), benign=True),
        Scenario("trickle 0.1 draft/s, 60 %", 12, (p("a", const(0.6), const(0.1), sigma=1.0),), benign=True),
        Scenario("vLLM restart, healthy", 2, (p("a", const(0.75), const(HIGH), restart_at=60 * M + 7),),
                 benign=True),
        Scenario("k 4 → 2 at 1h, healthy", 2, (p("a", step(0.62, 0.78, H), const(HIGH),
                                                   k=lambda t: 2 if t >= H else 4),), benign=True),
        Scenario("scale-out 2 → 6 pods", 2, tuple(
            p(f"10.0.1.{i}:9400", const(0.7), step(0.0, 8.0, 0 if i < 2 else 30 * M + i * 60)) for i in range(6)),
            benign=True),
        Scenario("dips to 10 % of 60/90/120 s, every 30 min", 24, (p("a", _dips, const(HIGH)),), benign=True),
        Scenario("night: 55 %, 1-12 draft tok/s, overdispersed", 24,
                 (p("a", const(0.55), _night_volume, sigma=0.8, request_tokens=300),), benign=True,
                 note="logit sigma 0.8: request acceptance spread ±0.19 (1 sd)"),
        Scenario("night: 62 %, 1-12 draft tok/s, very overdispersed", 24,
                 (p("a", const(0.62), _night_volume, sigma=1.2, request_tokens=400),), benign=True, seed=5),
        Scenario("2-min dips to 0 % from 55 %, every 30 min", 24, (p("a", _dips_from_55, const(HIGH)),), benign=True),
        Scenario("SGLang adaptive tier 0 for an hour (batch 64)", 2,
                 (p("a", const(0.7), const(HIGH), batch=step(4.0, 64.0, 30 * M, 90 * M), sglang_tier0_above=32),),
                 benign=True, quiet=(alert_rules.DRAFTS_STOPPED,),
                 note="SGLang's default adaptive config drafts nothing (tier 0) from a batch of 64; the exporter "
                      "serves its tier gauges, no counter; warnings here count SpecDecodeDraftsStopped too"),
        Scenario("dynamic-k pauses: batch 8 for 30 min an hour", 12,
                 (p("a", const(0.7), const(HIGH), batch=_load_waves, pause_above=2),), benign=True,
                 quiet=(alert_rules.DRAFTS_STOPPED,),
                 note="vLLM num_speculative_tokens_per_batch_size [[1,2,4],[3,256,0]]: no drafts above a batch of 2;"
                      " warnings here count SpecDecodeDraftsStopped too"),
        # --- malign --------------------------------------------------------------------------------
        Scenario("collapse 75 → 5 %, busy; recovery", 1.5,
                 (p("a", step(0.75, 0.05, 30 * M, 60 * M), const(HIGH)),), benign=False,
                 onset=30 * M, recovery=60 * M),
        Scenario("fall to 45 % (below warning only), busy", 1.5,
                 (p("a", step(0.75, 0.45, 30 * M, 75 * M), const(10.0)),), benign=False,
                 onset=30 * M, recovery=75 * M, note="critical must stay quiet"),
        Scenario("fall to 42 %, busy", 1.5,
                 (p("a", step(0.75, 0.42, 30 * M, 75 * M), const(10.0)),), benign=False,
                 onset=30 * M, recovery=75 * M, note="critical must stay quiet"),
        Scenario("collapse 75 → 5 % at 1 draft/s; recovery", 2,
                 (p("a", step(0.75, 0.05, 30 * M, 75 * M), const(1.0)),), benign=False,
                 onset=30 * M, recovery=75 * M),
        Scenario("collapse 75 → 10 % at 0.2 draft/s (0.8 tok/s)", 2,
                 (p("a", step(0.75, 0.10, 30 * M), const(0.2)),), benign=False, onset=30 * M),
        Scenario("slow decline 75 → 30 % over 1h", 1.5, (p("a", _decline, const(10.0)),), benign=False,
                 onset=_decline_crossing(0.5), page_onset=_decline_crossing(0.4),
                 note="warn from crossing 50 %, page from crossing 40 % (13.3 min later); 10 drafts/s"),
        Scenario("slow decline 75 → 30 % over 1h, busy", 1.5, (p("a", _decline, const(HIGH)),), benign=False,
                 onset=_decline_crossing(0.5), page_onset=_decline_crossing(0.4), seed=3,
                 note="the same at 25 drafts/s"),
        Scenario("one bad pod of ten", 1.5,
                 (*fleet_ok, p("10.0.0.10:9400", step(0.75, 0.1, 30 * M), const(5.0))), benign=False,
                 onset=30 * M, bad_instance="10.0.0.10:9400"),
        Scenario("pod deleted while critical fires", 1.5,
                 (p("a", step(0.75, 0.05, 30 * M), const(HIGH), vanish_at=50 * M),), benign=False,
                 onset=30 * M, vanish=50 * M),
        Scenario("spec decoding silently off", 1.5,
                 (p("a", const(0.75), const(HIGH), spec_off_at=30 * M),), benign=False,
                 onset=30 * M, expect=(alert_rules.DRAFTS_STOPPED,), note="acceptance alerts must stay quiet"),
        Scenario("vLLM down while critical fires", 1.5,
                 (p("a", step(0.75, 0.05, 30 * M), const(HIGH), target_down_at=50 * M),), benign=False,
                 onset=30 * M, vanish=50 * M, expect=(alert_rules.VLLM_UNREACHABLE,)),
        Scenario("exporter down while critical fires", 1.5,
                 (p("a", step(0.75, 0.05, 30 * M), const(HIGH), exporter_down_at=50 * M),), benign=False,
                 onset=30 * M, vanish=50 * M, expect=(alert_rules.EXPORTER_DOWN,)),
    ]

