"""Time-to-fire / time-to-resolve of the acceptance alerts vs a mixin-style baseline, and pages on
benign traffic. Prints figures and ratios; asserts nothing about time.

Method (honest and reproducible): both rule sets are rendered from MixinConfig — ours with the
defaults, the baseline with the usual mixin choices (`rate[5m]`, `for: 10m`, no hysteresis), the
rest identical. Each scenario is a synthetic exporter series at a 15 s scrape interval, evaluated
by Prometheus' own rule engine through `promtool test rules` with a 15 s evaluation interval: the
generated test expects "no alert" at every step, so every step where an alert fires shows up as a
failure, which is parsed into a firing timeline. Real deployments add Alertmanager's group_wait
(30 s by default) before the page leaves.

    .venv/bin/python bench/alert_timing.py
"""

from __future__ import annotations

import math
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from vllm_spec_exporter.mixin import alerts, rules
from vllm_spec_exporter.mixin.config import MixinConfig

STEP_S = 15  # scrape and evaluation interval, seconds
K = 4  # draft tokens per draft
LABELS = 'job="vllm-spec-exporter",instance="10.0.0.7:9400",model_name="llama",engine="0"'
BASELINE_OVERRIDES = {
    "rate_window": "5m", "acceptance_low_for": "10m", "acceptance_critical_for": "10m",
    "acceptance_keep_firing_for": "0s",
}

# acceptance(t) and drafts per second(t) -> the scenario; None acceptance = restart marker
Profile = Callable[[float], tuple[float, float]]


@dataclass(frozen=True)
class Scenario:
    name: str
    minutes: int
    profile: Profile
    benign: bool
    restart_at_s: float | None = None  # vLLM restart: counters drop to 0 here


def _collapse(t: float) -> tuple[float, float]:
    if 20 * 60 <= t < 40 * 60:
        return 0.1, 25.0
    return 0.8, 25.0


def _healthy(_t: float) -> tuple[float, float]:
    return 0.75, 25.0


def _flapping(t: float) -> tuple[float, float]:
    # ±6 points around 50 %, switching every 90 s
    return (0.56 if int(t // 90) % 2 == 0 else 0.44), 25.0


def _brief_dip(t: float) -> tuple[float, float]:
    # one minute of bad requests (10 %) every 15 minutes
    return (0.1 if (t % 900) >= 840 else 0.75), 25.0


def _idle(_t: float) -> tuple[float, float]:
    return 0.0, 0.0


def _trickle(_t: float) -> tuple[float, float]:
    # terrible acceptance, but only ~0.5 draft tokens/s
    return 0.1, 0.12


def _bursty(t: float) -> tuple[float, float]:
    # light, bursty traffic at a healthy mean: 0..6 drafts/s changing every minute
    burst = random.Random(int(t // 60)).choice([0.0, 0.5, 1.0, 3.0, 6.0])
    return 0.62, burst


SCENARIOS = (
    Scenario("collapse 80%→10% at 20m, recovery at 40m", 60, _collapse, benign=False),
    Scenario("healthy 75%", 60, _healthy, benign=True),
    Scenario("flapping 44%/56% every 90 s", 60, _flapping, benign=True),
    Scenario("1-minute dips to 10% every 15m", 60, _brief_dip, benign=True),
    Scenario("idle", 60, _idle, benign=True),
    Scenario("trickle: 10% at 0.5 draft tok/s", 60, _trickle, benign=True),
    Scenario("bursty light traffic, 62%", 60, _bursty, benign=True),
    Scenario("vLLM restart at 30m, healthy", 60, _healthy, benign=True, restart_at_s=30 * 60 + 7),
)


def _series(scenario: Scenario, seed: int = 7) -> dict[str, list[float]]:
    """Counter samples every STEP_S, with binomial-like noise in accepted tokens per step."""
    rng = random.Random(seed)
    drafts = draft_tokens = accepted = generation = 0.0
    out: dict[str, list[float]] = {"drafts": [], "draft_tokens": [], "accepted": [], "generation": []}
    for step in range(scenario.minutes * 60 // STEP_S + 1):
        t = step * STEP_S
        if scenario.restart_at_s is not None and t - STEP_S < scenario.restart_at_s <= t:
            drafts = draft_tokens = accepted = generation = 0.0
        acceptance, drafts_per_s = scenario.profile(t)
        if step:
            n = int(rng.gauss(drafts_per_s * STEP_S, math.sqrt(drafts_per_s * STEP_S) + 1e-9)) if drafts_per_s else 0
            n = max(n, 0)
            tokens = n * K
            ok = sum(1 for _ in range(tokens) if rng.random() < acceptance)
            drafts, draft_tokens, accepted, generation = (drafts + n, draft_tokens + tokens,
                                                          accepted + ok, generation + n + ok)
        out["drafts"].append(drafts)
        out["draft_tokens"].append(draft_tokens)
        out["accepted"].append(accepted)
        out["generation"].append(generation)
    return out


def _test_file(scenario: Scenario, rules_dir: Path) -> dict:
    samples = _series(scenario)
    names = {"drafts": "vllm_spec_decode_drafts_total", "draft_tokens": "vllm_spec_decode_draft_tokens_total",
             "accepted": "vllm_spec_decode_accepted_tokens_total", "generation": "vllm_generation_tokens_total"}
    steps = range(1, scenario.minutes * 60 // STEP_S + 1)
    checks = [{"eval_time": f"{s * STEP_S}s", "alertname": name}
              for s in steps for name in (rules.ACCEPTANCE_LOW, rules.ACCEPTANCE_CRITICAL)]
    return {
        "rule_files": [str(rules_dir / alerts.RULES_FILE), str(rules_dir / alerts.ALERTS_FILE)],
        "evaluation_interval": f"{STEP_S}s",
        "group_eval_order": [rules.RECORDING_GROUP, rules.ACCEPTANCE_GROUP, rules.EXPORTER_GROUP],
        "tests": [{
            "interval": f"{STEP_S}s",
            "input_series": [{"series": f"{metric}{{{LABELS}}}", "values": " ".join(f"{v:g}" for v in samples[key])}
                             for key, metric in names.items()],
            "alert_rule_test": checks,
        }],
    }


_FAILURE = re.compile(r"alertname: (\w+), time: ([0-9hms.]+),\s*\n\s*exp:\[\],\s*\n\s*got:\[")


def _seconds(duration: str) -> float:
    total = 0.0
    for value, unit in re.findall(r"([0-9.]+)(h|ms|m|s)", duration):
        total += float(value) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[unit]
    return total


def firing_timeline(scenario: Scenario, rules_dir: Path, workdir: Path) -> dict[str, list[float]]:
    """alertname -> sorted eval times (s) at which it was firing."""
    path = workdir / "scenario_test.yaml"
    path.write_text(yaml.safe_dump(_test_file(scenario, rules_dir)))
    result = subprocess.run([shutil.which("promtool") or "/usr/bin/promtool", "test", "rules", str(path)],
                            capture_output=True, text=True, check=False, timeout=300)
    output = result.stdout + result.stderr
    if result.returncode != 0 and "FAILED" not in output:
        raise RuntimeError(output)
    timeline: dict[str, list[float]] = {rules.ACCEPTANCE_LOW: [], rules.ACCEPTANCE_CRITICAL: []}
    for name, when in _FAILURE.findall(output):
        timeline[name].append(_seconds(when))
    return {name: sorted(times) for name, times in timeline.items()}


def episodes(times: list[float]) -> list[tuple[float, float]]:
    """Contiguous firing runs as (first firing eval, first eval no longer firing)."""
    runs: list[tuple[float, float]] = []
    for t in times:
        if runs and t - runs[-1][1] < STEP_S / 2:
            runs[-1] = (runs[-1][0], t + STEP_S)
        else:
            runs.append((t, t + STEP_S))
    return runs


def main() -> int:
    configs = {"ours": MixinConfig(), "baseline": MixinConfig().with_overrides(BASELINE_OVERRIDES)}
    with tempfile.TemporaryDirectory(prefix="alert-timing-") as tmp:
        workdir = Path(tmp)
        dirs = {}
        for label, cfg in configs.items():
            dirs[label] = workdir / label
            for rel, text in alerts.render(cfg).items():
                (dirs[label] / rel).parent.mkdir(parents=True, exist_ok=True)
                (dirs[label] / rel).write_text(text)
        results = {(s.name, label): firing_timeline(s, dirs[label], workdir) for s in SCENARIOS for label in configs}

    ours, base = configs["ours"], configs["baseline"]
    print(f"scrape/evaluation interval {STEP_S}s; k={K}; Alertmanager group_wait not included")
    print(f"ours:     rate[{ours.rate_window}], warning for {ours.acceptance_low_for}, critical for "
          f"{ours.acceptance_critical_for}, keep_firing_for {ours.acceptance_keep_firing_for}")
    print(f"baseline: rate[{base.rate_window}], warning for {base.acceptance_low_for}, critical for "
          f"{base.acceptance_critical_for}, no keep_firing_for\n")

    collapse = SCENARIOS[0]
    start, end = 20 * 60, 40 * 60
    print(f"Collapse scenario ({collapse.name}):")
    print(f"  {'alert':32} {'rules':9} {'fire after':>11} {'resolve after':>14}")
    figures: dict[tuple[str, str], tuple[float, float]] = {}
    for name in (rules.ACCEPTANCE_CRITICAL, rules.ACCEPTANCE_LOW):
        for label in configs:
            runs = [r for r in episodes(results[(collapse.name, label)][name]) if r[1] > start]
            if not runs:
                print(f"  {name:32} {label:9} {'never':>11}")
                continue
            fire, resolve = runs[0][0] - start, runs[-1][1] - end
            figures[(name, label)] = (fire, resolve)
            print(f"  {name:32} {label:9} {fire:>10.0f}s {resolve:>13.0f}s   ({len(runs)} episode(s))")
    for name in (rules.ACCEPTANCE_CRITICAL, rules.ACCEPTANCE_LOW):
        if (name, "ours") in figures and (name, "baseline") in figures:
            (f_o, r_o), (f_b, r_b) = figures[(name, "ours")], figures[(name, "baseline")]
            print(f"  {name}: time-to-fire ours/baseline = {f_o / f_b:.2f}, "
                  f"time-to-resolve ours/baseline = {r_o / r_b:.2f}")
    page = figures.get((rules.ACCEPTANCE_CRITICAL, "ours"))
    if page:
        print(f"  target: page <= 150 s after a sustained collapse → measured {page[0]:.0f} s "
              f"(+ group_wait {ours.alertmanager_group_wait} before the notification leaves)")

    print("\nBenign scenarios: firing episodes (pages = critical, chat = warning)")
    print(f"  {'scenario':40} {'ours pages/chat':>16} {'baseline pages/chat':>20}")
    totals = {label: [0, 0] for label in configs}
    for scenario in (s for s in SCENARIOS if s.benign):
        cells = []
        for label in configs:
            timeline = results[(scenario.name, label)]
            pages = len(episodes(timeline[rules.ACCEPTANCE_CRITICAL]))
            chats = len(episodes(timeline[rules.ACCEPTANCE_LOW]))
            totals[label][0] += pages
            totals[label][1] += chats
            cells.append(f"{pages}/{chats}")
        print(f"  {scenario.name:40} {cells[0]:>16} {cells[1]:>20}")
    ours_total, base_total = "/".join(map(str, totals["ours"])), "/".join(map(str, totals["baseline"]))
    print(f"  {'total':40} {ours_total:>16} {base_total:>20}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
