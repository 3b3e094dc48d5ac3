"""One scrape interval in the config: every window, hold and interval of the bundle derives from it.

Unit checks of mixin/windows.py (derivation, sample counts on left-open ranges, the one-line error
naming the knob) and of the rendered bundle (group `interval:`, PodMonitor, compose), plus
`promtool check rules` on bundles rendered for every scrape interval from 10 s to 120 s.

And the committed rules: every range selector `[d]` in them holds at least two samples on
Prometheus 3's left-open ranges `(t - d, t]`, at every scrape interval the bundle ships.

Prometheus 3 drops the sample at exactly `t - d`, so a window holds only floor(d / interval)
samples in the worst phase: `rate()`/`increase()` over fewer than two return nothing, and an alert
silently never fires. The intervals are read from the shipped files, not restated here: the
compose Prometheus configs (global and per job), the Kubernetes PodMonitor and the demo's
Prometheus (lab pipeline: its own rules, rendered with FAST_ALERTS, at its 2 s scrape). Recording
rules are evaluated at the evaluation interval, which is never shorter than the scrape interval in
these configs, so the longest of the two spaces the samples of a window over a record.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from support.paths import ROOT
from support.prom import require_binary, run_tool
from vllm_spec_exporter.durations import seconds
from vllm_spec_exporter.mixin import generate, windows
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.deploy import compose, kubernetes
from vllm_spec_exporter.mixin.rules import fleet_counts, fleet_records, positions, recording_rules, rule_files
from vllm_spec_lab import pipeline
from vllm_spec_lab.monitoring import PROMTOOL_BIN

DEFAULT = MixinConfig()
FLEET_GROUPS = (fleet_records.FLEET_GROUP, fleet_counts.FLEET_COUNTS_GROUP)
INTERVALS = ["10s", "15s", "20s", "30s", "45s", "60s", "90s", "120s"]


def at(interval: str, **more: object) -> MixinConfig:
    return DEFAULT.with_overrides({"scrape_interval": interval, **more})


def test_default_windows_are_the_measured_15s_bundle() -> None:
    w = DEFAULT.windows
    assert (w.fast_long, w.fast_short, w.slow_long, w.slow_short) == ("5m", "1m", "10m", "4m")
    assert (w.fleet_interval, w.k_interval) == ("1m", "1m")
    assert (w.warning_hold, w.critical_hold, w.slow_hold, w.rate_window) == ("3m", "2m30s", "6m", "2m")
    assert w.evaluation_interval == "15s"
    assert w.evidence == ("5m", "1m", "10m", "4m")


def test_one_bundle_serves_15s_and_30s_scrapes() -> None:
    fifteen, thirty = DEFAULT.windows, at("30s").windows
    for name in ("rate_window", "fast_long", "fast_short", "slow_long", "slow_short", "warning_hold",
                 "critical_hold", "slow_hold"):
        assert getattr(fifteen, name) == getattr(thirty, name), name


@pytest.mark.parametrize("interval", INTERVALS)
def test_every_window_holds_enough_samples_on_left_open_ranges(interval: str) -> None:
    w = at(interval).windows
    scrape = windows.seconds(interval)
    for window in (w.rate_window, w.fast_long, w.slow_long, w.slow_short):
        assert windows.samples_in(windows.seconds(window), scrape) >= windows.ALWAYS_SAMPLES, window
    assert windows.samples_in(windows.seconds(w.fast_short), scrape) >= windows.SHORT_SAMPLES
    # Holds are whole evaluation intervals; each tier's short window is shorter than its long one.
    for hold in (w.warning_hold, w.critical_hold, w.slow_hold):
        assert windows.seconds(hold) % windows.seconds(w.evaluation_interval) == 0, hold
    assert windows.seconds(w.fast_short) < windows.seconds(w.fast_long)
    assert windows.seconds(w.slow_short) < windows.seconds(w.slow_long)


def test_a_1m_window_at_60s_is_what_the_60s_bundle_avoids() -> None:
    assert windows.samples_in(60, 60) == 1  # (t-1m, t] holds one sample: no rate at all
    w = at("60s").windows
    assert w.fast_short == "2m" and w.rate_window == "4m"
    assert (w.critical_hold, w.warning_hold) == ("3m", "4m")


def test_holds_follow_the_dip_formula() -> None:
    # dip 2m, healthy 55 %, short window 1m: critical 2m + (1 - 2(1 - .4/.55)) 1m = 2m27s -> 2m30s
    assert windows.dip_hold(120, 60, 0.4, 0.55, 15) == "2m30s"
    assert windows.dip_hold(120, 60, 0.5, 0.55, 15) == "3m"
    # A longer tolerated dip or a higher healthy floor moves the hold with it.
    assert at("15s", acceptance_dip_tolerance="3m").windows.critical_hold == "3m30s"
    assert windows.seconds(at("15s", acceptance_healthy_floor=0.8).windows.critical_hold) < 150


@pytest.mark.parametrize(("overrides", "knob"), [
    ({"scrape_interval": "60s", "rate_window": "2m"}, "rate_window"),
    ({"scrape_interval": "60s", "acceptance_fast_short_window": "1m"}, "acceptance_fast_short_window"),
    ({"scrape_interval": "30s", "acceptance_fast_long_window": "1m30s"}, "acceptance_fast_long_window"),
    ({"scrape_interval": "2m", "acceptance_slow_short_window": "4m"}, "acceptance_slow_short_window"),
    ({"scrape_interval": "10m"}, "reset_window"),
])
def test_too_few_samples_is_a_one_line_error_naming_the_knob(overrides: dict, knob: str) -> None:
    with pytest.raises(ValueError) as error:
        DEFAULT.with_overrides(overrides)
    message = str(error.value)
    assert message.startswith(f"{knob} (") and "left-open" in message and "\n" not in message


def test_explicit_windows_win_over_derived_ones() -> None:
    cfg = at("2s", rate_window="30s", acceptance_fast_short_window="10s", acceptance_critical_for="30s")
    assert (cfg.windows.rate_window, cfg.windows.fast_short, cfg.windows.critical_hold) == ("30s", "10s", "30s")


@pytest.mark.parametrize("interval", ["15s", "60s"])
def test_the_bundle_carries_the_interval_everywhere(interval: str) -> None:
    cfg = at(interval)
    files = generate.render_all(cfg)
    for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE):
        for group in yaml.safe_load(files[rel])["groups"]:
            if group["name"] not in FLEET_GROUPS:  # a minute at least (the next tests)
                assert group["interval"] == interval, (rel, group["name"])
    podmonitor = yaml.safe_load(files[kubernetes.PODMONITOR_FILE])
    assert podmonitor["spec"]["podMetricsEndpoints"][0]["interval"] == interval
    for rel in (compose.PROMETHEUS_FILE, compose.MONITORING_PROMETHEUS_FILE):
        prometheus = yaml.safe_load(files[rel])
        assert prometheus["global"]["scrape_interval"] == interval
        assert prometheus["global"]["evaluation_interval"] == interval
        assert all("scrape_interval" not in job for job in prometheus["scrape_configs"])
    # The evidence records exist for exactly the windows the alerts read.
    records = {r["record"] for g in yaml.safe_load(files[rule_files.RULES_FILE])["groups"] for r in g["rules"]}
    for window in cfg.windows.evidence:
        assert recording_rules.evidence_names(window).upper in records


@pytest.mark.parametrize(("interval", "at_least_a_minute"),
                         [("15s", "1m"), ("60s", "1m"), ("90s", "1m30s"), ("120s", "2m")])
@pytest.mark.parametrize("source", ["exporter", "vllm"])
def test_k_and_the_fleet_groups_run_once_a_minute_or_at_the_evaluation_interval(
        interval: str, at_least_a_minute: str, source: str) -> None:
    """Without the sidecar k is counted in a group of its own (positions.k_group); the fleet groups
    feed only dashboards. Each runs at least a minute apart; every other group keeps the
    evaluation interval."""
    files = generate.render_all(at(interval, source=source))
    intervals = {g["name"]: g["interval"] for g in yaml.safe_load(files[rule_files.RULES_FILE])["groups"]}
    assert {name: intervals.pop(name) for name in FLEET_GROUPS} == dict.fromkeys(FLEET_GROUPS, at_least_a_minute)
    if source == "vllm":
        assert intervals.pop(positions.K_GROUP) == at_least_a_minute
    assert set(intervals.values()) == {interval}


@pytest.mark.parametrize("interval", INTERVALS)
def test_the_derived_fleet_interval_never_outlasts_the_rate_window(interval: str) -> None:
    """A minute, the rate window when that is shorter (a 10 s scrape with a 45 s window), never
    shorter than the evaluation interval."""
    for cfg in (at(interval), at(interval, rate_window=f"{4 * int(interval[:-1]) + 5}s")):
        w = cfg.windows
        assert seconds(w.evaluation_interval) <= seconds(w.fleet_interval) <= seconds(w.rate_window)
        assert seconds(w.fleet_interval) == max(seconds(w.evaluation_interval), min(60, seconds(w.rate_window)))
    assert at("10s", rate_window="45s").windows.fleet_interval == "45s"


@pytest.mark.parametrize(("knob", "message"), [
    ("3m", "fleet_evaluation_interval (3m) must not be longer than rate_window (2m)"),
    ("10s", "fleet_evaluation_interval (10s) must not be shorter than the evaluation interval (15s)"),
])
def test_an_explicit_fleet_interval_stays_within_evaluation_and_rate_window(knob: str, message: str) -> None:
    """Set explicitly it wins (30 s) within those bounds, and outside them is a one-line error."""
    groups = yaml.safe_load(generate.render_all(at("15s", fleet_evaluation_interval="30s"))[rule_files.RULES_FILE])
    assert {g["name"]: g["interval"] for g in groups["groups"] if g["name"] in FLEET_GROUPS} == dict.fromkeys(
        FLEET_GROUPS, "30s")
    with pytest.raises(ValueError, match=re.escape(message)):
        at("15s", fleet_evaluation_interval=knob)


@pytest.mark.prometheus
def test_every_interval_from_10s_to_120s_renders_rules_promtool_accepts(tmp_path: Path) -> None:
    promtool = require_binary(PROMTOOL_BIN)
    paths = []
    for interval in INTERVALS:
        files = generate.render_all(at(interval))
        for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE):
            path = tmp_path / interval / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(files[rel])
            paths.append(str(path))
    result = run_tool([promtool, "check", "rules", *paths])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(paths)


def test_generate_output_renders_a_60s_bundle_into_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    generate.add_arguments(parser)
    args = parser.parse_args(["--set", "scrape_interval=60s", "--output", str(tmp_path / "b60")])
    assert generate.run(args) == 0
    rules = yaml.safe_load((tmp_path / "b60" / rule_files.ALERTS_FILE).read_text())
    assert {g["interval"] for g in rules["groups"]} == {"60s"}
    alerts_text = (tmp_path / "b60" / rule_files.ALERTS_FILE).read_text()
    assert 'confidence_upper_2m{job="vllm-spec-exporter"}[3m]' in alerts_text
    assert (tmp_path / "b60" / kubernetes.PODMONITOR_FILE).is_file()
    assert (tmp_path / "b60" / compose.PROMETHEUS_FILE).is_file()


# --- every range selector of the committed rules, at every shipped interval -------------------

# `[5m]`, `[2m30s]`, and the range of a subquery `[5m:1m]` (its resolution is checked separately).
_RANGE = re.compile(r"\[(?P<range>(?:\d+[smhdw])+)(?::(?P<step>(?:\d+[smhdw])+)?)?\]")


def ranges(rules_text: str) -> list[tuple[str, str, int, int | None]]:
    """(rule name, selector, range seconds, subquery step seconds or None) of every range selector."""
    found = []
    for group in yaml.safe_load(rules_text)["groups"]:
        for rule in group["rules"]:
            name = rule.get("record") or rule.get("alert")
            for match in _RANGE.finditer(str(rule["expr"])):
                step = match["step"]
                found.append((name, match[0], seconds(match["range"]), seconds(step) if step else None))
    return found


def shipped_intervals() -> set[int]:
    """Every scrape interval (seconds) a shipped config sets, with each config's evaluation interval
    when that is longer."""
    intervals = set()
    for path in sorted((ROOT / "compose" / "prometheus").glob("*.yml")):
        config = yaml.safe_load(path.read_text())
        global_ = config.get("global", {})
        evaluation = seconds(global_.get("evaluation_interval", "1m"))
        for job in config["scrape_configs"]:
            scrape = seconds(job.get("scrape_interval", global_.get("scrape_interval", "1m")))
            intervals.add(max(scrape, evaluation))
    for path in sorted((ROOT / "deploy" / "kubernetes").rglob("podmonitor*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            for endpoint in document["spec"]["podMetricsEndpoints"]:
                intervals.add(seconds(endpoint["interval"]))
    return intervals


def samples_in(window: int, interval: int) -> int:
    """Samples a left-open window (t - window, t] holds in its worst phase."""
    return window // interval


def test_the_shipped_intervals_are_found() -> None:
    intervals = shipped_intervals()
    assert 15 in intervals, intervals  # compose's global and the PodMonitor's


@pytest.mark.parametrize("rel", [rule_files.RULES_FILE, rule_files.ALERTS_FILE])
def test_every_committed_window_holds_two_samples_at_every_shipped_interval(rel: str) -> None:
    found = ranges((ROOT / rel).read_text())
    assert found, f"no range selector in {rel}"
    too_short = [f"{name}: {selector} holds {samples_in(window, interval)} sample(s) at a {interval}s interval"
                 for interval in sorted(shipped_intervals())
                 for name, selector, window, step in found
                 if samples_in(window, step or interval) < 2]
    assert not too_short, "\n".join(too_short)


def test_every_demo_window_holds_two_samples_at_its_2s_scrape() -> None:
    """The demo renders its own short-window rules (pipeline.FAST_ALERTS) for a 2 s Prometheus."""
    rendered = rule_files.render(MixinConfig().with_overrides(pipeline.FAST_ALERTS))
    demo_interval = seconds(pipeline.DEMO_SCRAPE_INTERVAL)
    too_short = [f"{name}: {selector} holds {samples_in(window, step or demo_interval)} sample(s)"
                 for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE)
                 for name, selector, window, step in ranges(rendered[rel])
                 if samples_in(window, step or demo_interval) < 2]
    assert not too_short, "\n".join(too_short)


def test_the_check_can_fail() -> None:
    """A 1m window at a 60 s scrape holds one sample on a left-open range."""
    assert samples_in(seconds("1m"), 60) == 1
    assert ranges("groups: [{name: g, rules: [{record: r, expr: 'rate(x[1m])'}]}]") == [("r", "[1m]", 60, None)]
