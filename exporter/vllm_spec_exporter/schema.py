"""The exporter's output schema: every metric it serves, in one table.

This is a contract. Alert rules, recording rules, dashboards, README and tests all read these
names from here, so a rename is one edit and a lint test catches any query that drifts.
"""

from __future__ import annotations

from dataclasses import dataclass

# Labels passed through from vLLM. The exporter adds no target labels (job, instance, cluster):
# those belong to Prometheus' scrape config.
SERIES_LABELS = ("model_name", "engine")
POSITION_LABELS = (*SERIES_LABELS, "position")

SCRAPE_ERROR_REASONS = (
    "timeout",  # connect or read took longer than --timeout (whole response, not per byte)
    "connect",  # connection refused / reset / DNS / TLS failure
    "http_status",  # any status other than 200, redirects included (they are never followed)
    "too_large",  # body beyond --max-bytes
    "parse",  # not a Prometheus text exposition, truncated, or a malformed spec-decode line
    "invalid_sample",  # one series rejected (non-integer position, NaN/negative counter); rest kept
    "series_limit",  # more series than --max-series; the poll is rejected to bound memory
)


@dataclass(frozen=True)
class Metric:
    name: str
    type: str  # "gauge" | "counter" | "info"
    labels: tuple[str, ...]
    help: str
    formula: str = ""  # documentation only: how the value is computed (README table)


# Windowed values are computed over the trailing --window (default 60 s) from counter deltas
# sampled at the same instants, so num and den always cover the identical interval.
DERIVED = (
    Metric(
        "vllm_spec_decode_acceptance_ratio", "gauge", SERIES_LABELS,
        "Draft acceptance rate over the window: accepted / drafted tokens (V1, from "
        "vllm:spec_decode_num_accepted_tokens_total and ..._num_draft_tokens_total). On V0 it is "
        "vllm:spec_decode_draft_acceptance_rate, a lifetime value. Omitted when idle or below "
        "--min-draft-tokens.",
        "ΔA / ΔT",
    ),
    Metric(
        "vllm_spec_decode_position_acceptance_ratio", "gauge", POSITION_LABELS,
        "Share of drafts whose token at this 0-based position was accepted over the window "
        "(vllm:spec_decode_num_accepted_tokens_per_pos_total / ..._num_drafts_total).",
        "ΔA_pos / ΔD",
    ),
    Metric(
        "vllm_spec_decode_mean_acceptance_length", "gauge", SERIES_LABELS,
        "Mean tokens emitted per verification step including the bonus token, 1 .. k+1 "
        "(1 + accepted / drafts over the window).",
        "1 + ΔA / ΔD",
    ),
    Metric(
        "vllm_spec_decode_efficiency_ratio", "gauge", SERIES_LABELS,
        "System efficiency, V0's definition: emitted / maximum emittable tokens = "
        "(drafts + accepted) / (drafts * (k + 1)), k = number of draft positions. On V0 it is "
        "vllm:spec_decode_efficiency (lifetime).",
        "(ΔD + ΔA) / (ΔD · (k+1))",
    ),
    Metric(
        "vllm_spec_decode_drafted_efficiency_ratio", "gauge", SERIES_LABELS,
        "Efficiency over tokens actually drafted: (drafts + accepted) / (drafts + draft tokens). "
        "Fair when the drafter proposes fewer than k tokens (n-gram misses, dynamic k).",
        "(ΔD + ΔA) / (ΔD + ΔT)",
    ),
    Metric(
        "vllm_spec_decode_mean_draft_length", "gauge", SERIES_LABELS,
        "Mean draft tokens proposed per draft over the window (draft tokens / drafts), <= k.",
        "ΔT / ΔD",
    ),
    Metric(
        "vllm_spec_decode_draft_output_ratio", "gauge", SERIES_LABELS,
        "Share of generated tokens that came from accepted drafts over the window "
        "(accepted / vllm:generation_tokens_total delta).",
        "ΔA / ΔG",
    ),
    Metric(
        "vllm_generation_tokens_per_second", "gauge", SERIES_LABELS,
        "Generated (output) tokens per second over the window, accepted drafts included "
        "(vllm:generation_tokens_total). 0 when idle.",
        "ΔG / Δt",
    ),
    Metric(
        "vllm_spec_decode_drafts_per_second", "gauge", SERIES_LABELS,
        "Verification steps that carried a draft, per second (vllm:spec_decode_num_drafts_total).",
        "ΔD / Δt",
    ),
    Metric(
        "vllm_spec_decode_draft_tokens_per_second", "gauge", SERIES_LABELS,
        "Draft tokens proposed per second (vllm:spec_decode_num_draft_tokens_total).",
        "ΔT / Δt",
    ),
    Metric(
        "vllm_spec_decode_accepted_tokens_per_second", "gauge", SERIES_LABELS,
        "Draft tokens accepted per second (vllm:spec_decode_num_accepted_tokens_total).",
        "ΔA / Δt",
    ),
    Metric(
        "vllm_spec_decode_rejected_tokens_per_second", "gauge", SERIES_LABELS,
        "Draft tokens rejected (wasted target compute) per second: drafted - accepted.",
        "(ΔT − ΔA) / Δt",
    ),
    Metric(
        "vllm_spec_decode_window_draft_tokens", "gauge", SERIES_LABELS,
        "Draft tokens counted in the current window; ratios are omitted below --min-draft-tokens.",
        "ΔT",
    ),
    Metric(
        "vllm_spec_decode_window_seconds", "gauge", SERIES_LABELS,
        "Time actually covered by the window's samples (shorter than --window right after start "
        "or after the series appeared).",
        "Δt",
    ),
    Metric(
        "vllm_spec_decode_estimated_speedup", "gauge", SERIES_LABELS,
        "Advisor: expected speed-up over no speculation at the current k, "
        "(1 + sum of position acceptance) / (1 + c*k), c = --draft-cost-ratio; an upper bound (the "
        "target's verification overhead is not modelled).",
        "E(k) / (1 + c·k)",
    ),
    Metric(
        "vllm_spec_decode_recommended_k", "gauge", SERIES_LABELS,
        "Advisor: the k' <= k that maximises the estimated speed-up (ties go to the smaller k); 0 means "
        "speculation does not pay at all. Positions beyond k were never drafted, so it never recommends "
        "raising k.",
        "argmax S(k')",
    ),
    Metric(
        "vllm_spec_decode_recommended_k_estimated_speedup", "gauge", SERIES_LABELS,
        "Advisor: estimated speed-up at the recommended k.",
        "S(k*)",
    ),
    Metric(
        "vllm_spec_decode_num_speculative_tokens", "gauge", SERIES_LABELS,
        "k: number of draft positions the target exposes (distinct position labels).",
        "#positions",
    ),
)

# Faithful re-exposition of vLLM's counters under colon-free names that do not depend on the vLLM
# version or on Ray's prefixes. Raw values: Prometheus' rate() handles resets as usual.
COUNTERS = (
    Metric("vllm_spec_decode_drafts_total", "counter", SERIES_LABELS,
           "Drafts (verification steps with >= 1 draft token); vllm:spec_decode_num_drafts_total."),
    Metric("vllm_spec_decode_draft_tokens_total", "counter", SERIES_LABELS,
           "Draft tokens proposed; vllm:spec_decode_num_draft_tokens_total."),
    Metric("vllm_spec_decode_accepted_tokens_total", "counter", SERIES_LABELS,
           "Draft tokens accepted (prefix only, bonus excluded); vllm:spec_decode_num_accepted_tokens_total."),
    Metric("vllm_spec_decode_accepted_tokens_by_position_total", "counter", POSITION_LABELS,
           "Drafts whose token at this 0-based position was accepted; "
           "vllm:spec_decode_num_accepted_tokens_per_pos_total."),
    Metric("vllm_generation_tokens_total", "counter", SERIES_LABELS,
           "Generated tokens, accepted drafts included; vllm:generation_tokens_total."),
)

# Context that explains an acceptance drop (speculation hurts at high batch sizes).
CONTEXT = (
    Metric("vllm_num_requests_running", "gauge", SERIES_LABELS,
           "Requests in the running batch; vllm:num_requests_running."),
    Metric("vllm_num_requests_waiting", "gauge", SERIES_LABELS,
           "Requests waiting to be scheduled; vllm:num_requests_waiting."),
    Metric("vllm_kv_cache_usage_ratio", "gauge", SERIES_LABELS,
           "KV-cache usage 0..1; vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc before 0.12)."),
)

HEALTH = (
    Metric("vllm_spec_exporter_target_up", "gauge", (),
           "1 when the last poll of the target's /metrics succeeded and parsed, else 0."),
    Metric("vllm_spec_decode_enabled", "gauge", (),
           "1 when the target exposes spec-decode metrics, 0 when it exposes none (spec decoding "
           "off). Omitted while the target is down."),
    Metric("vllm_spec_exporter_scrape_duration_seconds", "gauge", (),
           "Duration of the last poll of the target (fetch + parse + derive)."),
    Metric("vllm_spec_exporter_last_success_timestamp_seconds", "gauge", (),
           "Unix time of the last successful poll; 0 before the first."),
    Metric("vllm_spec_exporter_scrape_errors_total", "counter", ("reason",),
           "Failed or partly rejected polls of the target, by reason: " + ", ".join(SCRAPE_ERROR_REASONS) + "."),
    Metric("vllm_spec_exporter_counter_resets_total", "counter", (),
           "Polls in which vLLM's counters went backwards or their _created time changed "
           "(a vLLM restart)."),
    Metric("vllm_spec_exporter_target_info", "info", ("schema", "version"),
           "Detected metrics schema of the target (v1, v0, none) and vLLM version from /version "
           "when the server reports it."),
    Metric("vllm_spec_exporter_window_seconds", "gauge", (),
           "Configured trailing window for the derived gauges (--window)."),
    Metric("vllm_spec_exporter_min_draft_tokens", "gauge", (),
           "Configured low-volume guard (--min-draft-tokens)."),
    Metric("vllm_spec_exporter_build_info", "info", ("version",),
           "Version of vllm-spec-exporter."),
)

ALL = DERIVED + COUNTERS + CONTEXT + HEALTH
BY_NAME = {m.name: m for m in ALL}


def served(name: str) -> str:
    """`name` if the exporter serves it, else KeyError: the generators wrap every metric name they
    query in this, so rules and dashboards cannot drift from the schema."""
    if name not in BY_NAME:
        raise KeyError(f"{name} is not served by the exporter (vllm_spec_exporter/schema.py)")
    return name


def exposed_names() -> set[str]:
    """Every sample name a Prometheus scraping the exporter can see."""
    return {m.name for m in ALL}
