"""The promtool scenarios (alerts/tests/*.yaml, direct/alerts/tests/*.yaml) run through `vmalert-tool unittest` as well:
VictoriaMetrics' own rule tester, with vmalert's evaluation and MetricsQL.

The files are used as they are, converted only where the two formats differ by name
(`promql_expr_test` is `metricsql_expr_test`; rule paths made absolute) and with
`--disableAlertgroupLabel` (vmalert's default `alertgroup` label would otherwise be on every
expected alert). Every check that fails under vmalert-tool must be one of the documented
differences, each proven rather than assumed:

- LATE_BY_ONE_EVALUATION: an alert (or its ALERTS series) fires, or resolves, exactly one
  evaluation later than on Prometheus. MetricsQL's `increase()`/`rate()` over `[d]` also use the
  last sample before the window and never extrapolate, so a window still "remembers" the old
  acceptance for one more sample. Proven twice for each such check at time T: Prometheus'
  expectation changes state between T - step and T (promtool 3.x or 2.42 fails the same
  expectation moved to T - step; the files check just after both versions' transition, which
  differ by one step: left-open ranges), otherwise a one-evaluation false page, or a missing one,
  would be excused as "late"; and vmalert-tool passes the check moved to T + step.
- TWELVE_DIGITS: VictoriaMetrics stores about 12 significant decimal digits, so a ratio such as
  7/3 differs from Prometheus' float64 result in the 13th digit; the values must agree to 1e-10.
- NAME_KEPT: MetricsQL's `round()` keeps the metric name (PromQL drops it); the samples must be
  equal otherwise.

Anything else fails the test. The table of differences is printed in the terminal summary
(tests/conftest.py).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from support.paths import ROOT, promtool_scenarios
from support.prom import require_binary, run_tool
from support.report import VMALERT_DIFFERENCES  # printed at the end of the run
from vllm_spec_exporter.durations import format_duration, seconds
from vllm_spec_lab.binaries import PROMTOOL_BIN, PROMTOOL_OLDEST_BIN, VMALERT_TOOL_BIN

pytestmark = pytest.mark.prometheus

SCENARIO_FILES = promtool_scenarios()

# vmalert-tool's failure report: per test group "testGroupName: <test>," then one block per failed
# alert check or expression check.
_ALERT_FAILURE = re.compile(
    r"\n\s+groupname: .*?, alertname: (?P<alertname>\w+), time: (?P<time>\S+), \n"
    r"\s+exp:(?P<exp>\[\]|\[.*?\n\s+\]), \n\s+got:(?P<got>\[\]|\[.*?\n\s+\])", re.S)
_EXPR_FAILURE = re.compile(
    r"\n\s+expr: \"(?P<expr>.*?)\", time: (?P<time>\S+),\n"
    r"\s+exp: (?P<exp>.*?)\n\s+got: (?P<got>.*?)\s*(?=\n|\]|$)", re.S)
_SAMPLE = re.compile(r"(\{[^}]*\}) (\S+?)(?:,|$)")


def as_vmalert_tool(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    doc["rule_files"] = [str((path.parent / rule).resolve()) for rule in doc["rule_files"]]
    for test in doc["tests"]:
        if "promql_expr_test" in test:
            test["metricsql_expr_test"] = test.pop("promql_expr_test")
    return doc


def run_vmalert_tool(doc: dict, folder: Path, name: str) -> tuple[int, str]:
    path = folder / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = run_tool([require_binary(VMALERT_TOOL_BIN), "unittest", "--disableAlertgroupLabel",
                       f"--files={path}"], cwd=folder, timeout=600)
    return result.returncode, result.stdout + result.stderr


def samples(text: str) -> list[tuple[str, float]]:
    return [(labels, float(value)) for labels, value in _SAMPLE.findall(text.strip())]


def value_difference(exp: str, got: str) -> str | None:
    """TWELVE_DIGITS or NAME_KEPT when that explains the whole difference, else None."""
    expected, actual = samples(exp), samples(got)
    if not expected or len(expected) != len(actual):
        return None
    strip_name = re.compile(r'__name__="[^"]*", ?')
    names_differ = False
    for (exp_labels, exp_value), (got_labels, got_value) in zip(expected, actual, strict=True):
        if exp_labels != got_labels:
            if strip_name.sub("", exp_labels) != strip_name.sub("", got_labels):
                return None
            names_differ = True
        if not math.isclose(exp_value, got_value, rel_tol=1e-10, abs_tol=1e-12):
            return None
    return "NAME_KEPT" if names_differ else "TWELVE_DIGITS"


def shifted(test: dict, late: set[tuple[str, int]], step: int) -> dict:
    """The test with only its late checks, each moved one evaluation later (the rest passed)."""
    out = {k: v for k, v in test.items() if k not in ("alert_rule_test", "metricsql_expr_test")}
    out["alert_rule_test"] = [dict(check, eval_time=format_duration(seconds(check["eval_time"]) + step))
                              for check in test.get("alert_rule_test", [])
                              if (check["alertname"], seconds(check["eval_time"])) in late]
    out["metricsql_expr_test"] = [dict(check, eval_time=format_duration(seconds(check["eval_time"]) + step))
                                  for check in test.get("metricsql_expr_test", [])
                                  if (check["expr"], seconds(check["eval_time"])) in late]
    assert len(out["alert_rule_test"]) + len(out["metricsql_expr_test"]) == len(late), late
    return out


def prometheus_changes_state(path: Path, index: int, late_check: tuple[str, int], step: int, folder: Path) -> bool:
    """True when Prometheus' expectation for `late_check` (alertname or expr, at T) is NOT what
    Prometheus gives at T - step: promtool (3.x, else 2.42) fails the same expectation moved there."""
    key, at = late_check
    if at - step < 0:
        return False
    doc = yaml.safe_load(path.read_text())
    doc["rule_files"] = [str((path.parent / rule).resolve()) for rule in doc["rule_files"]]
    test = doc["tests"][index]
    earlier = {k: v for k, v in test.items() if k not in ("alert_rule_test", "promql_expr_test")}
    before = format_duration(at - step)
    earlier["alert_rule_test"] = [dict(check, eval_time=before) for check in test.get("alert_rule_test", [])
                                  if (check["alertname"], seconds(check["eval_time"])) == late_check]
    earlier["promql_expr_test"] = [dict(check, eval_time=before) for check in test.get("promql_expr_test", [])
                                   if (check["expr"], seconds(check["eval_time"])) == late_check]
    assert earlier["alert_rule_test"] or earlier["promql_expr_test"], f"{key} at {at}s not in {path.name}"
    moved = folder / f"{index}-earlier-{path.name}"
    moved.write_text(yaml.safe_dump({**doc, "tests": [earlier]}, sort_keys=False))
    return any(run_tool([require_binary(promtool), "test", "rules", str(moved)], cwd=folder, timeout=600).returncode
               for promtool in (PROMTOOL_BIN, PROMTOOL_OLDEST_BIN))


def explain_failures(output: str) -> tuple[set[tuple[str, int]], list[tuple[str, str]], list[str]]:
    """(late checks, explained (check, reason), unexplained) from one test's vmalert-tool output."""
    alert_failures = list(_ALERT_FAILURE.finditer(output))
    expr_failures = list(_EXPR_FAILURE.finditer(output))
    late: set[tuple[str, int]] = set()
    explained: list[tuple[str, str]] = []
    unexplained: list[str] = []
    # Every failure block is parsed, or the test fails: nothing may slip through unread.
    blocks = len(re.findall(r"\n\s+groupname: ", output)) + len(re.findall(r'\n\s+expr: "', output))
    if blocks != len(alert_failures) + len(expr_failures) or (blocks == 0 and "FAILED" in output):
        unexplained.append(f"unparsed vmalert-tool output:\n{output[-3000:]}")
    for failure in alert_failures:
        late.add((failure["alertname"], seconds(failure["time"])))
        explained.append((f"{failure['alertname']} at {failure['time']}", "LATE_BY_ONE_EVALUATION"))
    for failure in expr_failures:
        expr = failure["expr"].replace('\\"', '"')
        reason = value_difference(failure["exp"], failure["got"])
        if reason is None and expr.startswith("count(ALERTS"):
            late.add((expr, seconds(failure["time"])))
            reason = "LATE_BY_ONE_EVALUATION"
        if reason is None:
            unexplained.append(f"{expr} at {failure['time']}: expected {failure['exp']}, got {failure['got']}")
        else:
            explained.append((f"{expr[:60]} at {failure['time']}", reason))
    return late, explained, unexplained


@pytest.mark.slow  # one vmalert-tool run per scenario test: minutes
@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: f"{p.relative_to(ROOT).parent.parent}:{p.stem}")
def test_scenarios_on_vmalert_tool(path: Path, tmp_path: Path) -> None:
    """One vmalert-tool run per test (its report names the test of an alert failure, not of an
    expression failure), then one more for the late checks, one evaluation later."""
    doc = as_vmalert_tool(path)
    step = seconds(doc.get("evaluation_interval", "1m"))
    problems: list[str] = []
    for index, test in enumerate(doc["tests"]):
        single = {**doc, "tests": [test]}
        code, output = run_vmalert_tool(single, tmp_path, f"{index}-{path.name}")
        if code == 0:
            continue
        late, explained, unexplained = explain_failures(output)
        name = test.get("name", f"test {index}")
        VMALERT_DIFFERENCES.extend((path.name, name, check, reason) for check, reason in explained)
        problems.extend(f"{name}: {text}" for text in unexplained)
        for key, at in sorted(late):
            if not prometheus_changes_state(path, index, (key, at), step, tmp_path):
                unexplained.append(f"{key[:70]} at {at}s fails on vmalert-tool, but Prometheus' expectation "
                                   f"does not change between {at - step}s and {at}s: not a late evaluation")
                problems.append(f"{name}: {unexplained[-1]}")
        if late and not unexplained:
            later = {**doc, "tests": [shifted(test, late, step)]}
            later_code, later_output = run_vmalert_tool(later, tmp_path, f"{index}-late-{path.name}")
            if later_code != 0:
                problems.append(f"{name}: failed checks are not merely one evaluation late:\n"
                                f"{later_output[-3000:]}")
    assert not problems, "\n".join(problems)



def test_prometheus_changes_state_tells_a_late_evaluation_from_a_real_change(tmp_path: Path) -> None:
    """The check behind "late by one evaluation": an expectation that already held one step earlier
    is not a change of state (False); one that did not hold there is (True)."""
    (tmp_path / "rules.yaml").write_text("groups: [{name: g, rules: [{record: one, expr: vector(1)}]}]\n")
    test = {"interval": "1m", "input_series": [{"series": "x", "values": "0 0 1"}],
            "promql_expr_test": [{"expr": "one", "eval_time": "2m", "exp_samples": [{"labels": "one", "value": 1}]},
                                 {"expr": "x", "eval_time": "2m", "exp_samples": [{"labels": "x", "value": 1}]}]}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [test]}))
    assert prometheus_changes_state(path, 0, ("one", seconds("2m")), 60, tmp_path) is False
    assert prometheus_changes_state(path, 0, ("x", seconds("2m")), 60, tmp_path) is True
