"""Panels both dashboards show: acceptance, estimated speed-up, targets down, firing alerts.

Functions of the config and the queries only; each dashboard places them with its own size.
Panels link to the runbooks of the alerts they explain.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard, stat, table, timeseries

from .. import links
from ..config import MixinConfig
from ..rules import alert_rules
from .crowd import Crowd
from .panels import NUMBER, SPEEDUP, Query, acceptance_thresholds, link, table_panel, thresholds
from .presets import BACKGROUND, NO_EXPORTER, NO_TARGET, count_stat, ratio_series, ratio_stat, traffic_stat
from .promql import ALERT_NAME_REGEX, Queries, legend_label

__all__ = [
    "acceptance_by_instance",
    "acceptance_by_model",
    "acceptance_crowd",
    "acceptance_series",
    "acceptance_stat",
    "crowd_note",
    "firing_alerts_stat",
    "firing_alerts_table",
    "runbook_links",
    "speedup_stat",
    "speedup_thresholds",
    "targets_down_stat",
    "threshold_note",
]

# The advisor's speed-up is relative to decoding without speculation: below 1 it slows decoding.
BREAK_EVEN_SPEEDUP = 1


def runbook_links(cfg: MixinConfig, *alert_names: str) -> list[dashboard.DashboardLink]:
    return [link(f"Runbook: {name}", links.runbook_url(cfg, name)) for name in alert_names]


def acceptance_stat(cfg: MixinConfig, q: Queries, title: str, scope: str) -> stat.Panel:
    warn = links.percent(cfg.acceptance_warning_threshold)
    crit = links.percent(cfg.acceptance_critical_threshold)
    return ratio_stat(
        title,
        f"Share of draft tokens the target model accepted, {scope} "
        "(accepted / drafted, summed before dividing). Good: green, at or above "
        f"{warn}; speculation pays off. Orange below {warn}: the target verifies more rejected "
        f"tokens than speculation saves (alert {alert_rules.ACCEPTANCE_LOW}). Red below {crit}: "
        f"speculation costs latency and compute (alert {alert_rules.ACCEPTANCE_CRITICAL}). "
        '"No traffic" means no draft tokens in the window.',
        [Query(q.acceptance(), "acceptance")],
        thresholds_config=acceptance_thresholds(cfg),
        color_mode=BACKGROUND,
    ).links(runbook_links(cfg, alert_rules.ACCEPTANCE_LOW, alert_rules.ACCEPTANCE_CRITICAL))


def speedup_thresholds() -> dashboard.ThresholdsConfig:
    return thresholds("red", (BREAK_EVEN_SPEEDUP, "green"))


def speedup_stat(q: Queries) -> stat.Panel:
    verdict = ("Good: green, above 1×. Red below 1×: speculation makes decoding slower than plain decoding. "
               "An estimate: confirm with time per output token.")
    if q.direct:
        description = (
            "Decoding speed with speculation relative to without it, computed from vLLM's counters for a draft "
            f"costing {q.cfg.draft_cost_ratio:g} target steps per token (knob draft_cost_ratio): tokens per step / "
            "(1 + cost × mean draft length) = (drafts + accepted) / (drafts + cost × draft tokens), summed over "
            "the selected servers and engines before dividing. It assumes the cost is right for your drafter and "
            "that a step costs the same with and without its drafts (the target's verification work is not "
            f"counted: an upper bound). {verdict}")
    else:
        description = (
            "The exporter's advisor: decoding speed with speculation relative to without it, "
            "estimated from per-position acceptance and the draft's cost (exporter flag "
            "--draft-cost-ratio): (1 + accepted per draft) / (1 + cost × k), averaged over the "
            f"selected engines weighted by their drafts. {verdict}")
    return traffic_stat(
        "Speed-up (est.)",
        description,
        SPEEDUP,
        [Query(q.estimated_speedup(), "speed-up")],
        thresholds_config=speedup_thresholds(),
        decimals=2,
        color_mode=BACKGROUND,
    )


def targets_down_stat(cfg: MixinConfig, q: Queries) -> stat.Panel:
    if q.direct:
        return count_stat(
            "Targets down",
            f"vLLM servers Prometheus cannot scrape ({cfg.vllm_selector}). Good is 0. 'No target' means "
            "Prometheus scrapes no vLLM server matching the selection: every other panel is then empty "
            "for that reason, not because of idle traffic (check the vllm_selector knob).",
            [Query(q.targets_down(), "down")],
            no_value=NO_TARGET,
        ).links(runbook_links(cfg, alert_rules.VLLM_UNREACHABLE, alert_rules.VLLM_ABSENT))
    return count_stat(
        "Targets down",
        "vLLM servers the exporter cannot read, plus exporters Prometheus cannot scrape. Good is "
        "0. 'No exporter' means Prometheus scrapes no exporter matching the selection: every "
        "other panel is then empty for that reason, not because of idle traffic.",
        [Query(q.targets_down(), "down")],
        no_value=NO_EXPORTER,
    ).links(runbook_links(cfg, alert_rules.VLLM_UNREACHABLE, alert_rules.EXPORTER_DOWN, alert_rules.EXPORTER_ABSENT))


def firing_alerts_stat(cfg: MixinConfig, q: Queries) -> stat.Panel:
    return count_stat(
        "Firing alerts",
        f"Spec-decode alerts ({ALERT_NAME_REGEX}) firing now in this Prometheus, for every "
        "server, not only the selected ones: a page elsewhere stays visible. Good is 0. The table "
        "'Firing spec-decode alerts' at the bottom lists them; each alert's runbook_url explains it.",
        [Query(q.firing_alerts_count(), "firing")],
    ).links([link("Runbooks", links.runbook_index_url(cfg))])


def firing_alerts_table(cfg: MixinConfig, q: Queries) -> table.Panel:
    return table_panel(
        "Firing spec-decode alerts",
        f"Every {ALERT_NAME_REGEX} alert firing now, with its labels. Good: empty. Open the "
        "runbook from the alert notification (runbook_url) or the dashboard's Runbooks link.",
        NUMBER,
        [Query(q.firing_alerts(), table=True)],
        hidden_columns=("Time", "Value", "__name__", "alertstate"),
        no_value="None firing",
    ).links([link("Runbooks", links.runbook_index_url(cfg))])


def crowd_note(cfg: MixinConfig) -> str:
    """What a panel built on a Queries.crowd ranking draws over a large fleet."""
    best = f" and the best {cfg.panel_best_k}" if cfg.panel_best_k else ""
    return (f" Over more than {cfg.panel_all_series_up_to} servers (All over a fleet) it draws those of the worst "
            f"{cfg.panel_worst_k}{best} series at the end of the range (ranked once when the dashboard loads), and at "
            f"most {cfg.panel_all_series_up_to} series; pick servers in the instance variable to see all of them.")


def threshold_note(cfg: MixinConfig) -> str:
    return (
        # Grafana colours a threshold line like the band above it (seen in the browser tests).
        f"Dashed lines at warning {links.percent(cfg.acceptance_warning_threshold)} and critical "
        f"{links.percent(cfg.acceptance_critical_threshold)}; the band below warning is shaded orange, "
        "below critical red. Good stays in the green band above the warning line; "
        "gaps mean no draft tokens in the window."
    )


def acceptance_series(cfg: MixinConfig, title: str, description: str, queries: list[Query]) -> timeseries.Panel:
    """Acceptance over time: 0..1 with the warning and critical lines drawn."""
    return ratio_series(
        title, description, queries,
        thresholds_config=acceptance_thresholds(cfg),
        threshold_lines=True,
        legend_calcs=("mean", "min", "lastNotNull"),
    )


def acceptance_by_model(cfg: MixinConfig, q: Queries) -> timeseries.Panel:
    return acceptance_series(
        cfg,
        "Acceptance rate by model",
        "Accepted / drafted tokens per served model, summed over every selected server and "
        "engine before dividing (busy servers weigh more). " + threshold_note(cfg)
        + " A step down at one moment points at a deploy or a prompt-mix change; a slow slide at "
        "a load increase.",
        [Query(q.acceptance(("model_name",)), "{{model_name}}")],
    ).links(runbook_links(cfg, alert_rules.ACCEPTANCE_LOW, alert_rules.ACCEPTANCE_CRITICAL))


def acceptance_by_instance(cfg: MixinConfig, q: Queries, ranking: Crowd) -> timeseries.Panel:
    """Acceptance per server, on the servers of `ranking` (acceptance_crowd)."""
    return acceptance_series(
        cfg,
        "Acceptance rate by instance",
        "Accepted / drafted tokens per vLLM server. " + threshold_note(cfg)
        + " One server below the others points at its config (draft model, k) or its traffic."
        + crowd_note(cfg),
        [Query(ranking.read(q.acceptance((cfg.instance_label,))), legend_label(cfg.instance_label))],
    )


def acceptance_crowd(cfg: MixinConfig, q: Queries) -> Crowd:
    """The servers with the lowest and highest acceptance: the per-server acceptance panels' ranking."""
    return q.crowd("acceptance_by_instance", q.acceptance((cfg.instance_label,)))
