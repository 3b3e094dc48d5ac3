"""`promtool check metrics` (promlint) exits 0 on the exporter's own output, on both promtools.

The exporter serves names users write into their own queries, so lint problems are fixed by
renaming before 1.0 (CHANGELOG.md lists each rename): e.g. promlint rejects a counter whose name
contains its type (`…_counter_resets_total`, now `vllm_spec_exporter_target_restarts_total`).
The exposition comes from the real exporter process polling the fake vLLM (a simulation with
vLLM 0.32's names) with traffic, so every derived series is present, not only the health ones.
"""

from __future__ import annotations

import subprocess

import pytest
import requests

from support.prom import require_version
from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.fakes.vllm import FakeVllm
from vllm_spec_lab.monitoring import PROMTOOL_BIN, PROMTOOL_OLDEST_BIN, wait_until

pytestmark = pytest.mark.prometheus


@pytest.fixture(scope="module")
def exposition() -> str:
    # (with the per-position draft counter some builds export: its re-exposed name is linted too)
    with FakeVllm(models=("tiny-llama", "tiny-qwen"), engines=("0", "1"), drafted_per_position=True) as fake:
        fake.drive(50, 0.7)
        with ExporterProcess(fake.start(), interval=0.5, window=5, timeout=0.4, min_draft_tokens=0) as exporter:
            def full() -> str | None:
                text = requests.get(exporter.url + "/metrics", timeout=5,
                                    headers={"Accept": "text/plain;version=0.0.4"}).text
                return text if "vllm_spec_decode_position_acceptance_ratio{" in text else None

            return wait_until(full, timeout=20)


@pytest.mark.parametrize(("promtool", "prefix"), [(PROMTOOL_BIN, "3."), (PROMTOOL_OLDEST_BIN, "2.")],
                         ids=["promtool-3", "promtool-2.42"])
def test_promtool_check_metrics_is_clean(exposition: str, promtool: str, prefix: str) -> None:
    binary = require_version(promtool, prefix)
    result = subprocess.run([binary, "check", "metrics"], input=exposition, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (result.stdout + result.stderr).strip() == ""


def test_promtool_check_metrics_can_fail(exposition: str) -> None:
    """The check is not vacuous: the old name is still rejected."""
    binary = require_version(PROMTOOL_BIN, "3.")
    old = exposition.replace("vllm_spec_exporter_target_restarts_total", "vllm_spec_exporter_counter_resets_total")
    assert old != exposition
    result = subprocess.run([binary, "check", "metrics"], input=old, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode != 0 and "should not include type" in result.stdout + result.stderr
