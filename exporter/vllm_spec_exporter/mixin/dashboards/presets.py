"""Panel presets: the option sets several panels share, so each panel states only what is its own.

`ratio_stat` and `traffic_stat` say "No traffic" (never 0 % or NaN) when there were no drafts;
`count_stat` is a count of things in trouble, green at 0; `named_stat` shows one instant value
per model by name; `ratio_series` is a 0..1 time series.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.models import common as common_models

from .panels import NUMBER, RATIO, Query, count_thresholds, no_traffic_mapping, stat_panel, timeseries_panel

__all__ = [
    "BACKGROUND",
    "NO_EXPORTER",
    "NO_TRAFFIC",
    "VALUE_AND_NAME",
    "count_stat",
    "named_stat",
    "ratio_series",
    "ratio_stat",
    "traffic_stat",
]

NO_TRAFFIC = "No traffic"  # no draft tokens in the window: not 0 %
NO_EXPORTER = "No exporter"  # Prometheus scrapes no exporter matching the selection
NO_TARGET = "No target"  # source=vllm: Prometheus scrapes no vLLM server matching the selection
BACKGROUND = common_models.BigValueColorMode.BACKGROUND
VALUE_AND_NAME = common_models.BigValueTextMode.VALUE_AND_NAME


def traffic_stat(title: str, description: str, unit: str, queries: Sequence[Query], **options: Any) -> stat.Panel:
    """A figure that exists only with draft traffic: "No traffic" without it."""
    return stat_panel(title, description, unit, queries, mappings=no_traffic_mapping(), no_value=NO_TRAFFIC,
                      **options)


def ratio_stat(title: str, description: str, queries: Sequence[Query], **options: Any) -> stat.Panel:
    """A 0..1 figure resting on draft traffic, as a percentage with one decimal."""
    return traffic_stat(title, description, RATIO, queries, decimals=1, **options)


def count_stat(title: str, description: str, queries: Sequence[Query], *, color: str = "red",
               **options: Any) -> stat.Panel:
    """How many things are in trouble now: green at 0, `color` from 1, the whole tile coloured."""
    return stat_panel(title, description, NUMBER, queries, thresholds_config=count_thresholds(color),
                      sparkline=False, color_mode=BACKGROUND, **options)


def named_stat(title: str, description: str, queries: Sequence[Query], **options: Any) -> stat.Panel:
    """Instant values shown with their names (one per model or band), no sparkline."""
    return stat_panel(title, description, NUMBER, queries, no_value=NO_TRAFFIC, sparkline=False,
                      text_mode=VALUE_AND_NAME, **options)


def ratio_series(title: str, description: str, queries: Sequence[Query], **options: Any) -> timeseries.Panel:
    """A 0..1 time series as a percentage, the axis from 0 to 100 %."""
    return timeseries_panel(title, description, RATIO, queries, max_value=1, **options)
