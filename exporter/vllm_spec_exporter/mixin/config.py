"""The one config object behind every generated artifact: rules, alerts, runbooks, dashboards.

Thresholds live here and nowhere else. Users regenerate with their own values:
`vllm-spec-exporter generate --set acceptance_warning_threshold=0.6` or `--config my.yaml`.
Every knob says what it is and when to change it (node-mixin style).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any, NamedTuple, TypeVar

import yaml

from ..advisor import UNKNOWN_METHOD_DRAFT_COST, draft_cost_help
from ..durations import seconds
from .config_signal import SOURCE_EXPORTER, SOURCE_VLLM, SOURCES, SignalConfig
from .knobs import Between, Contains, Kind, Matches, NotEmpty, field_problems, knob
from .windows import ALWAYS_SAMPLES, SHORT_SAMPLES, AlertWindows, alert_windows, samples_problem

__all__ = ["SOURCES", "SOURCE_EXPORTER", "SOURCE_VLLM", "Knob", "MixinConfig", "knobs",
           "load_config", "once_per_config"]

# A Kubernetes label value (release_label), as the API server validates it.
_LABEL_VALUE = re.compile(r"(?=.{1,63}$)[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_LABEL_VALUE_FORM = ("a Kubernetes label value (up to 63 letters, digits, '-', '_' or '.', starting and ending with a "
                     "letter or digit)")

# Sections of the config (the README's knob table groups by them).
LABELS = "Labels, links"
ALERTMANAGER = "Alertmanager (alerts/alertmanager.yml)"
DASHBOARDS = "Dashboards"

# Documentation shared by consecutive knobs.
_SEVERITY_DOC = (
    "Severity names, configurable like node-mixin's nodeCriticalSeverity: set critical_severity=\"warning\" where one "
    "server's speculation collapsing should not page."
)
_GROUP_TIMING_DOC = (
    "Wait before the first notification of a new group (collects servers failing together), between updates of a "
    "group, and before re-sending an unchanged firing group."
)
_PAGER_DOC = (
    "Pager receiver (critical): PagerDuty Events API v2. The routing key is read from this file so the config holds "
    "no secret. Point pager_events_url at a compatible gateway if you use one."
)
_CHAT_DOC = (
    "Chat receiver (warning): a Slack-compatible incoming-webhook URL read from this file (Alertmanager 0.25 supports"
    " *_file for Slack's URL but not yet for generic webhooks)."
)
_REFRESH_DOC = "Auto-refresh interval and default time range of the dashboards."


@dataclass(frozen=True)
class MixinConfig(SignalConfig):
    """Every threshold, window, selector and name the generated artifacts use, and nothing else.

    Invariants (checked by `validate`, which `with_overrides` and `load_config` always run):
    0 < critical <= warning < 1; every duration is a Prometheus duration; the runbook URL pattern
    holds `%s`; severities are non-empty. Immutable: a change is a new config (`with_overrides`).
    Each field is a `knob` carrying its own documentation, kind and constraints (mixin/knobs.py);
    the selectors, thresholds, windows, evidence and load knobs come first, from SignalConfig
    (config_signal.py), then the labels, Alertmanager and dashboard knobs below.
    """


    # --- Labels, links ---------------------------------------------------------------------
    warning_severity: str = knob(
        LABELS, "warning",
        _SEVERITY_DOC,
        Kind.TEXT, NotEmpty(),
    )
    critical_severity: str = knob(
        LABELS, "critical",
        _SEVERITY_DOC,
        Kind.TEXT, NotEmpty(),
    )
    extra_alert_labels: dict[str, str] = knob(  # noqa: RUF009 (knob is a dataclasses.field with a default_factory)
        LABELS, {},
        "Extra labels added to every alert (team, routing key). Never target labels.",
        Kind.LABEL_MAP,
    )
    runbook_url_pattern: str = knob(
        LABELS, "https://github.com/vllm-spec-exporter/vllm-spec-exporter/blob/main/docs/runbooks.md#%s",
        "Where runbooks live; %s is the lower-cased alert name (GitHub anchor). The default is the repository's "
        "page of the bundle: docs/runbooks.md, or direct/docs/runbooks.md with source=vllm; a pattern you set is "
        "used as given.",
        Kind.TEXT, Contains("%s", "the lower-cased alert name"),
    )
    grafana_url: str = knob(
        LABELS, "",
        "Grafana base URL for dashboard links in alerts; empty gives a relative /d/<uid> link.",
        Kind.TEXT,
    )

    # --- Alertmanager (alerts/alertmanager.yml) ----------------------------------------------
    alertmanager_group_by: tuple[str, ...] = knob(
        ALERTMANAGER, ("alertname", "model_name"),
        "Labels that group alerts into one notification: one message per alert and model, listing every server "
        "affected.",
        Kind.LABELS,
    )
    alertmanager_group_wait: str = knob(
        ALERTMANAGER, "30s",
        _GROUP_TIMING_DOC,
        Kind.DURATION,
    )
    alertmanager_group_interval: str = knob(
        ALERTMANAGER, "5m",
        _GROUP_TIMING_DOC,
        Kind.DURATION,
    )
    alertmanager_repeat_interval: str = knob(
        ALERTMANAGER, "4h",
        _GROUP_TIMING_DOC,
        Kind.DURATION,
    )
    pager_routing_key_file: str = knob(
        ALERTMANAGER, "/etc/alertmanager/secrets/pagerduty-routing-key",
        _PAGER_DOC,
        Kind.TEXT,
    )
    pager_events_url: str = knob(
        ALERTMANAGER, "https://events.pagerduty.com/v2/enqueue",
        _PAGER_DOC,
        Kind.TEXT,
    )
    chat_webhook_url_file: str = knob(
        ALERTMANAGER, "/etc/alertmanager/secrets/chat-webhook-url",
        _CHAT_DOC,
        Kind.TEXT,
    )
    chat_channel: str = knob(
        ALERTMANAGER, "#vllm-alerts",
        _CHAT_DOC,
        Kind.TEXT,
    )
    prometheus_rule_labels: dict[str, str] = knob(  # noqa: RUF009 (knob is a dataclasses.field with a default_factory)
        ALERTMANAGER, {"app.kubernetes.io/name": "vllm-spec-exporter"},
        "Labels on the Kubernetes PrometheusRule (alerts/prometheusrule.yaml); match them to your Prometheus "
        "Operator's ruleSelector (kube-prometheus-stack: release=<helm release>).",
        Kind.LABEL_MAP,
    )
    release_label: str = knob(
        ALERTMANAGER, "",
        "kube-prometheus-stack's Prometheus picks PodMonitors and PrometheusRules labelled `release: <Helm release "
        "name>` (its podMonitorSelector and ruleSelector, by default). Set your release name (e.g. "
        "kube-prometheus-stack) and the generated PrometheusRule and PodMonitor carry that label, so "
        "`kubectl apply -k deploy/kubernetes/base` is picked up without an overlay's patch. Empty: no label.",
        Kind.LABEL_VALUE, Matches(_LABEL_VALUE, _LABEL_VALUE_FORM),
    )

    # --- Dashboards ------------------------------------------------------------------------
    dashboard_uid_prefix: str = knob(
        DASHBOARDS, "vllm-spec",
        "Stable dashboard UIDs start with this; the main one is `<prefix>-overview`, which every alert's "
        "dashboard_url links to.",
        Kind.TEXT,
    )
    dashboard_tags: tuple[str, ...] = knob(
        DASHBOARDS, ("vllm", "speculative-decoding", "vllm-spec-exporter"),
        "Grafana tags on every dashboard (dashboard lists, links between them).",
        Kind.TAGS,
    )
    dashboard_refresh: str = knob(
        DASHBOARDS, "30s",
        _REFRESH_DOC,
        Kind.TEXT,
    )
    dashboard_time_from: str = knob(
        DASHBOARDS, "now-1h",
        _REFRESH_DOC,
        Kind.TEXT,
    )
    panel_all_series_up_to: int = knob(
        DASHBOARDS, 24,
        "A per-server or per-engine panel draws every series while it has at most this many (one selected "
        "server, even with 16 engines, shows everything about it); beyond, only the worst and best few "
        "(`panel_worst_k`, `panel_best_k`). 1,000 lines on one panel are unreadable and slow to draw.",
        Kind.COUNT,
    )
    panel_worst_k: int = knob(
        DASHBOARDS, 5,
        "Series a crowded per-server panel keeps from its bad end (lowest acceptance, oldest poll, ...).",
        Kind.COUNT,
    )
    panel_best_k: int = knob(
        DASHBOARDS, 3,
        "Series a crowded per-server panel keeps from its good end, for contrast (0: none).",
        Kind.COUNT,
    )
    draft_cost_ratio: float = knob(
        DASHBOARDS, UNKNOWN_METHOD_DRAFT_COST,
        "Cost of drafting one token relative to one target forward step, for the estimated speed-up at the "
        "current load (both bundles, and SpecDecodeNotPaying) and the sidecar-less dashboards' \"Speed-up (est.)\" "
        "(tokens per step / (1 + cost x mean draft length)); the sidecar's advisor has its own "
        f"--draft-cost-ratio. Default: EAGLE's; set yours ({draft_cost_help()}).",
        Kind.NUMBER, Between(0),
    )

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
        """Every knob holds its own constraints (its kind's and its field's, mixin/knobs.py), then the
        rules between knobs hold."""
        if (problem := field_problems(self)) is not None:
            raise ValueError(problem)
        if not 0 < self.panel_worst_k <= self.panel_all_series_up_to or self.panel_best_k < 0:
            raise ValueError("need 0 < panel_worst_k <= panel_all_series_up_to and panel_best_k >= 0, got "
                             f"{self.panel_worst_k}, {self.panel_all_series_up_to}, {self.panel_best_k}")
        if not 0 < self.acceptance_critical_threshold <= self.acceptance_warning_threshold < 1:
            raise ValueError(
                "need 0 < acceptance_critical_threshold <= acceptance_warning_threshold < 1, got "
                f"{self.acceptance_critical_threshold} and {self.acceptance_warning_threshold}"
            )
        self._validate_windows()
        other = self.prometheus_rule_labels.get("release")
        if self.release_label and other is not None and other != self.release_label:
            raise ValueError(f"release_label ({self.release_label}) and prometheus_rule_labels' release ({other}) "
                             "disagree; set one of them")

    def _validate_windows(self) -> None:
        """Every rate()/increase() window holds enough samples at scrape_interval; tiers are ordered."""
        w = self.windows
        for key, window, minimum in (
                ("rate_window", w.rate_window, ALWAYS_SAMPLES),
                ("acceptance_fast_long_window", w.fast_long, ALWAYS_SAMPLES),
                ("acceptance_fast_short_window", w.fast_short, SHORT_SAMPLES),
                ("acceptance_slow_long_window", w.slow_long, ALWAYS_SAMPLES),
                ("acceptance_slow_short_window", w.slow_short, ALWAYS_SAMPLES),
                ("reset_window", self.reset_window, ALWAYS_SAMPLES)):
            problem = samples_problem(key, window, self.scrape_interval, minimum)
            if problem:
                raise ValueError(problem)
        if self.fleet_evaluation_interval:  # derived, it lies between the two (windows.py)
            if seconds(w.fleet_interval) > seconds(w.rate_window):
                raise ValueError(f"fleet_evaluation_interval ({w.fleet_interval}) must not be longer than "
                                 f"rate_window ({w.rate_window}): the fleet rates would skip traffic between "
                                 "evaluations")
            if seconds(w.fleet_interval) < seconds(w.evaluation_interval):
                raise ValueError(f"fleet_evaluation_interval ({w.fleet_interval}) must not be shorter than the "
                                 f"evaluation interval ({w.evaluation_interval}): the fleet counts read records "
                                 "written that often")
        for tier, long_, short in (("fast", w.fast_long, w.fast_short), ("slow", w.slow_long, w.slow_short)):
            if seconds(short) >= seconds(long_):
                raise ValueError(f"acceptance_{tier}_short_window ({short}) must be shorter than "
                                 f"acceptance_{tier}_long_window ({long_})")

    @functools.cached_property
    def windows(self) -> AlertWindows:
        """Every window and hold of the rules, resolved from this config (mixin/windows.py), once:
        the config is immutable (cached in the instance, outside its fields)."""
        return alert_windows(self)

    @property
    def direct(self) -> bool:
        """True when the rules read vLLM's own series (source=vllm): no sidecar."""
        return self.source == SOURCE_VLLM

    @property
    def confidence_z(self) -> float:
        """One-sided standard normal quantile of acceptance_confidence (1.645 for 95 %)."""
        return NormalDist().inv_cdf(self.acceptance_confidence)

    @property
    def confidence_label(self) -> str:
        """`95%`: the `confidence` label of the bound recording rules (GitLab metrics-catalog style)."""
        return f"{self.acceptance_confidence * 100:g}%"


_Derived = TypeVar("_Derived")


def once_per_config(derive: Callable[[MixinConfig], _Derived]) -> Callable[[MixinConfig], _Derived]:
    """`derive(cfg)` computed once per config object and reused (record names, load names: a render
    asks for them in many places). A config is immutable, so its derived values cannot go stale;
    they are kept in the instance, outside its fields (equality, replace and asdict never see them).
    """
    key = f"_derived_{derive.__module__}.{derive.__qualname__}"

    @functools.wraps(derive)
    def once(cfg: MixinConfig) -> _Derived:
        if key not in cfg.__dict__:
            cfg.__dict__[key] = derive(cfg)
        return cfg.__dict__[key]

    return once


class Knob(NamedTuple):
    """One row of the knob table: section, key, default (as YAML), what it does."""

    section: str
    name: str
    default: str
    doc: str


def knobs() -> list[Knob]:
    """Every MixinConfig field with its default and documentation, in definition order."""
    return [Knob(f.metadata["section"], f.name, _default_text(f), f.metadata["doc"])
            for f in dataclasses.fields(MixinConfig)]


def _default_text(f: dataclasses.Field[Any]) -> str:
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
    if isinstance(value, tuple):
        value = list(value)
    return yaml.safe_dump(value, default_flow_style=True, width=1_000_000).strip().removesuffix("...").strip()


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
