"""The rule files: recording and alerting rules, the PrometheusRule, and alerts/README.md.

`render(cfg)` returns {relative path: exact text}; `generate.py` writes or checks them. The rule
groups are dumped once and reused verbatim, so alerts/prometheusrule.yaml carries byte-identical
groups (only indented) to alerts/prometheus_rules.yaml + alerts/prometheus_alerts.yaml. The README
is templates/alerts-README.md filled from the config and the rules themselves.
"""

from __future__ import annotations

import textwrap
from typing import Any

from .. import config
from ..config import MixinConfig
from ..templates import fill
from ..yaml_text import CONFIG_HEADER, dump_yaml
from . import alert_rules, fleet_counts, fleet_records, load, measured, positions, recording_rules

__all__ = ["ALERTS_FILE", "PROMETHEUS_RULE_FILE", "README_FILE", "RULES_FILE", "all_groups_text", "operator_labels",
           "prometheus_rule_text", "render"]

RULES_FILE = "alerts/prometheus_rules.yaml"
ALERTS_FILE = "alerts/prometheus_alerts.yaml"
PROMETHEUS_RULE_FILE = "alerts/prometheusrule.yaml"
README_FILE = "alerts/README.md"


def render(cfg: MixinConfig) -> dict[str, str]:
    recording_groups = recording_rules.recording_groups(cfg)
    alert_groups = alert_rules.alert_groups(cfg)
    return {
        RULES_FILE: CONFIG_HEADER + _groups_text(recording_groups),
        ALERTS_FILE: CONFIG_HEADER + _groups_text(alert_groups),
        PROMETHEUS_RULE_FILE: prometheus_rule_text(cfg, _groups_text(recording_groups + alert_groups)),
        README_FILE: fill("alerts-README.md", readme_values(cfg)),
    }


def _groups_text(groups: list[dict[str, Any]]) -> str:
    return dump_yaml({"groups": groups})


def all_groups_text(cfg: MixinConfig) -> str:
    """`groups:` with every recording and alerting group, as the PrometheusRule's spec holds it."""
    return _groups_text(recording_rules.recording_groups(cfg) + alert_rules.alert_groups(cfg))


def prometheus_rule_text(cfg: MixinConfig, groups_text: str) -> str:
    metadata = dump_yaml({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "vllm-spec-exporter",
                     "labels": dict(sorted(operator_labels(cfg, cfg.prometheus_rule_labels).items()))},
    })
    # `spec:` then the very same `groups:` text, indented: byte-identical groups.
    return CONFIG_HEADER + metadata + "spec:\n" + textwrap.indent(groups_text, "  ")


def operator_labels(cfg: MixinConfig, labels: dict[str, str]) -> dict[str, str]:
    """`labels` of a Prometheus Operator object, with kube-prometheus-stack's `release` label when
    `release_label` is set (its Prometheus selects PodMonitors and PrometheusRules by it)."""
    return {**labels, "release": cfg.release_label} if cfg.release_label else dict(labels)


def readme_values(cfg: MixinConfig) -> dict[str, object]:
    """Every placeholder of templates/alerts-README.md for `cfg`."""
    n = recording_rules.record_names(cfg)
    # The acceptance alerts hold their duration inside the expression (max_over_time).
    w = cfg.windows
    sustained = {alert_rules.ACCEPTANCE_LOW: w.warning_hold,
                 alert_rules.ACCEPTANCE_CRITICAL: w.critical_hold}
    alert_rows = [
        f"| [`{a['alert']}`](../docs/runbooks.md#{a['alert'].lower()}) | {a['labels']['severity']} "
        f"| {a.get('for') or (sustained[a['alert']] + ' sustained' if a['alert'] in sustained else '0s')} "
        f"| {a['annotations']['summary']} |"
        for a in alert_rules.all_alerts(cfg)
    ]
    source_rows = [f"| `{name}` | {meaning} |" for name, meaning in (recording_rules.source_meanings(cfg)
                                                                     | fleet_records.fleet_meanings(cfg)).items()]
    count_rows = [f"| `{name}` | {meaning} |" for name, meaning in (fleet_counts.fleet_count_meanings(cfg)
                                                                    | load.load_meanings(cfg)
                                                                    | measured.measured_meanings(cfg)).items()]
    record_rows = source_rows + [f"| `{r['record']}` | {recording_rules.record_meaning(r['record'], n)} |"
                                 for r in recording_rules.recording_rules(cfg)] + count_rows
    evidence_rows = [f"| `{name}` | {meaning} |" for name, meaning in recording_rules.evidence_meanings(cfg).items()]
    derived = _derived_defaults(cfg)
    knob_rows = [f"| {knob.section} | `{knob.name}` | "
                 + (f"derived: `{derived[knob.name]}`" if knob.name in derived and knob.default == "''"
                    else f"`{_cell(knob.default)}`")
                 + f" | {_cell(knob.doc)} |"
                 for knob in config.knobs()]
    return {
        "source_group": recording_rules.SOURCE_GROUP,
        "k_record": positions.k_record(cfg),
        "k_group": positions.K_GROUP,
        "k_interval": w.k_interval,
        "fleet_group": fleet_records.FLEET_GROUP,
        "fleet_counts_group": fleet_counts.FLEET_COUNTS_GROUP,
        "fleet_interval": w.fleet_interval,
        "source_origin": ("vLLM's own series (`source=vllm`)" if cfg.direct
                          else "the exporter's counters (`source=exporter`, the default)"),
        "recording_group": recording_rules.RECORDING_GROUP,
        "evidence_group": recording_rules.EVIDENCE_GROUP,
        "acceptance_group": alert_rules.ACCEPTANCE_GROUP,
        "exporter_group": alert_rules.EXPORTER_GROUP,
        "critical_severity": cfg.critical_severity,
        "warning_severity": cfg.warning_severity,
        "group_by": ", ".join(cfg.alertmanager_group_by),
        "alert_rows": "\n".join(alert_rows),
        "confidence": cfg.confidence_label,
        "overdispersion": f"{cfg.acceptance_overdispersion:g}",
        "fast_long_window": w.fast_long,
        "fast_short_window": w.fast_short,
        "slow_long_window": w.slow_long,
        "slow_short_window": w.slow_short,
        "low_for": w.warning_hold,
        "critical_for": w.critical_hold,
        "slow_for": w.slow_hold,
        "scrape_interval": w.scrape_interval,
        "evaluation_interval": w.evaluation_interval,
        "drafting_batch_memory": cfg.drafting_batch_memory,
        "drafting_paused_record": n.drafting_paused,
        "drafts_stopped_record": n.drafts_stopped,
        "fleet_level": "_".join((*cfg.fleet_labels, "model")),
        "fleet_labels": ", ".join((*cfg.fleet_labels, "model_name")),
        "rate_window": w.rate_window,
        "record_rows": "\n".join(record_rows),
        "alert_windows": ", ".join(cfg.windows.evidence),
        "evidence_rows": "\n".join(evidence_rows),
        "knob_rows": "\n".join(knob_rows),
    }


def _derived_defaults(cfg: MixinConfig) -> dict[str, str]:
    """What each empty (derived) knob resolves to for `cfg` (windows.py)."""
    w = cfg.windows
    return {"evaluation_interval": w.evaluation_interval, "fleet_evaluation_interval": w.fleet_interval,
            "rate_window": w.rate_window,
            "acceptance_fast_long_window": w.fast_long, "acceptance_fast_short_window": w.fast_short,
            "acceptance_slow_long_window": w.slow_long, "acceptance_slow_short_window": w.slow_short,
            "acceptance_low_for": w.warning_hold, "acceptance_critical_for": w.critical_hold,
            "acceptance_slow_for": w.slow_hold}


def _cell(text: str) -> str:
    return text.replace("|", "&#124;")
