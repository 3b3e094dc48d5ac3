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
from ..rules import alert_rules, recording_rules
from ..rules.sources import series
from . import frame
from .crowd import Crowd
from .layout import Layout
from .overview_health import health_row
from .overview_load import context_row, load_row, token_flow_row
from .panels import (
    NUMBER,
    RATIO,
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
    Queries,
    join_matchers,
    legend_label,
)
from .shared_panels import (
    acceptance_by_model,
    acceptance_crowd,
    acceptance_series,
    acceptance_stat,
    crowd_note,
    firing_alerts_stat,
    runbook_links,
    speedup_stat,
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
        "Acceptance at each 0-based draft position: accepted at the position / draft tokens "
        "proposed at it. Where it drops below the line is where the draft stops paying off. Good: "
        "every position green. Exact where the server exports "
        "vllm:spec_decode_num_draft_tokens_per_pos (some builds; the sidecar serves it as "
        "vllm_spec_decode_draft_tokens_by_position_total). vLLM upstream does not: there every "
        "draft is in the denominator, also drafts too short to reach the position (n-gram misses, "
        "dynamic k's smaller k under load), so when the Draft length panel is below k the later "
        "positions are lower bounds, not a reason to lower k by themselves (a model whose servers "
        "only partly export it reads between the two). " + advice,
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

