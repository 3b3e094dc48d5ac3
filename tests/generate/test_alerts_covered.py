"""Every alert a bundle ships is promtool-tested in the files shipped beside it.

Users run `promtool test rules alerts/tests/*.yaml` (and `direct/alerts/tests/*.yaml`) on what they
deploy. For each bundle this reads the alert names of its committed alert file and the committed
scenarios that load it (wherever they are: a file testing both bundles counts for each), and
fails unless every alert has a case that fires (`exp_alerts` not empty) and a case where it must
stay quiet (an `alert_rule_test` of that alert with no `exp_alerts`). Scenarios generated inside
tests/ do not count: they are not what users can run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from support.paths import BUNDLES, ROOT, TESTS, promtool_scenarios
from vllm_spec_exporter.mixin.rules import rule_files


def alert_names(bundle: Path) -> set[str]:
    groups = yaml.safe_load((bundle / Path(rule_files.ALERTS_FILE).name).read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def loads(scenario: Path) -> set[Path]:
    """The rule files a scenario loads, resolved as promtool does: relative to the scenario."""
    return {(scenario.parent / name).resolve() for name in yaml.safe_load(scenario.read_text())["rule_files"]}


def cases(bundle: Path) -> tuple[set[str], set[str]]:
    """(alerts with a firing case, alerts with a quiet case) in the scenarios loading `bundle`'s alerts."""
    alerts_file = (bundle / Path(rule_files.ALERTS_FILE).name).resolve()
    firing: set[str] = set()
    quiet: set[str] = set()
    for scenario in promtool_scenarios():
        if alerts_file not in loads(scenario):
            continue
        for test in yaml.safe_load(scenario.read_text())["tests"]:
            for check in test.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    return firing, quiet


@pytest.mark.parametrize("bundle", BUNDLES.values(), ids=BUNDLES.keys())
def test_every_alert_fires_in_the_committed_scenarios(bundle: Path) -> None:
    names = alert_names(bundle)
    firing, _ = cases(bundle)
    assert names, f"no alert in {bundle.relative_to(ROOT)}"
    missing = sorted(names - firing)
    assert not missing, f"{bundle.relative_to(ROOT)}: {missing} never fire in a committed scenario"


@pytest.mark.parametrize("bundle", BUNDLES.values(), ids=BUNDLES.keys())
def test_every_alert_stays_quiet_somewhere_in_the_committed_scenarios(bundle: Path) -> None:
    _, quiet = cases(bundle)
    missing = sorted(alert_names(bundle) - quiet)
    assert not missing, f"{bundle.relative_to(ROOT)}: {missing} never checked quiet in a committed scenario"


@pytest.mark.parametrize("bundle", BUNDLES.values(), ids=BUNDLES.keys())
def test_a_bundles_scenarios_load_its_own_rules(bundle: Path) -> None:
    """A scenario beside a bundle tests that bundle (and may load the other one besides)."""
    own = {(bundle / Path(rel).name).resolve() for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE)}
    scenarios = promtool_scenarios(bundle)
    assert scenarios
    for scenario in scenarios:
        assert loads(scenario) & own, f"{scenario.relative_to(ROOT)} loads none of its bundle's rule files"
        assert all(path.is_file() for path in loads(scenario)), f"{scenario.relative_to(ROOT)}: a rule file is missing"


def test_no_scenario_is_left_where_users_do_not_look() -> None:
    """promtool scenarios live beside the rules they test; none in the test tree, where nothing runs them."""
    assert not sorted((TESTS / "promtool").glob("*.yaml")), "move them to alerts/tests/ or direct/alerts/tests/"


def test_the_check_can_fail() -> None:
    """An alert without a case is caught: the sidecar-only alerts have none in the direct bundle's files."""
    direct_firing, _ = cases(BUNDLES["direct"])
    assert alert_names(BUNDLES["sidecar"]) - alert_names(BUNDLES["direct"]) - direct_firing
