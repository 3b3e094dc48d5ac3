"""Panel builders on grafana-foundation-sdk: one function per panel type, plus units and colours.

A builder takes what the panel shows (title, description, unit, queries) and its options; where
it sits and how big it is belongs to the layout (layout.py), and the option sets several panels
share belong to presets.py. Every panel reads from the `${datasource}` variable.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from grafana_foundation_sdk.builders import bargauge, common, dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as dashboard_models
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from ..config import MixinConfig

DATASOURCE_VARIABLE = "datasource"
DATASOURCE = common_models.DataSourceRef(type_val="prometheus", uid="${" + DATASOURCE_VARIABLE + "}")

# Grafana's custom-unit syntax: "count:" scales with K/M/B and appends the text (as vLLM's own
# dashboards do). Tokens per second is the natural unit of every throughput panel.
TOKENS_PER_SECOND = "count:tok/s"
RATIO = "percentunit"  # 0..1 rendered as a percentage
SECONDS = "s"
NUMBER = "none"
SPEEDUP = "suffix:×"  # a factor relative to decoding without speculation

# Colours by role, so drafted/accepted/rejected mean the same thing on every panel.
COLOR_DRAFTED = "blue"
COLOR_ACCEPTED = "green"
COLOR_REJECTED = "orange"
COLOR_TARGET = "purple"
COLOR_NEUTRAL = "blue"


@dataclass(frozen=True)
class Query:
    """One panel target: PromQL, legend, and whether Grafana asks for an instant value."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


# --- Panels ---------------------------------------------------------------------------------


def prometheus_target(query: Query, ref_id: str) -> prometheus.Dataquery:
    target = prometheus.Dataquery().expr(query.expr).ref_id(ref_id).datasource(DATASOURCE)
    if query.legend:
        target = target.legend_format(query.legend)
    if query.table:
        target = target.format(PromQueryFormat.TABLE).instant()
    elif query.instant:
        target = target.instant()
    else:
        target = target.range()
    return target


def with_targets(panel, queries: Sequence[Query]):
    for index, query in enumerate(queries):
        panel = panel.with_target(prometheus_target(query, ref_id=chr(ord("A") + index)))
    return panel


def thresholds(base_color: str, *steps: tuple[float, str]) -> dashboard.ThresholdsConfig:
    """Absolute thresholds: `base_color` below the first step, then each (value, colour)."""
    return (
        dashboard.ThresholdsConfig()
        .mode(dashboard_models.ThresholdsMode.ABSOLUTE)
        .steps([dashboard_models.Threshold(color=base_color)]
               + [dashboard_models.Threshold(value=v, color=c) for v, c in steps])
    )


def as_json(built: object) -> object:
    """A builder's (or model's) JSON form, for field overrides, which take plain values."""
    if hasattr(built, "build"):
        built = built.build()
    return json.loads(JSONEncoder(sort_keys=True).encode(built))


def count_thresholds(color: str) -> dashboard.ThresholdsConfig:
    """For counts of servers in trouble: green at 0, `color` from 1."""
    return thresholds("green", (1, color))


def acceptance_thresholds(cfg: MixinConfig) -> dashboard.ThresholdsConfig:
    """Red below the critical threshold, orange below the warning threshold, green above."""
    return thresholds(
        "red",
        (cfg.acceptance_critical_threshold, "orange"),
        (cfg.acceptance_warning_threshold, "green"),
    )


def position_thresholds(cfg: MixinConfig) -> dashboard.ThresholdsConfig:
    """Per draft position: orange where the position stops paying off (lower k), green where it
    pays, blue where even this position is accepted so often that a longer draft would pay."""
    return thresholds(
        "orange",
        (cfg.acceptance_warning_threshold, "green"),
        (cfg.acceptance_raise_k_threshold, "blue"),
    )


def no_traffic_mapping(text: str = "No traffic") -> list[dashboard_models.ValueMapping]:
    """Show words, not 0 % or NaN, when a ratio has no denominator (the query returns NaN/null)."""
    return [
        dashboard_models.SpecialValueMap(
            options=dashboard_models.DashboardSpecialValueMapOptions(
                match=dashboard_models.SpecialValueMatch.NULL_AND_NAN,
                result=dashboard_models.ValueMappingResult(text=text, color="text"),
            )
        )
    ]


def link(title: str, url: str, tooltip: str = "") -> dashboard.DashboardLink:
    built = (
        dashboard.DashboardLink(title)
        .type(dashboard_models.DashboardLinkType.LINK)
        .url(url)
        .target_blank(True)
    )
    return built.tooltip(tooltip) if tooltip else built


def stat_panel(title: str, description: str, unit: str, queries: Sequence[Query], *,
               thresholds_config: dashboard.ThresholdsConfig | None = None,
               mappings: list[dashboard_models.ValueMapping] | None = None,
               no_value: str = "", decimals: int | None = None, sparkline: bool = False,
               color_mode: common_models.BigValueColorMode = common_models.BigValueColorMode.VALUE,
               text_mode: common_models.BigValueTextMode = common_models.BigValueTextMode.AUTO) -> stat.Panel:
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .color_mode(color_mode)
        .text_mode(text_mode)
        .graph_mode(common_models.BigValueGraphMode.AREA if sparkline else common_models.BigValueGraphMode.NONE)
        .thresholds(thresholds_config or thresholds(COLOR_NEUTRAL))
    )
    if mappings:
        panel = panel.mappings(mappings)
    if no_value:
        panel = panel.no_value(no_value)
    if decimals is not None:
        panel = panel.decimals(decimals)
    # A stat shows the value now, so it asks for an instant value. A range query reduced with
    # lastNotNull shows the last value before a gap: "No traffic" could never appear while idle and
    # the value would be up to a step old (seen in Grafana's own components). A sparkline
    # needs a range query, hence sparkline=True is only for values that never go missing.
    if not sparkline:
        queries = [query if query.table else replace(query, instant=True) for query in queries]
    return with_targets(panel, queries)


def timeseries_panel(title: str, description: str, unit: str, queries: Sequence[Query], *,
                     thresholds_config: dashboard.ThresholdsConfig | None = None,
                     threshold_lines: bool = False, min_value: float = 0,
                     max_value: float | None = None, stacked: bool = False, bars: bool = False,
                     legend_calcs: Sequence[str] = ("mean", "lastNotNull"),
                     colors: dict[str, str] | None = None,
                     no_value: str = "") -> timeseries.Panel:
    legend = (
        common.VizLegendOptions()
        .display_mode(common_models.LegendDisplayMode.TABLE)
        .placement(common_models.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(list(legend_calcs))
    )
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .legend(legend)
        .tooltip(common.VizTooltipOptions().mode(common_models.TooltipDisplayMode.MULTI)
                 .sort(common_models.SortOrder.DESCENDING))
        .line_width(2)
        .fill_opacity(35 if stacked else 10)
        .show_points(common_models.VisibilityMode.NEVER)
        .span_nulls(False)  # gaps mean "no traffic / no data", never interpolate across them
    )
    if thresholds_config is not None:
        panel = panel.thresholds(thresholds_config)
    if threshold_lines:
        # Dashed lines plus faint bands: a line sitting in the red band reads at a glance.
        panel = panel.thresholds_style(
            common.GraphThresholdsStyleConfig().mode(common_models.GraphThresholdsStyleMode.DASHED_AND_AREA)
        )
    panel = panel.min(min_value)  # rates, ratios and counts: the axis starts at 0 unless told
    if max_value is not None:
        panel = panel.max(max_value)
    if stacked:
        panel = panel.stacking(common.StackingConfig().mode(common_models.StackingMode.NORMAL))
    if bars:
        panel = panel.draw_style(common_models.GraphDrawStyle.BARS)
    if no_value:
        panel = panel.no_value(no_value)
    for series_name, color in (colors or {}).items():
        panel = panel.override_by_name(series_name, [fixed_color(color)])
    return with_targets(panel, queries)


def fixed_color(color: str) -> dashboard_models.DynamicConfigValue:
    return dashboard_models.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": color})


def bargauge_panel(title: str, description: str, unit: str, queries: Sequence[Query], *,
                   thresholds_config: dashboard.ThresholdsConfig,
                   no_value: str = "", min_value: float = 0, max_value: float = 1) -> bargauge.Panel:
    panel = (
        bargauge.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .min(min_value)
        .max(max_value)
        .thresholds(thresholds_config)
        .orientation(common_models.VizOrientation.HORIZONTAL)
        .display_mode(common_models.BarGaugeDisplayMode.GRADIENT)
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    if no_value:
        panel = panel.no_value(no_value)
    return with_targets(panel, queries)


def table_panel(title: str, description: str, unit: str, queries: Sequence[Query], *,
                hidden_columns: Sequence[str] = ("Time",), renames: dict[str, str] | None = None,
                merge: bool = False,
                no_value: str = "") -> table.Panel:
    """A table of instant queries; `merge` joins several queries' rows on their common labels."""
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
    )
    if merge:
        panel = panel.with_transformation(dashboard_models.DataTransformerConfig(id_val="merge", options={}))
    panel = (
        panel.with_transformation(dashboard_models.DataTransformerConfig(
            id_val="organize",
            options={
                "excludeByName": dict.fromkeys(hidden_columns, True),
                "renameByName": dict(renames or {}),
            },
        ))
    )
    if no_value:
        panel = panel.no_value(no_value)
    return with_targets(panel, queries)


@dataclass(frozen=True)
class Column:
    """One value column of a merged table: an instant query and how its cells are shown.

    `thresholds_config` colours the cell background; `mappings` turn values into words; `links`
    are data links on the column (Grafana interpolates `${__value.raw}` and the variables).
    """

    header: str
    expr: str
    unit: str = NUMBER
    decimals: int | None = None
    thresholds_config: dashboard.ThresholdsConfig | None = None
    mappings: list[dict] = field(default_factory=list)


def merged_table_panel(title: str, description: str, columns: Sequence[Column], *,
                       labels: dict[str, str], sort_by: str = "", descending: bool = False,
                       label_links: dict[str, list[dict]] | None = None,
                       no_value: str = "") -> table.Panel:
    """A table with one row per label set and one column per query.

    Every query is an instant table query; Grafana's merge transformation joins their rows on the
    labels all of them carry (a column aggregated by fewer labels, e.g. per instance only, is
    copied onto every row of that instance). `labels` maps the label columns (the labels the
    queries aggregate by, so no other label column appears) to their headers; the time is hidden.
    Column `i` is Grafana's "Value #<refId>", renamed to its header. `sort_by` names the header
    Grafana sorts on (ascending unless `descending`).
    """
    queries = [Query(column.expr, table=True) for column in columns]
    value_names = {f"Value #{chr(ord('A') + index)}": column.header for index, column in enumerate(columns)}
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(NUMBER)
        # Columns may narrow below Grafana's 150 px default so every column fits the panel.
        .min_width(60)
        .with_transformation(dashboard_models.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(dashboard_models.DataTransformerConfig(
            id_val="organize",
            options={
                # Queries aggregate `by` exactly the listed labels, so no other column appears.
                "excludeByName": {"Time": True},
                "indexByName": {name: index for index, name in enumerate([*labels, *value_names])},
                "renameByName": {**labels, **value_names},
            },
        ))
    )
    if sort_by:
        panel = panel.sort_by([common.TableSortByFieldState().display_name(sort_by).desc(descending)])
    for column in columns:
        properties = [dashboard_models.DynamicConfigValue(id_val="unit", value=column.unit)]
        if column.decimals is not None:
            properties.append(dashboard_models.DynamicConfigValue(id_val="decimals", value=column.decimals))
        if column.thresholds_config is not None:
            properties += [
                dashboard_models.DynamicConfigValue(id_val="thresholds", value=as_json(column.thresholds_config)),
                dashboard_models.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"}),
            ]
        if column.mappings:
            properties.append(dashboard_models.DynamicConfigValue(id_val="mappings", value=column.mappings))
        panel = panel.override_by_name(column.header, properties)
    for label, links in (label_links or {}).items():
        panel = panel.override_by_name(
            labels[label], [dashboard_models.DynamicConfigValue(id_val="links", value=links)])
    if no_value:
        panel = panel.no_value(no_value)
    return with_targets(panel, queries)


def value_words(words: dict[float, tuple[str, str]]) -> list[dict]:
    """A value mapping as a field override takes it: {value: (text, colour)}."""
    return [{"type": "value", "options": {
        f"{value:g}": {"text": text, "color": color, "index": index}
        for index, (value, (text, color)) in enumerate(words.items())
    }}]
