"""Alert quality: the acceptance alerts on independent, realistic scenarios, at 15, 30 and 60 s
scrape intervals, on Prometheus 3's and 2.42's promtool, side by side with the previous rules
(from git) and a mixin-style `rate[5m]` / `for: 10m` baseline.

Every scenario is simulated draft by draft at the scrape interval and run through Prometheus' own
rule engine (`promtool test rules`) on rules generated from MixinConfig:

* **new**: the rules `vllm-spec-exporter generate` writes today: the committed bundle at 15 s and
  30 s scrapes (its groups pin a 15 s evaluation), the bundle rendered with
  `--set scrape_interval=60s` at 60 s (60 s evaluation);
* **previous**: `alerts/prometheus_{rules,alerts}.yaml` at commit PREVIOUS_COMMIT, read from git
  (the evidence rules with windows fixed for 15 s), evaluated at the scrape interval;
* **baseline**: the new files with the two acceptance alerts replaced by what a typical mixin
  writes: `rate(accepted[5m]) / rate(draft_tokens[5m]) < T`, `for: 10m`, no volume guard,
  evaluated at the scrape interval;
* **direct** (`--rules new,direct`): the same bundle with source=vllm (no sidecar), fed the same
  simulated counters as vLLM's own series (`vllm:`, `vllm_`, `ray_vllm:`, `ray_vllm_` rotated over
  the pods, job `vllm`, the sidecar's target_up as vLLM's `up`); it prints both sources' pages
  side by side and their largest difference (never part of the README's table).

The simulator: drafts arrive as a Poisson stream; they belong to requests (lognormal length), and
each request has its own acceptance (logit offset ~ N(0, sigma) around the scenario's mean), so
traffic is over-dispersed like a real prompt mix; within a draft, tokens are accepted as a prefix
(token i+1 only after token i), with a per-token probability solved so the expected acceptance
ratio is the request's. The promtool test expects "no alert" at every evaluation; each firing
alert shows up as a failure and is parsed into a timeline. Alertmanager's group_wait (30 s by
default) comes on top of every time-to-page. Nothing here asserts a time; it prints figures.

    .venv/bin/python bench/alert_quality.py            # print the tables (≈ 15 min on 2 cores)
    .venv/bin/python bench/alert_quality.py --write    # also store them for alerts/README.md
    .venv/bin/python bench/alert_quality.py --intervals 60 --promtools 3 --only collapse   # a quick look
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import random
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from vllm_spec_exporter.durations import seconds
from vllm_spec_exporter.engines import VLLM_PREFIXES
from vllm_spec_exporter.mixin import generate, windows
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import alert_rules, rule_files, sources
from vllm_spec_exporter.names import MetricName
from vllm_spec_lab.monitoring import PROMTOOL_BIN, PROMTOOL_OLDEST_BIN

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import measured  # noqa: E402  (tools/measured.py: the record of what the table was made from)

TABLE = ROOT / measured.ALERT_QUALITY.outputs[0]
INTERVALS = (15, 30, 60)  # scrape intervals (s)
# The last commit before the windows were derived from the scrape interval.
PREVIOUS_COMMIT = "2d2a37e"
# The lab's two promtools: Prometheus 3 (Debian testing's, in the cache) and Debian 12's 2.42.
PROMTOOLS = {"3": Path(PROMTOOL_BIN), "2": Path(PROMTOOL_OLDEST_BIN)}
JOB = "vllm-spec-exporter"
RULE_SETS = ("new", "previous", "baseline")
DIRECT = "direct"  # source=vllm, compared with "new" (`--rules new,direct`)
ACCEPTANCE = (alert_rules.ACCEPTANCE_LOW, alert_rules.ACCEPTANCE_CRITICAL)


@dataclass(frozen=True)
class Run:
    """One promtool run: a rule set at a scrape interval on one promtool."""

    rules: str
    scrape_s: int
    promtool: str  # key of PROMTOOLS

    @property
    def evaluation_s(self) -> int:
        # The new bundles pin their groups' interval (15 s up to 30 s scrapes, else the scrape
        # interval); the others inherit a global evaluation interval equal to the scrape interval.
        if self.rules in ("new", DIRECT):
            return int(windows.seconds(bundle_config(self.scrape_s).windows.evaluation_interval))
        return self.scrape_s


def planned(s: Scenario, rules: str, scrape_s: int, promtool: str, full: bool) -> bool:
    """Which runs a default (not --full) benchmark makes: on a shared 2-core machine a full grid
    takes hours. The new rules run everywhere (benign scenarios on Prometheus 3's promtool only), and
    so do the direct ones when `--rules` asks for them;
    the previous rules at 60 s (and at 30 s on Prometheus 3's promtool for malign scenarios; at
    15 s they equal the new ones for acceptance); the baseline at 60 s on Prometheus 3's promtool,
    malign scenarios only."""
    if full:
        return True
    if s.benign:
        return promtool == "3" and (rules in ("new", DIRECT) or (rules == "previous" and scrape_s == 60))
    if rules in ("new", DIRECT):  # direct (asked for with --rules) wherever new runs: they are compared
        return True
    if rules == "previous":
        return scrape_s == 60 or (scrape_s == 30 and promtool == "3")
    return scrape_s == 60 and promtool == "3"  # baseline


def bundle_config(scrape_s: int) -> MixinConfig:
    """The config whose bundle serves `scrape_s`: the committed default up to 30 s, else rendered for it."""
    return MixinConfig() if scrape_s <= 30 else MixinConfig().with_overrides({"scrape_interval": f"{scrape_s}s"})

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


H, M = 3600.0, 60.0


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


# ---------------------------------------------------------------------------------------------
# Simulation


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


_METRICS = {
    "drafts": ("vllm_spec_decode_drafts_total", True), "draft_tokens": ("vllm_spec_decode_draft_tokens_total", True),
    "accepted": ("vllm_spec_decode_accepted_tokens_total", True),
    "generation": ("vllm_server_generation_tokens_total", True),
    "resets": ("vllm_spec_exporter_target_restarts_total", False), "up": ("up", False),
    "target_up": ("vllm_spec_exporter_target_up", False), "enabled": ("vllm_spec_decode_enabled", False),
    "running": ("vllm_server_requests_running", True),
}
# The exporter's names at PREVIOUS_COMMIT, which the previous rules read (CHANGELOG.md: renamed metrics).
_PREVIOUS_NAMES = {"vllm_server_generation_tokens_total": "vllm_generation_tokens_total",
                   "vllm_spec_exporter_target_restarts_total": "vllm_spec_exporter_counter_resets_total",
                   "vllm_server_requests_running": "vllm_num_requests_running"}
# Without the sidecar Prometheus holds vLLM's own counters, running requests and `up`; nothing else.
_DIRECT_NAMES = {c.exporter: c.vllm for c in sources.COUNTERS} | dict(sources.VLLM_GAUGES)


def _compress(values: list[str]) -> str:
    """promtool expanding notation: runs of equal values as `v xN`, keeps the file small."""
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        run = j - i
        if values[i] == "stale":  # one stale marker, then no samples
            out.append("stale" + (f" _x{run}" if run else ""))
        else:
            out.append(values[i] if run == 0 else f"{values[i]}x{run}")
        i = j + 1
    return " ".join(out)


_SGLANG_KEYS = ("resets", "up", "target_up", "enabled", "running")  # no spec counter: SGLang has none


def _sglang_series(pod: Pod, scenario: Scenario, step_s: int, counters: _Counters) -> list[dict]:
    """What the exporter serves for an SGLang adaptive server (engines.py): its health series, the
    running batch, the active tier and its own last-batch acceptance gauge; tier 0 above
    `pod.sglang_tier0_above`, where SGLang's gauge reads 0 (no accepted draft at all)."""
    assert pod.sglang_tier0_above is not None
    times = [i * step_s for i in range(int(scenario.hours * H / step_s) + 1)]
    paused = [pod.batch(t) > pod.sglang_tier0_above for t in times]
    target = f'job="{JOB}",instance="{pod.instance}"'
    labels = target + ',model_name="llama"'
    out = [{"series": f"{_METRICS[key][0]}{{{labels if _METRICS[key][1] else target}}}",
            "values": _compress(counters.samples[key])} for key in _SGLANG_KEYS]
    for metric, values in ((MetricName.ENGINE_DRAFT_STEPS, ["0" if p else "3" for p in paused]),
                           (MetricName.ENGINE_VERIFY_TOKENS, ["1" if p else "4" for p in paused]),
                           (MetricName.ENGINE_ACCEPTANCE_RATIO,
                            ["0" if p else f"{pod.acceptance(t):g}" for p, t in zip(paused, times, strict=True)])):
        out.append({"series": f"{metric}{{{labels}}}", "values": _compress(values)})
    info = f'{target},engine_family="sglang",schema="sglang-gauges",version=""'
    out.append({"series": f"vllm_spec_exporter_target_info{{{info}}}", "values": _compress(["1"] * len(times))})
    return out


def test_file(scenario: Scenario, rules_dir: Path, run: Run) -> dict:
    rng = random.Random(scenario.seed)
    step_s, eval_s = run.scrape_s, run.evaluation_s
    series = []
    direct = run.rules == DIRECT
    for index, pod in enumerate(scenario.pods):
        counters = simulate(pod, scenario, rng, step_s)
        if pod.sglang_tier0_above is not None:  # the sidecar's series (direct rules read none of them)
            series += _sglang_series(pod, scenario, step_s, counters)
            continue
        for key, (metric, per_model) in _METRICS.items():
            labels = f'job="{JOB}",instance="{pod.instance}"'
            if direct:  # vLLM's own `up` is what the sidecar's target_up reports
                if key == "target_up":
                    metric = "up"
                elif metric not in _DIRECT_NAMES:
                    continue
                labels = f'job="vllm",instance="{pod.instance}"'
                if metric in _DIRECT_NAMES:
                    metric = VLLM_PREFIXES[index % len(VLLM_PREFIXES)] + _DIRECT_NAMES[metric]
            if run.rules == "previous":
                metric = _PREVIOUS_NAMES.get(metric, metric)
            if per_model:
                labels += ',model_name="llama",engine="0"'
            series.append({"series": f'{{__name__="{metric}",{labels}}}', "values": _compress(counters.samples[key])})
        if direct:
            continue
        info = f'job="{JOB}",instance="{pod.instance}",engine_family="vllm",schema="v1",version="0.32.0"'
        series.append({"series": f"vllm_spec_exporter_target_info{{{info}}}",
                       "values": _compress(["stale" if no_counters_at(pod, i * step_s) else "1"
                                            for i in range(int(scenario.hours * H / step_s) + 1)])})
    names = [*ACCEPTANCE, *scenario.expect, *scenario.quiet]
    steps = range(1, int(scenario.hours * H / eval_s) + 1)
    checks = [{"eval_time": f"{s * eval_s}s", "alertname": name} for s in steps for name in names]
    return {
        "rule_files": [str(rules_dir / rule_files.RULES_FILE), str(rules_dir / rule_files.ALERTS_FILE)],
        "evaluation_interval": f"{eval_s}s",
        # every group of the rule set, recording groups first (as listed in the files)
        "group_eval_order": [g["name"] for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE)
                             for g in yaml.safe_load((rules_dir / rel).read_text())["groups"]],
        "tests": [{"interval": f"{step_s}s", "input_series": series, "alert_rule_test": checks}],
    }


# ---------------------------------------------------------------------------------------------
# Rule sets and promtool


def write_rule_sets(workdir: Path, cfg: MixinConfig) -> dict[str, Path]:
    workdir.mkdir(parents=True)
    dirs = {name: workdir / name for name in (*RULE_SETS, DIRECT)}
    new = generate.render_all(cfg)
    for name in dirs:
        (dirs[name] / "alerts").mkdir(parents=True)
    direct = generate.render_all(cfg.with_overrides({"source": "vllm"}))
    for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE):
        (dirs[DIRECT] / rel).write_text(direct[rel])
    for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE):
        (dirs["new"] / rel).write_text(new[rel])
        try:
            old = subprocess.run(["git", "show", f"{PREVIOUS_COMMIT}:{rel}"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout
        except (subprocess.CalledProcessError, FileNotFoundError) as error:
            raise SystemExit(f"cannot read the previous rules from git ({PREVIOUS_COMMIT}:{rel}): {error}") from error
        (dirs["previous"] / rel).write_text(old)
    (dirs["baseline"] / rule_files.RULES_FILE).write_text(new[rule_files.RULES_FILE])
    groups = yaml.safe_load(new[rule_files.ALERTS_FILE])
    sel = "{" + cfg.exporter_selector + "}"
    ratio = (f"sum without (engine) (rate({MetricName.ACCEPTED_TOKENS_TOTAL}{sel}[5m]))\n/\n"
             f"sum without (engine) (rate({MetricName.DRAFT_TOKENS_TOTAL}{sel}[5m]))")
    thresholds = {alert_rules.ACCEPTANCE_LOW: cfg.acceptance_warning_threshold,
                  alert_rules.ACCEPTANCE_CRITICAL: cfg.acceptance_critical_threshold}
    for group in groups["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") in thresholds:
                rule["expr"] = f"(\n{ratio}\n) < {thresholds[rule['alert']]:g}"
                rule["for"] = "10m"
                rule.pop("keep_firing_for", None)
        group.pop("interval", None)  # a typical mixin leaves evaluation to the global interval
    (dirs["baseline"] / rule_files.ALERTS_FILE).write_text(yaml.safe_dump(groups, sort_keys=False))
    return dirs


_FAILURE = re.compile(r"alertname: (\w+), time: ([0-9hms.]+),\s*\n\s*exp:\[\],\s*\n\s*got:\[(.*?)\n\s*\]", re.S)
_INSTANCE = re.compile(r'instance="([^"]*)"')


Timeline = dict[tuple[str, str], list[float]]  # (alertname, instance) -> firing eval times


def run_promtool(test: dict, path: Path, promtool: Path) -> Timeline:
    path.write_text(yaml.safe_dump(test, width=1_000_000))
    result = subprocess.run([str(promtool), "test", "rules", str(path)],
                            capture_output=True, text=True, check=False, timeout=1800)
    output = result.stdout + result.stderr
    if result.returncode != 0 and "FAILED" not in output:
        raise RuntimeError(output[:3000])
    timeline: Timeline = {}
    for name, when, got in _FAILURE.findall(output):
        for instance in _INSTANCE.findall(got) or [""]:
            timeline.setdefault((name, instance), []).append(seconds(when))
    return {key: sorted(times) for key, times in timeline.items()}


def episodes(times: list[float], eval_s: int) -> list[tuple[float, float]]:
    """Contiguous firing runs: (first firing eval, first eval no longer firing)."""
    runs: list[tuple[float, float]] = []
    for t in times:
        if runs and t - runs[-1][1] < eval_s / 2:
            runs[-1] = (runs[-1][0], t + eval_s)
        else:
            runs.append((t, t + eval_s))
    return runs


# ---------------------------------------------------------------------------------------------
# Figures


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    return f"{sign}{int(seconds // 60)}m{int(seconds % 60):02d}s"


def _runs(timeline: Timeline, eval_s: int, name: str, instance: str | None = None) -> list[tuple[float, float]]:
    times = sorted(t for (n, i), ts in timeline.items() if n == name and (instance is None or i == instance)
                   for t in ts)
    return episodes(sorted(set(times)), eval_s)


def malign_figures(s: Scenario, timeline: Timeline, eval_s: int) -> dict[str, str]:
    bad = s.bad_instance
    out: dict[str, str] = {}
    assert s.onset is not None
    for label, name, onset in (("warn", alert_rules.ACCEPTANCE_LOW, s.onset),
                               ("page", alert_rules.ACCEPTANCE_CRITICAL, s.page_onset or s.onset)):
        runs = _runs(timeline, eval_s, name, bad)
        before = [r for r in runs if r[0] < s.onset]
        after = [r for r in runs if r[1] > s.onset]
        out[label] = _fmt(after[0][0] - onset) if after else "never"
        if before:
            out[label] += f" ({len(before)} before onset)"
    ends = [r[1] for name in ACCEPTANCE for r in _runs(timeline, eval_s, name, bad) if r[1] > s.onset]
    if s.recovery is not None:
        out["resolve"] = _fmt(max(ends) - s.recovery) if ends else "-"
    if s.vanish is not None:
        out["end after vanish"] = _fmt(max(ends) - s.vanish) if ends else "-"
    if bad is not None:
        others = sum(len(_runs(timeline, eval_s, name, i)) for (name, i) in set(timeline)
                     if name in ACCEPTANCE and i != bad)
        out["other pods alerted"] = str(others)
    for name in s.expect:
        runs = _runs(timeline, eval_s, name)
        out[name.removeprefix("SpecDecode")] = _fmt(runs[0][0] - (s.vanish or s.onset)) if runs else "never"
    return out


def benign_figures(s: Scenario, timeline: Timeline, eval_s: int) -> str:
    """`pages / warnings` per simulated day (warnings include the scenario's `quiet` alerts)."""
    days = s.hours / 24
    pages = len(_runs(timeline, eval_s, alert_rules.ACCEPTANCE_CRITICAL)) / days
    warns = sum(len(_runs(timeline, eval_s, name)) for name in (alert_rules.ACCEPTANCE_LOW, *s.quiet)) / days
    return f"{pages:.3g} / {warns:.3g}"


def _cell(values: dict[str, str]) -> str:
    """One figure on both promtools: `x` when they agree, `x (2.42: y)` when they differ; `·` not run."""
    first = values.get("3", values.get("2", "·"))
    if "3" in values and "2" in values and values["2"] != values["3"]:
        return f"{first} (2.42: {values['2']})"
    return first


def compare_sources(results: dict[tuple[str, Run], Timeline], chosen: list[Scenario], intervals: list[int],
                    promtools: list[str]) -> str:
    """Pages of the sidecar's rules (new) and of the sidecar-less ones (direct), per scenario,
    alert and pod: every firing episode, and the largest difference between the two in seconds."""
    direct_alerts = {a["alert"] for a in alert_rules.all_alerts(MixinConfig().with_overrides({"source": "vllm"}))}
    lines = ["| scenario | scrape | promtool | alert | pod | sidecar (new) | direct | largest difference |",
             "|---|---|---|---|---|---|---|---|"]
    worst, compared = 0.0, 0
    for s in chosen:
        for iv in intervals:
            for p in promtools:
                new_run, direct_run = Run("new", iv, p), Run(DIRECT, iv, p)
                if (s.name, new_run) not in results or (s.name, direct_run) not in results:
                    continue  # a cell not run by default (benign scenarios on Prometheus 3's promtool)
                new, direct = results[(s.name, new_run)], results[(s.name, direct_run)]
                eval_s = new_run.evaluation_s
                keys = sorted({k for k in (*new, *direct) if k[0] in direct_alerts})
                for name, instance in keys:
                    a, b = _runs(new, eval_s, name, instance), _runs(direct, eval_s, name, instance)
                    compared += 1
                    if len(a) == len(b):
                        diff = max((abs(x - y) for ra, rb in zip(a, b, strict=True)
                                    for x, y in zip(ra, rb, strict=True)), default=0.0)
                        worst, shown = max(worst, diff), f"{diff:g} s"
                    else:
                        worst, shown = math.inf, "episodes differ"
                    def fmt(runs: list[tuple[float, float]]) -> str:
                        return ", ".join(f"{_fmt(x)}–{_fmt(y)}" for x, y in runs) or "none"
                    lines.append(f"| {s.name} | {iv} s | {p} | {name} | {instance} | {fmt(a)} | {fmt(b)} | {shown} |")
    lines.append(f"\n{compared} (scenario, alert, pod) timelines; largest difference between the two sources: "
                 f"{worst:g} s")
    return "\n".join(lines)


def render_tables(results: dict[tuple[str, Run], Timeline], all_scenarios: list[Scenario],
                  intervals: list[int], promtools: list[str]) -> str:
    versions = ", ".join(f"{_promtool_version(PROMTOOLS[p])}" for p in promtools)
    columns = [(rs, iv) for rs in RULE_SETS for iv in intervals]
    head = "| Scenario | Simulated | " + " | ".join(f"{rs} {iv} s" for rs, iv in columns) + " |"
    rule = "|---|---|" + "---|" * len(columns)
    lines = [
        f"Measured by `bench/alert_quality.py` at {', '.join(f'{i} s' for i in intervals)} scrapes on promtool "
        f"{versions} (a cell shows Prometheus 3's figure, and 2.42's in brackets where it differs). **new** = "
        "these rules: the committed bundle at 15 s and 30 s scrapes (its groups evaluate every 15 s), the bundle "
        "generated with `--set scrape_interval=60s` at 60 s; **previous** = the rules at "
        f"`{PREVIOUS_COMMIT}` (windows fixed for 15 s); **baseline** = mixin style `rate[5m]`, `for: 10m`; both "
        "evaluated at the scrape interval. Times are from onset (recovery, series vanishing) to the alert's first "
        "(last) firing evaluation; Alertmanager's group_wait comes on top. `·` = not run by default (the "
        "previous rules at 15 s equal the new ones for acceptance; the previous rules at 30 s and 60 s, the "
        "baseline at 60 s, benign scenarios on Prometheus 3's promtool; `--full` runs every cell).",
        "",
        "**Benign scenarios: false alerts per simulated day** (pages = critical / warnings)",
        "",
        head, rule,
    ]
    for s in (x for x in all_scenarios if x.benign):
        cells = [_cell({p: benign_figures(s, results[(s.name, Run(rs, iv, p))], Run(rs, iv, p).evaluation_s)
                        for p in promtools if (s.name, Run(rs, iv, p)) in results}) for rs, iv in columns]
        lines.append(f"| {s.name} | {s.hours:g} h | " + " | ".join(cells) + " |")
    lines += ["", "**Malign scenarios** (warn = warning fires, page = critical fires)", "",
              head.replace("| Simulated |", "| Figure |"), rule]
    for s in (x for x in all_scenarios if not x.benign):
        figures = {(rs, iv, p): malign_figures(s, results[(s.name, Run(rs, iv, p))], Run(rs, iv, p).evaluation_s)
                   for rs, iv in columns for p in promtools if (s.name, Run(rs, iv, p)) in results}
        keys = list(figures[(RULE_SETS[0], intervals[0], promtools[0])])
        for i, key in enumerate(keys):
            name = s.name if i == 0 else ""
            cells = [_cell({p: figures[(rs, iv, p)].get(key, "-") for p in promtools if (rs, iv, p) in figures})
                     for rs, iv in columns]
            lines.append(f"| {name} | {key} | " + " | ".join(cells) + " |")
    notes = [f"- *{s.name}*: {s.note}" for s in all_scenarios if s.note]
    for iv in intervals:
        w = bundle_config(iv).windows
        notes.append(f"- new rules at {iv} s: fast {w.fast_long}/{w.fast_short}, slow {w.slow_long}/{w.slow_short}, "
                     f"held warning {w.warning_hold} / critical {w.critical_hold} / slow {w.slow_hold}, evaluated "
                     f"every {w.evaluation_interval}.")
    cfg = MixinConfig()
    notes.append(f"- confidence {cfg.confidence_label}, overdispersion {cfg.acceptance_overdispersion:g}.")
    lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


def _promtool_version(promtool: Path) -> str:
    out = subprocess.run([str(promtool), "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"version (\S+)", out)
    return match.group(1) if match else "?"


def header(args: argparse.Namespace) -> str:
    """The table's title, the command that reproduces it and the commit it measured."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    command = ".venv/bin/python bench/alert_quality.py --write" + (f" --max-hours {args.max_hours:g}"
                                                                 if args.max_hours else "")
    return ("# Alert quality: the acceptance alerts on simulated scenarios\n\n"
            "<!-- Written by bench/alert_quality.py --write; do not edit. -->\n\n"
            f"Reproduce: `{command}` (≈ 15 min on 2 cores). Measured at commit `{commit}`"
            + (" with uncommitted changes" if dirty else "") + ".\n\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"store the tables in {TABLE.relative_to(ROOT)}")
    parser.add_argument("--only", default="", help="run scenarios whose name contains this text")
    parser.add_argument("--rules", default=",".join(RULE_SETS), help="comma-separated rule sets to run")
    parser.add_argument("--intervals", default=",".join(map(str, INTERVALS)), help="scrape intervals (s)")
    parser.add_argument("--promtools", default="3,2", help="promtool majors: 3 (Debian testing's), 2 (/usr/bin)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="every rule set x interval x promtool (hours)")
    parser.add_argument("--max-hours", type=float, default=0,
                        help="simulate each scenario at most this long (0: as defined; per-day rates stay per day)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="MixinConfig override for the new rules (tuning; --write refuses it)")
    args = parser.parse_args()
    chosen = [s for s in scenarios() if args.only in s.name]
    if args.max_hours:
        chosen = [dataclasses.replace(s, hours=min(s.hours, args.max_hours)) for s in chosen]
    sets = [r for r in args.rules.split(",") if r]
    intervals = [int(i) for i in args.intervals.split(",") if i]
    promtools = [p for p in args.promtools.split(",") if p]
    for p in promtools:
        if not os.access(PROMTOOLS[p], os.X_OK):
            raise SystemExit(f"promtool {p}.x not found at {PROMTOOLS[p]} (run scripts/bootstrap.sh)")
    overrides = dict(item.split("=", 1) for item in args.sets)
    with tempfile.TemporaryDirectory(prefix="alert-quality-") as tmp:
        workdir = Path(tmp)
        dirs = {iv: write_rule_sets(workdir / f"{iv}s", bundle_config(iv).with_overrides(overrides))
                for iv in intervals}
        jobs = [(s, Run(rs, iv, p)) for s in chosen for rs in sets for iv in intervals for p in promtools
                if planned(s, rs, iv, p, args.full)]
        # Longest first, so two workers finish together.
        jobs.sort(key=lambda job: -job[0].hours * 3600 / job[1].evaluation_s)

        def run(job: tuple[Scenario, Run]) -> Timeline:
            s, r = job
            slug = re.sub(r"\W+", "_", f"{s.name}_{r.rules}_{r.scrape_s}_{r.promtool}")
            return run_promtool(test_file(s, dirs[r.scrape_s][r.rules], r), workdir / f"{slug}.yaml",
                                PROMTOOLS[r.promtool])

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            timelines = list(pool.map(run, jobs))
    results = {(s.name, r): tl for (s, r), tl in zip(jobs, timelines, strict=True)}
    if DIRECT in sets and "new" in sets:
        print(compare_sources(results, chosen, intervals, promtools))
        return 0
    if set(sets) != set(RULE_SETS):
        for s, r in jobs:
            tl = results[(s.name, r)]
            figures = benign_figures(s, tl, r.evaluation_s) if s.benign else malign_figures(s, tl, r.evaluation_s)
            print(f"{s.name} | {r.rules} {r.scrape_s} s promtool {r.promtool}: {figures}", flush=True)
        return 0
    table = render_tables(results, chosen, intervals, promtools)
    print(table)
    if args.write:
        if args.only or args.sets:
            raise SystemExit("--write needs every scenario and the default config (drop --only/--set)")
        if args.max_hours:
            table += (f"\nRun with `--max-hours {args.max_hours:g}` on a shared machine: every scenario simulated "
                      f"at most {args.max_hours:g} h (false alerts still per simulated day).\n")
        rules = measured.digests(ROOT, measured.ALERT_QUALITY.inputs)
        table += ("\nRules measured: " + ", ".join(f"`{Path(path).name}` sha256 `{digest[:16]}`"
                                                   for path, digest in sorted(rules.items()))
                  + f" (recorded in `{measured.ALERT_QUALITY.record}`: `tools/measured.py` fails when they "
                  "change).\n")
        TABLE.write_text(header(args) + table)
        measured.write_record(ROOT, measured.ALERT_QUALITY)
        print(f"wrote {TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
