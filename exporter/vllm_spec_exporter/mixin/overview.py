"""Grafana dashboards, built with grafana-foundation-sdk from the same MixinConfig as the alerts.

`render(cfg)` returns the committed files: the dashboard JSON under `dashboards/` and a ConfigMap
for the Grafana sidecar of kube-prometheus-stack. The main dashboard is laid out for the on-call
engineer who arrives from a page: the top row answers "is speculation paying off right now, and
is anything firing?" in five seconds; the rows below answer "since when, where, and why".

Queries read the exporter's normalised counters (`vllm_spec_decode_*_total`) and aggregate the
numerator and denominator separately before dividing, so a ratio across engines or servers is
weighted by traffic instead of averaging per-series ratios.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import yaml
from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as dashboard_models

from .. import schema
from . import rules
from .config import MixinConfig
from .panels import (
    COLOR_ACCEPTED,
    COLOR_DRAFTED,
    COLOR_REJECTED,
    COLOR_TARGET,
    DATASOURCE,
    DATASOURCE_VARIABLE,
    NUMBER,
    RATE_INTERVAL,
    RATIO,
    SECONDS,
    SPEEDUP,
    TOKENS_PER_SECOND,
    Column,
    Query,
    Selectors,
    acceptance_thresholds,
    as_json,
    bargauge_panel,
    count_thresholds,
    guarded_ratio,
    join_matchers,
    legend_label,
    link,
    merged_table_panel,
    no_traffic_mapping,
    position_thresholds,
    rate,
    selector,
    stat_panel,
    sum_by,
    sum_rate,
    table_panel,
    thresholds,
    timeseries_panel,
    value_words,
)

MAIN_DASHBOARD_PATH = "dashboards/vllm-spec-decode-overview.json"
FLEET_DASHBOARD_PATH = "dashboards/vllm-spec-decode-fleet.json"
CONFIGMAP_PATH = "dashboards/kubernetes/grafana-dashboards-configmap.yaml"
# dashboard-linter reads exclusions from a `.lint` file next to the dashboards.
LINT_PATH = "dashboards/.lint"
README_PATH = "dashboards/README.md"
PREVIEW_FILE = "preview.png"  # drawn by tools/render_dashboard_preview.py, committed by hand
MAIN_DASHBOARD_TITLE = "vLLM / Speculative decoding: is it paying off?"
FLEET_DASHBOARD_TITLE = "vLLM / Speculative decoding — fleet"

# Alerts are matched by name prefix: every spec-decode alert the mixin generates starts with it.
ALERT_NAME_REGEX = "SpecDecode.*"

# vLLM's own metrics the dashboards query directly (the exporter does not re-expose histograms).
# The lint test checks each name against a real vLLM /metrics capture. Queries match both
# spellings (see vllm_name_pattern): Prometheus 2.x negotiates OpenMetrics, and prometheus_client
# >= 0.2x then escapes the colon, so the TSDB holds `vllm_inter_token_latency_seconds_bucket`;
# Prometheus 3 (UTF-8 names) or a text-format scrape keeps `vllm:inter_token_latency_seconds_bucket`.
VLLM_INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
VLLM_TIME_PER_OUTPUT_TOKEN = "vllm:request_time_per_output_token_seconds"
VLLM_METRICS_QUERIED = tuple(
    f"{histogram}_{suffix}"
    for histogram in (VLLM_INTER_TOKEN_LATENCY, VLLM_TIME_PER_OUTPUT_TOKEN)
    for suffix in ("bucket", "sum", "count")
)
# Series Prometheus itself creates (not served by any exporter).
PROMETHEUS_BUILTIN_METRICS = ("up", "ALERTS")

LATENCY_QUANTILES = (0.5, 0.9, 0.99)
GRID_COLUMNS = 24
ANNOTATION_STEP = "1m"


def vllm_name_pattern(name: str) -> str:
    """Regex for a `vllm:` name that also matches its OpenMetrics-escaped `vllm_` spelling."""
    if not name.startswith("vllm:"):
        raise ValueError(f"{name} is not a vLLM metric name")
    return "vllm[:_]" + name.removeprefix("vllm:")


DRAFTS = schema.served("vllm_spec_decode_drafts_total")
DRAFT_TOKENS = schema.served("vllm_spec_decode_draft_tokens_total")
ACCEPTED = schema.served("vllm_spec_decode_accepted_tokens_total")
ACCEPTED_BY_POSITION = schema.served("vllm_spec_decode_accepted_tokens_by_position_total")
GENERATED = schema.served("vllm_generation_tokens_total")
NUM_SPECULATIVE_TOKENS = schema.served("vllm_spec_decode_num_speculative_tokens")
REQUESTS_RUNNING = schema.served("vllm_num_requests_running")
REQUESTS_WAITING = schema.served("vllm_num_requests_waiting")
KV_CACHE_USAGE = schema.served("vllm_kv_cache_usage_ratio")
TARGET_UP = schema.served("vllm_spec_exporter_target_up")
SPEC_DECODE_ENABLED = schema.served("vllm_spec_decode_enabled")
SCRAPE_DURATION = schema.served("vllm_spec_exporter_scrape_duration_seconds")
LAST_SUCCESS = schema.served("vllm_spec_exporter_last_success_timestamp_seconds")
SCRAPE_ERRORS = schema.served("vllm_spec_exporter_scrape_errors_total")
COUNTER_RESETS = schema.served("vllm_spec_exporter_counter_resets_total")
TARGET_INFO = schema.served("vllm_spec_exporter_target_info")
ESTIMATED_SPEEDUP = schema.served("vllm_spec_decode_estimated_speedup")
RECOMMENDED_K = schema.served("vllm_spec_decode_recommended_k")
RECOMMENDED_K_SPEEDUP = schema.served("vllm_spec_decode_recommended_k_estimated_speedup")
# The advisor's speed-up is relative to decoding without speculation: below 1 it slows decoding.
BREAK_EVEN_SPEEDUP = 1
# Why a server of the fleet is not speculating (the fleet dashboard's table, label `problem`).
PROBLEM_LABEL = "problem"
PROBLEM_SPEC_OFF = "spec decoding off"
PROBLEM_VLLM_UNREADABLE = "vLLM unreadable"
PROBLEM_EXPORTER_UNSCRAPED = "exporter not scraped"


def main_dashboard_uid(cfg: MixinConfig) -> str:
    return f"{cfg.dashboard_uid_prefix}-overview"


def fleet_dashboard_uid(cfg: MixinConfig) -> str:
    return f"{cfg.dashboard_uid_prefix}-fleet"


def dashboard_url(cfg: MixinConfig, uid: str = "") -> str:
    """Link to a dashboard, by default the main one, for alert annotations and runbooks (the way
    back) and for the links between the dashboards."""
    return f"{cfg.grafana_url.rstrip('/')}/d/{uid or main_dashboard_uid(cfg)}"


def runbook_url(cfg: MixinConfig, alert_name: str) -> str:
    return cfg.runbook_url_pattern % alert_name.lower()


def runbook_links(cfg: MixinConfig, *alert_names: str) -> list[dashboard.DashboardLink]:
    return [link(f"Runbook: {name}", runbook_url(cfg, name)) for name in alert_names]


def runbook_index_url(cfg: MixinConfig) -> str:
    """The runbook page itself: the pattern without the per-alert anchor."""
    return cfg.runbook_url_pattern.replace("%s", "").rstrip("#")


# --- Queries --------------------------------------------------------------------------------


class Queries:
    """The PromQL of the main dashboard, parametrised by the config's selectors."""

    def __init__(self, cfg: MixinConfig) -> None:
        self.cfg = cfg
        self.sel = Selectors.from_config(cfg)

    def sum_rate(self, metric: str, by: tuple[str, ...] = ()) -> str:
        return sum_rate(metric, self.sel.series, by)

    def acceptance(self, by: tuple[str, ...] = ()) -> str:
        return guarded_ratio(self.sum_rate(ACCEPTED, by), self.sum_rate(DRAFT_TOKENS, by))

    def mean_acceptance_length(self, by: tuple[str, ...] = ()) -> str:
        return "1 + " + guarded_ratio(self.sum_rate(ACCEPTED, by), self.sum_rate(DRAFTS, by))

    def max_acceptance_length(self, by: tuple[str, ...] = ()) -> str:
        """k + 1: the most tokens one verification step can emit (all drafts + the bonus)."""
        return sum_by(by, selector(NUM_SPECULATIVE_TOKENS, self.sel.series), op="max") + " + 1"

    def efficiency(self, by: tuple[str, ...] = ()) -> str:
        """(drafts + accepted) / (drafts * (k + 1)): tokens emitted / most emittable. Each draft's
        rate is weighted by its own series' k, so servers with different k aggregate correctly.
        Both sides cover exactly the series that have a k gauge: a series whose k is missing (the
        exporter's first poll, a target just gone down) must not add to the numerator alone."""
        k = selector(NUM_SPECULATIVE_TOKENS, self.sel.series)
        emitted = sum_by(by, f"({rate(DRAFTS, self.sel.series)} + {rate(ACCEPTED, self.sel.series)}) and {k}")
        most_emittable = sum_by(by, f"{rate(DRAFTS, self.sel.series)} * ({k} + 1)")
        return guarded_ratio(emitted, most_emittable)

    def drafted_efficiency(self, by: tuple[str, ...] = ()) -> str:
        """(drafts + accepted) / (drafts + draft tokens): fair when drafts are shorter than k."""
        emitted = f"{self.sum_rate(DRAFTS, by)} + {self.sum_rate(ACCEPTED, by)}"
        drafted = f"{self.sum_rate(DRAFTS, by)} + {self.sum_rate(DRAFT_TOKENS, by)}"
        return guarded_ratio(f"({emitted})", f"({drafted})")

    def position_acceptance(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """Share of drafts whose token at each position was accepted. Drafts have no position
        label, hence the one-to-many match on the remaining labels."""
        matching = f"on ({', '.join(by)}) group_left ()" if by else "on () group_left ()"
        return guarded_ratio(
            self.sum_rate(ACCEPTED_BY_POSITION, (*by, "position")),
            self.sum_rate(DRAFTS, by),
            matching=matching,
        )

    def positions_paying_off(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """How many draft positions are accepted at least at the warning threshold: the k that
        pays. `>= bool` keeps failing positions as 0, so the count can be 0 instead of empty."""
        threshold = self.cfg.acceptance_warning_threshold
        return sum_by(by, f"{self.position_acceptance(by)} >= bool {threshold}")

    def last_position_acceptance(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """Acceptance of the last draft position. Acceptance is prefix-based, so it never rises
        with position: the minimum over positions is the last one."""
        return sum_by(by, self.position_acceptance(by), op="min")

    def draft_output_share(self, by: tuple[str, ...] = ()) -> str:
        return guarded_ratio(self.sum_rate(ACCEPTED, by), self.sum_rate(GENERATED, by))

    def mean_draft_length(self, by: tuple[str, ...] = ()) -> str:
        return guarded_ratio(self.sum_rate(DRAFT_TOKENS, by), self.sum_rate(DRAFTS, by))

    def target_sampled_tokens(self, by: tuple[str, ...] = ()) -> str:
        """Output tokens the target model sampled itself (one per step, incl. the bonus token)."""
        return f"{self.sum_rate(GENERATED, by)} - {self.sum_rate(ACCEPTED, by)}"

    def rejected_tokens(self, by: tuple[str, ...] = ()) -> str:
        return f"{self.sum_rate(DRAFT_TOKENS, by)} - {self.sum_rate(ACCEPTED, by)}"

    def traffic_weighted(self, gauge: str, by: tuple[str, ...] = ()) -> str:
        """Average of a per-series gauge weighted by each series' drafts/s, over the series that
        report it (the exporter omits advisor gauges while a series is idle)."""
        gauge_selector = selector(gauge, self.sel.series)
        drafts = rate(DRAFTS, self.sel.series)
        return guarded_ratio(
            sum_by(by, f"{gauge_selector} * {drafts}"),
            sum_by(by, f"{drafts} and {gauge_selector}"),
        )

    def gauge(self, metric: str, by: tuple[str, ...], op: str = "sum") -> str:
        return sum_by(by, selector(metric, self.sel.series), op=op)

    def vllm_rate(self, sample_name: str) -> str:
        """rate() of one of vLLM's own series under either spelling of its name."""
        matchers = join_matchers(f'__name__=~"{vllm_name_pattern(sample_name)}"', self.sel.vllm)
        return f"rate({{{matchers}}}[{RATE_INTERVAL}])"

    def latency_quantile(self, histogram: str, quantile: float, by: tuple[str, ...] = ()) -> str:
        return f"histogram_quantile({quantile}, {sum_by(('le', *by), self.vllm_rate(histogram + '_bucket'))})"

    def latency_mean(self, histogram: str, by: tuple[str, ...] = ()) -> str:
        return guarded_ratio(
            sum_by(by, self.vllm_rate(histogram + "_sum")),
            sum_by(by, self.vllm_rate(histogram + "_count")),
        )

    def acceptance_band(self, by: tuple[str, ...], low: float | None, high: float | None) -> str:
        """Per-`by` acceptance kept only where low <= acceptance < high (comparison filters)."""
        expr = f"({self.acceptance(by)})"
        if high is not None:
            expr += f" < {high}"
        if low is not None:
            expr += f" >= {low}"
        return expr

    def servers_in_band(self, low: float | None, high: float | None) -> str:
        """Servers whose acceptance lies in [low, high). 0 while some server has traffic, empty
        (shown as "No traffic") while none has: an idle fleet is not a healthy one."""
        by_instance = (self.cfg.instance_label,)
        return (f"count({self.acceptance_band(by_instance, low, high)}) "
                f"or (0 * count({self.acceptance(by_instance)}))")

    def per_target(self, metric: str, op: str = "min") -> str:
        """One value per scrape target of an exporter health gauge (no model/engine labels)."""
        return sum_by((self.cfg.instance_label,), selector(metric, self.sel.target), op=op)

    def spec_decode_off_servers(self) -> str:
        """Servers the exporter reads where vLLM exposes no spec-decode metrics; 0 (not empty)
        while exporters are scraped, so "No exporter" stays distinguishable."""
        up = selector("up", self.sel.target)
        return f"count({self.per_target(SPEC_DECODE_ENABLED, op='max')} == 0) or (0 * count({up}))"

    def not_speculating(self) -> str:
        """One row per server that is not speculating, with the reason in label `problem`."""
        reasons = (
            (self.per_target(SPEC_DECODE_ENABLED, op="max"), PROBLEM_SPEC_OFF),
            (self.per_target(TARGET_UP), PROBLEM_VLLM_UNREADABLE),
            (self.per_target("up"), PROBLEM_EXPORTER_UNSCRAPED),
        )
        return " or ".join(f'label_replace({expr} == 0, "{PROBLEM_LABEL}", "{text}", "", "")'
                           for expr, text in reasons)

    # Health: per scrape target, no model/engine labels.
    def targets_down(self) -> str:
        """Exporters that cannot read vLLM, plus exporters Prometheus cannot scrape. Empty (shown
        as "No exporter") when no exporter is scraped at all, so silence is never green."""
        up = selector("up", self.sel.target)
        target_up = selector(TARGET_UP, self.sel.target)
        return f"count(({target_up} == 0) or ({up} == 0)) or (0 * count({up}))"

    def firing_alerts(self) -> str:
        return f'ALERTS{{alertname=~"{ALERT_NAME_REGEX}", alertstate="firing"}}'


# --- Dashboard ------------------------------------------------------------------------------


def _variables(cfg: MixinConfig) -> Iterator[dashboard.QueryVariable | dashboard.DatasourceVariable]:
    yield (
        dashboard.DatasourceVariable(DATASOURCE_VARIABLE)
        .label("Data source")
        .type("prometheus")
    )
    exporter = cfg.exporter_selector
    chained = [
        # (variable, label shown, metric, label to read, matchers of the variables before it)
        ("job", "Job", TARGET_UP, "job", ""),
        ("instance", "Instance", TARGET_UP, cfg.instance_label, 'job=~"$job"'),
        ("model_name", "Model", REQUESTS_RUNNING, "model_name",
         f'job=~"$job", {cfg.instance_label}=~"$instance"'),
        ("engine", "Engine", REQUESTS_RUNNING, "engine",
         f'job=~"$job", {cfg.instance_label}=~"$instance", model_name=~"$model_name"'),
    ]
    for name, label, metric, label_name, previous in chained:
        matchers = ", ".join(m for m in (exporter, previous) if m)
        yield (
            dashboard.QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query(f"label_values({metric}{{{matchers}}}, {label_name})")
            .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dashboard_models.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".+")
            .current(dashboard_models.VariableOption(selected=True, text="All", value="$__all"))
        )


def _annotations(cfg: MixinConfig, q: Queries) -> Iterator[dashboard.AnnotationQuery]:
    """Markers on every time series: where vLLM restarted (counters reset, so a rate window
    straddling it covers less traffic) and where spec-decode alerts were firing."""
    yield (
        dashboard.AnnotationQuery()
        .name("vLLM restarts")
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("orange")
        .expr(sum_by((cfg.instance_label,),
                     f"increase({selector(COUNTER_RESETS, q.sel.target)}[{RATE_INTERVAL}])") + " > 0")
        .title_format("vLLM restarted")
        .text_format("Counters reset on " + legend_label(cfg.instance_label))
        .tag_keys(cfg.instance_label)
        # Grafana derives $__rate_interval from the step (>= step + scrape interval), so 1m
        # windows evaluated every minute leave no gap in which a restart could hide.
        .step(ANNOTATION_STEP)
    )
    yield (
        dashboard.AnnotationQuery()
        .name("Spec-decode alerts")
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("red")
        .expr(q.firing_alerts())
        .title_format("{{alertname}}")
        .tag_keys("alertname,severity")
        .step(ANNOTATION_STEP)
    )


# --- Panels shared by the dashboards --------------------------------------------------------


def _acceptance_stat(cfg: MixinConfig, q: Queries, title: str, scope: str, width: int = 4):
    warn = f"{cfg.acceptance_warning_threshold:.0%}"
    crit = f"{cfg.acceptance_critical_threshold:.0%}"
    return stat_panel(
        title,
        f"Share of draft tokens the target model accepted, {scope} "
        "(accepted / drafted, summed before dividing). Good: green, at or above "
        f"{warn}; speculation pays off. Orange below {warn}: the target verifies more rejected "
        f"tokens than speculation saves (alert {rules.ACCEPTANCE_LOW}). Red below {crit}: "
        f"speculation costs latency and compute (alert {rules.ACCEPTANCE_CRITICAL}). "
        '"No traffic" means no draft tokens in the window.',
        RATIO,
        [Query(q.acceptance(), "acceptance")],
        thresholds_config=acceptance_thresholds(cfg),
        mappings=no_traffic_mapping(),
        no_value="No traffic",
        decimals=1,
        color_mode=common_models.BigValueColorMode.BACKGROUND,
        width=width,
    ).links(runbook_links(cfg, rules.ACCEPTANCE_LOW, rules.ACCEPTANCE_CRITICAL))


def _speedup_thresholds() -> dashboard.ThresholdsConfig:
    return thresholds("red", (BREAK_EVEN_SPEEDUP, "green"))


def _speedup_stat(q: Queries, width: int = 3):
    return stat_panel(
        "Speed-up (est.)",
        "The exporter's advisor: decoding speed with speculation relative to without it, "
        "estimated from per-position acceptance and the draft's cost (exporter flag "
        "--draft-cost-ratio): (1 + accepted per draft) / (1 + cost × k), averaged over the "
        "selected engines weighted by their drafts. Good: green, above 1×. Red below 1×: "
        "speculation makes decoding slower than plain decoding. An estimate: confirm with time "
        "per output token.",
        SPEEDUP,
        [Query(q.traffic_weighted(ESTIMATED_SPEEDUP), "speed-up")],
        thresholds_config=_speedup_thresholds(),
        mappings=no_traffic_mapping(),
        no_value="No traffic",
        decimals=2,
        color_mode=common_models.BigValueColorMode.BACKGROUND,
        width=width,
    )


def _targets_down_stat(cfg: MixinConfig, q: Queries, width: int = 2):
    return stat_panel(
        "Targets down",
        "vLLM servers the exporter cannot read, plus exporters Prometheus cannot scrape. Good is "
        "0. 'No exporter' means Prometheus scrapes no exporter matching the selection: every "
        "other panel is then empty for that reason, not because of idle traffic.",
        NUMBER,
        [Query(q.targets_down(), "down")],
        thresholds_config=count_thresholds("red"),
        no_value="No exporter",
        sparkline=False,
        color_mode=common_models.BigValueColorMode.BACKGROUND,
        width=width,
    ).links(runbook_links(cfg, rules.VLLM_UNREACHABLE, rules.EXPORTER_DOWN, rules.EXPORTER_ABSENT))


def _firing_alerts_stat(cfg: MixinConfig, q: Queries, width: int = 3):
    return stat_panel(
        "Firing alerts",
        f"Spec-decode alerts ({ALERT_NAME_REGEX}) firing now in this Prometheus, for every "
        "server, not only the selected ones: a page elsewhere stays visible. Good is 0. The table "
        "'Firing spec-decode alerts' at the bottom lists them; each alert's runbook_url explains it.",
        NUMBER,
        [Query(f"count({q.firing_alerts()}) or vector(0)", "firing")],
        thresholds_config=count_thresholds("red"),
        sparkline=False,
        color_mode=common_models.BigValueColorMode.BACKGROUND,
        width=width,
    ).links([link("Runbooks", runbook_index_url(cfg))])


def _firing_alerts_table(cfg: MixinConfig, q: Queries, width: int = 24):
    return table_panel(
        "Firing spec-decode alerts",
        f"Every {ALERT_NAME_REGEX} alert firing now, with its labels. Good: empty. Open the "
        "runbook from the alert notification (runbook_url) or the dashboard's Runbooks link.",
        NUMBER,
        [Query(q.firing_alerts(), table=True)],
        hidden_columns=("Time", "Value", "__name__", "alertstate"),
        width=width,
        height=5,
        no_value="None firing",
    ).links([link("Runbooks", runbook_index_url(cfg))])


def _acceptance_series_options(cfg: MixinConfig) -> dict:
    """Acceptance over time: 0..1 with the warning and critical lines drawn."""
    return {
        "thresholds_config": acceptance_thresholds(cfg),
        "threshold_lines": True,
        "min_value": 0,
        "max_value": 1,
        "legend_calcs": ("mean", "min", "lastNotNull"),
    }


def _threshold_note(cfg: MixinConfig) -> str:
    return (
        f"Dashed lines: warning {cfg.acceptance_warning_threshold:.0%} (orange), critical "
        f"{cfg.acceptance_critical_threshold:.0%} (red). Good stays above the warning line; "
        "gaps mean no draft tokens in the window."
    )


def _acceptance_by_model(cfg: MixinConfig, q: Queries, width: int = 12):
    return timeseries_panel(
        "Acceptance rate by model",
        "Accepted / drafted tokens per served model, summed over every selected server and "
        "engine before dividing (busy servers weigh more). " + _threshold_note(cfg)
        + " A step down at one moment points at a deploy or a prompt-mix change; a slow slide at "
        "a load increase.",
        RATIO, [Query(q.acceptance(("model_name",)), "{{model_name}}")],
        width=width, **_acceptance_series_options(cfg),
    ).links(runbook_links(cfg, rules.ACCEPTANCE_LOW, rules.ACCEPTANCE_CRITICAL))


def _acceptance_by_instance(cfg: MixinConfig, q: Queries, width: int = 12):
    return timeseries_panel(
        "Acceptance rate by instance",
        "Accepted / drafted tokens per vLLM server. " + _threshold_note(cfg)
        + " One server below the others points at its config (draft model, k) or its traffic.",
        RATIO, [Query(q.acceptance((cfg.instance_label,)), legend_label(cfg.instance_label))],
        width=width, **_acceptance_series_options(cfg),
    )


# --- Overview dashboard ---------------------------------------------------------------------


def _top_row(cfg: MixinConfig, q: Queries) -> Iterator:
    yield _acceptance_stat(cfg, q, "Acceptance rate", "over the selected servers", width=4)
    yield stat_panel(
        "Tokens per step vs k+1",
        "Mean acceptance length: tokens emitted per verification step, bonus token included "
        "(1 + accepted / drafts), next to its ceiling k+1 (every draft token accepted). Good is "
        "close to k+1; 1.0 means drafts are never accepted and speculation only adds work.",
        NUMBER,
        [Query(q.mean_acceptance_length(), "tokens/step"),
         Query(q.max_acceptance_length(), "k+1", instant=True)],
        mappings=no_traffic_mapping(),
        no_value="No traffic",
        decimals=2,
        text_mode=common_models.BigValueTextMode.VALUE_AND_NAME,
        width=4,
    )
    yield stat_panel(
        "Efficiency",
        "System efficiency: tokens emitted / most tokens the steps could have emitted, "
        "(drafts + accepted) / (drafts × (k+1)) = tokens per step / (k+1). 100 % means every "
        "draft token was accepted. Good: steady or rising; compare over time rather than against "
        "a fixed line, since it falls with acceptance and also when k is raised without better "
        "drafts.",
        RATIO,
        [Query(q.efficiency(), "efficiency")],
        mappings=no_traffic_mapping(),
        no_value="No traffic",
        decimals=1,
        width=3,
    )
    yield _speedup_stat(q, width=3)
    yield stat_panel(
        "Tokens/s",
        "Output tokens generated per second (accepted drafts included), draft tokens accepted "
        "per second and draft tokens proposed per second. Good: accepted close to drafted and a "
        "large share of generated. Generated 0 with requests running means vLLM is stuck.",
        TOKENS_PER_SECOND,
        [Query(q.sum_rate(GENERATED), "generated"),
         Query(q.sum_rate(ACCEPTED), "accepted"),
         Query(q.sum_rate(DRAFT_TOKENS), "drafted")],
        text_mode=common_models.BigValueTextMode.VALUE_AND_NAME,
        decimals=1,
        width=5,
    ).links(runbook_links(cfg, rules.DRAFTS_STOPPED))
    yield _targets_down_stat(cfg, q, width=2)
    yield _firing_alerts_stat(cfg, q, width=3)


def _acceptance_row(cfg: MixinConfig, q: Queries) -> Iterator:
    yield dashboard.Row("Acceptance: since when, and where?")
    yield _acceptance_by_model(cfg, q)
    yield timeseries_panel(
        "Tokens per step vs k+1 by model",
        "Mean acceptance length (1 + accepted / drafts, bonus token included) per model, with its "
        "ceiling k+1 dashed. Good: close to the ceiling. If it stays near 1, drafts are rejected "
        "at their first token and speculation is pure overhead.",
        NUMBER,
        [Query(q.mean_acceptance_length(("model_name",)), "{{model_name}} tokens/step"),
         Query(q.max_acceptance_length(("model_name",)), "{{model_name}} k+1")],
        min_value=1,
    ).override_by_regexp(".* k\\+1$", [
        dashboard_models.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}),
        dashboard_models.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
    ])
    by_instance = (cfg.instance_label,)
    yield _acceptance_by_instance(cfg, q)
    yield timeseries_panel(
        "Acceptance rate by engine",
        "Accepted / drafted tokens per data-parallel engine of each server. " + _threshold_note(cfg)
        + " Engines of one server share model and config, so they should agree.",
        RATIO,
        [Query(q.acceptance((*by_instance, "engine")), legend_label(cfg.instance_label) + " engine {{engine}}")],
        **_acceptance_series_options(cfg),
    )
    yield timeseries_panel(
        "Efficiency by model",
        "System efficiency (drafts + accepted) / (drafts × (k+1)), and the same over tokens "
        "actually drafted, (drafts + accepted) / (drafts + draft tokens), which is fair when the "
        "drafter proposes fewer than k tokens (n-gram misses). Good: high and steady; the two "
        "lines part when drafts are shorter than k.",
        RATIO,
        [Query(q.efficiency(("model_name",)), "{{model_name}} of k+1"),
         Query(q.drafted_efficiency(("model_name",)), "{{model_name}} of drafted")],
        min_value=0, max_value=1,
    )
    yield timeseries_panel(
        "Draft length vs k by model",
        "Mean draft tokens proposed per draft (draft tokens / drafts) next to k. Equal for a draft "
        "model; lower for n-gram/suffix drafters when the prompt has no match. Good: close to k. "
        "Far below k means the drafter rarely finds anything to propose, which acceptance alone "
        "does not show.",
        NUMBER,
        [Query(q.mean_draft_length(("model_name",)), "{{model_name}} draft length"),
         Query(q.gauge(NUM_SPECULATIVE_TOKENS, ("model_name",), op="max"), "{{model_name}} k")],
        min_value=0,
    )


def _position_row(cfg: MixinConfig, q: Queries) -> Iterator:
    warn = f"{cfg.acceptance_warning_threshold:.0%}"
    raise_k = f"{cfg.acceptance_raise_k_threshold:.0%}"
    advice = (
        f"Rule of thumb: if the last position is still accepted above {raise_k} (blue), try a "
        f"larger k; positions below {warn} (orange) cost more verification than they save, so "
        "lower k to the number of positions at or above it."
    )
    yield dashboard.Row("Per-position acceptance: is k right?")
    yield bargauge_panel(
        "Acceptance by draft position",
        "Share of drafts whose token at each 0-based position was accepted (accepted at position "
        "/ drafts). It can only fall with position: where it drops below the line is where the "
        "draft stops paying off. Good: every position green. " + advice,
        RATIO,
        [Query(q.position_acceptance(), "{{model_name}} position {{position}}", instant=True)],
        thresholds_config=position_thresholds(cfg),
        no_value="No traffic",
        width=8,
        height=9,
    )
    yield timeseries_panel(
        "Acceptance by draft position over time",
        "The same per-position acceptance over time. A collapse of position 0 means the draft "
        "model no longer matches the target (wrong draft, tokenizer or chat template). Good: "
        "flat lines, position 0 highest. " + advice,
        RATIO,
        [Query(q.position_acceptance(), "{{model_name}} position {{position}}")],
        thresholds_config=position_thresholds(cfg),
        threshold_lines=True,
        min_value=0,
        max_value=1,
        width=9,
        height=9,
    )
    yield stat_panel(
        "k advice",
        f"From the last draft position's acceptance: 'Raise k' at or above {raise_k}, 'Keep k' "
        f"between {warn} and {raise_k}, 'Lower k' below {warn}. 'Positions that pay' counts "
        f"positions accepted at or above {warn}: a good k to try. 'No traffic' without drafts.",
        NUMBER,
        [Query(q.last_position_acceptance(), "{{model_name}}", instant=True)],
        mappings=_k_advice_mappings(cfg),
        no_value="No traffic",
        sparkline=False,
        color_mode=common_models.BigValueColorMode.BACKGROUND,
        text_mode=common_models.BigValueTextMode.VALUE_AND_NAME,
        width=7,
        height=3,
    )
    # The layout's gravity stacks these short stats under the advice (right-hand column).
    yield stat_panel(
        "Positions that pay vs k",
        f"Draft positions accepted at or above {warn}, next to k (positions configured). Good: "
        "equal, every position pays; fewer means k can be lowered to that number.",
        NUMBER,
        [Query(q.positions_paying_off(), "{{model_name}} paying", instant=True),
         Query(q.gauge(NUM_SPECULATIVE_TOKENS, ("model_name",), op="max"), "{{model_name}} k",
               instant=True)],
        no_value="No traffic",
        sparkline=False,
        text_mode=common_models.BigValueTextMode.VALUE_AND_NAME,
        width=7,
        height=3,
    )
    yield stat_panel(
        "Advisor: recommended k",
        "The exporter's advisor per model: the k (at most the current k) that maximises the "
        "estimated speed-up given per-position acceptance and draft cost, and the speed-up it "
        "would give. Good: equal to k. It never suggests raising k (positions beyond k were never "
        f"drafted); for that, watch the last position's acceptance (above {raise_k}).",
        NUMBER,
        [Query(q.gauge(RECOMMENDED_K, ("model_name",), op="min"), "{{model_name}} k*", instant=True),
         Query(q.traffic_weighted(RECOMMENDED_K_SPEEDUP, ("model_name",)), "{{model_name}} speed-up at k*",
               instant=True)],
        no_value="No traffic",
        sparkline=False,
        decimals=2,
        text_mode=common_models.BigValueTextMode.VALUE_AND_NAME,
        width=7,
        height=3,
    )


def _k_advice_mappings(cfg: MixinConfig) -> list[dashboard_models.ValueMapping]:
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


def _token_flow_row(q: Queries) -> Iterator:
    yield dashboard.Row("Token flow: where do output tokens come from?")
    yield timeseries_panel(
        "Draft tokens: proposed, accepted, rejected",
        "Draft tokens proposed per second (blue), accepted (green) and rejected = proposed - "
        "accepted (orange). Rejected tokens are target-model compute spent for nothing. Good: the "
        "green line hugs the blue one; orange above green means most speculation is wasted.",
        TOKENS_PER_SECOND,
        [Query(q.sum_rate(DRAFT_TOKENS), "proposed"),
         Query(q.sum_rate(ACCEPTED), "accepted"),
         Query(q.rejected_tokens(), "rejected")],
        min_value=0,
        colors={"proposed": COLOR_DRAFTED, "accepted": COLOR_ACCEPTED, "rejected": COLOR_REJECTED},
    )
    yield timeseries_panel(
        "Output tokens by source",
        "Generated tokens per second, stacked by origin: accepted draft tokens (green) on top of "
        "tokens the target model sampled itself, one per step including the bonus token "
        "(purple). The total is vLLM's output throughput. Good: a thick green band.",
        TOKENS_PER_SECOND,
        [Query(q.target_sampled_tokens(), "sampled by target"),
         Query(q.sum_rate(ACCEPTED), "accepted drafts")],
        stacked=True,
        min_value=0,
        colors={"sampled by target": COLOR_TARGET, "accepted drafts": COLOR_ACCEPTED},
    )
    yield timeseries_panel(
        "Share of output from drafts by model",
        "Accepted draft tokens / generated tokens per model: the part of the output speculation "
        "produced. With acceptance length L it is about (L-1)/L. Good: well above 0; near 0 means "
        "speculation adds work without adding tokens.",
        RATIO,
        [Query(q.draft_output_share(("model_name",)), "{{model_name}}")],
        min_value=0, max_value=1,
    )
    yield timeseries_panel(
        "Drafted and generated tokens by model",
        "Per model: draft tokens proposed and output tokens generated per second. Good: drafted "
        "no higher than generated; drafting far more tokens than are generated means most "
        "verification work is rejected.",
        TOKENS_PER_SECOND,
        [Query(q.sum_rate(DRAFT_TOKENS, ("model_name",)), "{{model_name}} drafted"),
         Query(q.sum_rate(GENERATED, ("model_name",)), "{{model_name}} generated")],
        min_value=0,
    )


def _context_row(cfg: MixinConfig, q: Queries) -> Iterator:
    by_instance = (cfg.instance_label,)
    instance_legend = legend_label(cfg.instance_label)
    vllm_scope = (
        f"From vLLM's own /metrics ({cfg.vllm_selector or 'all jobs'}), filtered by model and "
        "engine; the job/instance variables pick the exporter's targets and do not apply here."
    )
    yield dashboard.Row("Load and latency: why did acceptance change?")
    yield timeseries_panel(
        "Requests running and waiting",
        "Requests in the running batch and waiting in the queue, per server. Speculation pays "
        "best at small batches: acceptance or speed dropping while running requests climb "
        "points at load, not at the draft. Good: waiting stays near 0.",
        NUMBER,
        [Query(q.gauge(REQUESTS_RUNNING, by_instance), f"{instance_legend} running"),
         Query(q.gauge(REQUESTS_WAITING, by_instance), f"{instance_legend} waiting")],
        min_value=0,
        width=8,
    )
    yield timeseries_panel(
        "KV-cache usage",
        "Share of the KV cache in use, per server and model (highest engine). Good: below ~90 %; "
        "near 100 % vLLM preempts requests, and draft tokens also need cache blocks.",
        RATIO,
        [Query(q.gauge(KV_CACHE_USAGE, (*by_instance, "model_name"), op="max"),
               instance_legend + " {{model_name}}")],
        min_value=0, max_value=1,
        width=8,
    )
    yield timeseries_panel(
        "Inter-token latency",
        "Time between two outputs of a request (p50, p90, p99, mean). With speculation one output "
        "can carry several tokens, so this measures per step, not per token: compare it with "
        "tokens per step. Good: flat; rising with load means the batch is saturated. " + vllm_scope,
        SECONDS,
        [*(Query(q.latency_quantile(VLLM_INTER_TOKEN_LATENCY, quantile), f"p{round(quantile * 100)}")
           for quantile in LATENCY_QUANTILES),
         Query(q.latency_mean(VLLM_INTER_TOKEN_LATENCY), "mean")],
        min_value=0,
        width=8,
    )
    yield timeseries_panel(
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
        min_value=0,
        width=24,
    ).override_by_name("tokens per step", [
        dashboard_models.DynamicConfigValue(id_val="unit", value=NUMBER),
        dashboard_models.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
        dashboard_models.DynamicConfigValue(id_val="custom.axisLabel", value="tokens per step"),
        dashboard_models.DynamicConfigValue(id_val="min", value=1),
    ])


def _health_row(cfg: MixinConfig, q: Queries) -> Iterator:
    target = q.sel.target
    by_instance = (cfg.instance_label,)
    instance_legend = legend_label(cfg.instance_label)
    yield dashboard.Row("Exporter and target health: can these numbers be trusted?")
    yield timeseries_panel(
        "Target and exporter up",
        "'vLLM readable' is 1 when the exporter's last poll of vLLM's /metrics succeeded; "
        "'exporter scraped' is Prometheus' own up for the exporter. Good: both 1. Exporter "
        "scraped but vLLM unreadable: check vLLM and the scrape errors panel.",
        NUMBER,
        [Query(sum_by(by_instance, selector(TARGET_UP, target), op="min"),
               f"{instance_legend} vLLM readable"),
         Query(sum_by(by_instance, selector("up", target), op="min"),
               f"{instance_legend} exporter scraped")],
        min_value=0, max_value=1,
        legend_calcs=("min", "lastNotNull"),
        width=8,
    ).links(runbook_links(cfg, rules.VLLM_UNREACHABLE, rules.EXPORTER_DOWN))
    yield timeseries_panel(
        "Scrape errors by reason",
        "Failed or partly rejected polls of vLLM per second, by reason (timeout, connect, "
        "http_status, too_large, parse, invalid_sample, series_limit). Good: nothing above 0. "
        "Persistent 'parse' or 'invalid_sample' after a vLLM upgrade means the metrics format "
        "changed.",
        "count:errors/s",
        [Query(sum_rate(SCRAPE_ERRORS, target, ("reason",)), "{{reason}}")],
        min_value=0,
        bars=False,
        width=8,
    )
    yield timeseries_panel(
        "Counter resets (vLLM restarts)",
        "Polls in which vLLM's counters went backwards or were re-created, i.e. vLLM restarted, "
        "per server per interval. Good: 0. Repeated resets are a crash loop; acceptance right "
        "after a restart covers little traffic.",
        NUMBER,
        [Query(sum_by(by_instance, f"increase({selector(COUNTER_RESETS, target)}[$__rate_interval])"),
               instance_legend)],
        min_value=0,
        bars=True,
        legend_calcs=("sum", "max"),
        width=8,
    ).links(runbook_links(cfg, rules.VLLM_RESTARTING))
    yield timeseries_panel(
        "Age of the last successful poll",
        "Seconds since the exporter last read vLLM successfully, per server. Good: about one "
        "poll interval. Growing means the values on this dashboard are stale.",
        SECONDS,
        [Query(f"time() - {sum_by(by_instance, selector(LAST_SUCCESS, target) + ' > 0', op='max')}",
               instance_legend)],
        min_value=0,
        width=8,
    )
    yield timeseries_panel(
        "Poll duration",
        "Duration of the exporter's last poll of vLLM (fetch + parse + derive), per server. Good: "
        "well below the poll interval; close to the timeout means timeouts are next.",
        SECONDS,
        [Query(sum_by(by_instance, selector(SCRAPE_DURATION, target), op="max"), instance_legend)],
        min_value=0,
        width=8,
    )
    yield table_panel(
        "Detected schema and spec decoding",
        "What the exporter detected on each server: metrics schema (v1 = current vLLM, v0 = "
        "legacy engine, none = no spec-decode metrics), vLLM version, and whether speculative "
        "decoding is on (1). Good: schema v1 and spec decoding 1 on every server that should "
        "speculate.",
        NUMBER,
        [Query(sum_by((*by_instance, "schema", "version"), selector(TARGET_INFO, target), op="max"),
               table=True),
         Query(sum_by(by_instance, selector(SPEC_DECODE_ENABLED, target), op="max"), table=True)],
        hidden_columns=("Time", "Value #A"),
        renames={"Value #B": "spec decoding on"},
        merge=True,
        width=8,
        no_value="No exporter",
    ).links(runbook_links(cfg, rules.METRICS_MISSING))
    yield _firing_alerts_table(cfg, q)


def _dashboard_link(cfg: MixinConfig, title: str, uid: str, tooltip: str) -> dashboard.DashboardLink:
    """A link to another dashboard of the bundle that carries the variables and the time range."""
    return (link(title, dashboard_url(cfg, uid), tooltip).target_blank(False).icon("dashboard")
            .include_vars(True).keep_time(True))


def _build_dashboard(cfg: MixinConfig, title: str, uid: str, description: str, panels: Iterator,
                     links: list[dashboard.DashboardLink]) -> dict:
    """What every dashboard of the bundle shares: tags, read-only, refresh, time, the variables,
    the annotations, the Runbooks link and the vLLM dashboards dropdown, and the layout."""
    q = Queries(cfg)
    builder = (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description + " Generated by vllm-spec-exporter; edit the generator, not this JSON.")
        .tags(list(cfg.dashboard_tags))
        .readonly()  # dashboards are code: changes go through the generator
        .refresh(cfg.dashboard_refresh)
        .time(cfg.dashboard_time_from, "now")
        .timezone("browser")
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
    )
    for item in links:
        builder = builder.link(item)
    builder = (
        builder
        .link(link("Runbooks", runbook_index_url(cfg), "What each spec-decode alert means and what to do")
              .icon("doc"))
        .link(
            dashboard.DashboardLink("vLLM dashboards")
            .type(dashboard_models.DashboardLinkType.DASHBOARDS)
            .tags(["vllm"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for variable in _variables(cfg):
        builder = builder.with_variable(variable)
    for annotation in _annotations(cfg, q):
        builder = builder.annotation(annotation)
    for item in panels:
        builder = builder.with_row(item) if isinstance(item, dashboard.Row) else builder.with_panel(item)
    model = json.loads(JSONEncoder(sort_keys=True).encode(builder.build()))
    _layout(model)
    _show_links_in_top_bar(model)
    return model


def build_main_dashboard(cfg: MixinConfig) -> dict:
    return _build_dashboard(
        cfg, MAIN_DASHBOARD_TITLE, main_dashboard_uid(cfg),
        "Is vLLM speculative decoding paying off? Acceptance, tokens per step, efficiency, "
        "per-position acceptance (is k right?), token flow, load, latency and exporter health.",
        _panels(cfg, Queries(cfg)),
        [_dashboard_link(cfg, "Fleet", fleet_dashboard_uid(cfg),
                         "Every server side by side, worst acceptance first")],
    )


def build_fleet_dashboard(cfg: MixinConfig) -> dict:
    return _build_dashboard(
        cfg, FLEET_DASHBOARD_TITLE, fleet_dashboard_uid(cfg),
        "Many vLLM servers at once: which servers speculate badly (worst acceptance first), how "
        "acceptance is spread across the fleet, fleet-wide acceptance per model, and which "
        "servers are not speculating at all.",
        _fleet_panels(cfg, Queries(cfg)),
        [_dashboard_link(cfg, "Overview", main_dashboard_uid(cfg),
                         "One server or model in depth: per-position acceptance, token flow, latency, health")],
    )


# The committed dashboards, in the order the README and the ConfigMap list them.
DASHBOARD_BUILDERS = {
    MAIN_DASHBOARD_PATH: build_main_dashboard,
    FLEET_DASHBOARD_PATH: build_fleet_dashboard,
}


def _show_links_in_top_bar(model: dict) -> None:
    """The SDK stamps every link and annotation with placement "inControlsMenu", which hides them
    in a dropdown; without it Grafana shows them next to the variables, where on-call looks."""
    for item in [*model.get("links", []), *(ln for p in model["panels"] for ln in p.get("links", [])),
                 *model.get("annotations", {}).get("list", [])]:
        item.pop("placement", None)


def _panels(cfg: MixinConfig, q: Queries) -> Iterator:
    yield from _top_row(cfg, q)
    yield from _acceptance_row(cfg, q)
    yield from _position_row(cfg, q)
    yield from _token_flow_row(q)
    yield from _context_row(cfg, q)
    yield from _health_row(cfg, q)


# --- Fleet dashboard ------------------------------------------------------------------------


def _acceptance_bands(cfg: MixinConfig) -> list[tuple[str, float | None, float | None, str]]:
    """(legend, low, high, colour) of the three acceptance bands, thresholds from the config."""
    warn, crit = cfg.acceptance_warning_threshold, cfg.acceptance_critical_threshold
    return [
        (f"at or above {warn:.0%}", warn, None, "green"),
        (f"{crit:.0%} to {warn:.0%}", crit, warn, "orange"),
        (f"below {crit:.0%}", None, crit, "red"),
    ]


def _fleet_top_row(cfg: MixinConfig, q: Queries) -> Iterator:
    warn = f"{cfg.acceptance_warning_threshold:.0%}"
    crit = f"{cfg.acceptance_critical_threshold:.0%}"
    bands = _acceptance_bands(cfg)
    yield _acceptance_stat(cfg, q, "Fleet acceptance rate",
                           "over every selected server (busy servers weigh more)", width=4)
    servers = stat_panel(
        "Servers by acceptance",
        f"How many servers (with draft traffic) are accepted at or above {warn}, between {crit} "
        f"and {warn} (alert {rules.ACCEPTANCE_LOW}) and below {crit} (alert "
        f"{rules.ACCEPTANCE_CRITICAL}), each server's acceptance summed over its models and "
        "engines before dividing. Good: every server in the first band, the other two 0. "
        "'No traffic' means no server proposed draft tokens in the window.",
        NUMBER,
        [Query(q.servers_in_band(low, high), legend, instant=True) for legend, low, high, _ in bands],
        no_value="No traffic",
        sparkline=False,
        decimals=0,
        color_mode=common_models.BigValueColorMode.BACKGROUND,
        text_mode=common_models.BigValueTextMode.VALUE_AND_NAME,
        width=7,
    ).links(runbook_links(cfg, rules.ACCEPTANCE_LOW, rules.ACCEPTANCE_CRITICAL))
    for legend, _, high, color in bands:
        band_thresholds = count_thresholds(color) if high is not None else thresholds(color)
        servers = servers.override_by_name(legend, [dashboard_models.DynamicConfigValue(
            id_val="thresholds", value=as_json(band_thresholds))])
    yield servers
    yield _speedup_stat(q, width=4)
    yield stat_panel(
        "Spec decoding off",
        "Servers whose vLLM exposes no spec-decode metrics: speculation is not configured, or a "
        "vLLM upgrade renamed the metrics (alert " + rules.METRICS_MISSING + "). Good is 0, "
        "unless some servers are meant to run without speculation. The table 'Servers not "
        "speculating' names them.",
        NUMBER,
        [Query(q.spec_decode_off_servers(), "spec off")],
        thresholds_config=count_thresholds("orange"),
        no_value="No exporter",
        sparkline=False,
        color_mode=common_models.BigValueColorMode.BACKGROUND,
        width=3,
    ).links(runbook_links(cfg, rules.METRICS_MISSING))
    yield _targets_down_stat(cfg, q, width=3)
    yield _firing_alerts_stat(cfg, q, width=3)


def _servers_row(cfg: MixinConfig, q: Queries) -> Iterator:
    instance = cfg.instance_label
    by_server = (instance, "model_name")
    overview = dashboard_url(cfg, main_dashboard_uid(cfg))
    yield dashboard.Row("Servers: which ones speculate badly?")
    yield merged_table_panel(
        "Servers, worst acceptance first",
        "One row per server and model, lowest acceptance on top: acceptance (accepted / drafted "
        "over the server's engines), tokens per step (1 + accepted / drafts) next to k, draft "
        "tokens proposed per second (how much the row weighs in the fleet figures), the "
        "exporter's estimated speed-up, and whether the exporter can read vLLM. Good: every "
        "acceptance green and every speed-up above 1×. Empty cells mean no draft tokens in the "
        "window; a row with only 'vLLM up' is a server that is down or not speculating. Click "
        "an instance to open it in the overview dashboard.",
        [
            Column("acceptance", f"sort({q.acceptance(by_server)})", RATIO, decimals=1,
                   thresholds_config=acceptance_thresholds(cfg)),
            Column("tokens per step", q.mean_acceptance_length(by_server), NUMBER, decimals=2),
            Column("k", q.gauge(NUM_SPECULATIVE_TOKENS, by_server, op="max"), NUMBER, decimals=0),
            Column("draft tokens/s", q.sum_rate(DRAFT_TOKENS, by_server), TOKENS_PER_SECOND, decimals=1),
            Column("speed-up (est.)", q.traffic_weighted(ESTIMATED_SPEEDUP, by_server), SPEEDUP,
                   decimals=2, thresholds_config=_speedup_thresholds()),
            Column("vLLM up", q.per_target(TARGET_UP), NUMBER, thresholds_config=thresholds("red", (1, "green")),
                   mappings=value_words({0: ("down", "red"), 1: ("up", "green")})),
        ],
        labels={instance: "instance", "model_name": "model"},
        sort_by="acceptance",
        label_links={instance: [{
            "title": "Open ${__value.raw} in the overview",
            "url": overview + "?${datasource:queryparam}&var-instance=${__value.raw}&${__url_time_range}",
        }]},
        width=24,
        height=9,
        no_value="No exporter",
    ).links([link("Overview", overview + "?${__all_variables}&${__url_time_range}",
                  "The overview dashboard with this selection and time range").target_blank(False),
             *runbook_links(cfg, rules.ACCEPTANCE_LOW, rules.ACCEPTANCE_CRITICAL)])
    yield bargauge_panel(
        "Acceptance by server",
        "Each server's acceptance now (accepted / drafted over its models and engines), lowest "
        "first, coloured by the alert thresholds. Good: every bar green. One short bar is that "
        "server's draft model, k or traffic; every bar short is the model or the prompt mix.",
        RATIO,
        [Query(f"sort({q.acceptance((instance,))})", legend_label(instance), instant=True)],
        thresholds_config=acceptance_thresholds(cfg),
        no_value="No traffic",
        width=8,
        height=8,
    )
    yield timeseries_panel(
        "Servers per acceptance band",
        "Servers with draft traffic per acceptance band over time, stacked: green at or above "
        "the warning threshold, orange between critical and warning, red below critical. Good: "
        "all green. Many servers turning orange at once points at a shared cause (model, "
        "prompt mix, a release); one server at a time at that server.",
        NUMBER,
        [Query(q.servers_in_band(low, high), legend) for legend, low, high, _ in _acceptance_bands(cfg)],
        stacked=True,
        bars=True,
        min_value=0,
        legend_calcs=("max", "lastNotNull"),
        colors={legend: color for legend, _, _, color in _acceptance_bands(cfg)},
        width=8,
        height=8,
    )
    yield _acceptance_by_instance(cfg, q, width=8)


def _models_row(cfg: MixinConfig, q: Queries) -> Iterator:
    by_model = ("model_name",)
    yield dashboard.Row("Models: fleet-wide acceptance per model")
    yield merged_table_panel(
        "Models across the fleet",
        "Per model, over every selected server serving it: servers speculating it, acceptance "
        "and tokens per step with numerator and denominator summed over the servers before "
        "dividing (never an average of per-server ratios, so a busy server weighs more than an "
        "idle one), draft tokens per second and estimated speed-up. Good: acceptance green.",
        [
            Column("servers", sum_by(by_model, q.gauge(NUM_SPECULATIVE_TOKENS, (cfg.instance_label, *by_model),
                                                      op="max"), op="count"), NUMBER, decimals=0),
            Column("acceptance", f"sort({q.acceptance(by_model)})", RATIO, decimals=1,
                   thresholds_config=acceptance_thresholds(cfg)),
            Column("tokens per step", q.mean_acceptance_length(by_model), NUMBER, decimals=2),
            Column("draft tokens/s", q.sum_rate(DRAFT_TOKENS, by_model), TOKENS_PER_SECOND, decimals=1),
            Column("speed-up (est.)", q.traffic_weighted(ESTIMATED_SPEEDUP, by_model), SPEEDUP,
                   decimals=2, thresholds_config=_speedup_thresholds()),
        ],
        labels={"model_name": "model"},
        sort_by="acceptance",
        width=10,
        height=8,
        no_value="No exporter",
    ).links(runbook_links(cfg, rules.ACCEPTANCE_LOW, rules.ACCEPTANCE_CRITICAL))
    yield _acceptance_by_model(cfg, q, width=14)


def _not_speculating_row(cfg: MixinConfig, q: Queries) -> Iterator:
    yield dashboard.Row("Servers not speculating, and alerts")
    yield table_panel(
        "Servers not speculating",
        f"Every server that is not speculating now, and why: '{PROBLEM_SPEC_OFF}' (vLLM "
        f"exposes no spec-decode metrics: not configured, or renamed by an upgrade), "
        f"'{PROBLEM_VLLM_UNREADABLE}' (the exporter cannot read vLLM's /metrics: vLLM down or "
        f"unreachable) or '{PROBLEM_EXPORTER_UNSCRAPED}' (Prometheus cannot scrape the exporter). "
        "Good: empty, or only servers meant to run without speculation.",
        NUMBER,
        [Query(q.not_speculating(), table=True)],
        hidden_columns=("Time", "Value"),
        width=12,
        height=6,
        no_value="None: every server speculates",
    ).links(runbook_links(cfg, rules.METRICS_MISSING, rules.VLLM_UNREACHABLE, rules.EXPORTER_DOWN))
    yield _firing_alerts_table(cfg, q, width=12)


def _fleet_panels(cfg: MixinConfig, q: Queries) -> Iterator:
    yield from _fleet_top_row(cfg, q)
    yield from _servers_row(cfg, q)
    yield from _models_row(cfg, q)
    yield from _not_speculating_row(cfg, q)


def _layout(model: dict) -> None:
    """Number panels 1..n in reading order and place them on Grafana's 24-column grid.

    Panels keep their width and height; each goes to the highest free spot (leftmost on ties)
    below the last row header, the way Grafana floats panels up. Unlike the SDK's flow layout this
    stacks a half-height panel under its half-height neighbour. Rows span the full width below
    everything placed so far.
    """
    skyline = [0] * GRID_COLUMNS  # first free y per column
    for panel_id, panel in enumerate(model["panels"], start=1):
        panel["id"] = panel_id
        pos = panel["gridPos"]
        if panel["type"] == "row":
            top = max(skyline)
            pos.update(x=0, y=top, w=GRID_COLUMNS, h=1)
            skyline = [top + 1] * GRID_COLUMNS
            continue
        width, height = pos["w"], pos["h"]
        y, x = min((max(skyline[x:x + width]), x) for x in range(GRID_COLUMNS - width + 1))
        pos.update(x=x, y=y)
        skyline[x:x + width] = [y + height] * width


# --- Reading a generated dashboard (tests, preview tool) -----------------------------------


def iter_panels(model: dict) -> Iterator[dict]:
    """Every panel that shows data (rows excluded), collapsed rows' panels included."""
    for panel in model["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def expand_variables(expr: str, rate_interval: str, values: dict[str, str] | None = None) -> str:
    """Substitute Grafana's variables the way Grafana would before sending a query: All is the
    variables' allValue `.+`. `values` overrides single variables (already regex-escaped)."""
    chosen = {"job": ".+", "instance": ".+", "model_name": ".+", "engine": ".+", **(values or {})}
    expr = expr.replace("$__rate_interval", rate_interval)
    # Longest names first so $model_name is not read as $model followed by _name.
    for name in sorted(chosen, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", chosen[name]).replace("$" + name, chosen[name])
    return expr


# --- Files ----------------------------------------------------------------------------------


def dashboard_json(model: dict) -> str:
    return json.dumps(model, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def configmap_yaml(files: dict[str, str]) -> str:
    """A ConfigMap the Grafana sidecar of kube-prometheus-stack picks up by its label."""
    lines = [
        "# Generated by `vllm-spec-exporter generate`; do not edit.",
        "# Grafana's dashboard sidecar (kube-prometheus-stack: grafana.sidecar.dashboards) loads",
        '# ConfigMaps labelled grafana_dashboard: "1". Apply it in a namespace the sidecar watches',
        "# (the release namespace, or any with grafana.sidecar.dashboards.searchNamespace=ALL).",
        "apiVersion: v1",
        "kind: ConfigMap",
        "metadata:",
        "  name: vllm-spec-exporter-dashboards",
        "  labels:",
        '    grafana_dashboard: "1"',
        "    app.kubernetes.io/name: vllm-spec-exporter",
        "    app.kubernetes.io/component: dashboards",
        "data:",
    ]
    for name, text in sorted(files.items()):
        lines.append(f"  {name}: |-")
        lines.extend(f"    {line}" if line else "" for line in text.rstrip("\n").split("\n"))
    return "\n".join(lines) + "\n"


def lint_config(models: Sequence[dict]) -> dict:
    """Exclusions for grafana/dashboard-linter, each with its reason, derived from the panels of
    every dashboard so they can never drift from the queries they excuse."""
    unscoped_reason = (
        "vLLM's own latency histograms come from vLLM's scrape job, whose job/instance values differ "
        "from the exporter's; they are narrowed by MixinConfig.vllm_selector plus the model and "
        "engine variables. ALERTS is shown for every server on purpose: a page elsewhere must stay "
        "visible."
    )
    unscoped_metrics = (*(vllm_name_pattern(name) for name in VLLM_METRICS_QUERIED), "ALERTS{")
    unscoped = [
        {"dashboard": model["title"], "panel": panel["title"], "targetIdx": str(index)}
        for model in models
        for panel in iter_panels(model)
        for index, target in enumerate(panel.get("targets", []))
        if any(name in target["expr"] for name in unscoped_metrics)
    ]
    custom_units = [
        {"dashboard": model["title"], "panel": panel["title"]}
        for model in models
        for panel in iter_panels(model)
        if ":" in panel["fieldConfig"]["defaults"].get("unit", "")
    ]
    return {"exclusions": {
        "target-job-rule": {"reason": unscoped_reason, "entries": unscoped},
        # A copy, so PyYAML writes the list out instead of an &anchor/*alias pair.
        "target-instance-rule": {"reason": unscoped_reason, "entries": [dict(e) for e in unscoped]},
        "panel-units-rule": {
            "reason": "Grafana's custom unit syntax (count:tok/s, as vLLM's own dashboards use) is "
                      "valid in Grafana but missing from the linter's fixed unit list.",
            "entries": custom_units,
        },
    }}


def lint_yaml(models: Sequence[dict]) -> str:
    return "# Generated by `vllm-spec-exporter generate`; do not edit.\n" + yaml.safe_dump(
        lint_config(models), sort_keys=True, width=100, allow_unicode=True)


def _markdown_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _panel_tables(model: dict, top_heading: str) -> list[str]:
    """One markdown table per row of the dashboard, the panels' own descriptions in it."""
    table_head = ["| panel | unit | what it shows, what good looks like |", "|---|---|---|"]
    out: list[str] = []
    for panel in model["panels"]:
        if panel["id"] == 1 and panel["type"] != "row":
            out += ["", f"### {top_heading}", "", *table_head]
        if panel["type"] == "row":
            out += ["", f"### {panel['title']}", "", *table_head]
        else:
            unit = panel["fieldConfig"]["defaults"].get("unit", "")
            out.append(f"| **{panel['title']}** | `{unit}` | {_markdown_cell(panel['description'])} |")
    return out


def readme_markdown(cfg: MixinConfig, models: dict[str, dict]) -> str:
    """dashboards/README.md. The panel tables are the panels' own descriptions, so the README
    cannot drift from the dashboards and every threshold in it comes from MixinConfig."""
    warn = f"{cfg.acceptance_warning_threshold:.0%}"
    crit = f"{cfg.acceptance_critical_threshold:.0%}"
    raise_k = f"{cfg.acceptance_raise_k_threshold:.0%}"
    model, fleet = models[MAIN_DASHBOARD_PATH], models[FLEET_DASHBOARD_PATH]
    main_file, fleet_file = file_name(MAIN_DASHBOARD_PATH), file_name(FLEET_DASHBOARD_PATH)
    tags = ", ".join(f"`{tag}`" for tag in model["tags"])
    out = [
        "<!-- Generated by `vllm-spec-exporter generate` from mixin/dashboards.py; do not edit. -->",
        "# Grafana dashboards: is speculative decoding paying off?",
        "",
        f"Two dashboards, linked both ways (the **Fleet** and **Overview** links in the top bar). "
        f"**{model['title']}** is for the engineer who opens it from a page: the top row says in "
        "five seconds whether speculative decoding is paying off and whether anything is firing; "
        "the rows below say since when, where (model, server, engine, draft position) and why "
        f"(load, latency, exporter health). **{fleet['title']}** is for the engineer who runs many "
        "vLLM servers: every server side by side, worst acceptance first, how acceptance is spread "
        "across the fleet, fleet-wide acceptance per model, and which servers are not speculating. "
        "Every threshold comes from the same `MixinConfig` as the alert rules "
        f"(now: warning {warn}, critical {crit}, raise k above {raise_k}).",
        "",
        f"![Preview of the dashboard]({PREVIEW_FILE})",
        "",
        "*Preview drawn by `tools/render_dashboard_preview.py` with matplotlib (no Grafana server runs "
        "here) from real query results: simulated traffic from the fake vLLM (acceptance 80 %, then "
        "30 %, then 65 %) → the real exporter → a real Prometheus with the generated alert rules → "
        "each panel's own PromQL.*",
        "",
        "## Files",
        "",
        "| file | what |",
        "|---|---|",
        f"| `{main_file}` | the overview dashboard (uid `{model['uid']}`, tags {tags}, read-only) |",
        f"| `{fleet_file}` | the fleet dashboard (uid `{fleet['uid']}`, same tags, read-only) |",
        "| `kubernetes/grafana-dashboards-configmap.yaml` | both JSON files in a ConfigMap labelled "
        "`grafana_dashboard: \"1\"` for the Grafana sidecar of kube-prometheus-stack |",
        "| `.lint` | exclusions, with reasons, for "
        "[grafana/dashboard-linter](https://github.com/grafana/dashboard-linter) |",
        f"| `{PREVIEW_FILE}` | the preview above |",
        "",
        "## Install",
        "",
        "- **Grafana UI**: Dashboards → New → Import → upload `" + main_file + "`, pick your Prometheus; "
        "the same for `" + fleet_file + "`.",
        "- **kube-prometheus-stack**: `kubectl apply -n <namespace Grafana's sidecar watches> -f "
        "dashboards/kubernetes/grafana-dashboards-configmap.yaml` (the release namespace, or any "
        "namespace with `grafana.sidecar.dashboards.searchNamespace=ALL`).",
        "- **File provisioning**: point a dashboard provider at this folder.",
        "- **Your own thresholds, selectors or uid**: `vllm-spec-exporter generate --set "
        "acceptance_warning_threshold=0.6 --set exporter_selector='namespace=\"llm\"'` (or "
        "`--config my.yaml`) regenerates alerts, runbooks and dashboards together; CI runs "
        "`vllm-spec-exporter generate --check` so committed files never drift from the generator.",
        "",
        "Built with grafana-foundation-sdk 0.0.21 (schemaVersion 42, Grafana 12 and later). "
        "Works with Prometheus 2.x and 3.x. Set the data source's *Scrape interval* to your real "
        "scrape interval so `$__rate_interval` covers at least four scrapes, and scrape the exporter "
        "at least as often as it polls vLLM.",
        "",
        "## Reading it at 3 a.m.",
        "",
        f"1. **Acceptance rate**: green at or above {warn}, orange below, red below {crit}. "
        "\"No traffic\" means no draft tokens were proposed in the window, not 0 %. Next to it, "
        "**Speed-up (est.)**: the exporter's estimate of decoding speed with speculation relative "
        "to without; red below 1×.",
        "2. **Targets down** and **Firing alerts**: if a target is down the rest of the dashboard "
        "is stale or empty for that reason; \"No exporter\" means Prometheus scrapes no exporter "
        "matching the selection.",
        "3. **Acceptance rate by model / instance / engine**: since when, and is it one server or all?",
        f"4. **k advice**: from the last draft position's acceptance: raise k above {raise_k}, "
        f"lower k below {warn}.",
        "5. **Load and latency**: a batch filling up or a KV cache near full explains many drops; "
        "time per output token shows what the drop costs users.",
        "",
        "Each panel's description (the ⓘ in Grafana) says what good looks like; they are repeated "
        "below. Panels link to the runbook of the alert they explain, and the dashboard links to "
        "the runbook page; alerts carry a `dashboard_url` back here.",
        "",
        "## Reading the fleet dashboard",
        "",
        f"1. **Fleet acceptance rate** and **Servers by acceptance**: the fleet's acceptance "
        "(numerator and denominator summed over every server, never an average of ratios) and how "
        f"many servers are at or above {warn}, between {crit} and {warn}, and below {crit}.",
        "2. **Spec decoding off**, **Targets down**, **Firing alerts**: servers that are not "
        "speculating, or not readable, and pages anywhere.",
        "3. **Servers, worst acceptance first**: the table to start from; click an instance to open "
        "it in the overview with the same time range.",
        "4. **Models across the fleet**: one model bad everywhere is the model, its drafter or "
        "the prompt mix; one server bad is that server.",
        "",
        "## Variables",
        "",
        "| variable | from | notes |",
        "|---|---|---|",
        "| `datasource` | Prometheus data sources | label \"Data source\" |",
    ]
    for variable in model["templating"]["list"]:
        if variable["type"] == "query":
            out.append(f"| `{variable['name']}` | `{_markdown_cell(variable['query'])}` | multi-select, All = "
                       "`.+`, refreshed on time-range change |")
    out += [
        "",
        "Both dashboards have these variables. "
        "Every exporter query filters on all four. vLLM's own latency histograms come from "
        f"vLLM's scrape job (`{cfg.vllm_selector}`), whose job and instance differ from the "
        "exporter's: they follow the model and engine variables only. Firing alerts are shown for "
        "every server on purpose. Both exceptions are recorded in `.lint`.",
        "",
        f"## Overview panels ({main_file})",
        *_panel_tables(model, "Top row (always visible)"),
        "",
        f"## Fleet panels ({fleet_file})",
        *_panel_tables(fleet, "Top row (always visible)"),
    ]
    out += [
        "",
        "## Query conventions",
        "",
        "- Rates read the exporter's normalised counters (`vllm_spec_decode_*_total`, colon-free, the "
        "same for every vLLM version) with `rate(...[$__rate_interval])`; no counter is read "
        "outside `rate()`/`increase()`.",
        "- Ratios are sum-then-divide, `sum(rate(num)) / (sum(rate(den)) > 0)`: servers weigh by "
        "their traffic, and an idle denominator gives no value (\"No traffic\") instead of 0 or NaN.",
        "- vLLM's own histograms are matched as `{__name__=~\"vllm[:_]...\"}`: Prometheus 2.x "
        "negotiates OpenMetrics and recent prometheus_client then escapes `vllm:` to `vllm_` in "
        "stored names, Prometheus 3 keeps the colon. The dashboard works with both.",
        "- Every panel reads `${datasource}` and has a unit and a description.",
        "",
        "## How it is tested",
        "",
        "- `tests/test_dashboards.py` re-implements grafana/dashboard-linter's rules, on every "
        "dashboard file (datasource "
        "variable, panel datasources, titles, descriptions, units, `$__rate_interval`, counters only "
        "in `rate()`, job/instance filters, variables, read-only, unique ids) with PromQL parsed by "
        "`promql-parser`, and adds: every metric queried is served by the exporter, defined by a "
        "recording rule or present in a real vLLM 0.32 capture; every division is guarded and "
        "sum-then-divide; thresholds follow `MixinConfig`; committed files equal a fresh render.",
        "- `tests/test_dashboards_prometheus.py` starts a real Prometheus scraping the real exporter "
        "(and the fake vLLM directly, in both name spellings), substitutes the variables as Grafana "
        "does, runs **every** panel query and checks the values against the scripted traffic "
        "(acceptance, tokens per step, efficiency, per-position rates, shares), that idle traffic "
        "gives empty ratios (\"No traffic\"), and that a lost vLLM shows up in the health panels. "
        "For the fleet dashboard it runs five exporters (three fake vLLMs at different acceptance "
        "and traffic, one without speculation, one unreachable) and checks every query exactly: "
        "the table order, the per-server values, the band counts and the per-model sums "
        "(sum-then-divide, which differs from the mean of the servers' ratios).",
        "",
        "## Compared with vLLM's own \"Speculative Decoding\" dashboard",
        "",
        "| | vLLM upstream | this dashboard |",
        "|---|---|---|",
        f"| thresholds | none (neutral tiles) | acceptance coloured at {crit}/{warn}, drawn on the "
        "time series, shared with the alert rules |",
        "| alerts | none | firing spec-decode alerts on the top row and in a table, runbook links |",
        "| is it paying off? | acceptance numbers to interpret | estimated speed-up (red below 1×) "
        "on the top row |",
        "| is k right? | per-position rates | per-position rates with raise/keep/lower-k advice, "
        "positions-that-pay vs k, and the exporter's recommended k |",
        "| efficiency | no | tokens per step vs k+1, system efficiency, draft length vs k |",
        "| why did it change | inter-token latency | batch, queue, KV cache, ITL and time per output "
        "token next to tokens per step |",
        "| can I trust it | no | exporter/target up, scrape errors by reason, vLLM restarts, poll age, "
        "detected schema |",
        "| vLLM renames | breaks (\"No data\") | reads the exporter's stable names; histograms in both "
        "spellings |",
        "",
    ]
    return "\n".join(out)


def file_name(path: str) -> str:
    return path.rsplit("/", 1)[1]


def render(cfg: MixinConfig) -> dict[str, str]:
    models = {path: build(cfg) for path, build in DASHBOARD_BUILDERS.items()}
    texts = {path: dashboard_json(model) for path, model in models.items()}
    return {
        **texts,
        CONFIGMAP_PATH: configmap_yaml({file_name(path): text for path, text in texts.items()}),
        LINT_PATH: lint_yaml(list(models.values())),
        README_PATH: readme_markdown(cfg, models),
    }
