"""End to end on 127.0.0.1: fake vLLM → real exporter process → real Prometheus with the generated
rules → real Alertmanager with the generated config → local webhook. The page arrives during an
acceptance collapse and resolves after recovery. The same scenario runs a second time with
VictoriaMetrics single-node scraping the exporter and vmalert evaluating the generated rules and
paging through the same Alertmanager (`vllm_spec_lab.victoria`, with `-rule.evalDelay=0s`).

The synthetic vLLM (lab/vllm_spec_lab/fakes/vllm.py) is a simulation of vLLM's /metrics; everything
after it is the real thing. Windows and `for` durations are shortened through
MixinConfig.with_overrides (not hand-edited copies) so the test takes about a minute and a half.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.alertstack import RULE_ENGINES
from vllm_spec_exporter.mixin.rules import alert_rules, recording_rules
from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.fakes.vllm import FakeVllm
from vllm_spec_lab.monitoring import (
    wait_until,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.server]  # starts Prometheus-family servers

EXPORTER = Path(sys.executable).with_name("vllm-spec-exporter")
JOB = "vllm-spec-exporter"

# Seconds instead of minutes; everything else (expressions, routing, inhibition) as shipped.
FAST = {
    "scrape_interval": "1s",  # the test Prometheus scrapes and evaluates every second
    "rate_window": "20s",
    "acceptance_fast_long_window": "20s",
    "acceptance_fast_short_window": "5s",
    "acceptance_slow_long_window": "40s",
    "acceptance_slow_short_window": "10s",
    "acceptance_low_for": "10s",
    "acceptance_critical_for": "10s",
    "target_down_for": "10s",
    "alertmanager_group_wait": "1s",
    "alertmanager_group_interval": "1s",
}


PAGE_WITHIN = 240  # seconds: a limit for a hung stack, not a latency goal


@pytest.fixture
def exporter_url() -> Iterator[tuple[str, FakeVllm]]:
    with FakeVllm(models=("tiny-llama",)) as fake:
        target = fake.start()
        fake.drive(50, 0.8)  # 5 drafts per 0.1 s tick × k=4 = 20 tokens, 16 accepted: exactly 80 %
        with ExporterProcess(target, interval=1, window=30, timeout=0.8, min_draft_tokens=100) as exporter:
            yield f"127.0.0.1:{exporter.port}", fake


@pytest.mark.parametrize("engine", sorted(RULE_ENGINES))
def test_collapse_pages_and_recovery_resolves(engine: str, exporter_url: tuple[str, FakeVllm], alert_stack) -> None:
    # The rule engines a user may run: Prometheus, or vmalert over VictoriaMetrics (the same rule files);
    # the stack's servers stop when the test ends (support/alertstack.py).
    exporter_address, fake = exporter_url
    stack = alert_stack(FAST, scrape={JOB: [exporter_address]}, engine=engine, routing_key="integration-key")
    cfg, hook, prom = stack.config, stack.hook, stack.rules
    ratio = recording_rules.record_names(cfg).acceptance_ratio
    # Healthy: the recording rule settles at ~80 % and nothing pages. A limit, not a single read: while
    # the rate window fills, vmalert's record layers (each searchable in VictoriaMetrics an evaluation
    # after the one it reads) may divide one evaluation's accepted tokens by an earlier one's drafts.
    healthy = wait_until(lambda: (v := prom.query_value(ratio)) is not None and abs(v - 0.8) <= 0.05 and v, 60,
                         what="the acceptance record near 80 %",
                         failure=lambda: f"last value {prom.query_value(ratio)}")
    print(f"healthy acceptance record: {healthy:.3f}")
    time.sleep(5)
    assert not prom.firing(alert_rules.ACCEPTANCE_CRITICAL) and not hook.received("/pager")

    # Collapse to 10 %: a page must arrive.
    collapse_at = time.monotonic()
    fake.drive(50, 0.1)
    # Limits, not expectations (alert timing is bench/alert_quality.py's, measured, not asserted): a
    # wait returns as soon as the page arrives; vmalert over VictoriaMetrics on a loaded 2-core
    # machine took over 90 s (each record layer is searchable seconds after the one it reads).
    wait_until(lambda: any(r["body"]["event_action"] == "trigger" for r in hook.received("/pager")), PAGE_WITHIN,
               what="a trigger at the pager", failure=lambda: f"firing: {prom.firing(alert_rules.ACCEPTANCE_CRITICAL)}")
    time_to_page = time.monotonic() - collapse_at
    page = next(r["body"] for r in hook.received("/pager") if r["body"]["event_action"] == "trigger")
    assert page["routing_key"] == "integration-key"
    assert page["payload"]["summary"] == "Speculative decoding acceptance is below 40%. (tiny-llama)"
    details = page["payload"]["custom_details"]
    # Text, not an object: Alertmanager 0.3x parses a detail that reads as YAML (see mixin/rules/alertmanager.py).
    assert isinstance(details["description"], str), details
    assert f"model tiny-llama on {exporter_address} is below 40%" in details["description"]
    assert details["runbook_url"].endswith("/docs/runbooks.md#specdecodeacceptancecritical")
    [alert] = prom.firing(alert_rules.ACCEPTANCE_CRITICAL)
    # vmalert adds the rule group's name as `alertgroup` (its default): nothing else differs.
    assert alert["labels"].pop("alertgroup", "vllm-spec-decode.alerts") == "vllm-spec-decode.alerts"
    assert alert["labels"] == {"alertname": alert_rules.ACCEPTANCE_CRITICAL, "severity": "critical",
                               "job": JOB, "instance": exporter_address, "model_name": "tiny-llama",
                               "confidence": cfg.confidence_label}

    # Recovery: the page resolves.
    recover_at = time.monotonic()
    fake.drive(50, 0.8)
    wait_until(lambda: any(r["body"]["event_action"] == "resolve" for r in hook.received("/pager")), PAGE_WITHIN,
               what="a resolve at the pager", failure=lambda: f"firing: {prom.firing(alert_rules.ACCEPTANCE_CRITICAL)}")
    time_to_resolve = time.monotonic() - recover_at
    assert not prom.firing(alert_rules.ACCEPTANCE_CRITICAL)
    # The critical alert never goes to chat; the warning never pages.
    assert not any(alert_rules.ACCEPTANCE_CRITICAL in str(r["body"]) for r in hook.received("/chat"))
    assert all(r["body"]["payload"]["summary"].startswith("Speculative decoding acceptance is below 40%")
               for r in hook.received("/pager"))
    # About 20 s each on quiet cores (20 s window crossing 40 %, 10 s sustained, evaluation, group_wait).
    print(f"{engine}: time to page {time_to_page:.1f}s, time to resolve {time_to_resolve:.1f}s (fast config)")
