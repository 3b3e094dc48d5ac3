"""The overview dashboard's rows on what speculation produces and what it runs under: token flow
(proposed, accepted, rejected, by source), paying at the running batch, and load and latency
(vLLM's own histograms). overview.py arranges them with the other rows.
"""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as dashboard_models

from ..config import MixinConfig
from ..rules import alert_rules
from ..rules.sources import SERVED
from .crowd import Crowd
from .layout import Layout
from .panels import (
    COLOR_ACCEPTED,
    COLOR_DRAFTED,
    COLOR_REJECTED,
    COLOR_TARGET,
    NUMBER,
    SECONDS,
    SPEEDUP,
    TOKENS_PER_SECOND,
    Query,
    timeseries_panel,
)
from .presets import (
    ratio_series,
)
from .promql import (
    ACCEPTED,
    DRAFT_TOKENS,
    GENERATED,
    LATENCY_QUANTILES,
    VLLM_INTER_TOKEN_LATENCY,
    VLLM_TIME_PER_OUTPUT_TOKEN,
    Queries,
    legend_label,
)
from .shared_panels import (
    crowd_note,
    runbook_links,
    speedup_thresholds,
)

# The per-server latency panel's two histograms: (inter-token latency?, legend name).
LATENCIES = ((False, "TPOT"), (True, "ITL"))


def token_flow_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    by_model = ("model_name",)
    layout.row("Token flow: where do output tokens come from?")
    layout.add(timeseries_panel(
        "Draft tokens: proposed, accepted, rejected",
        "Draft tokens proposed per second (blue), accepted (green) and rejected = proposed - "
        "accepted (orange). Rejected tokens are target-model compute spent for nothing. Good: the "
        "green line hugs the blue one; orange above green means most speculation is wasted.",
        TOKENS_PER_SECOND,
        [Query(q.sum_rate(DRAFT_TOKENS), "proposed"),
         Query(q.sum_rate(ACCEPTED), "accepted"),
         Query(q.rejected_tokens(), "rejected")],
        colors={"proposed": COLOR_DRAFTED, "accepted": COLOR_ACCEPTED, "rejected": COLOR_REJECTED},
    ), 12, 8)
    layout.add(timeseries_panel(
        "Output tokens by source",
        "Generated tokens per second, stacked by origin: accepted draft tokens (green) on top of "
        "tokens the target model sampled itself, one per step including the bonus token "
        "(purple). The total is vLLM's output throughput. Good: a thick green band.",
        TOKENS_PER_SECOND,
        [Query(q.target_sampled_tokens(), "sampled by target"),
         Query(q.sum_rate(ACCEPTED), "accepted drafts")],
        stacked=True,
        colors={"sampled by target": COLOR_TARGET, "accepted drafts": COLOR_ACCEPTED},
    ), 12, 8)
    layout.add(ratio_series(
        "Share of output from drafts by model",
        "Accepted draft tokens / generated tokens per model: the part of the output speculation "
        "produced. With acceptance length L it is about (L-1)/L. Good: well above 0; near 0 means "
        "speculation adds work without adding tokens.",
        [Query(q.draft_output_share(by_model), "{{model_name}}")],
    ), 12, 8)
    layout.add(timeseries_panel(
        "Drafted and generated tokens by model",
        "Per model: draft tokens proposed and output tokens generated per second. Good: drafted "
        "no higher than generated; drafting far more tokens than are generated means most "
        "verification work is rejected.",
        TOKENS_PER_SECOND,
        [Query(q.sum_rate(DRAFT_TOKENS, by_model), "{{model_name}} drafted"),
         Query(q.sum_rate(GENERATED, by_model), "{{model_name}} generated")],
    ), 12, 8)
    return []


def load_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    by_model = ("model_name",)
    instance_legend = legend_label(cfg.instance_label)
    layout.row("Paying at this load?")
    layout.add(timeseries_panel(
        "Speed-up (est.) at the running batch",
        "Decoding speed with speculation relative to without it, at the batch each engine runs: tokens each "
        "request emits per step (generated / (generated - accepted): steps that drafted nothing count too) "
        "over what a speculative step costs against a plain one. A step "
        f"verifies every request's drafts; above {cfg.compute_bound_tokens} tokens a step (knob "
        "compute_bound_tokens) its time grows with them, and drafting adds "
        f"{cfg.draft_cost_ratio:g} of a step per draft token (draft_cost_ratio). The worst engine per model. "
        "Good: above the 1× line. Below it speculation costs more than it saves at this load "
        f"(alert {alert_rules.NOT_PAYING} after {cfg.not_paying_for}). An estimate: confirm with time per "
        "output token.",
        SPEEDUP,
        [Query(q.speedup_at_load(by_model), "{{model_name}}")],
        thresholds_config=speedup_thresholds(),
        threshold_lines=True,
    ).links(runbook_links(cfg, alert_rules.NOT_PAYING)), 8, 8)
    measured = q.crowd("measured_speedup", q.measured_speedup())
    right_axis = [dashboard_models.DynamicConfigValue(id_val="unit", value=NUMBER),
                  dashboard_models.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
                  dashboard_models.DynamicConfigValue(id_val="custom.axisLabel", value="running batch")]
    layout.add(timeseries_panel(
        "Speed-up measured against the baseline",
        "Measured, not estimated: the baseline's time per output token (the same model served without "
        "speculation: knob baseline_selector, by default the servers configured without it) over each "
        "speculative server's, from vLLM's own per-request histograms (per token: decoding alone), and the same "
        "ratio of the end-to-end latency per output token (end to end: queueing and prefill included, what "
        "clients of a fixed concurrency receive in tokens/s; the two differ where the time before the first "
        "token does). Beside them (right axis) the running batch "
        "of the speculative server and of the baseline: compare only at comparable loads, a busy baseline beside "
        "an idle speculative server measures the load, not speculation. Good: above the 1× line at equal "
        "batches. No data: no baseline of that model, or no request finished in the rate window." + crowd_note(cfg),
        SPEEDUP,
        [Query(measured.read(q.measured_speedup(), several=True), f"{instance_legend} {{{{model_name}}}} per token"),
         Query(measured.read(q.measured_speedup_end_to_end(), several=True),
               f"{instance_legend} {{{{model_name}}}} end to end"),
         Query(measured.read(q.measured_server_batch(), several=True), f"{instance_legend} {{{{model_name}}}} batch"),
         Query(q.baseline_batch(), "{{model_name}} baseline batch")],
        thresholds_config=speedup_thresholds(),
        threshold_lines=True,
        no_value="No baseline of this model (knob baseline_selector), or no request finished",
    ).override_by_regexp(".* batch$", right_axis), 8, 8)
    layout.add(timeseries_panel(
        "Running batch vs where verification stops being free",
        "Running requests per engine (the largest engine per model), averaged over the rate window, and the "
        f"batch at which a speculative step reaches {cfg.compute_bound_tokens} tokens: "
        "compute_bound_tokens / (1 + draft tokens per request-step, steps without drafts included). Below "
        "that line verifying the drafts costs almost nothing and acceptance decides whether speculation "
        "pays; above it every draft token "
        "costs step time. Good: the batch below the line, or the speed-up on the left still above 1×.",
        NUMBER,
        [Query(q.load_batch(by_model), "{{model_name}} running"),
         Query(q.compute_bound_batch(by_model), "{{model_name}} compute-bound from")],
    ), 8, 8)
    return [measured]


def context_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    by_instance = (cfg.instance_label,)
    instance_legend = legend_label(cfg.instance_label)
    vllm_scope = (
        f"From vLLM's own /metrics ({cfg.vllm_selector or 'all jobs'}), filtered by model and "
        "engine; the job/instance variables pick the exporter's targets and do not apply here."
    ) if not q.direct else f"From vLLM's own /metrics ({cfg.vllm_selector})."
    layout.row("Load and latency: why did acceptance change?")
    running = q.load_gauge(SERVED.REQUESTS_RUNNING, by_instance)
    waiting = q.load_gauge(SERVED.REQUESTS_WAITING, by_instance)
    # Both lines of the same servers: the most requests in them, running or waiting.
    requests = q.crowd("requests", f"{running} + {waiting}", high_is_bad=True)
    layout.add(timeseries_panel(
        "Requests running and waiting",
        "Requests in the running batch and waiting in the queue, per server. Speculation pays "
        "best at small batches: acceptance or speed dropping while running requests climb "
        "points at load, not at the draft. Good: waiting stays near 0." + crowd_note(cfg),
        NUMBER,
        [Query(requests.read(running), f"{instance_legend} running"),
         Query(requests.read(waiting), f"{instance_legend} waiting")],
    ), 8, 8)
    kv_cache = q.load_gauge(SERVED.KV_CACHE_USAGE_RATIO, (*by_instance, "model_name"), op="max")
    kv_cache_ranking = q.crowd("kv_cache", kv_cache, high_is_bad=True)
    layout.add(ratio_series(
        "KV-cache usage",
        "Share of the KV cache in use, per server and model (highest engine). Good: below ~90 %; "
        "near 100 % vLLM preempts requests, and draft tokens also need cache blocks." + crowd_note(cfg),
        [Query(kv_cache_ranking.read(kv_cache, several=True), instance_legend + " {{model_name}}")],
    ), 8, 8)
    layout.add(timeseries_panel(
        "Inter-token latency",
        "Time between two outputs of a request (p50, p90, p99, mean). With speculation one output "
        "can carry several tokens, so this measures per step, not per token: compare it with "
        "tokens per step. Good: flat; rising with load means the batch is saturated. " + vllm_scope,
        SECONDS,
        [*(Query(q.latency_quantile(VLLM_INTER_TOKEN_LATENCY, quantile), f"p{round(quantile * 100)}")
           for quantile in LATENCY_QUANTILES),
         Query(q.latency_mean(VLLM_INTER_TOKEN_LATENCY), "mean")],
    ), 8, 8)
    layout.add(timeseries_panel(
        "Time per output token vs tokens per step",
        "Per-token decode latency (p50, p90, mean of each request's decode time / its tokens) "
        "against mean tokens per step (right axis). Speculation working shows as time per token "
        "falling while tokens per step rises. Good: the two move in opposite directions, time "
        "per token low. Time per token rising as tokens per step falls is the cost of bad drafts. "
        + vllm_scope,
        SECONDS,
        [*(Query(q.latency_quantile(VLLM_TIME_PER_OUTPUT_TOKEN, quantile), f"p{round(quantile * 100)}")
           for quantile in LATENCY_QUANTILES[:2]),
         Query(q.latency_mean(VLLM_TIME_PER_OUTPUT_TOKEN), "mean"),
         Query(q.mean_acceptance_length(), "tokens per step")],
    ).override_by_name("tokens per step", [
        dashboard_models.DynamicConfigValue(id_val="unit", value=NUMBER),
        dashboard_models.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
        dashboard_models.DynamicConfigValue(id_val="custom.axisLabel", value="tokens per step"),
        dashboard_models.DynamicConfigValue(id_val="min", value=1),
    ]), 24, 8)
    latency = q.crowd("server_latency", q.server_latency_quantiles(), high_is_bad=True)
    layout.add(timeseries_panel(
        "Time per output token and inter-token latency per server",
        "Per server and model, p50, p90 and mean over the rate window (recorded from vLLM's histograms). Time per "
        "output token (each request's decode time / its tokens) is per token whatever a step emits: the one the "
        "measured speed-up divides. Inter-token latency (ITL, dashed) is per output event: with speculation one "
        "event carries several tokens, so it grows with acceptance while tokens come sooner. Good: time per "
        "token of the speculative servers below the baseline's." + crowd_note(cfg),
        SECONDS,
        [Query(latency.read(q.server_latency_quantiles(itl=itl), several=True),
               f"{instance_legend} {{{{model_name}}}} {name} q{{{{quantile}}}}") for itl, name in LATENCIES] +
        [Query(latency.read(q.server_latency_mean(itl=itl), several=True),
               f"{instance_legend} {{{{model_name}}}} {name} mean") for itl, name in LATENCIES],
    ).override_by_regexp(".* ITL .*", [
        dashboard_models.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}),
    ]), 24, 8)
    return [requests, kv_cache_ranking, latency]

