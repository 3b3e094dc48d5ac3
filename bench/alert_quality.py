"""Alert quality: the acceptance alerts on independent, realistic scenarios, side by side with the
previous rules (from git) and a mixin-style `rate[5m]` / `for: 10m` baseline.

Every scenario is simulated draft by draft at a 15 s scrape interval and run through Prometheus'
own rule engine (`promtool test rules`, 15 s evaluation) on rules generated from MixinConfig:

* **new**: the rules `vllm-spec-exporter generate` writes today (default config);
* **previous**: `alerts/prometheus_{rules,alerts}.yaml` at commit PREVIOUS_COMMIT, read from git
  (rate2m ratio, volume guard, `for`, keep_firing_for 5m);
* **baseline**: the new files with the two acceptance alerts replaced by what a typical mixin
  writes: `rate(accepted[5m]) / rate(draft_tokens[5m]) < T`, `for: 10m`, no volume guard;
* **direct** (`--rules new,direct`): the same config with source=vllm (no sidecar), fed the same
  simulated counters as vLLM's own series (`vllm:`, `vllm_`, `ray_vllm:`, `ray_vllm_` rotated over
  the pods, job `vllm`); it prints both sources' pages side by side and their largest difference.

The simulator: drafts arrive as a Poisson stream; they belong to requests (lognormal length), and
each request has its own acceptance (logit offset ~ N(0, sigma) around the scenario's mean), so
traffic is over-dispersed like a real prompt mix; within a draft, tokens are accepted as a prefix
(token i+1 only after token i), with a per-token probability solved so the expected acceptance
ratio is the request's. The promtool test expects "no alert" at every evaluation; each firing
alert shows up as a failure and is parsed into a timeline. Alertmanager's group_wait (30 s by
default) comes on top of every time-to-page. Nothing here asserts a time; it prints figures.

    .venv/bin/python bench/alert_quality.py            # print the tables (≈ 3-4 min on 2 cores)
    .venv/bin/python bench/alert_quality.py --write    # also store them for alerts/README.md
"""

from __future__ import annotations

import argparse
import math
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from vllm_spec_exporter.mixin import alert_rules, generate, rule_files, sources
from vllm_spec_exporter.mixin.config import MixinConfig

ROOT = Path(__file__).resolve().parents[1]
STEP_S = 15  # scrape and evaluation interval
# The last commit on main before issue 11 replaced the acceptance alerts.
PREVIOUS_COMMIT = "8d08869"
JOB = "vllm-spec-exporter"
RULE_SETS = ("new", "previous", "baseline")
DIRECT = "direct"  # source=vllm: compared with "new", never part of the README's table
ACCEPTANCE = (alert_rules.ACCEPTANCE_LOW, alert_rules.ACCEPTANCE_CRITICAL)

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
                 onset=10 * M + 60 * M * (0.75 - 0.5) / 0.45,
                 note="onset = crossing 50 %; the critical line (40 %) is crossed 13.3 min later"),
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
        "up": [], "target_up": [], "enabled": []})


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


def simulate(pod: Pod, scenario: Scenario, rng: random.Random) -> _Counters:
    c = _Counters()
    request: _Request | None = None
    steps = int(scenario.hours * H / STEP_S)
    for i in range(steps + 1):
        t = i * STEP_S
        if pod.restart_at is not None and t - STEP_S < pod.restart_at <= t:
            c.drafts = c.draft_tokens = c.accepted = c.generation = 0.0
            c.resets += 1
        if i:
            k = pod.k(t)
            n = _poisson(rng, pod.drafts_per_s(t) * STEP_S)
            spec_off = pod.spec_off_at is not None and t >= pod.spec_off_at
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
        no_counters = gone or exporter_down or target_down
        for key, value in (("drafts", c.drafts), ("draft_tokens", c.draft_tokens), ("accepted", c.accepted)):
            s[key].append("stale" if no_counters else f"{value:g}")
        s["generation"].append("stale" if no_counters else f"{c.generation:g}")
        s["resets"].append("stale" if gone or exporter_down else f"{c.resets:g}")
        s["up"].append("stale" if gone else ("0" if exporter_down else "1"))
        s["target_up"].append("stale" if gone or exporter_down else ("0" if target_down else "1"))
        s["enabled"].append("stale" if no_counters else ("0" if spec_off else "1"))
    return c


_METRICS = {
    "drafts": (sources.DRAFTS.exporter, True), "draft_tokens": (sources.DRAFT_TOKENS.exporter, True),
    "accepted": (sources.ACCEPTED.exporter, True), "generation": (sources.GENERATED.exporter, True),
    "resets": ("vllm_spec_exporter_counter_resets_total", False), "up": ("up", False),
    "target_up": ("vllm_spec_exporter_target_up", False), "enabled": ("vllm_spec_decode_enabled", False),
}
# Without the sidecar Prometheus holds vLLM's own counters and `up`; nothing else of the above.
_DIRECT_NAMES = {c.exporter: c.vllm for c in sources.COUNTERS}


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


def test_file(scenario: Scenario, rules_dir: Path, direct: bool = False) -> dict:
    rng = random.Random(scenario.seed)
    series = []
    for index, pod in enumerate(scenario.pods):
        counters = simulate(pod, scenario, rng)
        for key, (metric, per_model) in _METRICS.items():
            labels = f'job="{JOB}",instance="{pod.instance}"'
            if direct:
                # vLLM's own `up` is what the sidecar's target_up reports; the sidecar's `up` is gone.
                if key == "target_up":
                    metric = "up"
                elif metric not in _DIRECT_NAMES:
                    continue
                labels = f'job="vllm",instance="{pod.instance}"'
                if metric in _DIRECT_NAMES:
                    prefix = sources.VLLM_PREFIXES[index % len(sources.VLLM_PREFIXES)]
                    metric = prefix + _DIRECT_NAMES[metric]
            if per_model:
                labels += ',model_name="llama",engine="0"'
            series.append({"series": f'{{__name__="{metric}",{labels}}}', "values": _compress(counters.samples[key])})
    names = [*ACCEPTANCE, *scenario.expect]
    steps = range(1, int(scenario.hours * H / STEP_S) + 1)
    checks = [{"eval_time": f"{s * STEP_S}s", "alertname": name} for s in steps for name in names]
    return {
        "rule_files": [str(rules_dir / rule_files.RULES_FILE), str(rules_dir / rule_files.ALERTS_FILE)],
        "evaluation_interval": f"{STEP_S}s",
        # every group of the rule set, recording groups first (as listed in the files)
        "group_eval_order": [g["name"] for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE)
                             for g in yaml.safe_load((rules_dir / rel).read_text())["groups"]],
        "tests": [{"interval": f"{STEP_S}s", "input_series": series, "alert_rule_test": checks}],
    }


# ---------------------------------------------------------------------------------------------
# Rule sets and promtool


def write_rule_sets(workdir: Path, cfg: MixinConfig) -> dict[str, Path]:
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
    ratio = (f"sum without (engine) (rate({sources.ACCEPTED.exporter}{sel}[5m]))\n/\n"
             f"sum without (engine) (rate({sources.DRAFT_TOKENS.exporter}{sel}[5m]))")
    thresholds = {alert_rules.ACCEPTANCE_LOW: cfg.acceptance_warning_threshold,
                  alert_rules.ACCEPTANCE_CRITICAL: cfg.acceptance_critical_threshold}
    for group in groups["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") in thresholds:
                rule["expr"] = f"(\n{ratio}\n) < {thresholds[rule['alert']]:g}"
                rule["for"] = "10m"
                rule.pop("keep_firing_for", None)
    (dirs["baseline"] / rule_files.ALERTS_FILE).write_text(yaml.safe_dump(groups, sort_keys=False))
    return dirs


_FAILURE = re.compile(r"alertname: (\w+), time: ([0-9hms.]+),\s*\n\s*exp:\[\],\s*\n\s*got:\[(.*?)\n\s*\]", re.S)
_INSTANCE = re.compile(r'instance="([^"]*)"')


def _seconds(duration: str) -> float:
    return sum(float(v) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[u]
               for v, u in re.findall(r"([0-9.]+)(h|ms|m|s)", duration))


Timeline = dict[tuple[str, str], list[float]]  # (alertname, instance) -> firing eval times


def run_promtool(test: dict, path: Path) -> Timeline:
    path.write_text(yaml.safe_dump(test, width=1_000_000))
    result = subprocess.run([shutil.which("promtool") or "/usr/bin/promtool", "test", "rules", str(path)],
                            capture_output=True, text=True, check=False, timeout=1800)
    output = result.stdout + result.stderr
    if result.returncode != 0 and "FAILED" not in output:
        raise RuntimeError(output[:3000])
    timeline: Timeline = {}
    for name, when, got in _FAILURE.findall(output):
        for instance in _INSTANCE.findall(got) or [""]:
            timeline.setdefault((name, instance), []).append(_seconds(when))
    return {key: sorted(times) for key, times in timeline.items()}


def episodes(times: list[float]) -> list[tuple[float, float]]:
    """Contiguous firing runs: (first firing eval, first eval no longer firing)."""
    runs: list[tuple[float, float]] = []
    for t in times:
        if runs and t - runs[-1][1] < STEP_S / 2:
            runs[-1] = (runs[-1][0], t + STEP_S)
        else:
            runs.append((t, t + STEP_S))
    return runs


# ---------------------------------------------------------------------------------------------
# Figures


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    return f"{sign}{int(seconds // 60)}m{int(seconds % 60):02d}s"


def _runs(timeline: Timeline, name: str, instance: str | None = None) -> list[tuple[float, float]]:
    times = sorted(t for (n, i), ts in timeline.items() if n == name and (instance is None or i == instance)
                   for t in ts)
    return episodes(sorted(set(times)))


def malign_figures(s: Scenario, timeline: Timeline) -> dict[str, str]:
    bad = s.bad_instance
    out: dict[str, str] = {}
    assert s.onset is not None
    for label, name in (("warn", alert_rules.ACCEPTANCE_LOW), ("page", alert_rules.ACCEPTANCE_CRITICAL)):
        runs = _runs(timeline, name, bad)
        before = [r for r in runs if r[0] < s.onset]
        after = [r for r in runs if r[1] > s.onset]
        out[label] = _fmt(after[0][0] - s.onset) if after else "never"
        if before:
            out[label] += f" ({len(before)} before onset)"
    ends = [r[1] for name in ACCEPTANCE for r in _runs(timeline, name, bad) if r[1] > s.onset]
    if s.recovery is not None:
        out["resolve"] = _fmt(max(ends) - s.recovery) if ends else "-"
    if s.vanish is not None:
        out["end after vanish"] = _fmt(max(ends) - s.vanish) if ends else "-"
    if bad is not None:
        others = sum(len(_runs(timeline, name, i)) for (name, i) in {k for k in timeline}
                     if name in ACCEPTANCE and i != bad)
        out["other pods alerted"] = str(others)
    for name in s.expect:
        runs = _runs(timeline, name)
        out[name.removeprefix("SpecDecode")] = _fmt(runs[0][0] - (s.vanish or s.onset)) if runs else "never"
    return out


def benign_figures(s: Scenario, timeline: Timeline) -> tuple[float, float]:
    """(pages per day, warnings per day)."""
    days = s.hours / 24
    return (len(_runs(timeline, alert_rules.ACCEPTANCE_CRITICAL)) / days,
            len(_runs(timeline, alert_rules.ACCEPTANCE_LOW)) / days)


def compare_sources(results: dict[tuple[str, str], Timeline], chosen: list[Scenario]) -> str:
    """Pages of the sidecar's rules (new) and of the sidecar-less ones (direct), per scenario and
    alert: every firing episode's start and end, and the largest difference in seconds."""
    lines = ["| scenario | alert | pod | sidecar (new): episodes | direct: episodes | largest difference |",
             "|---|---|---|---|---|---|"]
    worst = 0.0
    for s in chosen:
        new, direct = results[(s.name, "new")], results[(s.name, DIRECT)]
        direct_alerts = {a["alert"] for a in alert_rules.all_alerts(MixinConfig().with_overrides({"source": "vllm"}))}
        keys = sorted({k for k in (*new, *direct) if k[0] in (*ACCEPTANCE, *s.expect) and k[0] in direct_alerts})
        for name, instance in keys:
            a, b = _runs(new, name, instance), _runs(direct, name, instance)
            if len(a) == len(b):
                diff = max((abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)),
                           default=0.0)
                worst = max(worst, diff)
                shown = f"{diff:g} s"
            else:
                shown, worst = "episodes differ", math.inf
            def fmt(runs: list[tuple[float, float]]) -> str:
                return ", ".join(f"{_fmt(x)}–{_fmt(y)}" for x, y in runs) or "none"
            lines.append(f"| {s.name} | {name} | {instance} | {fmt(a)} | {fmt(b)} | {shown} |")
    lines.append(f"\nlargest difference between the two sources: {worst:g} s (evaluation interval {STEP_S} s)")
    return "\n".join(lines)


def render_tables(results: dict[tuple[str, str], Timeline], all_scenarios: list[Scenario]) -> str:
    cfg = MixinConfig()
    lines = [
        f"Measured by `bench/alert_quality.py` (default config; 15 s scrape and evaluation, promtool "
        f"{_promtool_version()}). **new** = these rules; **previous** = the rules at `{PREVIOUS_COMMIT}` "
        "(2m ratio, volume guard, keep_firing_for 5m); **baseline** = mixin style `rate[5m]`, `for: 10m`. "
        "Times are from onset (recovery, series vanishing) to the alert's first (last) firing "
        "evaluation; Alertmanager's group_wait comes on top.",
        "",
        "**Benign scenarios: false alerts per simulated day** (pages = critical / warnings)",
        "",
        "| Scenario | Simulated | new | previous | baseline |",
        "|---|---|---|---|---|",
    ]
    for s in (x for x in all_scenarios if x.benign):
        cells = []
        for rs in RULE_SETS:
            pages, warns = benign_figures(s, results[(s.name, rs)])
            cells.append(f"{pages:.3g} / {warns:.3g}")
        lines.append(f"| {s.name} | {s.hours:g} h | " + " | ".join(cells) + " |")
    lines += ["", "**Malign scenarios** (warn = warning fires, page = critical fires)", "",
              "| Scenario | Figure | new | previous | baseline |", "|---|---|---|---|---|"]
    for s in (x for x in all_scenarios if not x.benign):
        figures = {rs: malign_figures(s, results[(s.name, rs)]) for rs in RULE_SETS}
        for i, key in enumerate(figures["new"]):
            name = s.name if i == 0 else ""
            lines.append(f"| {name} | {key} | " + " | ".join(figures[rs].get(key, "-") for rs in RULE_SETS) + " |")
    notes = [f"- *{s.name}*: {s.note}" for s in all_scenarios if s.note]
    lines += ["", "Notes:", *notes,
              f"- new rules: confidence {cfg.confidence_label}, overdispersion {cfg.acceptance_overdispersion:g}, "
              f"fast {cfg.acceptance_fast_long_window}/{cfg.acceptance_fast_short_window}, slow "
              f"{cfg.acceptance_slow_long_window}/{cfg.acceptance_slow_short_window}, for warning "
              f"{cfg.acceptance_low_for} / critical {cfg.acceptance_critical_for}."]
    return "\n".join(lines) + "\n"


def _promtool_version() -> str:
    out = subprocess.run([shutil.which("promtool") or "/usr/bin/promtool", "--version"], capture_output=True,
                         text=True, check=False).stdout
    match = re.search(r"version (\S+)", out)
    return match.group(1) if match else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"store the tables in {rule_files.QUALITY_TABLE}")
    parser.add_argument("--only", default="", help="run scenarios whose name contains this text")
    parser.add_argument("--rules", default=",".join(RULE_SETS),
                        help=f"comma-separated rule sets to run ({', '.join(RULE_SETS)}, {DIRECT})")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="MixinConfig override for the new rules (tuning; --write refuses it)")
    args = parser.parse_args()
    chosen = [s for s in scenarios() if args.only in s.name]
    sets = [r for r in args.rules.split(",") if r]
    with tempfile.TemporaryDirectory(prefix="alert-quality-") as tmp:
        workdir = Path(tmp)
        cfg = MixinConfig().with_overrides(dict(item.split("=", 1) for item in args.sets))
        dirs = write_rule_sets(workdir, cfg)
        jobs = [(s, rs) for s in chosen for rs in sets]

        def run(job: tuple[Scenario, str]) -> Timeline:
            s, rs = job
            slug = re.sub(r"\W+", "_", f"{s.name}_{rs}")
            return run_promtool(test_file(s, dirs[rs], direct=rs == DIRECT), workdir / f"{slug}.yaml")

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            timelines = list(pool.map(run, jobs))
    results = {(s.name, rs): tl for (s, rs), tl in zip(jobs, timelines, strict=True)}
    if DIRECT in sets and "new" in sets:
        print(compare_sources(results, chosen))
        return 0
    if set(sets) != set(RULE_SETS):
        for s in chosen:
            for rs in sets:
                tl = results[(s.name, rs)]
                print(s.name, rs, malign_figures(s, tl) if not s.benign else benign_figures(s, tl))
        return 0
    table = render_tables(results, chosen)
    print(table)
    if args.write:
        if args.only or args.sets:
            raise SystemExit("--write needs every scenario and the default config (drop --only/--set)")
        rule_files.QUALITY_TABLE.write_text(table)
        print(f"wrote {rule_files.QUALITY_TABLE.relative_to(ROOT)}; now run `vllm-spec-exporter generate`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
