"""The overview dashboard: one server or model in depth, for the engineer who arrives from a page.

The top row answers "is speculation paying off right now, and is anything firing?" in five
seconds; the rows below answer "since when, where, and why": acceptance by model, instance and
engine, per-position acceptance (is k right?), token flow, load and latency, exporter health.
This module only arranges panels; the PromQL is in promql.py, the shared option sets in presets.py.
"""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as dashboard_models

from .. import links
from ..config import MixinConfig
from ..rules import alert_rules, recording_rules, sources
from ..rules.sources import SERVED, series
from . import frame
from .crowd import Crowd
from .layout import Layout
from .panels import (
    COLOR_ACCEPTED,
    COLOR_DRAFTED,
    COLOR_REJECTED,
    COLOR_TARGET,
    NUMBER,
    RATIO,
    SECONDS,
    SPEEDUP,
    TOKENS_PER_SECOND,
    Query,
    bargauge_panel,
    no_traffic_mapping,
    position_thresholds,
    stat_panel,
    table_panel,
    timeseries_panel,
)
from .presets import (
    BACKGROUND,
    NO_EXPORTER,
    NO_TRAFFIC,
    VALUE_AND_NAME,
    named_stat,
    ratio_series,
    ratio_stat,
    traffic_stat,
)
from .promql import (
    ACCEPTED,
    DRAFT_TOKENS,
    GENERATED,
    LATENCY_QUANTILES,
    RANGE,
    SPEC_DECODE_ENABLED,
    TARGET_UP,
    VLLM_INTER_TOKEN_LATENCY,
    VLLM_TIME_PER_OUTPUT_TOKEN,
    Queries,
    join_matchers,
    legend_label,
    sum_by,
)
from .shared_panels import (
    acceptance_by_model,
    acceptance_crowd,
    acceptance_series,
    acceptance_stat,
    crowd_note,
    firing_alerts_stat,
    firing_alerts_table,
    runbook_links,
    speedup_stat,
    speedup_thresholds,
    targets_down_stat,
    threshold_note,
)

__all__ = ["TITLE", "build"]

TITLE = "vLLM / Speculative decoding: is it paying off?"


def build(cfg: MixinConfig) -> dict:
    return frame.assemble(
        cfg, TITLE, links.overview_uid(cfg),
        "Is vLLM speculative decoding paying off? Acceptance, tokens per step, efficiency, "
        "per-position acceptance (is k right?), token flow, load, latency and "
        + ("target health (read straight from vLLM's own metrics, no sidecar)." if cfg.direct else "exporter health."),
        (top_row, acceptance_row, position_row, token_flow_row, load_row, context_row, health_row),
        [frame.dashboard_link(cfg, "Fleet", links.fleet_uid(cfg), "Every server side by side, worst acceptance first")],
    )


def top_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    # Widths (of 24) chosen from screenshots: each title readable, Tokens/s' three values legible.
    layout.add(acceptance_stat(cfg, q, "Acceptance rate", "over the selected servers"), 3, 5)
    layout.add(traffic_stat(
        "Tokens per step vs k+1",
        "Mean acceptance length: tokens emitted per verification step, bonus token included "
        "(1 + accepted / drafts), next to its ceiling k+1 (every draft token accepted). Good is "
        "close to k+1; 1.0 means drafts are never accepted and speculation only adds work.",
        NUMBER,
        [Query(q.mean_acceptance_length(), "tokens/step"),
         Query(q.max_acceptance_length(), "k+1", instant=True)],
        decimals=2,
        text_mode=VALUE_AND_NAME,
    ), 4, 5)
    layout.add(ratio_stat(
        "Efficiency",
        "System efficiency: tokens emitted / most tokens the steps could have emitted, "
        "(drafts + accepted) / (drafts × (k+1)) = tokens per step / (k+1). 100 % means every "
        "draft token was accepted. Good: steady or rising; compare over time rather than against "
        "a fixed line, since it falls with acceptance and also when k is raised without better "
        "drafts.",
        [Query(q.efficiency(), "efficiency")],
    ), 3, 5)
    layout.add(speedup_stat(q), 3, 5)  # the advisor's, or directly the same bound in PromQL
    layout.add(stat_panel(
        "Tokens/s",
        "Output tokens generated per second (accepted drafts included), draft tokens accepted "
        "per second and draft tokens proposed per second. Good: accepted close to drafted and a "
        "large share of generated. Generated 0 with requests running means vLLM is stuck.",
        TOKENS_PER_SECOND,
        [Query(q.sum_rate(GENERATED), "generated"),
         Query(q.sum_rate(ACCEPTED), "accepted"),
         Query(q.sum_rate(DRAFT_TOKENS), "drafted")],
        text_mode=VALUE_AND_NAME,
        decimals=1,
    ).links(runbook_links(cfg, alert_rules.DRAFTS_STOPPED)), 5, 5)
    layout.add(targets_down_stat(cfg, q), 3, 5)
    layout.add(firing_alerts_stat(cfg, q), 3, 5)
    return []


def acceptance_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    by_model = ("model_name",)
    by_instance = (cfg.instance_label,)
    by_engine = (*by_instance, "engine")
    rankings = [acceptance_crowd(cfg, q), q.crowd("acceptance_by_engine", q.acceptance(by_engine)),
                q.crowd("drafting", q.drafting_state(), high_is_bad=True)]
    by_server_ranking, by_engine_ranking, drafting_ranking = rankings
    layout.row("Acceptance: since when, and where?")
    layout.add(acceptance_by_model(cfg, q), 12, 8)
    layout.add(timeseries_panel(
        "Tokens per step vs k+1 by model",
        "Mean acceptance length (1 + accepted / drafts, bonus token included) per model, with its "
        "ceiling k+1 dashed. Good: close to the ceiling. If it stays near 1, drafts are rejected "
        "at their first token and speculation is pure overhead.",
        NUMBER,
        [Query(q.mean_acceptance_length(by_model), "{{model_name}} tokens/step"),
         Query(q.max_acceptance_length(by_model), "{{model_name}} k+1")],
        min_value=1,
    ).override_by_regexp(".* k\\+1$", [
        dashboard_models.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}),
        dashboard_models.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
    ]), 12, 8)
    layout.add(acceptance_with_bound_by_instance(cfg, q, by_server_ranking), 12, 8)
    layout.add(acceptance_series(
        cfg,
        "Acceptance rate by engine",
        "Accepted / drafted tokens per data-parallel engine of each server. " + threshold_note(cfg)
        + " Engines of one server share model and config, so they should agree." + crowd_note(cfg),
        [Query(by_engine_ranking.read(q.acceptance(by_engine), several=True),
               legend_label(cfg.instance_label) + " engine {{engine}}")],
    ), 12, 8)
    layout.add(ratio_series(
        "Efficiency by model",
        "System efficiency (drafts + accepted) / (drafts × (k+1)), and the same over tokens "
        "actually drafted, (drafts + accepted) / (drafts + draft tokens), which is fair when the "
        "drafter proposes fewer than k tokens (n-gram misses). Good: high and steady; the two "
        "lines part when drafts are shorter than k.",
        [Query(q.efficiency(by_model), "{{model_name}} of k+1"),
         Query(q.drafted_efficiency(by_model), "{{model_name}} of drafted")],
    ), 12, 8)
    layout.add(timeseries_panel(
        "Draft length vs k by model",
        "Mean draft tokens proposed per draft (draft tokens / drafts) next to k. Equal for a draft "
        "model; lower for n-gram/suffix drafters when the prompt has no match. Good: close to k. "
        "Far below k means the drafter rarely finds anything to propose, which acceptance alone "
        "does not show.",
        NUMBER,
        [Query(q.mean_draft_length(by_model), "{{model_name}} draft length"),
         Query(q.k(by_model), "{{model_name}} k")],
    ), 12, 8)
    layout.add(named_stat(
        "Drafting: on, paused by design, or stopped",
        "Per server and model while it generates. Paused: no drafts, and the running batch is larger "
        f"than any at which the server drafted in the last {cfg.drafting_batch_memory}: the engine "
        "pauses speculation on purpose under load (vLLM's num_speculative_tokens_per_batch_size with "
        "k = 0), not a fault; it resumes when the batch shrinks. Paused (tier 0): the engine says so "
        "itself (SGLang --speculative-adaptive at a tier of 0 draft steps; its own acceptance gauges then "
        "read 0 %). Stopped: no drafts at a batch where it"
        f" drafted before: {alert_rules.DRAFTS_STOPPED} after {cfg.spec_decode_stopped_for}. Good: "
        "drafting, or paused only at peak load." + crowd_note(cfg),
        [Query(drafting_ranking.read(q.drafting_state(), several=True),
               legend_label(cfg.instance_label) + " {{model_name}}",
               instant=True)],
        mappings=drafting_state_mappings(),
        color_mode=BACKGROUND,
    ).links(runbook_links(cfg, alert_rules.DRAFTS_STOPPED)), 24, 3)
    return rankings


def drafting_state_mappings() -> list[dashboard_models.ValueMapping]:
    """promql.Queries.drafting_state's values as words."""
    def word(value: int, text: str, color: str) -> dashboard_models.ValueMap:
        return dashboard_models.ValueMap(options={f"{value}": dashboard_models.ValueMappingResult(
            text=text, color=color, index=value)})

    return [word(0, "Drafting", "green"), word(1, "Paused by design (batch)", "blue"),
            word(2, "Stopped", "orange"), word(3, "Paused by design (tier 0)", "blue"), *no_traffic_mapping()]


def position_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    warn = links.percent(cfg.acceptance_warning_threshold)
    raise_k = links.percent(cfg.acceptance_raise_k_threshold)
    advice = (
        f"Rule of thumb: if the last position is still accepted above {raise_k} (blue), try a "
        f"larger k; positions below {warn} (orange) cost more verification than they save, so "
        "lower k to the number of positions at or above it."
    )
    layout.row("Per-position acceptance: is k right?")
    layout.add(bargauge_panel(
        "Acceptance by draft position",
        "Share of drafts whose token at each 0-based position was accepted (accepted at position "
        "/ drafts). It can only fall with position: where it drops below the line is where the "
        "draft stops paying off. Good: every position green. vLLM counts no drafts per position, so "
        "every draft is in the denominator, also drafts too short to reach the position (n-gram "
        "misses, dynamic k's smaller k under load): when the Draft length panel is below k, the "
        "later positions are lower bounds, not a reason to lower k by themselves. " + advice,
        RATIO,
        [Query(q.position_acceptance(), "{{model_name}} position {{position}}", instant=True)],
        thresholds_config=position_thresholds(cfg),
        no_value=NO_TRAFFIC,
    ), 8, 9)
    layout.add(ratio_series(
        "Acceptance by draft position over time",
        "The same per-position acceptance over time. A collapse of position 0 means the draft "
        "model no longer matches the target (wrong draft, tokenizer or chat template). Good: "
        "flat lines, position 0 highest. " + advice,
        [Query(q.position_acceptance(), "{{model_name}} position {{position}}")],
        thresholds_config=position_thresholds(cfg),
        threshold_lines=True,
    ), 9, 9)
    # Three short stats side by side with the two panels above: each floats up under the previous.
    layout.add(named_stat(
        "k advice",
        f"From the last draft position's acceptance: 'Raise k' at or above {raise_k}, 'Keep k' "
        f"between {warn} and {raise_k}, 'Lower k' below {warn}. 'Positions that pay' counts "
        f"positions accepted at or above {warn}: a good k to try. 'No traffic' without drafts.",
        [Query(q.last_position_acceptance(), "{{model_name}}", instant=True)],
        mappings=k_advice_mappings(cfg),
        color_mode=BACKGROUND,
    ), 7, 3)
    layout.add(named_stat(
        "Positions that pay vs k",
        f"Draft positions accepted at or above {warn}, next to k (positions configured). Good: "
        "equal, every position pays; fewer means k can be lowered to that number.",
        [Query(q.positions_paying_off(), "{{model_name}} paying", instant=True),
         Query(q.k(), "{{model_name}} k", instant=True)],
    ), 7, 3)
    if q.direct:  # the advisor runs in the sidecar, which also reads the speculative config
        return []
    layout.add(named_stat(
        "Advisor: recommended k",
        "The exporter's advisor per model: the k (at most the current k) that maximises the "
        "estimated speed-up given per-position acceptance and draft cost, and the speed-up it "
        "would give. Good: equal to k. It never suggests raising k (positions beyond k were never "
        f"drafted); for that, watch the last position's acceptance (above {raise_k}).",
        [Query(q.recommended_k(), "{{model_name}} k*", instant=True),
         Query(q.recommended_k_speedup(), "{{model_name}} speed-up at k*", instant=True)],
        decimals=2,
    ), 7, 3)
    layout.add(spec_config_table(cfg, q), 24, 4)
    return []


def spec_config_table(cfg: MixinConfig, q: Queries):
    """What each server is configured to do, which decides what its acceptance means."""
    return table_panel(
        "Speculative config",
        "What the exporter reads about each server's speculative decoding: the method (ngram, draft_model, "
        "eagle3, mtp, ...; a plugin's name as given; none = not speculating), k (num_speculative_tokens, the "
        "largest k when dynamic), the verification method and whether it is lossy (true: it accepts drafts exact "
        "verification would reject, so acceptance reads higher and the alert thresholds, set for exact "
        "verification, do not apply as they are), dynamic k (a batch-size table of k or adaptive verification: "
        "later positions are drafted less often) and the source (flag: the exporter's --speculative-config; "
        "server_info or cmdline: vLLM's own; metrics: k only; none). unknown: the source does not say. Good: "
        "every server known (no unknown), lossy false, and the same method and k where acceptance is compared.",
        NUMBER,
        [Query(q.spec_config(), table=True)],
        hidden_columns=("Time", "Value"),
        renames={"dynamic_k": "dynamic k"},
        no_value=NO_EXPORTER,
    ).links(runbook_links(cfg, alert_rules.LOSSY_VERIFICATION))


def k_advice_mappings(cfg: MixinConfig) -> list[dashboard_models.ValueMapping]:
    def band(low: float, high: float, text: str, color: str, index: int) -> dashboard_models.RangeMap:
        return dashboard_models.RangeMap(options=dashboard_models.DashboardRangeMapOptions(
            from_val=low, to=high,
            result=dashboard_models.ValueMappingResult(text=text, color=color, index=index),
        ))

    # Grafana applies the first matching mapping, so the bands are ordered high to low and a value
    # exactly on a threshold gets the higher band (thresholds are "at or above").
    return [
        band(cfg.acceptance_raise_k_threshold, 1.0, "Raise k", "blue", 0),
        band(cfg.acceptance_warning_threshold, cfg.acceptance_raise_k_threshold, "Keep k", "green", 1),
        band(0.0, cfg.acceptance_warning_threshold, "Lower k", "orange", 2),
        *no_traffic_mapping(),
    ]


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
    ).links(runbook_links(cfg, alert_rules.NOT_PAYING)), 12, 8)
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
    ), 12, 8)
    return []


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
    return [requests, kv_cache_ranking]


def health_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    instance_legend = legend_label(cfg.instance_label)
    if q.direct:
        return direct_health_row(layout, cfg, q)
    readable, scraped = q.per_target(TARGET_UP), q.per_target(sources.UP)
    poll_duration = q.per_target(SERVED.SCRAPE_DURATION_SECONDS, op="max")
    rankings = [q.crowd("vllm_readable", readable), q.crowd("exporter_scraped", scraped), restarts_ranking(q),
                q.crowd("poll_age", q.poll_age(), high_is_bad=True),
                q.crowd("poll_duration", poll_duration, high_is_bad=True)]
    readable_ranking, scraped_ranking, restarts, age_ranking, duration_ranking = rankings
    layout.row("Exporter and target health: can these numbers be trusted?")
    layout.add(timeseries_panel(
        "Target and exporter up",
        "'vLLM readable' is 1 when the exporter's last poll of vLLM's /metrics succeeded; "
        "'exporter scraped' is Prometheus' own up for the exporter. Good: both 1. Exporter "
        "scraped but vLLM unreadable: check vLLM and the scrape errors panel." + crowd_note(cfg),
        NUMBER,
        [Query(readable_ranking.read(readable), f"{instance_legend} vLLM readable"),
         Query(scraped_ranking.read(scraped), f"{instance_legend} exporter scraped")],
        max_value=1,
        legend_calcs=("min", "lastNotNull"),
    ).links(runbook_links(cfg, alert_rules.VLLM_UNREACHABLE, alert_rules.EXPORTER_DOWN)), 8, 8)
    layout.add(timeseries_panel(
        "Scrape errors by reason",
        "Failed or partly rejected polls of vLLM per second, by reason (timeout, connect, "
        "http_status, too_large, parse, invalid_sample, series_limit). Good: nothing above 0. "
        "Persistent 'parse' or 'invalid_sample' after a vLLM upgrade means the metrics format "
        "changed.",
        "count:errors/s",
        [Query(q.scrape_errors_by_reason(), "{{reason}}")],
    ), 8, 8)
    layout.add(timeseries_panel(
        "Counter resets (vLLM restarts)",
        "Polls in which vLLM's counters went backwards or were re-created, i.e. vLLM restarted, "
        "per server per interval. Good: 0. Repeated resets are a crash loop; acceptance right "
        "after a restart covers little traffic." + crowd_note(cfg),
        NUMBER,
        [Query(restarts.read(q.counter_resets()), instance_legend)],
        bars=True,
        legend_calcs=("sum", "max"),
    ).links(runbook_links(cfg, alert_rules.VLLM_RESTARTING)), 8, 8)
    layout.add(timeseries_panel(
        "Age of the last successful poll",
        "Seconds since the exporter last read vLLM successfully, per server. Good: about one "
        "poll interval. Growing means the values on this dashboard are stale." + crowd_note(cfg),
        SECONDS,
        [Query(age_ranking.read(q.poll_age()), instance_legend)],
    ), 8, 8)
    layout.add(timeseries_panel(
        "Poll duration",
        "Duration of the exporter's last poll of vLLM (fetch + parse + derive), per server. Good: "
        "well below the poll interval; close to the timeout means timeouts are next." + crowd_note(cfg),
        SECONDS,
        [Query(duration_ranking.read(poll_duration), instance_legend)],
    ), 8, 8)
    layout.add(table_panel(
        "Detected schema and spec decoding",
        "What the exporter detected on each server: engine family (vllm, llamacpp, trtllm, sglang, "
        "tgi), metrics schema (v1 = current vLLM, v0 = legacy engine, llamacpp, trtllm, "
        "sglang-gauges, tgi-summary, diffusion, none = no spec-decode metrics, mixed/unknown = "
        "rejected), server version, and whether speculative decoding is on (1). Good: a counter "
        "schema and spec decoding 1 on every server that should speculate.",
        NUMBER,
        [Query(q.detected_schema(), table=True),
         Query(q.per_target(SPEC_DECODE_ENABLED, op="max"), table=True)],
        hidden_columns=("Time", "Value #A"),
        renames={"Value #B": "spec decoding on"},
        merge=True,
        no_value=NO_EXPORTER,
    ).links(runbook_links(cfg, alert_rules.METRICS_MISSING)), 8, 6)
    layout.add(firing_alerts_table(cfg, q), 24, 5)
    return rankings


def direct_health_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    """source=vllm: what Prometheus itself knows about each vLLM server (no sidecar to ask)."""
    instance_legend = legend_label(cfg.instance_label)
    scraped = sum_by((cfg.instance_label,), q.scrape_up(), op="min")
    rankings = [q.crowd("vllm_scraped", scraped), restarts_ranking(q)]
    scraped_ranking, restarts = rankings
    layout.row("Target health: can these numbers be trusted?")
    layout.add(timeseries_panel(
        "vLLM scraped",
        f"Prometheus' own up for each vLLM server ({cfg.vllm_selector}): 1 when its last scrape of "
        "/metrics succeeded. Good: 1." + crowd_note(cfg),
        NUMBER,
        [Query(scraped_ranking.read(scraped), f"{instance_legend} vLLM scraped")],
        max_value=1,
        legend_calcs=("min", "lastNotNull"),
    ).links(runbook_links(cfg, alert_rules.VLLM_UNREACHABLE)), 8, 8)
    layout.add(timeseries_panel(
        "Counter resets (vLLM restarts)",
        "Resets of vLLM's generation counter, i.e. vLLM restarted, per server per interval. Good: "
        "0. Repeated resets are a crash loop; acceptance right after a restart covers little traffic."
        + crowd_note(cfg),
        NUMBER,
        [Query(restarts.read(q.counter_resets()), instance_legend)],
        bars=True,
        legend_calcs=("sum", "max"),
    ).links(runbook_links(cfg, alert_rules.VLLM_RESTARTING)), 8, 8)
    layout.add(table_panel(
        "Servers not speculating",
        "vLLM servers generating tokens whose /metrics has no speculative-decoding series "
        "(started without --speculative-config, or renamed by an upgrade), and servers Prometheus "
        "cannot scrape. Good: empty.",
        NUMBER,
        [Query(q.not_speculating(), table=True)],
        hidden_columns=("Time", "Value"),
        no_value="None",
    ).links(runbook_links(cfg, alert_rules.METRICS_MISSING)), 8, 8)
    layout.add(firing_alerts_table(cfg, q), 24, 5)
    return rankings


def restarts_ranking(q: Queries) -> Crowd:
    """The servers with the most restarts over the range (their restarts per interval are drawn)."""
    return q.crowd("restarts", q.counter_resets(), high_is_bad=True, latest=q.counter_resets(RANGE))


def acceptance_with_bound_by_instance(cfg: MixinConfig, q: Queries, crowd: Crowd):
    """The fleet's per-server acceptance panel plus the Wilson bounds the acceptance alerts read
    (fast tier's evidence window), per server and model: the page fires when the dashed upper
    line stays under a threshold line, so panel and page agree. `crowd` (acceptance_crowd) picks
    the servers, the bounds' too."""
    evidence = recording_rules.evidence_names(cfg.windows.fast_long)
    server_model = join_matchers(q.sel.target, 'model_name=~"$model_name"')
    bound_legend = legend_label(cfg.instance_label) + " {{model_name}} "
    conf = cfg.confidence_label
    return acceptance_series(
        cfg,
        "Acceptance rate by instance",
        "Accepted / drafted tokens per vLLM server. " + threshold_note(cfg)
        + " One server below the others points at its config (draft model, k) or its traffic. "
        f"Dashed: the {conf} confidence band over the last {cfg.windows.fast_long} per "
        f"server and model, the bound the acceptance alerts use. Upper line under a threshold line = "
        f"we are {conf} sure acceptance is below it; a wide band = little traffic, little evidence."
        + crowd_note(cfg),
        [Query(crowd.read(q.acceptance((cfg.instance_label,))), legend_label(cfg.instance_label)),
         Query(crowd.read(series(evidence.upper, server_model), several=True), bound_legend + "upper bound"),
         Query(crowd.read(series(evidence.lower, server_model), several=True), bound_legend + "lower bound")],
    ).override_by_regexp(".* (upper|lower) bound$", [
        dashboard_models.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [4, 4]}),
        dashboard_models.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
    ])
