"""The exporter's output schema: every metric it serves, with its type, labels, help and formula.

This is a contract. The names come from names.py; this table says what each one is, for the
collector (help text, label order), docs/metrics.md and the README. A test checks that every
MetricName has exactly one row here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .names import (
    HISTOGRAM_LABELS,
    POSITION_LABELS,
    SCRAPE_ERROR_REASONS,
    SERIES_LABELS,
    SPEC_CONFIG_LABELS,
    TARGET_INFO_LABELS,
    MetricName,
)

__all__ = ["ALL", "BY_NAME", "CONFIG", "CONTEXT", "COUNTERS", "DERIVED", "ENGINE_GAUGES", "HEALTH", "HISTOGRAMS",
           "Metric", "exposed_names"]


@dataclass(frozen=True)
class Metric:
    """One served metric: its name (names.MetricName), type, label names in exposition order, help."""

    name: MetricName
    type: str  # "gauge" | "counter" | "info" | "histogram" | "summary"
    labels: tuple[str, ...]
    help: str
    formula: str = ""  # documentation only: how the value is computed (README table)


# Windowed values are computed over the trailing --window (default 60 s) from counter deltas
# sampled at the same instants, so num and den always cover the identical interval.
DERIVED = (
    Metric(
        MetricName.ACCEPTANCE_RATIO, "gauge", SERIES_LABELS,
        "Draft acceptance rate over the window: accepted / drafted tokens (V1, from "
        "vllm:spec_decode_num_accepted_tokens_total and ..._num_draft_tokens_total). On V0 it is "
        "vllm:spec_decode_draft_acceptance_rate, a lifetime value. Omitted when idle or below "
        "--min-draft-tokens.",
        "ΔA / ΔT",
    ),
    Metric(
        MetricName.POSITION_ACCEPTANCE_RATIO, "gauge", POSITION_LABELS,
        "Acceptance at this 0-based position over the window. Exact where the server exports "
        "vllm:spec_decode_num_draft_tokens_per_pos_total (then served as "
        "vllm_spec_decode_draft_tokens_by_position_total for the same series): accepted at the "
        "position / drafted at the position. Otherwise (vLLM upstream) / ..._num_drafts_total: "
        "every draft counts, also drafts shorter than the position (n-gram misses, dynamic k), a "
        "lower bound when drafts vary in length.",
        "ΔA_pos / ΔT_pos, else ΔA_pos / ΔD",
    ),
    Metric(
        MetricName.MEAN_ACCEPTANCE_LENGTH, "gauge", SERIES_LABELS,
        "Mean tokens emitted per verification step including the bonus token, 1 .. k+1 "
        "(1 + accepted / drafts over the window).",
        "1 + ΔA / ΔD",
    ),
    Metric(
        MetricName.EFFICIENCY_RATIO, "gauge", SERIES_LABELS,
        "System efficiency, V0's definition: emitted / maximum emittable tokens = "
        "(drafts + accepted) / (drafts * (k + 1)), k = number of draft positions. On V0 it is "
        "vllm:spec_decode_efficiency (lifetime).",
        "(ΔD + ΔA) / (ΔD · (k+1))",
    ),
    Metric(
        MetricName.DRAFTED_EFFICIENCY_RATIO, "gauge", SERIES_LABELS,
        "Efficiency over tokens actually drafted: (drafts + accepted) / (drafts + draft tokens). "
        "Fair when the drafter proposes fewer than k tokens (n-gram misses, dynamic k).",
        "(ΔD + ΔA) / (ΔD + ΔT)",
    ),
    Metric(
        MetricName.MEAN_DRAFT_LENGTH, "gauge", SERIES_LABELS,
        "Mean draft tokens proposed per draft over the window (draft tokens / drafts), <= k.",
        "ΔT / ΔD",
    ),
    Metric(
        MetricName.DRAFT_OUTPUT_RATIO, "gauge", SERIES_LABELS,
        "Share of generated tokens that came from accepted drafts over the window "
        "(accepted / vllm:generation_tokens_total delta).",
        "ΔA / ΔG",
    ),
    Metric(
        MetricName.GENERATION_TOKENS_PER_SECOND, "gauge", SERIES_LABELS,
        "Generated (output) tokens per second over the window, accepted drafts included "
        "(vllm:generation_tokens_total). 0 when idle.",
        "ΔG / Δt",
    ),
    Metric(
        MetricName.DRAFTS_PER_SECOND, "gauge", SERIES_LABELS,
        "Verification steps that carried a draft, per second (vllm:spec_decode_num_drafts_total).",
        "ΔD / Δt",
    ),
    Metric(
        MetricName.DRAFT_TOKENS_PER_SECOND, "gauge", SERIES_LABELS,
        "Draft tokens proposed per second (vllm:spec_decode_num_draft_tokens_total).",
        "ΔT / Δt",
    ),
    Metric(
        MetricName.ACCEPTED_TOKENS_PER_SECOND, "gauge", SERIES_LABELS,
        "Draft tokens accepted per second (vllm:spec_decode_num_accepted_tokens_total).",
        "ΔA / Δt",
    ),
    Metric(
        MetricName.REJECTED_TOKENS_PER_SECOND, "gauge", SERIES_LABELS,
        "Draft tokens rejected (wasted target compute) per second: drafted - accepted.",
        "(ΔT − ΔA) / Δt",
    ),
    Metric(
        MetricName.WINDOW_DRAFT_TOKENS, "gauge", SERIES_LABELS,
        "Draft tokens counted in the current window; ratios are omitted below --min-draft-tokens.",
        "ΔT",
    ),
    Metric(
        MetricName.WINDOW_SECONDS, "gauge", SERIES_LABELS,
        "Time actually covered by the window's samples (shorter than --window right after start "
        "or after the series appeared).",
        "Δt",
    ),
    Metric(
        MetricName.ESTIMATED_SPEEDUP, "gauge", SERIES_LABELS,
        "Advisor: expected speed-up over no speculation at the current k, "
        "(1 + sum of position acceptance) / (1 + c*k), c = --draft-cost-ratio; an upper bound (the "
        "target's verification overhead is not modelled).",
        "E(k) / (1 + c·k)",
    ),
    Metric(
        MetricName.RECOMMENDED_K, "gauge", SERIES_LABELS,
        "Advisor: the k' <= k that maximises the estimated speed-up (ties go to the smaller k); 0 means "
        "speculation does not pay at all. Positions beyond k were never drafted, so it never recommends "
        "raising k.",
        "argmax S(k')",
    ),
    Metric(
        MetricName.RECOMMENDED_K_ESTIMATED_SPEEDUP, "gauge", SERIES_LABELS,
        "Advisor: estimated speed-up at the recommended k.",
        "S(k*)",
    ),
    Metric(
        MetricName.NUM_SPECULATIVE_TOKENS, "gauge", SERIES_LABELS,
        "k: number of draft positions the target exposes (distinct position labels).",
        "#positions",
    ),
)

# Faithful re-exposition of vLLM's counters under colon-free names that do not depend on the vLLM
# version or on Ray's prefixes. Raw values: Prometheus' rate() handles resets as usual.
COUNTERS = (
    Metric(MetricName.DRAFTS_TOTAL, "counter", SERIES_LABELS,
           "Drafts (verification steps with >= 1 draft token); vllm:spec_decode_num_drafts_total."),
    Metric(MetricName.DRAFT_TOKENS_TOTAL, "counter", SERIES_LABELS,
           "Draft tokens proposed; vllm:spec_decode_num_draft_tokens_total."),
    Metric(MetricName.ACCEPTED_TOKENS_TOTAL, "counter", SERIES_LABELS,
           "Draft tokens accepted (prefix only, bonus excluded); vllm:spec_decode_num_accepted_tokens_total."),
    Metric(MetricName.ACCEPTED_TOKENS_BY_POSITION_TOTAL, "counter", POSITION_LABELS,
           "Drafts whose token at this 0-based position was accepted; "
           "vllm:spec_decode_num_accepted_tokens_per_pos_total."),
    Metric(MetricName.DRAFT_TOKENS_BY_POSITION_TOTAL, "counter", POSITION_LABELS,
           "Draft tokens proposed at this 0-based position (drafts long enough to reach it); "
           "vllm:spec_decode_num_draft_tokens_per_pos_total, which vLLM upstream does not export: "
           "served only for a server that does. Its presence makes "
           "vllm_spec_decode_position_acceptance_ratio of the same series exact."),
    Metric(MetricName.GENERATION_TOKENS_TOTAL, "counter", SERIES_LABELS,
           "Generated tokens, accepted drafts included; vllm:generation_tokens_total."),
    Metric(MetricName.ENGINE_STEPS_TOTAL, "counter", SERIES_LABELS,
           "Engine steps (forward passes); request-steps (generated - accepted tokens) per step is the mean "
           "running batch. vllm:iteration_tokens_total_count."),
)

# The engine's own spec-decode gauges, for engines whose source has no usable counters for them
# (engines.py). Last batch or last iteration, exactly as the engine set them: never windowed, never
# averaged, so they are not comparable with the windowed ratios above.
ENGINE_GAUGES = (
    Metric(MetricName.ENGINE_ACCEPTANCE_LENGTH, "gauge", SERIES_LABELS,
           "The engine's own mean acceptance length (bonus token included) of its last batch or "
           "iteration: sglang:spec_accept_length, trtllm_spec_decode_acceptance_length. Not windowed."),
    Metric(MetricName.ENGINE_ACCEPTANCE_RATIO, "gauge", SERIES_LABELS,
           "The engine's own acceptance rate (accepted / draft tokens) of its last batch: "
           "sglang:spec_accept_rate. Not windowed: averaging it over time is biased."),
    Metric(MetricName.ENGINE_DRAFT_OVERHEAD_RATIO, "gauge", SERIES_LABELS,
           "Share of the last iteration's latency spent drafting: trtllm_spec_decode_draft_overhead."),
    Metric(MetricName.ENGINE_DRAFT_STEPS, "gauge", SERIES_LABELS,
           "Draft steps per verification of the engine's active adaptive tier: sglang:spec_num_steps. 0 with "
           "engine_verify_tokens >= 1: the tier drafts nothing, speculation paused by design (the engine's "
           "acceptance gauges then read 0 %, which is not a collapse)."),
    Metric(MetricName.ENGINE_VERIFY_TOKENS, "gauge", SERIES_LABELS,
           "Tokens verified per step by the active tier, the root token included (steps + 1 at top-k 1): "
           "sglang:spec_num_draft_tokens. 0: the server has no drafter."),
)

# Context that explains an acceptance drop (speculation hurts at high batch sizes).
CONTEXT = (
    Metric(MetricName.REQUESTS_RUNNING, "gauge", SERIES_LABELS,
           "Requests in the running batch; vllm:num_requests_running."),
    Metric(MetricName.REQUESTS_WAITING, "gauge", SERIES_LABELS,
           "Requests waiting to be scheduled; vllm:num_requests_waiting."),
    Metric(MetricName.KV_CACHE_USAGE_RATIO, "gauge", SERIES_LABELS,
           "KV-cache usage 0..1; vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc before 0.12)."),
)

# vLLM's latency histograms as vLLM wrote them (cumulative, its own buckets), served whether or not
# the server speculates: a baseline server without speculation serves them too. Bounded by vLLM's
# fixed bucket layout (20 buckets a histogram with its defaults) and --max-series. The end-to-end
# latency and output tokens per request are read only as totals (engines.TOTALS_ONLY): summaries
# of their _sum and _count, without quantiles.
HISTOGRAMS = (
    Metric(MetricName.REQUEST_TPOT_SECONDS, "histogram", HISTOGRAM_LABELS,
           "Time per output token of each finished request (decode time / (generated tokens - 1)), per token "
           "whatever speculation emits in one step; vllm:request_time_per_output_token_seconds."),
    Metric(MetricName.INTER_TOKEN_LATENCY_SECONDS, "histogram", HISTOGRAM_LABELS,
           "Time between output events; with speculation one event carries every token of a step, so this is "
           "not a time per token; vllm:inter_token_latency_seconds (vllm:time_per_output_token_seconds "
           "before 0.11)."),
    Metric(MetricName.E2E_REQUEST_LATENCY_SECONDS, "summary", SERIES_LABELS,
           "End-to-end latency of the finished requests, from arrival to last token (queueing and prefill "
           "included): the _sum and _count of vllm:e2e_request_latency_seconds."),
    Metric(MetricName.REQUEST_GENERATION_TOKENS, "summary", SERIES_LABELS,
           "Output tokens of the finished requests: the _sum and _count of vllm:request_generation_tokens."),
)

# What the target is configured to do, which decides what its acceptance means (specconfig.py).
CONFIG = (
    Metric(MetricName.SPEC_CONFIG_INFO, "info", SPEC_CONFIG_LABELS,
           "The target's speculative decoding config, which decides what an acceptance rate means: method "
           "(vLLM's name: ngram, draft_model, eagle3, mtp, ..., a plugin's as given, none = not speculating), "
           "k (num_speculative_tokens; the largest k under dynamic k), verification (rejection_sample_method: "
           "standard, block, synthetic, fly, ...), lossy (true: the verification accepts drafts exact "
           "verification rejects, so acceptance reads higher), dynamic_k (a batch-size table of k or adaptive "
           "verification), source (flag, server_info, cmdline; metrics: only k, from the draft positions; none). "
           "unknown where the source does not say. Omitted while the target is down, and for a vLLM serving a "
           "diffusion model. docs/speculation-config.md."),
)

HEALTH = (
    Metric(MetricName.TARGET_UP, "gauge", (),
           "1 when the last poll of the target's /metrics succeeded and parsed, else 0."),
    Metric(MetricName.SPEC_DECODE_ENABLED, "gauge", (),
           "1 when the target exposes spec-decode metrics, 0 when it exposes none (spec decoding "
           "off; llama.cpp: no draft yet). Omitted while the target is down, and for a vLLM serving "
           "a diffusion model (schema diffusion), where the question does not apply."),
    Metric(MetricName.SCRAPE_DURATION_SECONDS, "gauge", (),
           "Duration of the last poll of the target (fetch + parse + derive)."),
    Metric(MetricName.LAST_SUCCESS_TIMESTAMP_SECONDS, "gauge", (),
           "Unix time of the last successful poll; 0 before the first."),
    Metric(MetricName.SCRAPE_ERRORS_TOTAL, "counter", ("reason",),
           "Failed or partly rejected polls of the target, by reason: " + ", ".join(SCRAPE_ERROR_REASONS) + "."),
    Metric(MetricName.TARGET_RESTARTS_TOTAL, "counter", (),
           "Polls in which vLLM's counters went backwards or their _created time changed "
           "(a vLLM restart)."),
    Metric(MetricName.TARGET_INFO, "info", TARGET_INFO_LABELS,
           "Detected engine family (vllm, llamacpp, trtllm, sglang, tgi; mixed or unknown when the "
           "poll is rejected for it) and metrics schema of the target (v1, v0, diffusion, llamacpp, "
           "trtllm, sglang-gauges, tgi-summary, none, mixed, unknown), and the server version when "
           "it reports one."),
    Metric(MetricName.CONFIG_WINDOW_SECONDS, "gauge", (),
           "Configured trailing window for the derived gauges (--window)."),
    Metric(MetricName.CONFIG_MIN_DRAFT_TOKENS, "gauge", (),
           "Configured low-volume guard (--min-draft-tokens)."),
    Metric(MetricName.BUILD_INFO, "info", ("version",),
           "Version of vllm-spec-exporter."),
)

ALL = DERIVED + COUNTERS + ENGINE_GAUGES + CONTEXT + HISTOGRAMS + CONFIG + HEALTH
BY_NAME = {m.name: m for m in ALL}


def exposed_names() -> set[str]:
    """Every sample name a Prometheus scraping the exporter can see."""
    return {m.name for m in ALL if m.type not in ("histogram", "summary")} | {
        f"{m.name}_{part}" for m in HISTOGRAMS for part in ("bucket", "sum", "count")
        if part != "bucket" or m.type == "histogram"}
