"""Driving Prometheus' own rule engine: the rule sets (new, previous from git, baseline, direct), a
`promtool test rules` file per scenario that expects no alert, and the firing alerts parsed back
into a timeline.
"""

from __future__ import annotations

import random
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from vllm_spec_exporter.durations import seconds
from vllm_spec_exporter.engines import VLLM_PREFIXES
from vllm_spec_exporter.mixin import generate, windows
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import alert_rules, rule_files, sources
from vllm_spec_exporter.names import MetricName
from vllm_spec_lab.monitoring import PROMTOOL_BIN, PROMTOOL_OLDEST_BIN

from .scenarios import H, Pod, Scenario
from .simulation import _Counters, no_counters_at, simulate

ROOT = Path(__file__).resolve().parents[2]

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

