"""Every name the exporter reads or serves, in one place.

- `Family`: the canonical key of each vLLM metric family the parser keeps, whatever its spelling
  on the wire (`vllm:`, `vllm_`, `ray_vllm:`; see engines.VLLM_NAMES);
- `Schema`: which generation of vLLM metrics a target exposes;
- `MetricName`: every metric the exporter serves (schema.py gives each its type, labels and help;
  a test checks the two agree);
- the label names, the scrape-error reasons, and the keys of a series and of one counter.

schema, parse, normalise, window, derive, collector, the rules and the dashboards import their
names from here, so a rename is one edit and a query can never name a metric nobody serves.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

__all__ = [
    "FAMILY_MIXED",
    "FAMILY_UNKNOWN",
    "HISTOGRAM_LABELS",
    "POSITION_LABELS",
    "SCRAPE_ERROR_REASONS",
    "SERIES_LABELS",
    "SPEC_CONFIG_LABELS",
    "TARGET_INFO_LABELS",
    "CounterKey",
    "EngineFamily",
    "Family",
    "HistogramKey",
    "MetricName",
    "Schema",
    "SeriesKey",
]


class Family(StrEnum):
    """Canonical key of a vLLM metric family (the value is what logs and error messages show)."""

    # V1 engine (vLLM >= 0.8.5): counters.
    DRAFTS = "drafts"
    DRAFT_TOKENS = "draft_tokens"
    ACCEPTED_TOKENS = "accepted_tokens"
    ACCEPTED_PER_POS = "accepted_per_pos"
    # Draft tokens proposed at each position: not in vLLM upstream (SpecDecodingStats keeps
    # num_draft_tokens_per_pos without exporting it); some builds export it. Where present,
    # per-position acceptance is exact instead of a lower bound.
    DRAFTED_PER_POS = "drafted_per_pos"
    GENERATION_TOKENS = "generation_tokens"
    # Engine steps (forward passes): with generated - accepted (the request-steps) the mean batch
    # per step, which no sampling of the running gauge can miss.
    ENGINE_STEPS = "engine_steps"
    # V0 engine (<= 0.9): lifetime gauges, plus a counter that must not be rate()d (sum-of-sums).
    V0_ACCEPTANCE_RATE = "v0_acceptance_rate"
    V0_EFFICIENCY = "v0_efficiency"
    V0_EMITTED_TOKENS = "v0_emitted_tokens"
    # Context gauges.
    REQUESTS_RUNNING = "requests_running"
    REQUESTS_WAITING = "requests_waiting"
    KV_CACHE_USAGE = "kv_cache_usage"
    # Engines' own last-batch / last-iteration gauges (SGLang, TensorRT-LLM; engines.py): served as
    # such, never windowed.
    ENGINE_ACCEPTANCE_LENGTH = "engine_acceptance_length"
    ENGINE_ACCEPTANCE_RATE = "engine_acceptance_rate"
    ENGINE_DRAFT_OVERHEAD = "engine_draft_overhead"
    # An adaptive engine's active tier (SGLang --speculative-adaptive): draft steps per verification
    # (0 = drafting paused by design) and tokens verified per step (root included; 0 = no drafter).
    ENGINE_DRAFT_STEPS = "engine_draft_steps"
    ENGINE_VERIFY_TOKENS = "engine_verify_tokens"
    # vLLM serving a diffusion LLM: the spec-decode stats renamed (they mean denoising, not drafts).
    DIFFUSION_STEPS = "diffusion_steps"
    DIFFUSION_CANVAS_POSITIONS = "diffusion_canvas_positions"
    DIFFUSION_COMMITTED_TOKENS = "diffusion_committed_tokens"
    # vLLM's histograms (_sum, _count and _bucket by `le`): time per output token per request and
    # inter-token latency per emitted chunk (the sidecar serves both, MetricName.REQUEST_TPOT_SECONDS
    # and INTER_TOKEN_LATENCY_SECONDS), end-to-end latency and output tokens per finished request
    # (their _sum and _count only, engines.TOTALS_ONLY: served as E2E_REQUEST_LATENCY_SECONDS and
    # REQUEST_GENERATION_TOKENS summaries).
    TIME_PER_OUTPUT_TOKEN = "time_per_output_token"
    INTER_TOKEN_LATENCY = "inter_token_latency"
    E2E_LATENCY = "e2e_latency"  # per request, queueing and prefill included
    REQUEST_GENERATION_TOKENS = "request_generation_tokens"  # per finished request
    # A spec-decode-like name from an engine the exporter does not know (parse.py); never served.
    FOREIGN_SPEC = "foreign_spec"


class EngineFamily(StrEnum):
    """The inference engine a target runs (the `engine_family` label of target_info; engines.py).

    Distinct from the `engine` label, which stays vLLM's (and SGLang's) data-parallel engine index.
    """

    VLLM = "vllm"
    LLAMACPP = "llamacpp"
    TRTLLM = "trtllm"
    SGLANG = "sglang"
    TGI = "tgi"


# target_info{engine_family} values for expositions that name no single known family.
FAMILY_MIXED = "mixed"
FAMILY_UNKNOWN = "unknown"


class Schema(StrEnum):
    """The metrics schema a target exposes (the `schema` label of vllm_spec_exporter_target_info)."""

    V1 = "v1"  # spec-decode counters: windowed ratios are exact
    V0 = "v0"  # the legacy engine's lifetime gauges
    DIFFUSION = "diffusion"  # vLLM serving a diffusion LLM: nothing speculates
    LLAMACPP = "llamacpp"  # llama.cpp server counters: windowed like V1
    TRTLLM = "trtllm"  # TensorRT-LLM iteration counters plus last-iteration gauges
    SGLANG = "sglang-gauges"  # SGLang's last-batch gauges only
    TGI = "tgi-summary"  # TGI's skipped-tokens summary: mean acceptance length only
    NONE = "none"  # no spec-decode metrics: speculative decoding is off (or renamed by an upgrade)
    MIXED = "mixed"  # spec-decode metrics of two engine families: the poll is rejected
    UNKNOWN = "unknown"  # spec-decode-like metrics of an unknown engine: the poll is rejected


class MetricName(StrEnum):
    """Every metric the exporter serves. Generators query these and nothing else of ours."""

    # Derived gauges over the trailing window.
    ACCEPTANCE_RATIO = "vllm_spec_decode_acceptance_ratio"
    POSITION_ACCEPTANCE_RATIO = "vllm_spec_decode_position_acceptance_ratio"
    MEAN_ACCEPTANCE_LENGTH = "vllm_spec_decode_mean_acceptance_length"
    EFFICIENCY_RATIO = "vllm_spec_decode_efficiency_ratio"
    DRAFTED_EFFICIENCY_RATIO = "vllm_spec_decode_drafted_efficiency_ratio"
    MEAN_DRAFT_LENGTH = "vllm_spec_decode_mean_draft_length"
    DRAFT_OUTPUT_RATIO = "vllm_spec_decode_draft_output_ratio"
    GENERATION_TOKENS_PER_SECOND = "vllm_generation_tokens_per_second"
    DRAFTS_PER_SECOND = "vllm_spec_decode_drafts_per_second"
    DRAFT_TOKENS_PER_SECOND = "vllm_spec_decode_draft_tokens_per_second"
    ACCEPTED_TOKENS_PER_SECOND = "vllm_spec_decode_accepted_tokens_per_second"
    REJECTED_TOKENS_PER_SECOND = "vllm_spec_decode_rejected_tokens_per_second"
    WINDOW_DRAFT_TOKENS = "vllm_spec_decode_window_draft_tokens"
    WINDOW_SECONDS = "vllm_spec_decode_window_seconds"
    ESTIMATED_SPEEDUP = "vllm_spec_decode_estimated_speedup"
    RECOMMENDED_K = "vllm_spec_decode_recommended_k"
    RECOMMENDED_K_ESTIMATED_SPEEDUP = "vllm_spec_decode_recommended_k_estimated_speedup"
    NUM_SPECULATIVE_TOKENS = "vllm_spec_decode_num_speculative_tokens"
    # The engine's own gauges (SGLang, TensorRT-LLM), last batch or iteration: not windowed.
    ENGINE_ACCEPTANCE_LENGTH = "vllm_spec_decode_engine_acceptance_length"
    ENGINE_ACCEPTANCE_RATIO = "vllm_spec_decode_engine_acceptance_ratio"
    ENGINE_DRAFT_OVERHEAD_RATIO = "vllm_spec_decode_engine_draft_overhead_ratio"
    ENGINE_DRAFT_STEPS = "vllm_spec_decode_engine_draft_steps"
    ENGINE_VERIFY_TOKENS = "vllm_spec_decode_engine_verify_tokens"
    # vLLM's counters, re-exposed under stable colon-free names.
    DRAFTS_TOTAL = "vllm_spec_decode_drafts_total"
    DRAFT_TOKENS_TOTAL = "vllm_spec_decode_draft_tokens_total"
    ACCEPTED_TOKENS_TOTAL = "vllm_spec_decode_accepted_tokens_total"
    ACCEPTED_TOKENS_BY_POSITION_TOTAL = "vllm_spec_decode_accepted_tokens_by_position_total"
    DRAFT_TOKENS_BY_POSITION_TOTAL = "vllm_spec_decode_draft_tokens_by_position_total"
    GENERATION_TOKENS_TOTAL = "vllm_server_generation_tokens_total"
    ENGINE_STEPS_TOTAL = "vllm_server_engine_steps_total"
    # Context gauges.
    REQUESTS_RUNNING = "vllm_server_requests_running"
    REQUESTS_WAITING = "vllm_server_requests_waiting"
    KV_CACHE_USAGE_RATIO = "vllm_kv_cache_usage_ratio"
    # vLLM's latency histograms, re-exposed under stable colon-free names (buckets as vLLM set them).
    REQUEST_TPOT_SECONDS = "vllm_server_request_time_per_output_token_seconds"
    INTER_TOKEN_LATENCY_SECONDS = "vllm_server_inter_token_latency_seconds"
    E2E_REQUEST_LATENCY_SECONDS = "vllm_server_e2e_request_latency_seconds"
    REQUEST_GENERATION_TOKENS = "vllm_server_request_generation_tokens"
    # Exporter and target health.
    TARGET_UP = "vllm_spec_exporter_target_up"
    SPEC_DECODE_ENABLED = "vllm_spec_decode_enabled"
    SCRAPE_DURATION_SECONDS = "vllm_spec_exporter_scrape_duration_seconds"
    LAST_SUCCESS_TIMESTAMP_SECONDS = "vllm_spec_exporter_last_success_timestamp_seconds"
    SCRAPE_ERRORS_TOTAL = "vllm_spec_exporter_scrape_errors_total"
    # Counts the polls that saw vLLM's counters reset. Served as `target_restarts` after 0.1.0 (was
    # counter_resets): promlint rejects a counter whose name contains its type; see CHANGELOG.md.
    TARGET_RESTARTS_TOTAL = "vllm_spec_exporter_target_restarts_total"
    TARGET_INFO = "vllm_spec_exporter_target_info"
    SPEC_CONFIG_INFO = "vllm_spec_decode_config_info"
    CONFIG_WINDOW_SECONDS = "vllm_spec_exporter_window_seconds"
    CONFIG_MIN_DRAFT_TOKENS = "vllm_spec_exporter_min_draft_tokens"
    BUILD_INFO = "vllm_spec_exporter_build_info"


# Labels passed through from vLLM. The exporter adds no target labels (job, instance, cluster):
# those belong to Prometheus' scrape config.
SERIES_LABELS = ("model_name", "engine")
POSITION_LABELS = (*SERIES_LABELS, "position")
HISTOGRAM_LABELS = (*SERIES_LABELS, "le")

SCRAPE_ERROR_REASONS = (
    "timeout",  # connect or read took longer than --timeout (whole response, not per byte)
    "connect",  # connection refused / reset / DNS / TLS failure
    "http_status",  # any status other than 200, redirects included (they are never followed)
    "too_large",  # body beyond --max-bytes
    "parse",  # not a Prometheus text exposition, truncated, or a malformed spec-decode line
    "invalid_sample",  # one series rejected (non-integer position, NaN/negative counter); rest kept
    "series_limit",  # more series than --max-series; the poll is rejected to bound memory
    "engine_mixed",  # spec-decode metrics of two engine families on one target; the poll is rejected
    "engine_unknown",  # spec-decode-like metrics of an engine the exporter does not know; rejected
)

# The labels of target_info, in exposition order.
TARGET_INFO_LABELS = ("engine_family", "schema", "version")
# The labels of config_info (specconfig.SpecConfig.labels), in exposition order. Per target, no
# model_name: one vLLM process has one speculative config, whatever it names its model.
SPEC_CONFIG_LABELS = ("method", "k", "verification", "lossy", "dynamic_k", "source")


class SeriesKey(NamedTuple):
    """One vLLM series: a served model on one data-parallel engine ("" on V0, which has none)."""

    model_name: str
    engine: str


class HistogramKey(NamedTuple):
    """One sample of a vLLM histogram: `part` is "bucket", "sum" or "count"; `le` the bucket's
    upper bound as written ("0.01", "+Inf"), "" for sum and count. Replicas are summed."""

    family: Family
    series: SeriesKey
    part: str
    le: str


class CounterKey(NamedTuple):
    """One counter series of a target, as the window tracks it.

    `position` is the 0-based draft position ("" except for the per-position families); `replica`
    is the text of any labels beyond model_name/engine/position (Ray's per-replica labels), "" for
    plain vLLM. Each replica keeps its own window, so a replica leaving or restarting is never read
    as the others resetting; derived values sum the replicas' deltas.
    """

    family: Family
    series: SeriesKey
    position: str
    replica: str
