"""The knobs of what is measured and when it pages: the selectors and source, the acceptance
thresholds, the scrape interval and windows, the evidence behind the acceptance alerts and the
load. MixinConfig (config.py) adds the labels, links, Alertmanager and dashboard knobs to these and
validates them all; nothing reads SignalConfig on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..advisor import DEFAULT_COMPUTE_BOUND_TOKENS
from .knobs import Between, Differs, Duration, Kind, OneOf, knob

__all__ = ["EVIDENCE", "LOAD", "SELECTORS", "SOURCES", "SOURCE_EXPORTER", "SOURCE_VLLM", "THRESHOLDS", "WINDOWS",
           "SignalConfig"]

# Where the recording rules read the spec-decode counters (the `source` knob; mixin/sources.py).
SOURCE_EXPORTER = "exporter"
SOURCE_VLLM = "vllm"
SOURCES = (SOURCE_EXPORTER, SOURCE_VLLM)

_POSITIVE = Duration(positive=True)  # a duration longer than 0s

# Sections of the config (the README's knob table groups by them).
SELECTORS = "Selectors"
THRESHOLDS = "Acceptance thresholds"
WINDOWS = "Scrape interval and windows"
EVIDENCE = "Acceptance alerts: a decision on evidence"
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


@dataclass(frozen=True)
class SignalConfig:
    """The first sections of MixinConfig's knobs, in their order (the knob table's)."""

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
    baseline_selector: str = knob(
        LOAD, "",
        "PromQL label matchers (without braces) picking the baseline servers: the same model served without "
        "speculation, against which the speed-up is measured (baseline time per output token over the "
        "speculative server's). Empty: the servers whose config series says `method=\"none\"` or that serve no "
        "spec-decode metrics (the sidecar's vllm_spec_decode_config_info and vllm_spec_decode_enabled), or "
        "without the sidecar (source=vllm) the servers that serve no spec-decode counters. E.g. "
        "'instance=~\"plain-.*\"' for a canary, or 'deployment=\"llama-baseline\"'. "
        "The baseline is matched to speculative servers by model_name and the fleet labels, so it must share "
        "the source's scrape job; without one the measured speed-up is absent, never 1.",
        Kind.SELECTOR,
    )
