"""SGLang's adaptive tier 0 is speculation paused by design: the static promtool scenario
(alerts/tests/sglang_tier_test.yaml, run on both promtools by test_alerts_promtool.py and through
vmalert-tool by test_alerts_vmalert_tool.py) evaluates the overview's drafting-state query. This
keeps the scenario's copy of that query equal to the generated one, so the scenario cannot drift
from what the dashboard runs, and checks that the series the scenario feeds are the ones the
exporter serves for the reconstructed SGLang fixture."""

from __future__ import annotations

import yaml

from support.engine_replay import scrapes, serve
from support.paths import SIDECAR_BUNDLE
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.dashboards import dashboard_files, overview
from vllm_spec_lab.grafana_query import expand_variables

SCENARIO = SIDECAR_BUNDLE / "tests" / "sglang_tier_test.yaml"
STATE_PANEL = "Drafting: on, paused by design, or stopped"


def drafting_state_query() -> str:
    panels = [p for p in dashboard_files.iter_panels(overview.build(MixinConfig())) if p["title"] == STATE_PANEL]
    assert len(panels) == 1
    return expand_variables(panels[0]["targets"][0]["expr"], "1m")


def test_the_scenario_evaluates_the_generated_drafting_state_query() -> None:
    tests = yaml.safe_load(SCENARIO.read_text())["tests"]
    exprs = [check["expr"] for test in tests for check in test["promql_expr_test"]
             if not check["expr"].startswith("instance_model:")]
    assert exprs and set(exprs) == {drafting_state_query()}


def test_the_scenario_feeds_what_the_exporter_serves_for_sglang() -> None:
    # Every engine gauge the scenario's SGLang servers carry is served for the fixture, with the
    # fixture's tier-0 values where the scenario pauses.
    _, served = serve(scrapes("sglang-016d860")[1:])
    scenario = yaml.safe_load(SCENARIO.read_text())["tests"][0]
    fed = {s["series"].split("{")[0] for s in scenario["input_series"]}
    assert fed <= set(served), fed - set(served)
    assert served["vllm_spec_decode_engine_draft_steps"][0][1] == 0
    assert served["vllm_spec_decode_engine_verify_tokens"][0][1] == 1
    assert served["vllm_spec_decode_engine_acceptance_ratio"][0][1] == 0
