"""Every range selector `[d]` in the generated rules holds at least two samples on Prometheus 3's
left-open ranges `(t - d, t]`, at every scrape interval the bundle ships.

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

import pytest
import yaml

from support.paths import ROOT
from vllm_spec_exporter.durations import seconds
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import rule_files
from vllm_spec_lab import pipeline

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
