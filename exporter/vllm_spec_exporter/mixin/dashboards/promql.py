"""PromQL for the dashboards: selectors, guarded division and every query, as plain strings.

Nothing here knows about panels or layout (kubernetes-mixin keeps its queries apart the same way):
each query is a function of the config's selectors. The conventions hold by construction: queries
read records (the source layer's per-(server, model, engine) rates, summed per panel; at All the
fleet records, and at engine All the per-server records, where a panel's grouping allows; and the
acceptance evidence), but per position with servers selected, where no record exists and the
counters are read over the records' rate_window (Queries.counter_rate), every selector carries the
dashboard variables, ratios are the QUANTITIES of rules/quantities.py (sum-then-divide with a
`(den > 0)` guard: no NaN/Inf when idle), and every raw series comes from sources.py (the
sidecar's health gauges as sources.SERVED). With source=vllm there is no sidecar:
`Queries.direct` tells the dashboards which panels to leave out, and the few that read the
sidecar's gauges read vLLM's own or compute the same in PromQL.
"""

from __future__ import annotations

from .queries.acceptance import AcceptanceQueries
from .queries.health import HealthQueries
from .queries.load import LoadQueries
from .queries.measured import MeasuredQueries
from .queries.positions import PositionQueries
from .queries.selectors import (
    ACCEPTED,
    ACCEPTED_BY_POSITION,
    ALERT_NAME_REGEX,
    DRAFT_TOKENS,
    DRAFTS,
    GENERATED,
    LATENCY_QUANTILES,
    PROBLEM_EXPORTER_UNSCRAPED,
    PROBLEM_LABEL,
    PROBLEM_SPEC_OFF,
    PROBLEM_VLLM_UNREADABLE,
    PROMETHEUS_BUILTIN_METRICS,
    RANGE,
    RATE_INTERVAL,
    RAY_PREFIX,
    SPEC_DECODE_ENABLED,
    TARGET_UP,
    VLLM_INTER_TOKEN_LATENCY,
    VLLM_METRICS_QUERIED,
    VLLM_PREFIX_PATTERN,
    VLLM_TIME_PER_OUTPUT_TOKEN,
    Selectors,
    all_or_selected,
    guarded_ratio,
    join_matchers,
    legend_label,
    only_when_selected,
    rate,
    sum_by,
    sum_rate,
    vllm_name_pattern,
)

__all__ = [
    "ACCEPTED", "ACCEPTED_BY_POSITION", "ALERT_NAME_REGEX", "DRAFTS", "DRAFT_TOKENS", "GENERATED",
    "LATENCY_QUANTILES", "PROBLEM_EXPORTER_UNSCRAPED", "PROBLEM_LABEL", "PROBLEM_SPEC_OFF",
    "PROBLEM_VLLM_UNREADABLE", "PROMETHEUS_BUILTIN_METRICS", "RANGE", "RATE_INTERVAL", "RAY_PREFIX",
    "SPEC_DECODE_ENABLED", "TARGET_UP", "VLLM_INTER_TOKEN_LATENCY", "VLLM_METRICS_QUERIED",
    "VLLM_PREFIX_PATTERN", "VLLM_TIME_PER_OUTPUT_TOKEN", "Queries", "Selectors", "all_or_selected",
    "guarded_ratio", "join_matchers", "legend_label", "only_when_selected", "rate", "sum_by", "sum_rate",
    "vllm_name_pattern",
]


class Queries(AcceptanceQueries, PositionQueries, LoadQueries, MeasuredQueries, HealthQueries):
    """The PromQL of the dashboards, parametrised by the config's selectors: every subject's
    queries (queries/*.py) on one object, built once per dashboard render."""
