"""The one config object behind every generated artifact: rules, alerts, runbooks, dashboards.

Thresholds live here and nowhere else. Users regenerate with their own values:
`vllm-spec-exporter generate --set acceptance_warning_threshold=0.6` or `--config my.yaml`.
Every knob says what it is and when to change it (node-mixin style).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class MixinConfig:
    # --- Selectors -------------------------------------------------------------------------
    # PromQL label matchers (without braces) that pick the exporter's series. Point this at your
    # own scrape job, e.g. 'job="my-vllm-sidecars"' or 'namespace="llm",container="spec-exporter"'.
    exporter_selector: str = 'job="vllm-spec-exporter"'
    # Matchers for vLLM's own /metrics (latency histograms, `up` of the server itself). Only the
    # dashboards' context panels use it; alerts rely on the exporter.
    vllm_selector: str = 'job="vllm"'
    # Labels that identify one server in aggregations. Keep `instance` unless your relabelling
    # puts the pod name elsewhere (e.g. 'pod').
    instance_label: str = "instance"
    # Labels kept (besides model_name) when the fleet-level recording rules sum over servers.
    # Add 'cluster' (multi-cluster) or 'namespace' so separate fleets are not merged. The fleet
    # rules' level prefix is derived from them: ("job",) gives `job_model:...`.
    fleet_labels: tuple[str, ...] = ("job",)

    # --- Acceptance thresholds -------------------------------------------------------------
    # Below ~50 % acceptance the target model verifies more rejected tokens than speculation saves
    # for typical k=3..5 drafters; this is the warning line, drawn on every dashboard panel.
    acceptance_warning_threshold: float = 0.5
    # Below ~40 % speculation costs more latency and compute than it saves: page someone.
    acceptance_critical_threshold: float = 0.4
    # Above this, the dashboards suggest trying a larger k (per-position panel, advisor).
    acceptance_raise_k_threshold: float = 0.7

    # --- Windows and durations -------------------------------------------------------------
    # rate() window for the recording rules the alerts read. Shorter pages sooner but follows
    # bursty traffic more closely; must cover >= 4 scrape intervals of the exporter job.
    rate_window: str = "2m"
    # How long acceptance must stay below the warning threshold before SpecDecodeAcceptanceLow fires.
    acceptance_low_for: str = "2m"
    # How long below the critical threshold before SpecDecodeAcceptanceCritical pages. 1m on top
    # of the 2m rate window pages about 2 minutes after a sudden collapse (bench/alert_timing.py)
    # while a dip of a minute or less never pages.
    acceptance_critical_for: str = "1m"
    # Hysteresis: keep a firing acceptance alert for this long after the value recovers, so
    # acceptance wobbling around the threshold does not resolve and re-page (Prometheus >= 2.42).
    acceptance_keep_firing_for: str = "5m"
    # Minimum draft tokens per second (averaged over rate_window) before acceptance alerts may
    # fire: idle or trickle traffic never pages. 1 tok/s over 2m = 120 draft tokens.
    min_draft_tokens_per_second: float = 1.0
    # Target down / not scraped for this long before alerting.
    target_down_for: str = "5m"
    # Spec decoding silently stopped (output flows, no drafts) for this long. Long, because an
    # n-gram drafter legitimately proposes nothing for a while on text without repeats.
    spec_decode_stopped_for: str = "10m"
    # Minimum output tokens/s for "spec decoding stopped" to be meaningful.
    min_generation_tokens_per_second: float = 1.0
    # The exporter reports `vllm_spec_decode_enabled 0` (no spec-decode metrics: speculation off,
    # or a vLLM upgrade renamed them) for this long before SpecDecodeMetricsMissing fires. Long
    # enough to ride out a rolling restart.
    spec_decode_missing_for: str = "10m"
    # Counter resets (vLLM restarts) within reset_window that count as a crash loop. Fires at once
    # (no `for`): three restarts in the window are already sustained evidence.
    counter_resets_threshold: int = 3
    # Window for counting those resets; the alert resolves once the oldest leaves it.
    reset_window: str = "30m"

    # --- Labels, links ---------------------------------------------------------------------
    # Severity names, configurable like node-mixin's nodeCriticalSeverity: set
    # critical_severity="warning" where one server's speculation collapsing should not page.
    warning_severity: str = "warning"
    critical_severity: str = "critical"
    # Extra labels added to every alert (team, routing key). Never target labels.
    extra_alert_labels: dict[str, str] = field(default_factory=dict)
    # Where runbooks live; %s is the lower-cased alert name (GitHub anchor).
    runbook_url_pattern: str = (
        "https://github.com/vllm-spec-exporter/vllm-spec-exporter/blob/main/docs/runbooks.md#%s"
    )
    # Grafana base URL for dashboard links in alerts; empty gives a relative /d/<uid> link.
    grafana_url: str = ""

    # --- Alertmanager (alerts/alertmanager.yml) ----------------------------------------------
    # Labels that group alerts into one notification: one message per alert and model, listing
    # every server affected.
    alertmanager_group_by: tuple[str, ...] = ("alertname", "model_name")
    # Wait before the first notification of a new group (collects servers failing together),
    # between updates of a group, and before re-sending an unchanged firing group.
    alertmanager_group_wait: str = "30s"
    alertmanager_group_interval: str = "5m"
    alertmanager_repeat_interval: str = "4h"
    # Pager receiver (critical): PagerDuty Events API v2. The routing key is read from this file
    # so the config holds no secret. Point pager_events_url at a compatible gateway if you use one.
    pager_routing_key_file: str = "/etc/alertmanager/secrets/pagerduty-routing-key"
    pager_events_url: str = "https://events.pagerduty.com/v2/enqueue"
    # Chat receiver (warning): a Slack-compatible incoming-webhook URL read from this file
    # (Alertmanager 0.25 supports *_file for Slack's URL but not yet for generic webhooks).
    chat_webhook_url_file: str = "/etc/alertmanager/secrets/chat-webhook-url"
    chat_channel: str = "#vllm-alerts"
    # Labels on the Kubernetes PrometheusRule (alerts/prometheusrule.yaml); match them to your
    # Prometheus Operator's ruleSelector (kube-prometheus-stack: release=<helm release>).
    prometheus_rule_labels: dict[str, str] = field(
        default_factory=lambda: {"app.kubernetes.io/name": "vllm-spec-exporter"}
    )

    # --- Dashboards ------------------------------------------------------------------------
    # Stable dashboard UIDs start with this; the main one is `<prefix>-overview`, which every
    # alert's dashboard_url links to.
    dashboard_uid_prefix: str = "vllm-spec"
    # Grafana tags on every dashboard (dashboard lists, links between them).
    dashboard_tags: tuple[str, ...] = ("vllm", "speculative-decoding", "vllm-spec-exporter")
    # Auto-refresh interval and default time range of the dashboards.
    dashboard_refresh: str = "30s"
    dashboard_time_from: str = "now-1h"

    def with_overrides(self, overrides: dict[str, Any]) -> MixinConfig:
        """Return a copy with `overrides` applied; unknown keys and wrong types are errors."""
        known = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for key, raw in overrides.items():
            if key not in known:
                raise ValueError(f"unknown config key {key!r}; known keys: {', '.join(sorted(known))}")
            changes[key] = _coerce(key, raw, getattr(self, key))
        new = dataclasses.replace(self, **changes)
        new.validate()
        return new

    def validate(self) -> None:
        if not 0 < self.acceptance_critical_threshold <= self.acceptance_warning_threshold < 1:
            raise ValueError(
                "need 0 < acceptance_critical_threshold <= acceptance_warning_threshold < 1, got "
                f"{self.acceptance_critical_threshold} and {self.acceptance_warning_threshold}"
            )
        if "%s" not in self.runbook_url_pattern:
            raise ValueError("runbook_url_pattern must contain %s (the lower-cased alert name)")
        for key in _DURATION_KEYS:
            value = getattr(self, key)
            if not value or not _DURATION.fullmatch(value):
                raise ValueError(f"{key} must be a Prometheus duration like 90s, 2m or 1h30m, got {value!r}")
        if not self.warning_severity or not self.critical_severity:
            raise ValueError("warning_severity and critical_severity must not be empty")
        if self.min_draft_tokens_per_second < 0 or self.min_generation_tokens_per_second < 0:
            raise ValueError("minimum token rates must be >= 0")
        if self.counter_resets_threshold < 1:
            raise ValueError("counter_resets_threshold must be >= 1")


# Prometheus durations as rule files accept them (units largest first, no fractions).
_DURATION = re.compile(r"(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?")
_DURATION_KEYS = (
    "rate_window", "acceptance_low_for", "acceptance_critical_for", "acceptance_keep_firing_for",
    "target_down_for", "spec_decode_stopped_for", "spec_decode_missing_for", "reset_window",
    "alertmanager_group_wait", "alertmanager_group_interval", "alertmanager_repeat_interval",
)


def _coerce(key: str, raw: Any, current: Any) -> Any:
    if isinstance(raw, str) and not isinstance(current, str):
        raw = yaml.safe_load(raw)  # --set key=0.6 arrives as a string
    if isinstance(current, bool):
        ok = isinstance(raw, bool)
    elif isinstance(current, float):
        ok = isinstance(raw, int | float) and not isinstance(raw, bool)
        raw = float(raw) if ok else raw
    elif isinstance(current, int):
        ok = isinstance(raw, int) and not isinstance(raw, bool)
    elif isinstance(current, tuple):
        ok = isinstance(raw, list | tuple)
        raw = tuple(raw) if ok else raw
    elif isinstance(current, dict):
        ok = isinstance(raw, dict)
    else:
        ok = isinstance(raw, str)
    if not ok:
        raise ValueError(f"config key {key!r} expects {type(current).__name__}, got {raw!r}")
    return raw


def load_config(path: Path | None = None, sets: list[str] | None = None) -> MixinConfig:
    """Defaults, then a YAML file, then `key=value` pairs from --set."""
    cfg = MixinConfig()
    if path is not None:
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of config keys")
        cfg = cfg.with_overrides(data)
    overrides = {}
    for item in sets or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects key=value, got {item!r}")
        overrides[key.strip()] = value
    return cfg.with_overrides(overrides) if overrides else cfg
