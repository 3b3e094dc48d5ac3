"""alerts/alertmanager.yml: route pages and chat warnings, inhibit alerts a dead target explains.

A complete, `amtool check-config`-clean example for Alertmanager 0.25 and 0.3x that people can
paste into their own tree. Secrets stay out of it: the PagerDuty routing key and the chat webhook URL are
read from files (`routing_key_file`, `api_url_file`).
"""

from __future__ import annotations

from typing import Any

from ..config import MixinConfig
from ..yaml_text import CONFIG_HEADER, dump_yaml
from . import alert_rules

__all__ = ["ALERTMANAGER_FILE", "CHAT_RECEIVER", "PAGER_RECEIVER", "alertmanager_config", "render"]

ALERTMANAGER_FILE = "alerts/alertmanager.yml"
# The links come from the group's first alert, not CommonAnnotations: one group (alertname, model)
# can hold alerts of both bundles (sidecar and direct servers in one Prometheus), whose runbook and
# dashboard URLs differ by page but name the same section; common-only, the link would be empty.
FIRST_ALERT = "(index .Alerts 0).Annotations"
PAGER_RECEIVER = "spec-decode-pager"
CHAT_RECEIVER = "spec-decode-chat"


# Alertmanager 0.3x (seen on 0.33.1) sends a PagerDuty detail whose rendered text parses as a YAML
# mapping as an object: "… is below 40%: over the last 5m …" arrived as {"… is below 40%": "over …"}.
# A no-break space after each ": " keeps the text one string on every version (0.25 sends strings).
_DESCRIPTIONS_AS_TEXT = '{{ range .Alerts }}{{ reReplaceAll ": " ":\\u00a0" .Annotations.description }}\n{{ end }}'


# The acceptance alerts, which explain a server not paying at its load whatever the batch.
ACCEPTANCE_ALERTS = (alert_rules.ACCEPTANCE_LOW, alert_rules.ACCEPTANCE_CRITICAL)


def _alternatives(names: tuple[str, ...]) -> str:
    return "|".join(names)


def render(cfg: MixinConfig) -> dict[str, str]:
    return {ALERTMANAGER_FILE: CONFIG_HEADER + dump_yaml(alertmanager_config(cfg))}


def alertmanager_config(cfg: MixinConfig) -> dict[str, Any]:
    target_labels = sorted({*cfg.fleet_labels, cfg.instance_label})
    return {
        "route": {
            "receiver": CHAT_RECEIVER,  # anything unmatched still reaches a human, never a pager
            "group_by": list(cfg.alertmanager_group_by),
            "group_wait": cfg.alertmanager_group_wait,
            "group_interval": cfg.alertmanager_group_interval,
            "repeat_interval": cfg.alertmanager_repeat_interval,
            "routes": [
                {"matchers": [f'severity="{cfg.critical_severity}"'], "receiver": PAGER_RECEIVER},
                {"matchers": [f'severity="{cfg.warning_severity}"'], "receiver": CHAT_RECEIVER},
            ],
        },
        "inhibit_rules": [
            # A server vLLM that cannot be read (or an exporter Prometheus cannot scrape) explains
            # any acceptance symptom on the same server: page for the cause only.
            {
                "source_matchers": [f'alertname=~"{_alternatives(alert_rules.TARGET_DOWN_ALERTS)}"'],
                "target_matchers": [f'alertname=~"{_alternatives(alert_rules.TRAFFIC_ALERTS)}"'],
                "equal": target_labels,
            },
            # The critical acceptance alert supersedes the warning for the same server and model.
            {
                "source_matchers": [f'alertname="{alert_rules.ACCEPTANCE_CRITICAL}"'],
                "target_matchers": [f'alertname="{alert_rules.ACCEPTANCE_LOW}"'],
                "equal": sorted({*target_labels, "model_name"}),
            },
            # Collapsed acceptance makes speculation not pay at any batch: the acceptance alert names
            # the cause, the estimate at the current load would only repeat it.
            {
                "source_matchers": [f'alertname=~"{_alternatives(ACCEPTANCE_ALERTS)}"'],
                "target_matchers": [f'alertname="{alert_rules.NOT_PAYING}"'],
                "equal": sorted({*target_labels, "model_name"}),
            },
        ],
        "receivers": [
            {
                "name": PAGER_RECEIVER,
                "pagerduty_configs": [{
                    "routing_key_file": cfg.pager_routing_key_file,
                    "url": cfg.pager_events_url,
                    "send_resolved": True,
                    # The model when the alerts name one (llama.cpp read directly has no model_name).
                    "description": ("{{ .CommonAnnotations.summary }}"
                                    "{{ with .GroupLabels.model_name }} ({{ . }}){{ end }}"),
                    "details": {
                        "description": _DESCRIPTIONS_AS_TEXT,
                        "runbook_url": "{{ " + FIRST_ALERT + ".runbook_url }}",
                        "dashboard_url": "{{ " + FIRST_ALERT + ".dashboard_url }}",
                    },
                }],
            },
            {
                "name": CHAT_RECEIVER,
                "slack_configs": [{
                    "api_url_file": cfg.chat_webhook_url_file,
                    "channel": cfg.chat_channel,
                    "send_resolved": True,
                    "title": "[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }}: "
                             "{{ .CommonAnnotations.summary }}",
                    "title_link": "{{ " + FIRST_ALERT + ".runbook_url }}",
                    "text": "{{ range .Alerts }}{{ .Annotations.description }}\n{{ end }}"
                            "Runbook: {{ " + FIRST_ALERT + ".runbook_url }}\n"
                            "Dashboard: {{ " + FIRST_ALERT + ".dashboard_url }}",
                }],
            },
        ],
    }
