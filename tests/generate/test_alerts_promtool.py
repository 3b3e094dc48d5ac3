"""promtool / amtool on the generated rules and Alertmanager config (real Debian binaries).

Every check and every scenario runs on both promtools: Prometheus 3's (Debian testing, the servers
users run) and 2.42's (Debian 12, the oldest we support). Skipped only when a tool is missing
outside CI; with env CI set a missing tool fails.
The mutation tests prove the promtool scenarios can fail: rules generated from a subtly wrong
config must break at least one scenario.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from support.paths import ROOT, SIDECAR_BUNDLE, promtool_scenarios
from support.prom import require_version, run_tool
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import alert_rules, alertmanager, recording_rules, rule_files
from vllm_spec_lab.binaries import AMTOOL_OLDEST_BIN
from vllm_spec_lab.monitoring import AMTOOL_BIN, PROMTOOL_BIN, PROMTOOL_OLDEST_BIN

pytestmark = pytest.mark.prometheus

# Both bundles' scenarios, from beside their rule files (alerts/tests/, direct/alerts/tests/).
PROMTOOL_TESTS = promtool_scenarios()


def test_promtool_check_rules_on_committed_files(promtool: str) -> None:
    result = run_tool([promtool, "check", "rules", rule_files.RULES_FILE, rule_files.ALERTS_FILE], cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    # 4 source records (none per position); 6 fleet rates + efficiency's 2 terms; per server 4
    # rates + 2 ratios, per model 2 rates + acceptance, 4 drafting-state records; 3 band counts +
    # scrape errors; 4 windows x (drafts + acceptance + upper bound) + 2 read lower bounds (the
    # fast tier's); the measured group: TPOT and ITL mean and p50/p90 per server, the baseline's
    # TPOT and batch, the measured speed-up, TPOT by method (the drafting servers and the baseline),
    # and end to end the latency per output token per server and of the baseline and its speed-up
    assert "SUCCESS: 59 rules found" in result.stdout
    assert "SUCCESS: 10 rules found" in result.stdout


def test_the_scenarios_per_position_check_is_the_runbooks_query() -> None:
    """recording_rules_test.yaml checks per-position acceptance, which no record holds, by the
    runbook's query written out: it must be the generated one (recording_rules.position_acceptance),
    so the check follows a change of the query and cannot pass on a stale copy."""
    scenario = yaml.safe_load((SIDECAR_BUNDLE / "tests" / "recording_rules_test.yaml").read_text())
    written = [" ".join(check["expr"].split()) for case in scenario["tests"]
               for check in case.get("promql_expr_test", []) if "by_position" in check["expr"]]
    assert written == [" ".join(recording_rules.position_acceptance(MixinConfig(), "").split())]


@pytest.mark.parametrize("source", ["exporter", "vllm"])
def test_the_exact_per_position_scenarios_check_the_runbooks_query(source: str) -> None:
    """position_acceptance_test.yaml (both bundles) checks the same query, rounded, where a server
    counts drafts per position: exact there, over drafts elsewhere."""
    cfg = MixinConfig(source=source)
    bundle = ROOT / (generate.DIRECT_ROOT if cfg.direct else "") / "alerts"
    scenario = yaml.safe_load((bundle / "tests" / "position_acceptance_test.yaml").read_text())
    written = [" ".join(check["expr"].split()) for case in scenario["tests"]
               for check in case.get("promql_expr_test", []) if "sum without" in check["expr"]]
    assert written == [" ".join(f"round( {recording_rules.position_acceptance(cfg, '')} , 0.0001)".split())]


def test_promtool_check_rules_on_prometheusrule_spec(promtool: str, tmp_path: Path) -> None:
    # promtool reads plain rule files; the PrometheusRule's spec is exactly one.
    spec = yaml.safe_load((ROOT / rule_files.PROMETHEUS_RULE_FILE).read_text())["spec"]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = run_tool([promtool, "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 69 rules found" in result.stdout  # 59 records + 10 alerts


def test_there_are_promtool_scenarios() -> None:
    assert len(PROMTOOL_TESTS) >= 3


def _id(path: Path) -> str:
    """A scenario's test id: its bundle's folder and its name (direct/alerts:health_test)."""
    return f"{path.relative_to(ROOT).parent.parent}:{path.stem}"


def scenario_groups(path: Path) -> list[str | None]:
    """The named test groups of a scenario file, or [None] (the whole file) when a group is unnamed."""
    names = [group.get("name") for group in yaml.safe_load(path.read_text())["tests"]]
    return names if all(names) and len(set(names)) == len(names) else [None]


# Prometheus 3: one promtool run per test group (`--run`), so each fails on its own and parallel
# workers share the longest file out; its JUnit report proves the group (and only it) ran.
SCENARIO_GROUPS = [pytest.param(path, group, id=f"{_id(path)}:{group}" if group else _id(path))
                   for path in PROMTOOL_TESTS for group in scenario_groups(path)]


@pytest.mark.parametrize(("scenario", "group"), SCENARIO_GROUPS)
def test_promtool_unit_tests_pass(scenario: Path, group: str | None, tmp_path: Path) -> None:
    promtool = require_version(PROMTOOL_BIN, "3.")
    junit = tmp_path / "junit.xml"
    only = [f"--run=^{re.escape(group)}$"] if group else []
    result = run_tool([promtool, "test", "rules", f"--junit={junit}", *only, str(scenario)], cwd=scenario.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    ran = [case.get("name") for case in ElementTree.parse(junit).iter("testcase")]
    if group:
        assert ran == [group], ran
    else:  # promtool names unnamed groups itself: count them
        assert len(ran) == len(yaml.safe_load(scenario.read_text())["tests"]), ran


# promtool 2.42 has neither `--run` nor `--junit`: one run per scenario file.
@pytest.mark.slow
@pytest.mark.parametrize("scenario", PROMTOOL_TESTS, ids=_id)
def test_promtool_oldest_unit_tests_pass(scenario: Path) -> None:
    result = run_tool([require_version(PROMTOOL_OLDEST_BIN, "2."), "test", "rules", str(scenario)],
                      cwd=scenario.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == 1


@pytest.mark.parametrize(("path", "prefix"), [(AMTOOL_BIN, "0.3"), (AMTOOL_OLDEST_BIN, "0.25")],
                         ids=["amtool-0.3x", "amtool-0.25"])
def test_amtool_check_config_on_committed_file(path: str, prefix: str) -> None:
    amtool = require_version(path, prefix)
    result = run_tool([amtool, "check-config", alertmanager.ALERTMANAGER_FILE], cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 inhibit rules" in result.stdout and "2 receivers" in result.stdout


def _run_scenarios_against(cfg: MixinConfig, tmp_path: Path, expected_failure: str) -> str:
    """Render `cfg` into tmp/ and run the committed scenario that must fail (`expected_failure`,
    "name: <test group>") on it, from the files that hold it, copied to their places beside the
    rendered rules (tmp/alerts/tests/, tmp/direct/alerts/tests/): only that group (`--run`), as the
    other scenarios say nothing about the mutation."""
    for rel, text in generate.render_all(cfg).items():
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    holding = [path.relative_to(ROOT) for path in PROMTOOL_TESTS if expected_failure in path.read_text()]
    assert holding, f"no scenario file has {expected_failure!r}"
    for rel in holding:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    # Generous: a mutated 20m window makes promtool's simulation several times slower on a busy machine.
    group = expected_failure.removeprefix("name: ")
    result = run_tool([require_version(PROMTOOL_BIN, "3."), "test", "rules", f"--run=^{re.escape(group)}$",
                       *map(str, holding)], cwd=tmp_path, timeout=600)
    assert result.returncode != 0, f"scenarios passed against a wrong config {cfg}"
    return result.stdout + result.stderr  # promtool prints failures on stderr


@pytest.mark.slow  # 17 promtool runs, each of the scenario files that must fail
@pytest.mark.parametrize(
    ("overrides", "expected_failure"),
    [
        # A shorter held time cannot tell a 2-minute dip (to 0 % from 55 %) from a collapse.
        ({"acceptance_critical_for": "2m"}, "name: two-minute dip to zero from 55 percent never pages"),
        # (2m30s pages the dip on 2.42 but not on Prometheus 3: its left-open windows see one sample less.)
        ({"acceptance_low_for": "2m15s"}, "name: two-minute dip to zero from 55 percent never pages"),
        ({"acceptance_slow_for": "4m"}, "name: two-minute dip to zero from 55 percent never pages"),
        # Binomial counting (no overdispersion) or a low confidence page on thin evidence.
        ({"acceptance_overdispersion": 1.0}, "name: little evidence never pages"),
        ({"acceptance_confidence": 0.6}, "name: little evidence never pages"),
        # Window drift: a longer evidence window pages later, a longer short window resolves later,
        # the slow tier decides the low-traffic case.
        ({"acceptance_fast_long_window": "10m"}, "name: sudden collapse and recovery"),
        ({"acceptance_fast_short_window": "2m"}, "name: sudden collapse and recovery"),
        ({"acceptance_slow_long_window": "20m"}, "name: low-traffic collapse and recovery"),
        ({"acceptance_slow_short_window": "8m"}, "name: low-traffic collapse and recovery"),
        # Threshold drift shows in values and annotations.
        ({"acceptance_warning_threshold": 0.45}, "name: sudden collapse and recovery"),
        ({"acceptance_critical_threshold": 0.3}, "name: sudden collapse and recovery"),
        ({"spec_decode_missing_for": "5m"}, "name: spec decoding turned off"),
        ({"counter_resets_threshold": 2}, "name: vllm restarting repeatedly"),
        ({"target_down_for": "3m"}, "name: vllm unreachable"),
        ({"lossy_verification_for": "10m"}, "name: a lossy verification is named and flagged"),
        # Not paying: a shorter hold pages early; more free verification makes the large batch pay.
        ({"not_paying_for": "10m"}, "name: not paying at a large batch, paying at a small one"),
        ({"compute_bound_tokens": 512}, "name: not paying at a large batch, paying at a small one"),
    ],
)
def test_scenarios_fail_against_wrong_rules(overrides: dict[str, object], expected_failure: str,
                                             tmp_path: Path) -> None:
    output = _run_scenarios_against(MixinConfig().with_overrides(overrides), tmp_path, expected_failure)
    assert expected_failure in output, output[:3000]


def test_the_config_scenarios_catch_a_join_on_the_config_series(tmp_path: Path) -> None:
    """Joining the config series into the acceptance alerts (the tempting way to name the config)
    silences them wherever the series is missing and adds labels where it is there: the config
    scenarios catch both, so the lookup in the description cannot be swapped for a join unnoticed."""
    files = generate.render_all(MixinConfig())
    alerts = yaml.safe_load(files[rule_files.ALERTS_FILE])
    joined = 0
    for group in alerts["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") in (alert_rules.ACCEPTANCE_LOW, alert_rules.ACCEPTANCE_CRITICAL):
                rule["expr"] = (f"({rule['expr']})\n* on (job, instance) group_left (method, k, verification)\n"
                                "  vllm_spec_decode_config_info")
                joined += 1
    assert joined == 2
    for rel, text in {**files, rule_files.ALERTS_FILE: yaml.safe_dump(alerts, sort_keys=False)}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    tests_dir = tmp_path / SIDECAR_BUNDLE.relative_to(ROOT) / "tests"
    tests_dir.mkdir(parents=True)
    shutil.copy(SIDECAR_BUNDLE / "tests" / "spec_config_test.yaml", tests_dir)
    result = run_tool([require_version(PROMTOOL_BIN, "3."), "test", "rules", "spec_config_test.yaml"], cwd=tests_dir)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "acceptance alerts fire without the config series" in output, output[:3000]
    assert "acceptance alerts name the config when it is served" in output, output[:3000]
