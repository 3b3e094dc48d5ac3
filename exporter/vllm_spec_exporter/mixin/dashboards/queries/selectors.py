"""The dashboards' PromQL vocabulary: the template variables' selectors (Selectors), the names the
queries read (vLLM's own histograms in every spelling, the source counters, the alert names, the
`problem` label of the fleet's table) and the combinators every query is written with (`sum_by`,
`all_or_selected`, `guarded_ratio`, `rate`). Functions of strings only; no query of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ....engines import VLLM_PREFIXES
from ...config import MixinConfig
from ...rules import fleet_counts, sources
from ...rules.sources import SERVED, series

RATE_INTERVAL = "$__rate_interval"
# The dashboard's time range (Grafana sets it for variable queries too).
RANGE = "$__range"
# Alerts are matched by name prefix: every spec-decode alert the mixin generates starts with it.
ALERT_NAME_REGEX = "SpecDecode.*"

# vLLM's own metrics the latency panels query directly, on vLLM's scrape job (the measured panels
# read the measured records instead, which read the sidecar's copies).
# The lint test checks each name against a real vLLM /metrics capture. Queries match both
# spellings (see vllm_name_pattern): Prometheus 2.x negotiates OpenMetrics, and prometheus_client
# >= 0.2x then escapes the colon, so the TSDB holds `vllm_inter_token_latency_seconds_bucket`;
# Prometheus 3 (UTF-8 names) or a text-format scrape keeps `vllm:inter_token_latency_seconds_bucket`.
VLLM_INTER_TOKEN_LATENCY = VLLM_PREFIXES[0] + sources.ITL.vllm[0]  # today's name
VLLM_TIME_PER_OUTPUT_TOKEN = VLLM_PREFIXES[0] + sources.TPOT.vllm[0]
VLLM_METRICS_QUERIED = tuple(
    f"{histogram}_{suffix}"
    for histogram in (VLLM_INTER_TOKEN_LATENCY, VLLM_TIME_PER_OUTPUT_TOKEN)
    for suffix in ("bucket", "sum", "count")
)
# Series Prometheus itself creates (not served by any exporter).
PROMETHEUS_BUILTIN_METRICS = ("up", "ALERTS")
LATENCY_QUANTILES = (0.5, 0.9, 0.99)

# Why a server of the fleet is not speculating (the fleet dashboard's table, label `problem`).
PROBLEM_LABEL = "problem"
PROBLEM_SPEC_OFF = "spec decoding off"
PROBLEM_VLLM_UNREADABLE = "vLLM unreadable"
PROBLEM_EXPORTER_UNSCRAPED = "exporter not scraped"

# The counters of the source layer, under the short names the queries read best with.
DRAFTS = sources.DRAFTS
DRAFT_TOKENS = sources.DRAFT_TOKENS
ACCEPTED = sources.ACCEPTED
ACCEPTED_BY_POSITION = sources.ACCEPTED_BY_POSITION
GENERATED = sources.GENERATED
TARGET_UP = SERVED.TARGET_UP
SPEC_DECODE_ENABLED = SERVED.SPEC_DECODE_ENABLED


# Ray Serve's stat logger prefixes vLLM's names with `ray_` (`ray_vllm:...`, escaped `ray_vllm_...`);
# the exporter reads all four spellings (parse.py), so do the panels that read vLLM directly.
RAY_PREFIX = "(ray_)?"
# engines.VLLM_PREFIXES, factored as Prometheus' regex engine reads them best.
VLLM_PREFIX_PATTERN = RAY_PREFIX + "vllm[:_]"
if {p for p in VLLM_PREFIXES if not re.fullmatch(VLLM_PREFIX_PATTERN, p)} or len(VLLM_PREFIXES) != 4:
    raise RuntimeError("VLLM_PREFIX_PATTERN no longer matches exactly engines.VLLM_PREFIXES")


def vllm_name_pattern(name: str) -> str:
    """Regex for a `vllm:` name matching every spelling the exporter accepts: `vllm:`, its
    OpenMetrics-escaped `vllm_`, and Ray Serve's `ray_vllm:` / `ray_vllm_`."""
    if not name.startswith("vllm:"):
        raise ValueError(f"{name} is not a vLLM metric name")
    return VLLM_PREFIX_PATTERN + name.removeprefix("vllm:")


def legend_label(label: str) -> str:
    """Grafana legend template for one label: `{{instance}}`."""
    return "{{" + label + "}}"


def join_matchers(*parts: str) -> str:
    return ", ".join(p.strip() for p in parts if p and p.strip())


@dataclass(frozen=True)
class Selectors:
    """Label matchers (without braces) for the scrape jobs the dashboards read.

    `series` picks the source records (and the exporter's per-(model, engine) gauges; on the
    per-server and fleet records, which lack the engine or instance label, it matches only at
    that variable's All); `target`
    the source job's per-target series (health gauges and `up` carry no model/engine labels, and
    `.+` would not match a missing label); `servers` is `series` that matches nothing at "All"
    (`job!~"$instance"`: All is `.*`, and no job is named like a server while a selection is a list
    of servers; MixinConfig.validate rejects instance_label=job), the per-server side of
    Queries.fleet_or_servers; `vllm` picks vLLM's own /metrics for the latency
    histograms the latency panels read there. With source=exporter, vLLM's scrape job has other
    job/instance values than the sidecar's, so it is narrowed by `vllm_selector` plus model/engine
    instead of the job/instance variables; with source=vllm it is the source job itself.
    """

    target: str
    series: str
    servers: str
    vllm: str

    @classmethod
    def from_config(cls, cfg: MixinConfig) -> Selectors:
        target = join_matchers(
            sources.source_matchers(cfg), 'job=~"$job"', f'{cfg.instance_label}=~"$instance"'
        )
        model_engine = 'model_name=~"$model_name", engine=~"$engine"'
        series = join_matchers(target, model_engine)
        return cls(
            target=target,
            series=series,
            servers=join_matchers(series, 'job!~"$instance"'),
            vllm=series if cfg.direct else join_matchers(cfg.vllm_selector, model_engine),
        )


def only_when_selected(variable: str) -> str:
    """A matcher that matches no series while the dashboard variable is at All and every series
    once values are selected: `acceptance_band!~"($variable)"`. Only the band counts carry that
    label (fleet_counts); on any other series it is absent and reads as "", which All's `(.*)`
    matches and no selection does, whatever the values. For the variables whose All is `.*`
    (instance, model_name, engine), not job's `.+`. The parentheses are for VictoriaMetrics
    (servers_in_band says why)."""
    if variable == "job":
        raise ValueError("only_when_selected: job's All is .+, which never matches the absent label")
    return f'{fleet_counts.BAND_LABEL}!~"(${variable})"'


def rate(metric: str, matchers: str) -> str:
    return f"rate({series(metric, matchers)}[{RATE_INTERVAL}])"


def sum_by(labels: Sequence[str], inner: str, op: str = "sum") -> str:
    """`sum by (a, b) (inner)`, or `sum(inner)` when no labels are given."""
    if labels:
        return f"{op} by ({', '.join(labels)}) ({inner})"
    return f"{op}({inner})"


def all_or_selected(by: Sequence[str], at_all: str, selected: str, op: str = "sum") -> str:
    """`(op by (by) (at_all) or op by (by) (selected))`: a panel's switch between the side that
    answers at a variable's All and the side that answers once values are selected. The switch is
    in the two sides' selectors, each matching nothing when the other answers (Queries says how);
    Prometheus evaluates both operands of `or` whatever the left one holds, and an empty selector
    costs nothing."""
    return f"({sum_by(by, at_all, op=op)} or {sum_by(by, selected, op=op)})"


def sum_rate(metric: str, matchers: str, by: Sequence[str] = ()) -> str:
    return sum_by(by, rate(metric, matchers))


def guarded_ratio(numerator: str, denominator: str, matching: str = "") -> str:
    """`num / (den > 0)`: no result at all (not 0, not NaN) while the denominator is idle, which the
    stat panels turn into "No traffic". Both sides must already be aggregated (sum-then-divide)."""
    operator = f"/ {matching} " if matching else "/ "
    return f"{numerator} {operator}({denominator} > 0)"
