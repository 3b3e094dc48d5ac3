"""The fleet dashboard: many vLLM servers at once, for the engineer who runs them.

Which servers speculate badly (worst acceptance first), how acceptance is spread across the fleet,
fleet-wide acceptance per model (sum-then-divide, never an average of ratios), and which servers
are not speculating at all. This module only arranges panels; the PromQL is in promql.py.
"""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as dashboard_models

from .. import links
from ..config import MixinConfig
from ..rules import alert_rules, fleet_counts
from ..rules.fleet_counts import Band
from . import frame
from .crowd import Crowd
from .layout import Layout
from .panels import (
    NUMBER,
    RATIO,
    SECONDS,
    SPEEDUP,
    TOKENS_PER_SECOND,
    Column,
    Query,
    acceptance_thresholds,
    as_json,
    bargauge_panel,
    count_thresholds,
    link,
    merged_table_panel,
    table_panel,
    thresholds,
    timeseries_panel,
    value_words,
)
from .presets import BACKGROUND, NO_EXPORTER, NO_TRAFFIC, count_stat, named_stat
from .promql import (
    DRAFT_TOKENS,
    PROBLEM_EXPORTER_UNSCRAPED,
    PROBLEM_SPEC_OFF,
    PROBLEM_VLLM_UNREADABLE,
    TARGET_UP,
    Queries,
    legend_label,
    sum_by,
)
from .shared_panels import (
    acceptance_by_instance,
    acceptance_by_model,
    acceptance_crowd,
    acceptance_stat,
    crowd_note,
    firing_alerts_stat,
    firing_alerts_table,
    runbook_links,
    speedup_stat,
    speedup_thresholds,
    targets_down_stat,
)

__all__ = ["TITLE", "band_legends", "build"]

TITLE = "vLLM / Speculative decoding — fleet"


def build(cfg: MixinConfig) -> dict:
    return frame.assemble(
        cfg, TITLE, links.fleet_uid(cfg),
        "Many vLLM servers at once: which servers speculate badly (worst acceptance first), how "
        "acceptance is spread across the fleet, fleet-wide acceptance per model, and which "
        "servers are not speculating at all.",
        (top_row, servers_row, models_row, methods_row, not_speculating_row),
        [frame.dashboard_link(cfg, "Overview", links.overview_uid(cfg),
                              "One server or model in depth: per-position acceptance, token flow, latency, health")],
    )


def band_legends(cfg: MixinConfig) -> list[tuple[str, Band, str]]:
    """(legend, band, colour) of the three acceptance bands (fleet_counts), thresholds from the config."""
    warn, crit = cfg.acceptance_warning_threshold, cfg.acceptance_critical_threshold
    ok, low, critical = fleet_counts.acceptance_bands(cfg)
    return [
        (f"at or above {links.percent(warn)}", ok, "green"),
        (f"{links.percent(crit)} to {links.percent(warn)}", low, "orange"),
        (f"below {links.percent(crit)}", critical, "red"),
    ]


def top_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    warn = links.percent(cfg.acceptance_warning_threshold)
    crit = links.percent(cfg.acceptance_critical_threshold)
    bands = band_legends(cfg)
    layout.add(acceptance_stat(cfg, q, "Fleet acceptance rate", "over every selected server (busy servers weigh more)"),
               4, 5)
    servers = named_stat(
        "Servers by acceptance",
        f"How many servers (with draft traffic) are accepted at or above {warn}, between {crit} "
        f"and {warn} (alert {alert_rules.ACCEPTANCE_LOW}) and below {crit} (alert "
        f"{alert_rules.ACCEPTANCE_CRITICAL}), each server's acceptance summed over its models and "
        "engines before dividing. Good: every server in the first band, the other two 0. "
        "'No traffic' means no server proposed draft tokens in the window.",
        [Query(q.servers_in_band(band), legend, instant=True) for legend, band, _ in bands],
        decimals=0,
        color_mode=BACKGROUND,
    ).links(runbook_links(cfg, alert_rules.ACCEPTANCE_LOW, alert_rules.ACCEPTANCE_CRITICAL))
    for legend, band, color in bands:
        band_thresholds = count_thresholds(color) if band.high is not None else thresholds(color)
        servers = servers.override_by_name(legend, [dashboard_models.DynamicConfigValue(
            id_val="thresholds", value=as_json(band_thresholds))])
    layout.add(servers, 7, 5)
    layout.add(speedup_stat(q), 4, 5)  # the advisor's, or directly the same bound in PromQL
    layout.add(count_stat(
        "Spec decoding off",
        "Servers whose vLLM exposes no spec-decode metrics: speculation is not configured, or a "
        "vLLM upgrade renamed the metrics (alert " + alert_rules.METRICS_MISSING + "). Good is 0, "
        "unless some servers are meant to run without speculation. The table 'Servers not "
        "speculating' names them.",
        [Query(q.spec_decode_off_servers(), "spec off")],
        color="orange",
        no_value=NO_EXPORTER,
    ).links(runbook_links(cfg, alert_rules.METRICS_MISSING)), 3, 5)
    layout.add(targets_down_stat(cfg, q), 3, 5)
    layout.add(firing_alerts_stat(cfg, q), 3, 5)
    return []


def servers_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    instance = cfg.instance_label
    by_server = (instance, "model_name")
    overview = links.dashboard_url(cfg, links.overview_uid(cfg))
    ranking = acceptance_crowd(cfg, q)
    layout.row("Servers: which ones speculate badly?")
    layout.add(merged_table_panel(
        "Servers, worst acceptance first",
        "One row per server and model, lowest acceptance on top: acceptance (accepted / drafted "
        "over the server's engines), tokens per step (1 + accepted / drafts) next to k, draft "
        "tokens proposed per second (how much the row weighs in the fleet figures), "
        + ("the estimated speed-up for a draft costing draft_cost_ratio target steps per token, and "
           "whether Prometheus can scrape vLLM. " if q.direct else
           "the exporter's estimated speed-up, and whether the exporter can read vLLM. ")
        + "Good: every acceptance green and every speed-up above 1×. "
        + "Empty cells mean no draft tokens in the "
        "window; a row with only 'vLLM up' is a server that is down or not speculating. Click "
        "an instance to open it in the overview dashboard.",
        [
            Column("acceptance", q.worst_first(q.acceptance(by_server)), RATIO, decimals=1,
                   thresholds_config=acceptance_thresholds(cfg)),
            Column("tokens per step", q.mean_acceptance_length(by_server), NUMBER, decimals=2),
            Column("k", q.k(by_server), NUMBER, decimals=0),
            Column("draft tokens/s", q.sum_rate(DRAFT_TOKENS, by_server), TOKENS_PER_SECOND, decimals=1),
            *advisor_columns(q, by_server),
            Column("vLLM up", vllm_up(cfg, q), NUMBER, thresholds_config=thresholds("red", (1, "green")),
                   mappings=value_words({0: ("down", "red"), 1: ("up", "green")})),
        ],
        labels={instance: "instance", "model_name": "model"},
        sort_by="acceptance",
        label_links={instance: [{
            "title": "Open ${__value.raw} in the overview",
            "url": overview + "?${datasource:queryparam}&var-instance=${__value.raw}&${__url_time_range}",
        }]},
        no_value=NO_EXPORTER,
    ).links([link("Overview", overview + "?${__all_variables}&${__url_time_range}",
                  "The overview dashboard with this selection and time range").target_blank(False),
             *runbook_links(cfg, alert_rules.ACCEPTANCE_LOW, alert_rules.ACCEPTANCE_CRITICAL)]), 24, 9)
    layout.add(bargauge_panel(
        "Acceptance by server",
        "Each server's acceptance now (accepted / drafted over its models and engines), lowest "
        "first, coloured by the alert thresholds. Good: every bar green. One short bar is that "
        "server's draft model, k or traffic; every bar short is the model or the prompt mix."
        + crowd_note(cfg),
        RATIO,
        [Query(q.worst_first(ranking.read(q.acceptance((instance,)))), legend_label(instance),
               instant=True)],
        thresholds_config=acceptance_thresholds(cfg),
        no_value=NO_TRAFFIC,
    ), 8, 8)
    bands = band_legends(cfg)
    layout.add(timeseries_panel(
        "Servers per acceptance band",
        "Servers with draft traffic per acceptance band over time, stacked: green at or above "
        "the warning threshold, orange between critical and warning, red below critical. Good: "
        "all green. Many servers turning orange at once points at a shared cause (model, "
        "prompt mix, a release); one server at a time at that server.",
        NUMBER,
        [Query(q.servers_in_band(band), legend) for legend, band, _ in bands],
        stacked=True,
        bars=True,
        legend_calcs=("max", "lastNotNull"),
        colors={legend: color for legend, _, color in bands},
    ), 8, 8)
    layout.add(acceptance_by_instance(cfg, q, ranking), 8, 8)
    return [ranking]


def models_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    by_model = ("model_name",)
    layout.row("Models: fleet-wide acceptance per model")
    layout.add(merged_table_panel(
        "Models across the fleet",
        "Per model, over every selected server serving it: servers speculating it, acceptance "
        "and tokens per step with numerator and denominator summed over the servers before "
        "dividing (never an average of per-server ratios, so a busy server weighs more than an "
        "idle one), draft tokens per second and estimated speed-up"
        + ". Good: acceptance green.",
        [
            Column("servers", q.servers_per_model(), NUMBER, decimals=0),
            Column("acceptance", q.worst_first(q.acceptance(by_model)), RATIO, decimals=1,
                   thresholds_config=acceptance_thresholds(cfg)),
            Column("tokens per step", q.mean_acceptance_length(by_model), NUMBER, decimals=2),
            Column("draft tokens/s", q.sum_rate(DRAFT_TOKENS, by_model), TOKENS_PER_SECOND, decimals=1),
            *advisor_columns(q, by_model),
        ],
        labels={"model_name": "model"},
        sort_by="acceptance",
        no_value=NO_EXPORTER,
    ).links(runbook_links(cfg, alert_rules.ACCEPTANCE_LOW,
                          alert_rules.ACCEPTANCE_CRITICAL)), 12, 8)  # 10: columns scrolled away
    layout.add(acceptance_by_model(cfg, q), 12, 8)
    return []


def methods_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    layout.row("Methods: speculative against the baseline")
    baseline = (f"the servers matching `{cfg.baseline_selector}`" if cfg.baseline_selector else
                "servers without spec-decode counters" if q.direct else
                "servers configured without speculation or serving no spec-decode metrics")
    layout.add(timeseries_panel(
        "Time per output token by model and method",
        "Per model and speculative method, the mean time per output token of every selected server's finished "
        "requests (sums over counts, busy servers weigh more), from vLLM's per-request histograms: per token, "
        f"whatever a step emits. Method `none` is the baseline ({baseline}); "
        + ("without the sidecar no series names the method, so servers read `speculative` or `none`. "
           if q.direct else "the method is the sidecar's config series' label. ")
        + "Good: each method below `none` of its model; above it speculation makes every token slower.",
        SECONDS,
        [Query(q.tpot_by_method(), "{{model_name}} {{method}}")],
    ), 24, 8)
    return []


def advisor_columns(q: Queries, by: tuple[str, ...]) -> list[Column]:
    """The estimated speed-up: the sidecar advisor's, or with source=vllm the bound in PromQL."""
    return [Column("speed-up (est.)", q.estimated_speedup(by), SPEEDUP,
                   decimals=2, thresholds_config=speedup_thresholds())]


def vllm_up(cfg: MixinConfig, q: Queries) -> str:
    """Per server: can vLLM be read (the exporter's poll, or with source=vllm Prometheus' scrape)?"""
    if q.direct:
        return sum_by((cfg.instance_label,), q.scrape_up(), op="min")
    return q.per_target(TARGET_UP)


def not_speculating_row(layout: Layout, cfg: MixinConfig, q: Queries) -> list[Crowd]:
    layout.row("Servers not speculating, and alerts")
    unreadable = ("Prometheus cannot scrape vLLM's /metrics: vLLM down or unreachable)" if q.direct else
                  f"the exporter cannot read vLLM's /metrics: vLLM down or unreachable) or "
                  f"'{PROBLEM_EXPORTER_UNSCRAPED}' (Prometheus cannot scrape the exporter)")
    layout.add(table_panel(
        "Servers not speculating",
        f"Every server that is not speculating now, and why: '{PROBLEM_SPEC_OFF}' (vLLM "
        f"exposes no spec-decode metrics: not configured, or renamed by an upgrade)"
        f"{' or' if q.direct else ','} '{PROBLEM_VLLM_UNREADABLE}' ({unreadable}. "
        "Good: empty, or only servers meant to run without speculation.",
        NUMBER,
        [Query(q.not_speculating(), table=True)],
        hidden_columns=("Time", "Value"),
        no_value="None: every server speculates",
    ).links(runbook_links(cfg, alert_rules.METRICS_MISSING, alert_rules.VLLM_UNREACHABLE,
                          *(() if q.direct else (alert_rules.EXPORTER_DOWN,)))), 12, 6)
    layout.add(firing_alerts_table(cfg, q), 12, 5)
    return []
