"""The rules rendered with `baseline_selector` set, on both bundles: the selector alone names the
baseline the speed-up is measured against (a speculating server it names is a baseline, a server
configured without speculation it does not name is none), and SpecDecodeMetricsMissing skips the
servers it names. The committed rules use the default baseline, so this scenario runs on a
rendering (tests/generate/scenarios/baseline_selector_test.yaml), with promtool 3 and 2.42."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from support.prom import require_version, run_tool
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_lab.monitoring import PROMTOOL_BIN, PROMTOOL_OLDEST_BIN

pytestmark = pytest.mark.prometheus

SCENARIO = Path(__file__).parent / "scenarios" / "baseline_selector_test.yaml"
SELECTOR = 'instance=~"plain-.*"'


@pytest.mark.parametrize(("path", "prefix"), [(PROMTOOL_BIN, "3."), (PROMTOOL_OLDEST_BIN, "2.")],
                         ids=["promtool-3", "promtool-2"])
def test_the_baseline_is_what_the_selector_names(tmp_path: Path, path: str, prefix: str) -> None:
    promtool = require_version(path, prefix)
    cfg = MixinConfig().with_overrides({"baseline_selector": SELECTOR})
    for rel, text in generate.render_all(cfg).items():
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    assert SELECTOR in (tmp_path / "alerts" / "prometheus_rules.yaml").read_text()
    scenario = tmp_path / "alerts" / "tests" / SCENARIO.name
    scenario.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCENARIO, scenario)
    result = run_tool([promtool, "test", "rules", str(scenario)], cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
