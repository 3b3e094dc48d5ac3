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

from ..advisor import DEFAULT_COMPUTE_BOUND_TOKENS, UNKNOWN_METHOD_DRAFT_COST, draft_cost_help
from ..durations import seconds
from .knobs import Between, Contains, Differs, Duration, Kind, Matches, NotEmpty, OneOf, field_problems, knob
from .windows import ALWAYS_SAMPLES, SHORT_SAMPLES, AlertWindows, alert_windows, samples_problem

__all__ = ["SOURCES", "SOURCE_EXPORTER", "SOURCE_VLLM", "Knob", "MixinConfig", "knobs",
           "load_config", "once_per_config"]

# Where the recording rules read the spec-decode counters (the `source` knob; mixin/sources.py).
SOURCE_EXPORTER = "exporter"
SOURCE_VLLM = "vllm"
SOURCES = (SOURCE_EXPORTER, SOURCE_VLLM)


# A Kubernetes label value (release_label), as the API server validates it.
_LABEL_VALUE = re.compile(r"(?=.{1,63}$)[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_LABEL_VALUE_FORM = ("a Kubernetes label value (up to 63 letters, digits, '-', '_' or '.', starting and ending with a "
                     "letter or digit)")
_POSITIVE = Duration(positive=True)  # a duration longer than 0s

# Sections of the config (the README's knob table groups by them).
SELECTORS = "Selectors"
THRESHOLDS = "Acceptance thresholds"
WINDOWS = "Scrape interval and windows"
EVIDENCE = "Acceptance alerts: a decision on evidence"
LABELS = "Labels, links"
ALERTMANAGER = "Alertmanager (alerts/alertmanager.yml)"
DASHBOARDS = "Dashboards"
LOAD = "Paying at the current load"

# Documentation shared by consecutive knobs.
_FAST_TIER_DOC = (
    'Two tiers, each a long evidence window AND a short "is it still bad now?" window (SRE Workbook multi-window '
    "alerting). An alert fires when either tier's two bounds are below the threshold. Fast tier: enough evidence at "
    "high traffic within minutes; its short window ends the alert within about a minute of recovery. Empty: derived"
    " from scrape_interval (5m and 1m up to 30 s scrapes; the short window holds >= 2 samples, the long >= 4)."
)
_SLOW_TIER_DOC = (
    "Slow tier: low traffic (about 1 draft/s) collects enough evidence over these windows. While the fast short "
    "window proves acceptance is back above the threshold, this tier is ignored, so recovery at high traffic ends the"
    " alert just as fast."
)
_SUSTAINED_DOC = (
    "How long the fast tier's short window must have proven acceptance low (max_over_time) before the alert fires: "
    "what keeps a dip of 2 minutes (a batch of odd prompts) from alerting, since a dip and a collapse look the same "
    "until then. The short window stretches a dip by up to its own length, less the deeper the dip: 2m30s (critical) "
    "and 3m (warning) keep any 2-minute dip, even to 0 %, from a healthy level of 55 % or more quiet, and page a busy"
    " collapse in about 3 minutes. It runs alongside the long window, not after it. No keep_firing_for: an alert ends"
    " as soon as the short window stops proving it, or when its series vanish. Empty: derived (mixin/windows.py) "
    "from acceptance_dip_tolerance, acceptance_healthy_floor, the threshold, the fast short window and the "
    "evaluation interval: dip + (1 - 2(1 - threshold/healthy)) x short window."
)
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
class MixinConfig:
    """Every threshold, window, selector and name the generated artifacts use, and nothing else.

    Invariants (checked by `validate`, which `with_overrides` and `load_config` always run):
    0 < critical <= warning < 1; every duration is a Prometheus duration; the runbook URL pattern
    holds `%s`; severities are non-empty. Immutable: a change is a new config (`with_overrides`).
    Each field is a `knob` carrying its own documentation, kind and constraints (mixin/knobs.py).
    """

    # --- Selectors -------------------------------------------------------------------------
    exporter_selector: str = knob(
        SELECTORS, 'job="vllm-spec-exporter"',
        "PromQL label matchers (without braces) that pick the exporter's series. Point this at your own scrape job, "
        "e.g. 'job=\"my-vllm-sidecars\"' or 'namespace=\"llm\",container=\"spec-exporter\"'.",
        Kind.SELECTOR,
    )
    source: str = knob(
        SELECTORS, "exporter",
        "Where the rules read the spec-decode counters: `exporter` (the sidecar's normalised counters, job "
        "exporter_selector) or `vllm` (vLLM's own /metrics as Prometheus already scrapes it, job vllm_selector, under "
        "any of its four spellings `vllm:`, `vllm_`, `ray_vllm:`, `ray_vllm_`: no sidecar needed). Only the source "
        "layer of the recording rules changes (mixin/sources.py); every record, alert and panel downstream reads it. "
        "Without the sidecar there are no exporter health alerts, no advisor and no V0 support.",
        Kind.CHOICE, OneOf(SOURCES),
    )
    vllm_selector: str = knob(
        SELECTORS, 'job="vllm"',
        "Matchers for vLLM's own /metrics scrape job (as in compose/prometheus). With source=exporter only the "
        "dashboards' latency panels read it; with source=vllm every record, alert and panel does.",
        Kind.SELECTOR,
    )
    instance_label: str = knob(
        SELECTORS, "instance",
        "Labels that identify one server in aggregations. Keep `instance` unless your relabelling puts the pod name "
        "elsewhere (e.g. 'pod').",
        Kind.LABEL,
        # The dashboards tell "All" from selected servers by `job!~"$instance"` (promql.Selectors).
        Differs("job", "must name a label other than job (the dashboards' job variable), e.g. instance or pod"),
    )
    fleet_labels: tuple[str, ...] = knob(
        SELECTORS, ("job",),
        "Labels kept (besides model_name) when the fleet-level recording rules sum over servers. Add 'cluster' "
        "(multi-cluster) or 'namespace' so separate fleets are not merged. The fleet rules' level prefix is derived "
        'from them: ("job",) gives `job_model:...`.',
        Kind.LABELS,
    )

    # --- Acceptance thresholds -------------------------------------------------------------
    acceptance_warning_threshold: float = knob(
        THRESHOLDS, 0.5,
        "Below ~50 % acceptance the target model verifies more rejected tokens than speculation saves for typical "
        "k=3..5 drafters; this is the warning line, drawn on every dashboard panel.",
        Kind.RATIO,
    )
    acceptance_critical_threshold: float = knob(
        THRESHOLDS, 0.4,
        "Below ~40 % speculation costs more latency and compute than it saves: page someone.",
        Kind.RATIO,
    )
    acceptance_raise_k_threshold: float = knob(
        THRESHOLDS, 0.7,
        "Above this, the dashboards suggest trying a larger k (per-position panel, advisor).",
        Kind.RATIO,
    )

    # --- Windows and durations -------------------------------------------------------------
    scrape_interval: str = knob(
        WINDOWS, "15s",
        "How often Prometheus scrapes the exporter job: the longest interval across your Prometheus servers (it "
        "also sets the PodMonitor's interval and the compose scrape configs). Every window, hold and offset of the "
        "acceptance alerts derives from it (mixin/windows.py): a rate()/increase() window must hold 4 samples "
        "(2 for the fast tier's short window), and Prometheus 3 ranges are left-open, so a 1m window at 60 s holds "
        "one. Up to 30s the windows keep their 15 s lengths (one bundle serves 15 s and 30 s); render a bundle for "
        "60 s with `generate --set scrape_interval=60s --output DIR`.",
        Kind.DURATION, _POSITIVE,
    )
    evaluation_interval: str = knob(
        WINDOWS, "",
        "The rule groups' `interval:` (empty: the scrape interval). The holds are rounded up to it.",
        Kind.DURATION, _POSITIVE, derived=True,
    )
    fleet_evaluation_interval: str = knob(
        WINDOWS, "",
        "The `interval:` of the two fleet groups (`vllm-spec-decode.fleet`, `.fleet.counts`): sums and counts over "
        "every server that only the dashboards' \"All\" panels read, never an alert. Empty: a minute (the rate "
        "window when shorter), or the evaluation interval when longer: summing every server is among the "
        "costliest work of a large fleet's rules, and no page waits on it. Their panels step once an interval at "
        "All. At least the evaluation interval; at most rate_window, or the fleet rates skip traffic between "
        "evaluations.",
        Kind.DURATION, _POSITIVE, derived=True,
    )
    rate_window: str = knob(
        WINDOWS, "",
        "rate() window of the dashboards' recording rules (rates, ratios) and of their per-position panels; "
        "empty: 2m, or 4 scrape intervals when longer. The alerts use their own windows below. Must hold >= 4 samples.",
        Kind.WINDOW, derived=True,
    )

    # --- Acceptance alerts: a decision on evidence ------------------------------------------
    acceptance_confidence: float = knob(
        EVIDENCE, 0.98,
        "An acceptance alert fires only when the counters *prove* acceptance is below its threshold: the upper Wilson"
        ' score bound of acceptance, at this one-sided confidence, is below it ("we are 95 % sure acceptance is below'
        ' 50 %"). Higher confidence = fewer false alerts at low traffic and slower pages there; at high traffic the '
        "bound is close to the measured ratio and the level hardly matters. 98 % is GitLab's metrics-catalog level; "
        "with the overdispersion below it keeps overdispersed night traffic at 55 % free of pages "
        "(the alert-quality benchmark measures both sides).",
        Kind.RATIO, Between(0.5, 1, low_open=True, high_open=True, note=" (e.g. 0.95)"),
    )
    acceptance_overdispersion: float = knob(
        EVIDENCE, 8.0,
        "Trials behind the bound: drafts, not draft tokens (token i+1 is only accepted if token i was, so the tokens "
        "of one draft are not independent). Requests also differ from each other (prompt mix), which spreads "
        "acceptance beyond a binomial at low traffic: the bound counts drafts / acceptance_overdispersion independent"
        " trials (a variance inflation factor, 1 = pure binomial over drafts). Real vLLM output needs ~1.8 for the "
        "prefix structure alone (measured on real vLLM 0.32 captures); the rest covers prompt mix: requests whose own "
        "acceptance spreads ±0.2 and run ~100 drafts each inflate the variance ~10x at low traffic.",
        Kind.NUMBER, Between(1, note=" (1 = binomial over drafts)"),
    )
    acceptance_fast_long_window: str = knob(
        EVIDENCE, "",
        _FAST_TIER_DOC,
        Kind.WINDOW, derived=True,
    )
    acceptance_fast_short_window: str = knob(
        EVIDENCE, "",
        _FAST_TIER_DOC,
        Kind.WINDOW, derived=True,
    )
    acceptance_slow_long_window: str = knob(
        EVIDENCE, "",
        _SLOW_TIER_DOC,
        Kind.WINDOW, derived=True,
    )
    acceptance_slow_short_window: str = knob(
        EVIDENCE, "",
        _SLOW_TIER_DOC,
        Kind.WINDOW, derived=True,
    )
    acceptance_low_for: str = knob(
        EVIDENCE, "",
        _SUSTAINED_DOC,
        Kind.DURATION, _POSITIVE, derived=True,
    )
    acceptance_critical_for: str = knob(
        EVIDENCE, "",
        _SUSTAINED_DOC,
        Kind.DURATION, _POSITIVE, derived=True,
    )
    acceptance_slow_for: str = knob(
        EVIDENCE, "",
        "The same for the slow tier (both alerts): its short window is longer, so it stretches a dip more; dip length"
        " + slow short window keeps busy servers' dips out of it too. Empty: derived that way.",
        Kind.DURATION, _POSITIVE, derived=True,
    )
    acceptance_dip_tolerance: str = knob(
        EVIDENCE, "2m",
        "Dips in acceptance up to this long (a batch of odd prompts), even to 0 %, never alert; the holds derive from"
        " it. A longer tolerance pages a real collapse later by the same amount.",
        Kind.DURATION, _POSITIVE,
    )
    acceptance_healthy_floor: float = knob(
        EVIDENCE, 0.55,
        "The lowest acceptance that counts as healthy: dips from this level or above stay quiet (the holds derive "
        "from it). At or below a threshold, that alert's holds take the whole dip plus the short window.",
        Kind.RATIO, Between(0, 1, low_open=True),
    )
    target_down_for: str = knob(
        EVIDENCE, "5m",
        "Target down / not scraped for this long before alerting.",
        Kind.DURATION,
    )
    spec_decode_stopped_for: str = knob(
        EVIDENCE, "10m",
        "Spec decoding silently stopped (output flows, no drafts) for this long. Long, because an n-gram drafter "
        "legitimately proposes nothing for a while on text without repeats.",
        Kind.DURATION,
    )
    drafting_batch_memory: str = knob(
        EVIDENCE, "1h",
        "Drafting paused by design is not speculation lost. Engines stop drafting on purpose under load (vLLM's "
        "num_speculative_tokens_per_batch_size with k = 0 above a batch size: those steps count no draft at all). "
        "The rules remember, over this long, the smallest running batch of every window in which the server "
        "drafted; no drafts while the batch stays larger than that is *paused* (shown on the overview, never "
        "alerted), no drafts at a batch where it drafted before is *stopped* (SpecDecodeDraftsStopped).",
        Kind.DURATION, _POSITIVE,
    )
    min_generation_tokens_per_second: float = knob(
        EVIDENCE, 1.0,
        'Minimum output tokens/s for "spec decoding stopped" to be meaningful.',
        Kind.NUMBER, Between(0),
    )
    spec_decode_missing_for: str = knob(
        EVIDENCE, "10m",
        "The exporter reports `vllm_spec_decode_enabled 0` (no spec-decode metrics: speculation off, or a vLLM "
        "upgrade renamed them) for this long before SpecDecodeMetricsMissing fires. Long enough to ride out a rolling"
        " restart.",
        Kind.DURATION,
    )
    lossy_verification_for: str = knob(
        EVIDENCE, "15m",
        "The exporter reports a lossy verification method (vllm_spec_decode_config_info{lossy=\"true\"}: synthetic, "
        "fly, typical acceptance) for this long before SpecDecodeLossyVerification fires (sidecar only). A config, "
        "not an outage: long enough that a canary or a benchmark run of a few minutes stays quiet.",
        Kind.DURATION, _POSITIVE,
    )
    counter_resets_threshold: int = knob(
        EVIDENCE, 3,
        "Counter resets (vLLM restarts) within reset_window that count as a crash loop. Fires at once (no `for`): "
        "three restarts in the window are already sustained evidence.",
        Kind.COUNT, Between(1),
    )
    reset_window: str = knob(
        EVIDENCE, "30m",
        "Window for counting those resets; the alert resolves once the oldest leaves it.",
        Kind.WINDOW,
    )

    # --- Paying at the current load ---------------------------------------------------------
    compute_bound_tokens: int = knob(
        LOAD, DEFAULT_COMPUTE_BOUND_TOKENS,
        "Tokens per forward pass from which the target model's step time grows with the tokens it verifies "
        "(compute-bound) instead of staying flat (memory-bound). Below it, verifying a batch's drafts is "
        "almost free; above it, every draft token costs step time, so speculation pays less as the batch "
        "grows. About the GPU's peak FLOP/s over its memory bandwidth in bytes/s for a dense 16-bit model "
        "(H100 ≈ 300, A100 ≈ 150); measure yours as the batch size where time per output token starts to rise "
        "without speculation. The estimated speed-up at the current load and SpecDecodeNotPaying read it.",
        Kind.COUNT, Between(1),
    )
    not_paying_for: str = knob(
        LOAD, "15m",
        "How long the estimated speed-up at the current load must stay below 1 (speculation costs more than "
        "it saves at the running batch) before SpecDecodeNotPaying warns. Long: load moves, and one busy "
        "burst is not a reason to turn speculation off.",
        Kind.DURATION, _POSITIVE,
    )

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
