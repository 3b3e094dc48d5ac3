"""Both sources give the same pages: the promtool scenarios, run on vLLM's own series too.

Every scenario of alerts/tests/ is written for the sidecar (source=exporter). Here each one is
translated to what Prometheus holds when it scrapes vLLM directly: the sidecar's counters become
vLLM's own names in one of the four spellings (`vllm:`, `vllm_`, `ray_vllm:`, `ray_vllm_`,
rotated over the servers and over four runs, so every series is read in every spelling), the
sidecar's job becomes vLLM's, the runbook links the direct page, and the rule files are the committed sidecar-less ones
(direct/alerts/). The expectations are left as they are: the same alerts at the same evaluation
times, the same records with the same values. Scenarios of sidecar-only alerts (the exporter's
own health, `vllm_spec_decode_enabled`, `target_up`) have no direct counterpart; the direct
bundle has its own scenarios besides (direct/alerts/tests/).
Like every promtool scenario, they run on both promtools: Prometheus 3's and 2.42's, the oldest
we support (tests/generate/test_alerts_promtool.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from support.paths import ROOT, SIDECAR_BUNDLE, promtool_scenarios
from support.prom import is_version, run_tool
from vllm_spec_exporter.engines import VLLM_PREFIXES
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import (
    alert_rules,
    alertmanager,
    fleet_records,
    positions,
    recording_rules,
    rule_files,
    sources,
)
from vllm_spec_exporter.names import MetricName

pytestmark = pytest.mark.prometheus

# Written for the sidecar, and about the sidecar or engines the direct rules do not read.
# Not translatable: llama.cpp and SGLang's tier gauges reach Prometheus only through the sidecar;
# both bundles at once; the speculative config series (the sidecar reads it, vLLM serves no such
# series); the measured speed-up's file (loads both bundles).
SIDECAR_ONLY_FILES = ("mixed_engines_test.yaml", "sglang_tier_test.yaml", "both_bundles_test.yaml",
                      "spec_config_test.yaml", "measured_speedup_test.yaml")
SIDECAR_SCENARIOS = [p for p in promtool_scenarios(SIDECAR_BUNDLE) if p.name not in SIDECAR_ONLY_FILES]
SIDECAR_ONLY_ALERTS = {alert_rules.METRICS_MISSING, alert_rules.VLLM_UNREACHABLE, alert_rules.VLLM_RESTARTING,
                       alert_rules.EXPORTER_DOWN, alert_rules.EXPORTER_ABSENT}
SIDECAR_ONLY_SERIES = {MetricName.TARGET_UP, MetricName.SPEC_DECODE_ENABLED, MetricName.TARGET_RESTARTS_TOTAL,
                       MetricName.TARGET_INFO}
# Scenarios about engines other than vLLM (the direct rules read vLLM's own series only).
OTHER_ENGINES = ("TensorRT-LLM",)
EXPORTER_JOB, VLLM_JOB = "vllm-spec-exporter", "vllm"
VLLM_NAME = ({c.exporter: c.vllm for c in sources.COUNTERS} | {k: v for k, v in sources.VLLM_GAUGES.items()}
             | {MetricName.ENGINE_STEPS_TOTAL: sources.ENGINE_STEPS_VLLM})


def _spelling(instance: str, instances: list[str], offset: int) -> str:
    if instance not in instances:
        instances.append(instance)
    return VLLM_PREFIXES[(instances.index(instance) + offset) % len(VLLM_PREFIXES)]


def translate(scenario: dict, offset: int, rules: list[str]) -> tuple[dict, set[str]]:
    """The scenario as Prometheus would hold it without the sidecar; also the spellings used."""
    scenario = yaml.safe_load(yaml.safe_dump(scenario))  # a deep copy
    scenario["rule_files"] = rules
    # The groups in dependency order, as Prometheus' own evaluation of them reaches the same result.
    direct = MixinConfig().with_overrides({"source": "vllm"})
    scenario["group_eval_order"] = [g["name"] for g in (*recording_rules.recording_groups(direct),
                                                        *alert_rules.alert_groups(direct))]
    used: set[str] = set()
    scenario["tests"] = [c for c in scenario["tests"] if not any(e in c.get("name", "") for e in OTHER_ENGINES)]
    for case in scenario["tests"]:
        instances: list[str] = []
        series = []
        for item in case.get("input_series", []):
            name, _, labels = item["series"].partition("{")
            if name in SIDECAR_ONLY_SERIES:
                continue
            labels = labels.replace(f'job="{EXPORTER_JOB}"', f'job="{VLLM_JOB}"')
            if name in VLLM_NAME:
                instance = re.search(r'instance="([^"]*)"', labels)
                prefix = _spelling(instance.group(1) if instance else "", instances, offset)
                used.add(prefix)
                name = prefix + VLLM_NAME[name]
            series.append({**item, "series": f'{{__name__="{name}",{labels}'})
        case["input_series"] = series
        for check in case.get("promql_expr_test", []):  # a runbook's query of the scraped counters
            for counter in sources.COUNTERS:
                sidecar_rate = f'rate({counter.exporter}{{job="{EXPORTER_JOB}"}}[{direct.windows.rate_window}])'
                check["expr"] = check["expr"].replace(sidecar_rate, f"({sources.raw_rate(direct, counter)})")
        case["alert_rule_test"] = [t for t in case.get("alert_rule_test", [])
                                   if t["alertname"] not in SIDECAR_ONLY_ALERTS]
        for check in case["alert_rule_test"]:
            for alert in check.get("exp_alerts", []):
                alert["exp_labels"].pop("engine_family", None)  # target_info's, a sidecar series
        if not case["alert_rule_test"]:
            del case["alert_rule_test"]
    text = yaml.safe_dump(scenario, sort_keys=False, width=1_000_000)
    text = text.replace(f'job="{EXPORTER_JOB}"', f'job="{VLLM_JOB}"').replace(f"var-job={EXPORTER_JOB}&",
                                                                              f"var-job={VLLM_JOB}&")
    text = re.sub(rf"(\bjob: ){EXPORTER_JOB}\b", rf"\g<1>{VLLM_JOB}", text)
    # The direct bundle's alerts link its own runbook page (direct/docs/runbooks.md, same anchors).
    text = text.replace("/blob/main/docs/runbooks.md#", f"/blob/main/{generate.DIRECT_ROOT}docs/runbooks.md#")
    return yaml.safe_load(text), used


@pytest.fixture(scope="session")  # not module: the slow promtool runs may spread over xdist workers
def direct_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed direct rule files, checked equal to a fresh render, in a scratch tree."""
    root = tmp_path_factory.mktemp("direct-promtool")
    files = generate.render_all(MixinConfig())
    for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE):
        committed = (ROOT / generate.DIRECT_ROOT / rel).read_text()
        assert committed == files[generate.DIRECT_ROOT + rel], f"stale {generate.DIRECT_ROOT}{rel}"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(committed)
    (root / "tests").mkdir()
    return root


def test_every_sidecar_scenario_is_translated() -> None:
    assert {p.name for p in SIDECAR_SCENARIOS} >= {"acceptance_alerts_test.yaml", "failure_modes_test.yaml",
                                                   "recording_rules_test.yaml"}


@pytest.mark.slow  # a full promtool run per spelling and promtool: ~45 s each
@pytest.mark.parametrize("offset", range(len(VLLM_PREFIXES)))
def test_direct_rules_give_the_sidecar_pages_in_every_spelling(promtool: str, direct_root: Path, offset: int) -> None:
    rules = [f"../{rule_files.RULES_FILE}", f"../{rule_files.ALERTS_FILE}"]
    names, spellings = [], set()
    for path in SIDECAR_SCENARIOS:
        scenario, used = translate(yaml.safe_load(path.read_text()), offset, rules)
        spellings |= used
        out = direct_root / "tests" / f"direct-{offset}-{path.name}"
        out.write_text(yaml.safe_dump(scenario, sort_keys=False, width=1_000_000))
        names.append(out.name)
    assert spellings == set(VLLM_PREFIXES)
    result = run_tool([promtool, "test", "rules", *names], cwd=direct_root / "tests", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(names)


FAILS_AGAINST_SIDECAR_RULES = "sudden collapse and recovery"  # a group of acceptance_alerts_test.yaml


@pytest.mark.slow  # a mutation run: the translated scenarios on the sidecar's rules
def test_translation_can_fail(promtool: str, direct_root: Path) -> None:
    # The same scenarios against the sidecar's rules must fail (no exporter series any more):
    # the translated expectations are not vacuous.
    sidecar_rules = direct_root / "sidecar"
    sidecar_rules.mkdir(exist_ok=True)
    for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE):
        (sidecar_rules / Path(rel).name).write_text((ROOT / rel).read_text())
    path = SIDECAR_BUNDLE / "tests" / "acceptance_alerts_test.yaml"
    scenario, _ = translate(yaml.safe_load(path.read_text()), 0,
                            [f"../sidecar/{Path(rel).name}" for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE)])
    out = direct_root / "tests" / "against-sidecar-rules.yaml"
    out.write_text(yaml.safe_dump(scenario, sort_keys=False, width=1_000_000))
    # Prometheus 3's promtool runs only the group that pages critical (2.42 has no `--run`).
    only = [f"--run=^{re.escape(FAILS_AGAINST_SIDECAR_RULES)}$"] if is_version(promtool, "3.") else []
    result = run_tool([promtool, "test", "rules", *only, out.name], cwd=direct_root / "tests")
    assert result.returncode != 0
    assert "SpecDecodeAcceptanceCritical" in result.stdout + result.stderr


def test_generate_direct_output_is_the_committed_sidecar_less_bundle(tmp_path: Path) -> None:
    """`generate --set source=vllm --output DIR` writes what a Prometheus scraping vLLM loads, equal
    to the committed direct/ files, and nothing that deploys or documents the sidecar."""
    import argparse

    parser = argparse.ArgumentParser()
    generate.add_arguments(parser)
    out = tmp_path / "direct"
    assert generate.run(parser.parse_args(["--set", "source=vllm", "--output", str(out)])) == 0
    written = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert written == {*generate.DIRECT_FILES, alertmanager.ALERTMANAGER_FILE}, written
    root = ROOT
    for rel in generate.DIRECT_FILES:
        assert (out / rel).read_text() == (root / generate.DIRECT_ROOT / rel).read_text(), rel
    assert 'job="vllm-spec-exporter"' not in (out / rule_files.RULES_FILE).read_text()


def run_scenario(promtool: str, tmp_path: Path, groups: list[dict], series: list[dict], tests: list[dict]) -> None:
    """promtool's unit test of `groups` on `series`, every 15 s: `tests` must hold."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, width=1_000_000))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "15s",
         "tests": [{"interval": "15s", "input_series": series, "promql_expr_test": tests}]}, sort_keys=False))
    result = run_tool([promtool, "test", "rules", "test.yaml"], cwd=tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def test_a_series_stored_under_two_spellings_is_read_once(promtool: str, tmp_path: Path) -> None:
    """Across a Prometheus 2 -> 3 upgrade one vLLM series is stored as `vllm_…` and as `vllm:…`
    within one rate window. Every direct source and fleet rate record holds it once, the first spelling's rate
    (the spellings' `or` nests to the right, sources._either, and must still keep the first):
    here the two spellings' counters grow at different rates, so a sum or the second one shows."""
    cfg = MixinConfig(source="vllm")
    labels = f'job="{VLLM_JOB}", instance="a:8000", model_name="m", engine="0"'
    series, tests = [], []
    for counter in sources.COUNTERS:
        position = ', position="0"' if counter.position else ""
        colon, underscore = f"vllm:{counter.vllm}", f"vllm_{counter.vllm}"
        series += [{"series": f'{{__name__="{colon}", {labels}{position}}}', "values": "0+60x20"},
                   {"series": f'{{__name__="{underscore}", {labels}{position}}}', "values": "0+600x20"}]
        if counter in sources.RECORDED:
            tests.append({"expr": f"round({sources.rate_record(cfg, counter)}, 0.001)", "eval_time": "4m",
                          "exp_samples": [{"labels": f"{{{labels}{position}}}", "value": 4}]})
        # The per-position counter has no source record: the fleet's sum of its one server reads it.
        fleet_labels = f'job="{VLLM_JOB}", model_name="m", engine="0"{position}'
        tests.append({"expr": f"round({fleet_records.fleet_rate_record(cfg, counter)}, 0.001)", "eval_time": "4m",
                      "exp_samples": [{"labels": f"{{{fleet_labels}}}", "value": 4}]})
    groups = [{"name": "source", "rules": sources.source_rules(cfg)}, fleet_records.fleet_group(cfg)]
    run_scenario(promtool, tmp_path, groups, series, tests)


def test_k_counts_each_position_once_across_a_spelling_switch(promtool: str, tmp_path: Path) -> None:
    """The direct k record (positions.k_rule, in its group; promtool evaluates every group at the
    test's interval) counts the positions of the per-position rates, whose spellings' `or` keeps
    one: when the scrape switches from `vllm_…` to `vllm:…`, with the old name marked stale
    (server a) or just ending, as across a Prometheus restart (server c), k stays 4 throughout;
    one regex over the raw spellings would read 8 on c for the lookback. llama-server's positions
    count too."""
    cfg = MixinConfig(source="vllm")
    switched = {"a": "0+60x8 stale", "c": "0+60x8"}
    servers = {name: f'job="{VLLM_JOB}", instance="{name}:8000", model_name="m", engine="0"' for name in switched}
    llamacpp = f'job="{VLLM_JOB}", instance="b:8080"'
    per_position = sources.ACCEPTED_BY_POSITION
    series = []
    for name, old_values in switched.items():
        for position in range(4):
            labels = f'{servers[name]}, position="{position}"'
            series += [{"series": f'{{__name__="vllm_{per_position.vllm}", {labels}}}', "values": old_values},
                       {"series": f'{{__name__="vllm:{per_position.vllm}", {labels}}}', "values": "_x9 0+60x12"}]
    series += [{"series": f'{{__name__="{per_position.llamacpp}", {llamacpp}, position="{position}"}}',
                "values": "0+30x21"} for position in range(3)]
    k = positions.k_record(cfg)
    expected = [*({"labels": f"{k}{{{labels}}}", "value": 4} for labels in servers.values()),
                {"labels": f"{k}{{{llamacpp}}}", "value": 3}]
    tests = [{"expr": k, "eval_time": at, "exp_samples": expected} for at in ("1m", "2m", "2m15s", "2m30s", "3m", "4m")]
    run_scenario(promtool, tmp_path, [positions.k_group(cfg)], series, tests)


def test_a_server_without_k_yet_is_left_out_of_efficiency_on_both_sides(promtool: str, tmp_path: Path) -> None:
    """The k group runs once a minute (positions.k_group), so a new server's rates exist before its k:
    efficiency's fleet terms leave it out of numerator and denominator alike until its k comes,
    and read a k sampled once a minute between its samples. Here the k record is an input
    sampled every minute (promtool evaluates every group at the test's interval, whatever its
    `interval:`): server a (k 4) throughout, b (k 2) drafting from 3m with its first k at 6m."""
    cfg = MixinConfig(source="vllm")
    k = positions.k_record(cfg)
    # k; drafts and accepted per step; the first step with counters, and with a k
    servers = {"a": (4, 60, 120, 0, 0), "b": (2, 30, 30, 12, 24)}
    series = []
    for name, (server_k, drafts, accepted, first, first_k) in servers.items():
        labels = f'job="{VLLM_JOB}", instance="{name}:8000", model_name="m", engine="0"'
        gap = f"_x{first} " if first else ""
        series += [{"series": f'{{__name__="vllm:{sources.DRAFTS.vllm}", {labels}}}',
                    "values": f"{gap}0+{drafts}x{40 - first}"},
                   {"series": f'{{__name__="vllm:{sources.ACCEPTED.vllm}", {labels}}}',
                    "values": f"{gap}0+{accepted}x{40 - first}"},
                   {"series": f"{k}{{{labels}}}",
                    "values": " ".join(str(server_k) if i % 4 == 0 and i >= first_k else "_" for i in range(41))}]
    fleet = 'job="vllm", model_name="m", engine="0"'
    emitted, emittable = (fleet_records.efficiency_record(cfg, term) for term in fleet_records.EFFICIENCY_TERMS)
    drafts = fleet_records.fleet_rate_record(cfg, sources.DRAFTS)

    def check(record: str, at: str, value: float) -> dict:
        return {"expr": f"round({record}, 1e-6)", "eval_time": at, "exp_samples": [{"labels": f"{{{fleet}}}",
                                                                                         "value": value}]}
    tests = [check(drafts, "5m30s", 4 + 2),  # b drafts at 5m30s (its whole rate window) ...
             check(emitted, "5m30s", 4 + 8), check(emittable, "5m30s", 4 * 5),  # ... but has no k yet
             check(emitted, "6m30s", 4 + 8 + 2 + 2), check(emittable, "6m30s", 4 * 5 + 2 * 3),
             check(emittable, "7m45s", 4 * 5 + 2 * 3)]  # 45 s after both k samples
    run_scenario(promtool, tmp_path, [fleet_records.fleet_group(cfg)], series, tests)
