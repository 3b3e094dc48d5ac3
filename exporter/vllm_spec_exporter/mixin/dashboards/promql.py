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

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ...engines import VLLM_HISTOGRAMS, VLLM_PREFIXES
from ...names import SPEC_CONFIG_LABELS
from ..config import MixinConfig
from ..rules import fleet_counts, fleet_records, load, positions, recording_rules, sources
from ..rules.fleet_counts import Band
from ..rules.quantities import (
    ACCEPTANCE,
    DRAFT_OUTPUT_SHARE,
    DRAFTED_EFFICIENCY,
    MEAN_ACCEPTANCE_LENGTH,
    MEAN_DRAFT_LENGTH,
    POSITION_ACCEPTANCE,
    Quantity,
    speedup_bound,
)
from ..rules.sources import SERVED, SourceCounter, series
from . import crowd
from .crowd import Crowd, ServerVariable

RATE_INTERVAL = "$__rate_interval"
# The dashboard's time range (Grafana sets it for variable queries too).
RANGE = "$__range"
# Alerts are matched by name prefix: every spec-decode alert the mixin generates starts with it.
ALERT_NAME_REGEX = "SpecDecode.*"

# vLLM's own metrics the dashboards query directly (the exporter does not re-expose histograms).
# The lint test checks each name against a real vLLM /metrics capture. Queries match both
# spellings (see vllm_name_pattern): Prometheus 2.x negotiates OpenMetrics, and prometheus_client
# >= 0.2x then escapes the colon, so the TSDB holds `vllm_inter_token_latency_seconds_bucket`;
# Prometheus 3 (UTF-8 names) or a text-format scrape keeps `vllm:inter_token_latency_seconds_bucket`.
VLLM_INTER_TOKEN_LATENCY, VLLM_TIME_PER_OUTPUT_TOKEN = (VLLM_PREFIXES[0] + name for name in VLLM_HISTOGRAMS)
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
    histograms the exporter does not re-expose. With source=exporter, vLLM's scrape job has other
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


class Queries:
    """The PromQL of the main dashboard, parametrised by the config's selectors."""

    def __init__(self, cfg: MixinConfig) -> None:
        self.cfg = cfg
        self.sel = Selectors.from_config(cfg)
        # source=vllm: no sidecar, so no advisor, exporter health or target info to show.
        self.direct = cfg.direct

    def counter_rate(self, counter: SourceCounter, matchers: str = "", raw: bool = False) -> str:
        """One counter's rate per (server, model, engine[, position]) on the variables: its source
        record, or with `raw` the scraped series' rate, as the per-position counter is always read:
        it has no source record (sources.RECORDED). Over the records' rate_window, not
        $__rate_interval: a panel then shows the same with servers selected as at All, where it
        reads the fleet records, and as the stats beside it (dashboards/.lint says so)."""
        matchers = matchers or self.sel.series
        if raw or counter not in sources.RECORDED:
            return sources.operand(self.cfg, sources.panel_rate(self.cfg, counter, matchers,
                                                                self.cfg.windows.rate_window))
        return series(sources.rate_record(self.cfg, counter), matchers)

    def fleet_scope(self, by: tuple[str, ...]) -> bool:
        """True when a sum `by` these labels can read the fleet records at "All": none of them is
        a server's, and the instance label is not one the records must keep for the selector."""
        kept = fleet_records.kept_labels(self.cfg)
        return (self.cfg.instance_label not in sources.selector_labels(self.cfg)
                and set(by) <= {*kept, "model_name", "engine", "position"})

    def fleet_or_servers(self, fleet_record: str, per_server: str, by: tuple[str, ...]) -> str:
        """`sum by (by)` of a fleet record at "All", else of `per_server` on the selected servers.

        The switch lives in the selectors, so only one side reads any series: the fleet records
        have no instance label, which `=~"$instance"` matches only at All (`.*`), and the servers'
        side carries `job!~"$instance"`, which matches nothing at All."""
        return all_or_selected(by, series(fleet_record, self.sel.series), per_server)

    def server_scope(self, counter: SourceCounter, by: tuple[str, ...]) -> bool:
        """True when a sum `by` these labels can read the per-server records (recording_rules,
        `instance_model`: the engines summed) at engine "All": `by` keeps the server apart but not
        the engine or the position, and the counter's rate has such a record."""
        return (self.cfg.instance_label in by and not {"engine", "position"} & set(by)
                and counter in recording_rules.SERVER_RATE_RECORDS)

    def servers_or_engines(self, counter: SourceCounter, by: tuple[str, ...]) -> str:
        """`sum by (by)` of the counter's per-server record at engine All, else of the selected
        engines' source records. At All the per-server record holds one series per server and
        model, the engines already summed: as many series as the source records on single-engine
        servers, fewer on data-parallel ones. The switch is in
        the selectors, as in fleet_or_servers: the record has no engine label, which
        `engine=~"$engine"` matches only at All, and the engines' side carries
        `only_when_selected("engine")`."""
        record = recording_rules.server_rate_record(self.cfg, counter)
        engines = self.counter_rate(counter, join_matchers(self.sel.series, only_when_selected("engine")))
        return all_or_selected(by, series(record, self.sel.series), engines)

    def sum_rate(self, counter: SourceCounter, by: tuple[str, ...] = (), per_server: bool | None = None,
                 raw: bool = False) -> str:
        """One counter's rate summed `by`: from the fleet records where fleet_scope allows, from
        the per-server records where server_scope does (`per_server` decides instead when given:
        a quantity reads all its counters from one layer), else from the source records, or with
        `raw` from the scraped series (counter_rate)."""
        if not raw and (self.server_scope(counter, by) if per_server is None else per_server):
            return self.servers_or_engines(counter, by)
        if not self.fleet_scope(by):
            return sum_by(by, self.counter_rate(counter, raw=raw))
        return self.fleet_or_servers(fleet_records.fleet_rate_record(self.cfg, counter),
                                     self.counter_rate(counter, self.sel.servers, raw), by)

    def quantity(self, quantity: Quantity, by: tuple[str, ...] = ()) -> str:
        """One of quantities.QUANTITIES over the panel's `by`, from the source records (at
        All, where fleet_scope allows, the fleet records; at engine All, where server_scope allows
        for every counter of the quantity, the per-server records; the scraped series where a
        counter has no source record, for every counter of the quantity). Never numerator and
        denominator from two layers: a record of a record can be an evaluation behind the
        records it reads (fleet_records.py says what that did)."""
        def by_of(counter: SourceCounter) -> tuple[str, ...]:
            return (*by, "position") if counter.position else by
        counters = (*quantity.numerator, *quantity.denominator)
        per_server = all(self.server_scope(c, by_of(c)) for c in counters)
        # A counter without a source record (per position) is read raw, so its quantity's others are too.
        raw = not set(counters) <= set(sources.RECORDED)

        def read(counter: SourceCounter) -> str:
            return self.sum_rate(counter, by_of(counter), per_server, raw)
        matching = ""
        if any(c.position for c in quantity.numerator):
            matching = f"on ({', '.join(by)}) group_left ()" if by else "on () group_left ()"
        return quantity.expr(read, matching, separator=" ")

    def acceptance(self, by: tuple[str, ...] = ()) -> str:
        return self.quantity(ACCEPTANCE, by)

    def mean_acceptance_length(self, by: tuple[str, ...] = ()) -> str:
        return self.quantity(MEAN_ACCEPTANCE_LENGTH, by)

    def k_series(self, matchers: str = "") -> str:
        """k per (server, model, engine) on the variables (positions.k_series)."""
        return positions.k_series(self.cfg, matchers or self.sel.series)

    def max_acceptance_length(self, by: tuple[str, ...] = ()) -> str:
        """k + 1: the most tokens one verification step can emit (all drafts + the bonus)."""
        return self.k(by) + " + 1"

    def efficiency(self, by: tuple[str, ...] = ()) -> str:
        """(drafts + accepted) / (drafts * (k + 1)): tokens emitted / most emittable. Each draft's
        rate is weighted by its own series' k, so servers with different k aggregate correctly.
        Both sides cover exactly the series that have a k: a series whose k is missing (the
        exporter's first poll, a target just gone down) must not add to the numerator alone
        (fleet_records.efficiency_terms). At "All" both terms come from the fleet records."""
        fleet = self.fleet_scope(by)
        matchers = self.sel.servers if fleet else self.sel.series
        terms = fleet_records.efficiency_terms(self.counter_rate(DRAFTS, matchers),
                                               self.counter_rate(ACCEPTED, matchers), self.k_series(matchers))
        if not fleet:
            return guarded_ratio(*(sum_by(by, term) for term in terms))
        emitted, emittable = (self.fleet_or_servers(fleet_records.efficiency_record(self.cfg, name), term, by)
                              for name, term in zip(fleet_records.EFFICIENCY_TERMS, terms, strict=True))
        return guarded_ratio(emitted, emittable)

    def drafted_efficiency(self, by: tuple[str, ...] = ()) -> str:
        """(drafts + accepted) / (drafts + draft tokens): fair when drafts are shorter than k."""
        return self.quantity(DRAFTED_EFFICIENCY, by)

    def position_acceptance(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """Share of drafts whose token at each position was accepted. Drafts have no position
        label, hence the one-to-many match on the remaining labels."""
        return self.quantity(POSITION_ACCEPTANCE, by)

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
        return self.quantity(DRAFT_OUTPUT_SHARE, by)

    def mean_draft_length(self, by: tuple[str, ...] = ()) -> str:
        return self.quantity(MEAN_DRAFT_LENGTH, by)

    def speedup_at_load(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """The estimated speed-up at the running batch (rules/load.py), the worst engine of `by`:
        a non-linear estimate per engine does not sum, and the one that does not pay is the news."""
        return sum_by(by, series(load.load_names(self.cfg).speedup, self.sel.series), op="min")

    def load_batch(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """Running requests per engine, averaged over the rate window: the largest engine's of `by`."""
        return sum_by(by, series(load.load_names(self.cfg).batch, self.sel.series), op="max")

    def compute_bound_batch(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """The batch from which a speculative step holds more than compute_bound_tokens tokens:
        compute_bound_tokens / (1 + draft tokens per request-step) = N x R / (R + draft tokens), with R
        = generated - accepted the request-steps, as the estimate at load counts them
        (quantities.speedup_at_load). Above it verification stops being free."""
        steps = self.target_sampled_tokens(by)
        return f"{self.cfg.compute_bound_tokens} * ({steps}) / ({steps} + {self.sum_rate(DRAFT_TOKENS, by)} > 0)"

    def target_sampled_tokens(self, by: tuple[str, ...] = ()) -> str:
        """Output tokens the target model sampled itself (one per step, incl. the bonus token)."""
        return f"{self.sum_rate(GENERATED, by)} - {self.sum_rate(ACCEPTED, by)}"

    def rejected_tokens(self, by: tuple[str, ...] = ()) -> str:
        return f"{self.sum_rate(DRAFT_TOKENS, by)} - {self.sum_rate(ACCEPTED, by)}"

    def traffic_weighted(self, gauge: str, by: tuple[str, ...] = ()) -> str:
        """Average of a per-series gauge weighted by each series' drafts/s, over the series that
        report it (the exporter omits advisor gauges while a series is idle)."""
        gauge_selector = series(gauge, self.sel.series)
        drafts = self.counter_rate(DRAFTS)
        return guarded_ratio(
            sum_by(by, f"{gauge_selector} * {drafts}"),
            sum_by(by, f"{drafts} and {gauge_selector}"),
        )

    def estimated_speedup(self, by: tuple[str, ...] = ()) -> str:
        """The sidecar advisor's estimate; with source=vllm the same bound in PromQL (speedup_bound)."""
        if self.direct:
            return self.speedup_bound(by)
        return self.traffic_weighted(SERVED.ESTIMATED_SPEEDUP, by)

    def speedup_bound(self, by: tuple[str, ...] = ()) -> str:
        """Tokens per step / (1 + draft_cost_ratio x mean draft length), from the source records."""
        return self.quantity(speedup_bound(self.cfg.draft_cost_ratio), by)

    def recommended_k(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """The advisor's k*; the most cautious (smallest) where engines disagree."""
        return self.gauge(SERVED.RECOMMENDED_K, by, op="min")

    def recommended_k_speedup(self, by: tuple[str, ...] = ("model_name",)) -> str:
        return self.traffic_weighted(SERVED.RECOMMENDED_K_ESTIMATED_SPEEDUP, by)

    def gauge(self, metric: str, by: tuple[str, ...], op: str = "sum") -> str:
        return sum_by(by, series(metric, self.sel.series), op=op)

    def load_gauge(self, metric: str, by: tuple[str, ...], op: str = "sum") -> str:
        """A per-series load gauge: the sidecar's, or with source=vllm vLLM's own."""
        return sum_by(by, sources.raw_gauge(self.cfg, metric, self.sel.series), op=op)

    def k(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """Draft positions configured (the largest where engines differ). Without the sidecar k is
        the number of position series, and at All (where fleet_scope allows) it is counted from
        the fleet's per-position record: every server has positions 0..k-1, so the fleet's union
        holds as many as the largest k (a few series instead of k for every server). A server
        missing a middle position would count one less on its own, never more: the union is at
        least each server's own count, and equal while every server's positions are 0..k-1."""
        if not (self.direct and self.fleet_scope(by)):
            return sum_by(by, self.k_series(), op="max")
        fleet = series(fleet_records.fleet_rate_record(self.cfg, ACCEPTED_BY_POSITION), self.sel.series)
        return all_or_selected(by, positions.count_positions(fleet),
                               self.k_series(self.sel.servers), op="max")

    def worst_first(self, expr: str) -> str:
        """An instant query's rows sorted ascending: the lowest value on top."""
        return f"sort({expr})"

    def crowd(self, name: str, expr: str, high_is_bad: bool = False, latest: str = "") -> Crowd:
        """The ranking of one crowded per-server panel, a hidden variable `crowd_<name>`
        (crowd.ranking: the worst and best few servers by `latest`; the panel also draws every
        server of crowd.SEEN_VARIABLE). The row that draws the panel returns it to the frame."""
        return crowd.ranking(self.cfg, name, expr, high_is_bad, latest)

    def server_variables(self, rankings: Sequence[Crowd]) -> list[ServerVariable]:
        """The hidden variables of the crowded panels' `rankings` (the rows return them, the frame
        collects them): crowd.SEEN_VARIABLE, which every one of them reads, then each ranking
        (none without a crowded panel)."""
        if not rankings:
            return []
        return [crowd.seen_variable(self.cfg, self.servers_seen()), *rankings]

    def servers_seen(self) -> str:
        """Every selected server seen in the range, one series each, on every variable: the series
        the model and engine variables read (frame), the sidecar's running requests or directly the
        generation rate record, so a selected model or engine counts only its own servers."""
        seen = self.counter_rate(GENERATED) if self.direct else series(SERVED.REQUESTS_RUNNING, self.sel.series)
        return sum_by((self.cfg.instance_label,), f"last_over_time({seen}[{RANGE}])", op="group")

    def servers_per_model(self) -> str:
        """Servers exposing a k for each model: the servers speculating it."""
        return sum_by(("model_name",), self.k((self.cfg.instance_label, "model_name")), op="count")

    def vllm_rate(self, sample_name: str) -> str:
        """rate() of one of vLLM's own series under either spelling of its name."""
        return f"rate({sources.by_name(vllm_name_pattern(sample_name), self.sel.vllm, regex=True)}[{RATE_INTERVAL}])"

    def latency_quantile(self, histogram: str, quantile: float, by: tuple[str, ...] = ()) -> str:
        return f"histogram_quantile({quantile}, {sum_by(('le', *by), self.vllm_rate(histogram + '_bucket'))})"

    def latency_mean(self, histogram: str, by: tuple[str, ...] = ()) -> str:
        return guarded_ratio(
            sum_by(by, self.vllm_rate(histogram + "_sum")),
            sum_by(by, self.vllm_rate(histogram + "_count")),
        )

    def servers_in_band(self, band: Band) -> str:
        """Servers whose acceptance (models and engines summed) lies in the band. 0 while some
        server has traffic, empty (shown as "No traffic") while none has: an idle fleet is not a
        healthy one. At All the fleet count (fleet_counts.py); with servers, models or engines
        selected it is counted from those servers' source records.

        The band record has none of those three labels, so a selection matches none of it. Each
        per-server branch carries `acceptance_band!~"($<variable>)"`, a label no source record
        has: absent reads as "", which the variable's All (`(.*)`) matches and any selection does
        not, so the branch is the exact complement of the fleet side for that variable, whatever
        the values (a job named like a model cannot hide it, as `job!~` could). The parentheses are
        for VictoriaMetrics (1.145): it treats a literal `!~".*"` like `!~".+"`, which every series
        lacking the label matches, so each branch was computed over the whole fleet and matched."""
        by_server = fleet_counts.server_labels(self.cfg)

        def counted(matchers: str) -> str:
            acceptance = ACCEPTANCE.expr(lambda c: sum_by(by_server, self.counter_rate(c, matchers)), separator=" ")
            drafting = f"{sum_by(by_server, self.counter_rate(DRAFT_TOKENS, matchers))} > 0"
            return f"count({fleet_counts.in_band(acceptance, band)}) or (0 * count({drafting}))"

        if not self.fleet_scope(()):
            return counted(self.sel.series)
        label = fleet_counts.BAND_LABEL
        fleet = series(fleet_counts.band_record(self.cfg), join_matchers(self.sel.series, f'{label}="{band.name}"'))
        branches = [f"({counted(join_matchers(self.sel.series, only_when_selected(variable)))})"
                    for variable in ("instance", "model_name", "engine")]
        return " or ".join((f"sum({fleet})", *branches))

    def drafting_state(self) -> str:
        """Per server and model while it drafts or generates: 0 drafting, 1 paused by design (no
        drafts at a larger batch than any at which it drafted), 2 stopped, 3 paused by design by
        the engine's own adaptive tier (SGLang tier 0; recording_rules)."""
        names = recording_rules.record_names(self.cfg)
        matchers = join_matchers(self.sel.target, 'model_name=~"$model_name"')
        state = (f"(0 * {series(names.drafts_stopped, matchers)} + 2)"
                 f" or (0 * {series(names.drafting_paused, matchers)} + 1)")
        if self.cfg.direct:  # vLLM's own series: no engine declares a tier
            return state + f" or (0 * ({series(names.draft_tokens_rate, matchers)} > 0))"
        tier = recording_rules.engine_tier_steps(matchers)
        return (state + f" or (0 * ({tier} == 0) + 3)"
                f" or (0 * ({series(names.draft_tokens_rate, matchers)} > 0))"
                f" or (0 * ({tier} > 0))")

    def per_target(self, metric: str, op: str = "min") -> str:
        """One value per scrape target of an exporter health gauge (no model/engine labels)."""
        return sum_by((self.cfg.instance_label,), series(metric, self.sel.target), op=op)

    def scrape_up(self) -> str:
        """`up` of the source job's targets: the sidecars, or with source=vllm the vLLM servers."""
        return sources.scrape_up(self.cfg, join_matchers('job=~"$job"', f'{self.cfg.instance_label}=~"$instance"'))

    def spec_off_series(self) -> str:
        """source=vllm: (server, model) pairs generating tokens whose spec-decode counters are not
        scraped at all, the direct form of the sidecar's `spec_decode_enabled 0`."""
        return (f"group without (engine) ({self.counter_rate(GENERATED)})\n"
                f"unless {sources.drafts_present(self.cfg)}")

    def spec_decode_off_servers(self) -> str:
        """Servers the exporter reads where vLLM exposes no spec-decode metrics; 0 (not empty)
        while exporters are scraped, so "No exporter" stays distinguishable."""
        up = self.scrape_up()
        if self.direct:
            return f"count(count by ({self.cfg.instance_label}) ({self.spec_off_series()})) or (0 * count({up}))"
        return f"count({self.per_target(SPEC_DECODE_ENABLED, op='max')} == 0) or (0 * count({up}))"

    def not_speculating(self) -> str:
        """One row per server that is not speculating, with the reason in label `problem`."""
        instance = (self.cfg.instance_label,)
        if self.direct:
            reasons = ((f"sum by ({instance[0]}) ({self.spec_off_series()}) * 0", PROBLEM_SPEC_OFF),
                       (sum_by(instance, self.scrape_up(), op="min"), PROBLEM_VLLM_UNREADABLE))
        else:
            reasons = (
                (self.per_target(SPEC_DECODE_ENABLED, op="max"), PROBLEM_SPEC_OFF),
                (self.per_target(TARGET_UP), PROBLEM_VLLM_UNREADABLE),
                (self.per_target(sources.UP), PROBLEM_EXPORTER_UNSCRAPED),
            )
        return " or ".join(f'label_replace({expr} == 0, "{PROBLEM_LABEL}", "{text}", "", "")'
                           for expr, text in reasons)

    # Health: per scrape target, no model/engine labels.
    def targets_down(self) -> str:
        """Exporters that cannot read vLLM, plus exporters Prometheus cannot scrape (source=vllm:
        vLLM servers Prometheus cannot scrape). Empty (shown as "No exporter") when no target is
        scraped at all, so silence is never green."""
        up = self.scrape_up()
        if self.direct:
            return f"count({up} == 0) or (0 * count({up}))"
        target_up = series(TARGET_UP, self.sel.target)
        return f"count(({target_up} == 0) or ({up} == 0)) or (0 * count({up}))"

    def firing_alerts(self) -> str:
        return series(sources.ALERTS, f'alertname=~"{ALERT_NAME_REGEX}", alertstate="firing"')

    def firing_alerts_count(self) -> str:
        return f"count({self.firing_alerts()}) or vector(0)"

    def scrape_errors_by_reason(self) -> str:
        """The sidecars' failed polls per second by reason: the fleet count at All (fleet_counts.py),
        averaged over the panel's rate interval so a burst between two steps of a long range still
        shows, else its last value (its name dropped, as the average's): the count is recorded once
        a fleet interval (a minute), which a short rate interval (4 scrapes of 10 s) may not hold;
        with servers selected their own counters. Per target: no model or engine label, so only the
        server selection switches."""
        by = ("reason",)
        if not self.fleet_scope(()):  # the record keeps `reason` besides the fleet's labels
            return sum_rate(SERVED.SCRAPE_ERRORS_TOTAL, self.sel.target, by)
        record = series(fleet_counts.scrape_errors_record(self.cfg), self.sel.target)
        fleet = f"(avg_over_time({record}[{RATE_INTERVAL}]) or sum without () ({record}))"
        servers = rate(SERVED.SCRAPE_ERRORS_TOTAL, join_matchers(self.sel.target, 'job!~"$instance"'))
        return f"({sum_by(by, fleet)} or {sum_by(by, servers)})"

    def counter_resets(self, window: str = RATE_INTERVAL) -> str:
        """vLLM restarts per server per interval (sidecar: polls in which its counters reset;
        source=vllm: resets of vLLM's generation counter); over `window`."""
        matchers = join_matchers('job=~"$job"', f'{self.cfg.instance_label}=~"$instance"')
        return sum_by((self.cfg.instance_label,), sources.restarts(self.cfg, window, matchers))

    def poll_age(self) -> str:
        """Seconds since each exporter last read vLLM successfully (0 before the first success)."""
        last = series(SERVED.LAST_SUCCESS_TIMESTAMP_SECONDS, self.sel.target) + " > 0"
        return f"time() - {sum_by((self.cfg.instance_label,), last, op='max')}"

    def spec_config(self) -> str:
        """One row per server with the speculative config the exporter reads (method, k,
        verification, lossy, dynamic k and where it came from; specconfig.py)."""
        return sum_by((self.cfg.instance_label, *SPEC_CONFIG_LABELS),
                      series(SERVED.SPEC_CONFIG_INFO, self.sel.target), op="max")

    def detected_schema(self) -> str:
        """One row per server with the engine family, schema and server version the exporter detected."""
        return sum_by((self.cfg.instance_label, "engine_family", "schema", "version"),
                      series(SERVED.TARGET_INFO, self.sel.target), op="max")

