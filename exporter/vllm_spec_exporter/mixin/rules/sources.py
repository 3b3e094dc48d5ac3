"""The source layer: the only module of the generators that names raw series.

Every spec-decode quantity starts from five counters. With `source=exporter` (the default) they are
the sidecar's normalised counters (names.MetricName, job `exporter_selector`); with `source=vllm`
they are vLLM's own series as Prometheus already scrapes them (job `vllm_selector`), under any of
the four spellings a TSDB may hold: `vllm:` (vLLM, Prometheus 3), `vllm_` (OpenMetrics underscore
escaping, prometheus/client_python#1177), `ray_vllm:` and `ray_vllm_` (Ray Serve's stat logger),
and llama.cpp's llama-server (`llamacpp:`, b11434, `--metrics`), whose counters are the same
quantities: drafts (verification steps), draft tokens, accepted tokens, accepted by 0-based
position, and predicted (generated) tokens. Its series carry no model_name or engine label, so its
records lack them too; its per-position counters appear only after the first speculative request,
and until then its per-position rates and k are absent (never 0), as with every other source. It
serves its other spec counters at 0 even without speculation (drafts_present says why it matters).
And it prints its counters with 6 significant digits (`%g`): above 10^6 an increase is rounded to
tens, above 10^7 to hundreds, so on a long-running, busy llama-server the direct acceptance and its
bounds read rounded counts (the sidecar reads the same text; longer windows blunt it).

This module turns either into the *source records*, one per (server, model, engine) with every
target label kept and the metric name replaced:

    instance_model_engine:<metric>:rate<rate_window>                 every counter but the per-position
                                                                     one (RECORDED; dashboards, alerts)

(k, without the sidecar, is positions.py's record), and gives the evidence records (recording_rules.evidence_rules)
their terms, `increase_sum`: a counter's increase over an alert window, summed over the data-parallel engines in the
same expression, not one layer later: the Wilson bounds the alerts read are then one record away from the counters, as
they were before this layer existed. vmalert writes records back asynchronously, so a record read by the next rule of
its own group is the previous evaluation's (its docs: do not rely on chaining); every extra layer between counters and
bounds would page one evaluation later on vmalert. Per-engine increases would only be summed again (and cost series at
fleet scale).

Everything downstream (recording_rules, alert_rules, promql) reads those records or, where a record must not be read
(the fleet records, the evidence, k) or none exists (per position, for the servers a panel or runbook selects), the
same counters through raw_rate, panel_rate and increase_sum; so both sources give the same evidence, pages and panels.
The few raw series that are not counters of a quantity (`up`, restarts, "are the spec-decode counters there at all",
vLLM's load gauges and latency histograms) are also named only here, as expressions the alerts, records and dashboards
embed.

Direct mode reads each spelling with its own range selector joined by `or` (left operand wins), not one `__name__=~`
regex: while a scrape job switches spelling, both names hold samples inside the range, and one rate() over both would
fail with "vector cannot contain metrics with the same labelset" (until Prometheus' delayed name removal is the
default).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ... import engines
from ...engines import VLLM_HISTOGRAM_NAMES, VLLM_PREFIXES
from ...names import EngineFamily, Family, MetricName
from ..config import MixinConfig

__all__ = [
    "ACCEPTED", "ACCEPTED_BY_POSITION", "ALERTS", "COUNTERS", "COUNTER_MEANINGS", "DRAFTED_AT_POSITION", "DRAFTS",
    "DRAFT_TOKENS", "E2E", "GENERATED", "ITL", "LLAMACPP_GAUGES", "OUTPUT_TOKENS", "RECORDED", "SERVED", "TPOT", "UP",
    "VLLM_GAUGES", "SourceCounter", "SourceHistogram", "by_name", "config_info", "direct_names", "drafts_present",
    "engine_steps_rate", "histogram_rate", "increase_record", "increase_sum", "operand", "own", "panel_rate",
    "rate_record", "rate_sum", "raw_gauge", "raw_rate", "restarts", "scrape_up", "selector_labels", "series",
    "source_matchers", "source_rules", "spec_off", "spelled_out", "vllm_spellings",
]


@dataclass(frozen=True)
class SourceCounter:
    """One counter of the source layer.

    `metric` is the metric part of its record names; `exporter` the sidecar's served name; `vllm`
    vLLM's sample name after the `vllm:` prefix; `llamacpp` llama-server's whole sample name ("" where
    llama-server has none); `position` says the series carry a 0-based draft `position` label (such
    a counter has no source record: RECORDED; its fleet record's level ends in `_position`).
    """

    metric: str
    exporter: MetricName
    vllm: str
    llamacpp: str
    position: bool = False


def _vllm_name(key: Family) -> str:
    """vLLM's name of canonical `key` after the `vllm:` prefix (engines.VLLM_NAMES)."""
    return engines.sample_name(EngineFamily.VLLM, key).removeprefix(VLLM_PREFIXES[0])


def _source_counter(metric: str, exporter: MetricName, key: Family, position: bool = False) -> SourceCounter:
    """The counter of canonical `key`: its vLLM and llama-server names from engines' tables."""
    llamacpp = (engines.sample_name(EngineFamily.LLAMACPP, key) + "_total"
                if key in engines.NAMES[EngineFamily.LLAMACPP].values() else "")
    return SourceCounter(metric, exporter, _vllm_name(key) + "_total", llamacpp, position)


DRAFTS = _source_counter("vllm_spec_decode_drafts", MetricName.DRAFTS_TOTAL, Family.DRAFTS)
DRAFT_TOKENS = _source_counter("vllm_spec_decode_draft_tokens", MetricName.DRAFT_TOKENS_TOTAL, Family.DRAFT_TOKENS)
ACCEPTED = _source_counter("vllm_spec_decode_accepted_tokens", MetricName.ACCEPTED_TOKENS_TOTAL, Family.ACCEPTED_TOKENS)
ACCEPTED_BY_POSITION = _source_counter("vllm_spec_decode_accepted_tokens_by_position",
                                MetricName.ACCEPTED_TOKENS_BY_POSITION_TOTAL, Family.ACCEPTED_PER_POS, position=True)
GENERATED = _source_counter("vllm_generation_tokens", MetricName.GENERATION_TOKENS_TOTAL, Family.GENERATION_TOKENS)
# Draft tokens proposed at each position, per-position acceptance's denominator. vLLM upstream does not export them
# (some builds do: engines.VLLM_NAMES); every read of this counter (_drafted_at_position) is therefore its rate where
# the series has it, and otherwise the drafts' rate copied to each position of the accepted-per-position series:
# per-position acceptance is exact where the server counts drafts per position and the lower bound vLLM's own docs
# compute (accepted at p / drafts) where not. Summed over servers (fleet records, panels at All) it is exact when all
# of them count it, and a lower bound otherwise (drafts >= drafts reaching the position).
DRAFTED_AT_POSITION = _source_counter("vllm_spec_decode_draft_tokens_by_position",
                                      MetricName.DRAFT_TOKENS_BY_POSITION_TOTAL, Family.DRAFTED_PER_POS, position=True)

COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_BY_POSITION, DRAFTED_AT_POSITION, GENERATED)
# The counters with a source record: all but the per-position one. Per server its records were k times the series of
# any other counter's and the source group's costliest rule, read only by panels with servers selected and a runbook's
# server: those read the scraped counters, k series a server (at All the panels read the fleet's per-position sum, a
# fleet record: fleet_records.py). A config whose selector matches on the instance label has no fleet scope
# (promql.Queries.fleet_scope): its per-position panels read every server's.
RECORDED = (DRAFTS, DRAFT_TOKENS, ACCEPTED, GENERATED)
# What each counter counts, for the record tables of alerts/README.md.
COUNTER_MEANINGS = {
    DRAFTS: "drafts (verification steps with a draft)",
    DRAFT_TOKENS: "draft tokens proposed",
    ACCEPTED: "accepted draft tokens",
    ACCEPTED_BY_POSITION: "accepted draft tokens at each 0-based position",
    DRAFTED_AT_POSITION: ("draft tokens proposed at each 0-based position (where the server exports them; "
                          "elsewhere its drafts, so that per-position acceptance is a lower bound there)"),
    GENERATED: "generated (output) tokens, accepted drafts included",
}

# The load gauges the sidecar serves, under vLLM's own names (after the `vllm:` prefix) and
# llama-server's (it serves no KV-cache usage); the direct dashboards and rules read them.
_GAUGE_KEYS = {MetricName.REQUESTS_RUNNING: Family.REQUESTS_RUNNING,
               MetricName.REQUESTS_WAITING: Family.REQUESTS_WAITING,
               MetricName.KV_CACHE_USAGE_RATIO: Family.KV_CACHE_USAGE}
VLLM_GAUGES = {gauge: _vllm_name(key) for gauge, key in _GAUGE_KEYS.items()}
LLAMACPP_GAUGES = {gauge: engines.sample_name(EngineFamily.LLAMACPP, key) for gauge, key in _GAUGE_KEYS.items()
                   if key in engines.NAMES[EngineFamily.LLAMACPP].values()}

# The sidecar's own series besides the counters of a quantity (its health and info series, the advisor's and the
# engines' gauges, k, the load gauges): alerts, dashboards and runbooks name them as `sources.SERVED.<NAME>`, never by
# names.MetricName, so this module stays the one that names raw series. Prometheus' own series: UP, ALERTS.
SERVED = MetricName
UP = "up"


@dataclass(frozen=True)
class SourceHistogram:
    """A latency histogram of the source layer: its records' `metric`, the sidecar's `exporter` name, its `key`."""

    metric: str
    exporter: MetricName
    key: Family

    @property
    def vllm(self) -> tuple[str, ...]:
        """vLLM's names after the `vllm:` prefix (engines.VLLM_HISTOGRAM_NAMES: today's first)."""
        return tuple(name for name, key in VLLM_HISTOGRAM_NAMES.items() if key == self.key)


# Time per output token, per request: per token whatever a step emits (the measured speed-up's);
# inter-token latency: per output event, several tokens a step with speculation; end-to-end latency
# (queueing and prefill included: what a client waits) and output tokens per finished request.
TPOT = SourceHistogram("vllm_request_time_per_output_token_seconds", MetricName.REQUEST_TPOT_SECONDS,
                       Family.TIME_PER_OUTPUT_TOKEN)
ITL = SourceHistogram("vllm_inter_token_latency_seconds", MetricName.INTER_TOKEN_LATENCY_SECONDS,
                      Family.INTER_TOKEN_LATENCY)
E2E = SourceHistogram("vllm_e2e_request_latency_seconds", MetricName.E2E_REQUEST_LATENCY_SECONDS, Family.E2E_LATENCY)
OUTPUT_TOKENS = SourceHistogram("vllm_request_generation_tokens", MetricName.REQUEST_GENERATION_TOKENS,
                                Family.REQUEST_GENERATION_TOKENS)
ALERTS = "ALERTS"


def series(name: str, matchers: str = "") -> str:
    """`name{matchers}`: the one way the generators write a series selector, of a raw series or a
    record (`matchers`: label matchers without braces, joined as the caller reads them best)."""
    return f"{name}{{{matchers}}}"


def by_name(name: str, matchers: str, regex: bool = False) -> str:
    """`{__name__="name", matchers}` (`=~` with `regex`: one pattern over several spellings):
    series picked by their name among spellings, where no one metric name can lead the braces."""
    return series("", f'__name__{"=~" if regex else "="}"{name}", {matchers}')


def vllm_spellings(name: str) -> tuple[str, ...]:
    """Every spelling of vLLM's `vllm:<name>` a TSDB may hold."""
    return tuple(prefix + name for prefix in VLLM_PREFIXES)


def direct_names(counter: SourceCounter) -> tuple[str, ...]:
    """Every sample name of `counter` that the direct rules read: vLLM's spellings, then llama.cpp's."""
    return (*vllm_spellings(counter.vllm), *((counter.llamacpp,) if counter.llamacpp else ()))


def source_matchers(cfg: MixinConfig) -> str:
    """Label matchers (without braces) of the source's scrape job."""
    return cfg.vllm_selector if cfg.direct else cfg.exporter_selector


# A matcher's label name; PromQL quotes its value with ", ' or `.
_MATCHER_LABEL = re.compile(r'([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*["\'`]')


def selector_labels(cfg: MixinConfig) -> tuple[str, ...]:
    """The label names the source's selector matches on (`job`, or e.g. `namespace, container`):
    a record that aggregates servers away must keep them, or `own()` no longer finds it."""
    return tuple(dict.fromkeys(_MATCHER_LABEL.findall(source_matchers(cfg))))


def own(cfg: MixinConfig, record: str, matchers: str = "") -> str:
    """`record` as this bundle reads it back: with its source's job matcher (and `matchers`).
    Records keep the source's target labels, so the sidecar and the direct bundle can run in one
    Prometheus (a fleet with and without the sidecar) without reading, and re-writing, each
    other's series."""
    return series(record, _with_selector(cfg, matchers))


def _with_selector(cfg: MixinConfig, matchers: str) -> str:
    """The source's selector, then `matchers` (label matchers without braces) when given."""
    return ", ".join(m for m in (source_matchers(cfg), matchers) if m)


def rate_record(cfg: MixinConfig, counter: SourceCounter) -> str:
    """Name of `counter`'s source rate record (per server, model and engine); only RECORDED have one."""
    if counter not in RECORDED:
        raise ValueError(f"{counter.metric} has no source record (sources.RECORDED)")
    return f"instance_model_engine:{counter.metric}:rate{cfg.windows.rate_window}"


def increase_record(counter: SourceCounter, window: str) -> str:
    """Name of `counter`'s source increase record over `window` (per server and model)."""
    return f"instance_model:{counter.metric}:increase{window}"


def _over_range(cfg: MixinConfig, function: str, counter: SourceCounter, window: str, matchers: str = "") -> str:
    """`function(counter{source job, matchers}[window])`, one series per (server, model, engine)."""
    return _over_range_on(cfg, function, counter, window, _with_selector(cfg, matchers))


def _over_range_on(cfg: MixinConfig, function: str, counter: SourceCounter, window: str, match: str) -> str:
    """`function(counter{match}[window])` under each spelling the source may hold, `match` complete
    (DRAFTED_AT_POSITION: with the drafts where a series lacks it, _drafted_at_position)."""
    if counter == DRAFTED_AT_POSITION:
        return _drafted_at_position(cfg, function, window, match)
    return _plain_over_range(cfg, function, counter, window, match)


def _drafted_at_position(cfg: MixinConfig, function: str, window: str, match: str) -> str:
    """The per-position draft counter where a series has it, else the drafts' at every position of
    the accepted-per-position series (DRAFTED_AT_POSITION): `own or (drafts + ignoring (position)
    group_right () (0 * accepted_by_position))`, the drafts taking the position labels of the right."""
    def read(counter: SourceCounter) -> str:
        return operand(cfg, _plain_over_range(cfg, function, counter, window, match))
    return (f"({read(DRAFTED_AT_POSITION)}\nor (\n{read(DRAFTS)}\n+ ignoring (position) group_right ()\n"
            f"(0 * {read(ACCEPTED_BY_POSITION)})))")


def _plain_over_range(cfg: MixinConfig, function: str, counter: SourceCounter, window: str, match: str) -> str:
    """`function(counter{match}[window])` under each spelling the source may hold."""
    if not cfg.direct:
        return f"{function}({series(counter.exporter, match)}[{window}])"
    return _either([f"{function}({by_name(name, match)}[{window}])" for name in direct_names(counter)])


def _either(parts: list[str]) -> str:
    """`a or (b or (c or d))`: every series of `a`, then those of `b` whose labels `a` lacks, and so
    on, as `a or b or c or d` gives. Nested to the right because VictoriaMetrics (1.145) hashes the
    left side of each `or`, and in the left-nested chain that is the whole first spelling once per
    further spelling (nested to the right, about a quarter of the time: the other spellings are
    empty, so the inner `or`s cost nothing)."""
    head, *rest = parts
    return head if not rest else f"{head}\nor (\n{_either(rest)})"


def spelled_out(cfg: MixinConfig, expr: str) -> str:
    """`expr`, a raw read, on lines of its own inside the parentheses around it when it is the
    direct spellings' `or` (in a rule file or runbook a person reads); as it is with the sidecar's
    one name."""
    return f"\n{expr}\n" if cfg.direct else expr


def operand(cfg: MixinConfig, expr: str) -> str:
    """`expr`, a raw read, as an operand of a binary operator: in parentheses when it is the direct
    spellings' `or`, which binds loosest of all; as it is with the sidecar's one name."""
    return f"({expr})" if cfg.direct else expr


def raw_rate(cfg: MixinConfig, counter: SourceCounter, matchers: str = "") -> str:
    """`counter`'s rate over rate_window straight from the scraped series (the source's selector,
    and `matchers`), one per (server, model, engine[, position]): a source record's expression,
    and what rules that must not read records read (vmalert writes them back asynchronously:
    sources.py's docstring)."""
    return _over_range(cfg, "rate", counter, cfg.windows.rate_window, matchers)


def panel_rate(cfg: MixinConfig, counter: SourceCounter, matchers: str, window: str) -> str:
    """raw_rate as a panel reads it: over `window`, on `matchers` taken as they are (a dashboard's
    selectors hold the source's selector already), on one line. For a counter without a source
    record (the per-position one, RECORDED) and the quantities it is part of."""
    return _over_range_on(cfg, "rate", counter, window, matchers).replace("\n", " ")


def source_rules(cfg: MixinConfig) -> list[dict[str, str]]:
    """The source records: each RECORDED counter's rate, which the panels, the per-server records
    and the alerts read."""
    return [{"record": rate_record(cfg, c), "expr": raw_rate(cfg, c)} for c in RECORDED]


def increase_sum(cfg: MixinConfig, counter: SourceCounter, window: str) -> str:
    """`counter`'s increase over `window` straight from the scraped series, summed over the
    data-parallel engines: one series per (server, model). The evidence records' terms."""
    return f"sum without (engine) ({spelled_out(cfg, _over_range(cfg, 'increase', counter, window))})"


def rate_sum(cfg: MixinConfig, counter: SourceCounter, matchers: str) -> str:
    """`counter`'s rate over rate_window straight from the scraped series on `matchers`, summed
    over the data-parallel engines: one series per (server, model[, position]). A runbook's read
    of one server."""
    return f"sum without (engine) ({spelled_out(cfg, raw_rate(cfg, counter, matchers))})"


def drafts_present(cfg: MixinConfig, within: str = "") -> str:
    """One sample per (server, model) whose drafts counter is scraped *now*: its last sample within
    `presence` (two scrape intervals, windows.py), which ends two scrapes after the series go stale
    (pod deleted), unlike an evidence window; one missed scrape (a poll of a busy vLLM that timed
    out: the sidecar then omits vLLM's series) is no gap, so it neither resolves nor restarts an alert.

    llama-server serves its spec counters at 0 even when started without speculation, so its
    counter counts as present only once it has drafted (the sidecar reads a llama.cpp whose counters
    are all 0 as "no spec decoding" too): without speculation it is MetricsMissing's. `within`: a window instead."""
    held = within or cfg.windows.presence
    if not cfg.direct:
        return f"group without (engine) (last_over_time({series(DRAFTS.exporter, source_matchers(cfg))}[{held}]))"
    # Each spelling on its own: last_over_time drops the name, and a spelling switch inside `held`
    # would leave two series with one label set.
    vllm = [f"last_over_time({by_name(name, source_matchers(cfg))}[{held}])" for name in vllm_spellings(DRAFTS.vllm)]
    llamacpp = f"last_over_time({by_name(DRAFTS.llamacpp, source_matchers(cfg))}[{held}]) > 0"
    return f"group without (engine) (\n{_either([*vllm, llamacpp])}\n)"


def scrape_up(cfg: MixinConfig, matchers: str = "") -> str:
    """`up` of the source's scrape job (the sidecar's, or vLLM's own in direct mode)."""
    return series(UP, _with_selector(cfg, matchers))


def restarts(cfg: MixinConfig, window: str, matchers: str = "") -> str:
    """Restarts of each scrape target over `window`, one sample per target.

    The sidecar counts polls in which a counter went down or its `_created` time changed (its own
    counter, so increase() also counts across restarts of the sidecar); directly, a restart is a
    reset of vLLM's generation counter, which every model and engine of the server see at once.
    """
    match = _with_selector(cfg, matchers)
    if not cfg.direct:
        return f"increase({series(SERVED.TARGET_RESTARTS_TOTAL, match)}[{window}])"
    return f"max without (model_name, engine) (\n{_over_range(cfg, 'resets', GENERATED, window, matchers)}\n)"


# vLLM's engine-step count (its tokens-per-step histogram's _count; SERVED.ENGINE_STEPS_TOTAL).
ENGINE_STEPS_VLLM = _vllm_name(Family.ENGINE_STEPS)


def engine_steps_rate(cfg: MixinConfig, matchers: str) -> str:
    """Engine steps per second over rate_window, one series per (server, model, engine). vLLM V1
    serves the count, no other engine: a reader falls back to the running gauge with `or`. Each
    spelling on its own, `or`ed: a spelling switch inside the window would otherwise leave two
    series with one label set."""
    if not cfg.direct:
        return f"rate({series(SERVED.ENGINE_STEPS_TOTAL, matchers)}[{cfg.windows.rate_window}])"
    return _either([f"rate({by_name(name, matchers)}[{cfg.windows.rate_window}])"
                    for name in vllm_spellings(ENGINE_STEPS_VLLM)])


def raw_gauge(cfg: MixinConfig, gauge: MetricName, matchers: str) -> str:
    """A load gauge of each series: the sidecar's, or vLLM's (llama.cpp's) own under any spelling (an instant
    selector: a spelling switch leaves no overlap, the old name goes stale at the same scrape)."""
    if not cfg.direct:
        return series(gauge, matchers)
    llamacpp = (LLAMACPP_GAUGES[gauge],) if gauge in LLAMACPP_GAUGES else ()
    names = "|".join((*vllm_spellings(VLLM_GAUGES[gauge]), *llamacpp))
    return by_name(names, matchers, regex=True)


def histogram_rate(cfg: MixinConfig, histogram: SourceHistogram, part: str, matchers: str = "") -> str:
    """The rate over rate_window of `histogram`'s `part` (`sum`, `count` or `bucket`) on the source's
    selector and `matchers`, per (server, model, engine[, le]): the sidecar's one name, or vLLM's in
    every spelling and name it ever had (`or`, as raw_rate)."""
    match, window = _with_selector(cfg, matchers), cfg.windows.rate_window
    if not cfg.direct:
        return f"rate({series(f'{histogram.exporter}_{part}', match)}[{window}])"
    return _either([f"rate({by_name(f'{name}_{part}', match)}[{window}])"
                    for vllm in histogram.vllm for name in vllm_spellings(vllm)])


def config_info(cfg: MixinConfig, matchers: str) -> str:
    """The sidecar's speculative-config series (one per target; method, k, ... as labels) on its
    selector and `matchers`. The direct bundle has none: no vLLM series names the config."""
    return series(SERVED.SPEC_CONFIG_INFO, _with_selector(cfg, matchers))


def spec_off(cfg: MixinConfig) -> str:
    """One sample per sidecar whose target serves no spec-decode metrics (speculation off)."""
    return f"{series(SERVED.SPEC_DECODE_ENABLED, source_matchers(cfg))} == 0"
