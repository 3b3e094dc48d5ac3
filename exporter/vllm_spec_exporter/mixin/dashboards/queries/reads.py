"""How a panel reads a counter: the layer of records its grouping allows (the fleet records at All,
the per-server records at engine All, the source records, or the scraped series per position),
each quantity of rules/quantities.py summed then divided over that one layer, and k per series.
The base of every subject's queries (queries/*.py); Queries (promql.py) joins them.
"""

from __future__ import annotations

from ...config import MixinConfig
from ...rules import fleet_records, positions, recording_rules, sources
from ...rules.quantities import (
    Quantity,
)
from ...rules.sources import SourceCounter, series
from .. import crowd
from ..crowd import Crowd
from .selectors import (
    Selectors,
    all_or_selected,
    join_matchers,
    only_when_selected,
    sum_by,
)


class Reads:
    """The PromQL of the dashboards, parametrised by the config's selectors: the reads every
    subject's queries share."""

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
        matching = ""  # a `position` numerator over a denominator without it (none today) needs one
        if any(c.position for c in quantity.numerator) and not any(c.position for c in quantity.denominator):
            matching = f"on ({', '.join(by)}) group_left ()" if by else "on () group_left ()"
        return quantity.expr(read, matching, separator=" ")

    def k_series(self, matchers: str = "") -> str:
        """k per (server, model, engine) on the variables (positions.k_series)."""
        return positions.k_series(self.cfg, matchers or self.sel.series)

    def worst_first(self, expr: str) -> str:
        """An instant query's rows sorted ascending: the lowest value on top."""
        return f"sort({expr})"

    def crowd(self, name: str, expr: str, high_is_bad: bool = False, latest: str = "") -> Crowd:
        """The ranking of one crowded per-server panel, a hidden variable `crowd_<name>`
        (crowd.ranking: the worst and best few servers by `latest`; the panel also draws every
        server of crowd.SEEN_VARIABLE). The row that draws the panel returns it to the frame."""
        return crowd.ranking(self.cfg, name, expr, high_is_bad, latest)
