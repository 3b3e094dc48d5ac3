"""The overview dashboard's health row: can these numbers be trusted? With the sidecar its view of
each target (up, scrape errors, restarts, poll age and duration, detected schema); with
source=vllm what Prometheus itself knows (up, restarts, servers not speculating). overview.py
arranges it with the other rows.
"""

from __future__ import annotations

from ..config import MixinConfig
from ..rules import alert_rules, sources
from ..rules.sources import SERVED
from .crowd import Crowd
from .layout import Layout
from .panels import (
    NUMBER,
    SECONDS,
    Query,
    table_panel,
    timeseries_panel,
)
from .presets import (
    NO_EXPORTER,
)
from .promql import (
    RANGE,
    SPEC_DECODE_ENABLED,
    TARGET_UP,
    Queries,
    legend_label,
    sum_by,
)
from .shared_panels import (
    crowd_note,
    firing_alerts_table,
    runbook_links,
)


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

