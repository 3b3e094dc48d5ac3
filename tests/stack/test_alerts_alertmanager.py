"""The generated alertmanager.yml in a real Alertmanager (0.33.1; 0.25 on the fallback): routing,
secrets from files, inhibition.

Alerts are pushed straight into Alertmanager's API (the rules are covered by promtool tests and
the end-to-end test); the receivers' URLs point at a local webhook recorder. Only the URLs, the
key file and the group timings are overridden — through MixinConfig, not by editing the YAML.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from vllm_spec_exporter.mixin.rules import alert_rules
from vllm_spec_lab.monitoring import WebhookReceiver, wait_until

pytestmark = [pytest.mark.prometheus, pytest.mark.server]  # starts Prometheus-family servers

ROUTING_KEY = "test-routing-key-0123456789abcdef"


def _alert(name: str, severity: str, instance: str, model: str | None = "llama") -> dict[str, Any]:
    labels = {"alertname": name, "severity": severity, "job": "vllm-spec-exporter", "instance": instance}
    if model:
        labels["model_name"] = model
    return {"labels": labels,
            "annotations": {"summary": f"{name} summary.", "description": f"{name} on {instance}.",
                            "runbook_url": f"https://runbooks.example/{name.lower()}",
                            "dashboard_url": "/d/vllm-spec-overview"}}


@pytest.fixture
def stack(alert_stack):
    started = alert_stack({"alertmanager_group_wait": "1s", "alertmanager_group_interval": "1s"},
                          routing_key=ROUTING_KEY)
    return started.alertmanager, started.hook


def _pages(hook: WebhookReceiver) -> list[str]:
    """Text of every PagerDuty event received (summary + details), one string per event."""
    return [str(r["body"]) for r in hook.received("/pager")]


def _chats(hook: WebhookReceiver) -> list[str]:
    return [str(r["body"]) for r in hook.received("/chat")]


def test_critical_pages_and_warning_goes_to_chat(stack) -> None:
    am, hook = stack
    am.post_alerts([_alert(alert_rules.ACCEPTANCE_CRITICAL, "critical", "10.0.0.1:9400"),
                    _alert(alert_rules.ACCEPTANCE_LOW, "warning", "10.0.0.2:9400")])
    wait_until(lambda: hook.received("/pager") and hook.received("/chat"), 30)
    page = hook.received("/pager")[0]["body"]
    assert page["routing_key"] == ROUTING_KEY  # read from routing_key_file
    assert page["event_action"] == "trigger"
    assert page["payload"]["summary"] == "SpecDecodeAcceptanceCritical summary. (llama)"
    assert page["payload"]["custom_details"]["runbook_url"].endswith("specdecodeacceptancecritical")
    chat = hook.received("/chat")[0]["body"]
    # The configured channel, and the defaults both 0.25 and 0.3x send: 0.33.1 sends none of them
    # when it reads another version's default.tmpl (its Slack notifier drops that template error;
    # vllm_spec_lab/relocate.py is why it reads its own).
    assert (chat.get("channel"), chat.get("username")) == ("#vllm-alerts", "Alertmanager"), chat
    attachment = chat["attachments"][0]
    assert attachment.get("color") == "danger", attachment
    assert attachment["title"] == "[FIRING] SpecDecodeAcceptanceLow: SpecDecodeAcceptanceLow summary."
    assert "SpecDecodeAcceptanceLow on 10.0.0.2:9400." in attachment["text"]
    # the warning never reaches the pager, the critical never the chat
    assert not any("SpecDecodeAcceptanceLow" in p for p in _pages(hook))
    assert not any("SpecDecodeAcceptanceCritical" in c for c in _chats(hook))


def test_target_down_inhibits_acceptance_alerts_on_that_server_only(stack) -> None:
    am, hook = stack
    # Sources first: inhibition needs the source alert present when the target is notified.
    am.post_alerts([_alert(alert_rules.VLLM_UNREACHABLE, "warning", "10.0.0.3:9400", model=None),
                    _alert(alert_rules.EXPORTER_DOWN, "warning", "10.0.0.5:9400", model=None)])
    wait_until(lambda: len(am.alerts(alertname=alert_rules.VLLM_UNREACHABLE)) == 1, 10)
    am.post_alerts([
        _alert(alert_rules.ACCEPTANCE_CRITICAL, "critical", "10.0.0.3:9400"),  # inhibited: vLLM unreachable
        _alert(alert_rules.DRAFTS_STOPPED, "warning", "10.0.0.5:9400"),  # inhibited: exporter down
        _alert(alert_rules.ACCEPTANCE_CRITICAL, "critical", "10.0.0.4:9400"),  # other server: pages
    ])
    wait_until(lambda: any("10.0.0.4:9400" in p for p in _pages(hook)), 30)
    wait_until(lambda: any(alert_rules.VLLM_UNREACHABLE in c for c in _chats(hook)), 30)
    time.sleep(3)  # several group_interval cycles: an inhibited alert would have been sent by now
    assert not any("10.0.0.3:9400" in p for p in _pages(hook))
    assert not any(alert_rules.DRAFTS_STOPPED in c for c in _chats(hook))
    states = {(a["labels"]["alertname"], a["labels"]["instance"]): a["status"]
              for a in am.alerts()}
    assert states[(alert_rules.ACCEPTANCE_CRITICAL, "10.0.0.3:9400")]["state"] == "suppressed"
    assert states[(alert_rules.ACCEPTANCE_CRITICAL, "10.0.0.3:9400")]["inhibitedBy"]
    assert states[(alert_rules.DRAFTS_STOPPED, "10.0.0.5:9400")]["state"] == "suppressed"
    assert states[(alert_rules.ACCEPTANCE_CRITICAL, "10.0.0.4:9400")]["state"] == "active"


def test_critical_supersedes_warning_for_the_same_server_and_model(stack) -> None:
    am, hook = stack
    am.post_alerts([_alert(alert_rules.ACCEPTANCE_CRITICAL, "critical", "10.0.0.6:9400")])
    wait_until(lambda: len(am.alerts(alertname=alert_rules.ACCEPTANCE_CRITICAL)) == 1, 10)
    am.post_alerts([_alert(alert_rules.ACCEPTANCE_LOW, "warning", "10.0.0.6:9400"),
                    _alert(alert_rules.ACCEPTANCE_LOW, "warning", "10.0.0.6:9400", model="qwen")])
    wait_until(lambda: any("qwen" in c for c in _chats(hook)), 30)  # other model: not inhibited
    time.sleep(3)
    low_messages = [c for c in _chats(hook) if alert_rules.ACCEPTANCE_LOW in c]
    assert len(low_messages) == 1 and "qwen" in low_messages[0]
    assert any("10.0.0.6:9400" in p for p in _pages(hook))


def test_an_acceptance_alert_inhibits_not_paying_for_the_same_server_and_model(stack) -> None:
    """Collapsed acceptance is why speculation does not pay at any batch: chat hears the cause once."""
    am, hook = stack
    am.post_alerts([_alert(alert_rules.ACCEPTANCE_LOW, "warning", "10.0.0.7:9400")])
    wait_until(lambda: len(am.alerts(alertname=alert_rules.ACCEPTANCE_LOW)) == 1, 10)
    am.post_alerts([_alert(alert_rules.NOT_PAYING, "warning", "10.0.0.7:9400"),  # inhibited
                    _alert(alert_rules.NOT_PAYING, "warning", "10.0.0.8:9400")])  # other server: sent
    wait_until(lambda: any(alert_rules.NOT_PAYING in c and "10.0.0.8:9400" in c for c in _chats(hook)), 30)
    time.sleep(3)
    assert not any(alert_rules.NOT_PAYING in c and "10.0.0.7:9400" in c for c in _chats(hook))
    states = {(a["labels"]["alertname"], a["labels"]["instance"]): a["status"]["state"] for a in am.alerts()}
    assert states[(alert_rules.NOT_PAYING, "10.0.0.7:9400")] == "suppressed"
    assert states[(alert_rules.NOT_PAYING, "10.0.0.8:9400")] == "active"
