"""What every alert of the bundle is made of: the alert names (a contract: routing, inhibition,
runbook anchors and dashboards refer to them), the group names, the label templates of the
descriptions, the dashboard link and `alert(...)`, which gives each rule its labels and
annotations. alert_rules.py and health_alerts.py build the alerts from it.
"""

from __future__ import annotations

from typing import Any

from .. import links
from ..config import MixinConfig

# Alert names are a contract (routing, inhibition, runbook anchors, dashboards link to them).
LOSSY_VERIFICATION = "SpecDecodeLossyVerification"


ACCEPTANCE_LOW = "SpecDecodeAcceptanceLow"


ACCEPTANCE_CRITICAL = "SpecDecodeAcceptanceCritical"


DRAFTS_STOPPED = "SpecDecodeDraftsStopped"


NOT_PAYING = "SpecDecodeNotPaying"


METRICS_MISSING = "SpecDecodeMetricsMissing"


VLLM_UNREACHABLE = "SpecDecodeVllmUnreachable"


VLLM_RESTARTING = "SpecDecodeVllmRestarting"


EXPORTER_DOWN = "SpecDecodeExporterDown"


EXPORTER_ABSENT = "SpecDecodeExporterAbsent"


# source=vllm: no target of the vLLM job at all (a wrong vllm_selector); the sidecar's counterpart
# is EXPORTER_ABSENT (no exporter found): another job, another fix, so another name.
VLLM_ABSENT = "SpecDecodeVllmAbsent"


# Alerts about acceptance that a dead target makes meaningless (Alertmanager inhibits them).
TRAFFIC_ALERTS = (ACCEPTANCE_LOW, ACCEPTANCE_CRITICAL, DRAFTS_STOPPED, NOT_PAYING)


TARGET_DOWN_ALERTS = (VLLM_UNREACHABLE, EXPORTER_DOWN)


ACCEPTANCE_GROUP = "vllm-spec-decode.alerts"


EXPORTER_GROUP = "vllm-spec-exporter.alerts"


# source=vllm: the health alerts read vLLM's own scrape job (no exporter to watch).
HEALTH_GROUP = "vllm-spec-decode.health"


def label_template(label: str) -> str:
    return "{{ $labels." + label + " }}"


# Who the alert is about, as the start of a sentence. llama.cpp's series read directly carry no
# `model_name` (only the sidecar asks /v1/models), so the model is named only when there is one.
MODEL_ON = "{{ with $labels.model_name }}Model {{ . }} on {{ end }}"


FOR_MODEL_ON = "{{ with $labels.model_name }}for model {{ . }} {{ end }}on "


MODEL_ON_SERVER = "{{ with $labels.model_name }}Model {{ . }} on server {{ else }}Server {{ end }}"


# Alert labels that select the overview dashboard's variables (job, instance, model_name), so the
# link opens on the failing server and model.
SERVER_VARIABLES = ("job", "instance")


SERVER_MODEL_VARIABLES = ("job", "instance", "model_name")


def dashboard_link(cfg: MixinConfig, variables: tuple[str, ...]) -> str:
    label_of = {"job": "job", "instance": cfg.instance_label, "model_name": "model_name"}
    query = "&".join(f"var-{var}={{{{ $labels.{label_of[var]} | urlquery }}}}" for var in variables)
    return links.dashboard_url(cfg) + (f"?{query}" if query else "")


def alert(cfg: MixinConfig, name: str, expr: str, severity: str, summary: str, description: str,
           for_: str | None = None,
           dashboard_variables: tuple[str, ...] = SERVER_VARIABLES) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ and for_ not in ("0s", "0m"):
        rule["for"] = for_
    rule["labels"] = dict(sorted({**cfg.extra_alert_labels, "severity": severity}.items()))
    rule["annotations"] = {
        "dashboard_url": dashboard_link(cfg, dashboard_variables),
        "description": description,
        "runbook_url": links.runbook_url(cfg, name),
        "summary": summary,
    }
    return rule

