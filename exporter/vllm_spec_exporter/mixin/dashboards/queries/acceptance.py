"""The acceptance panels' queries: acceptance, tokens per step, efficiency, draft length and
share, rejected tokens, the speed-up (the advisor's or its PromQL bound) and the servers per
acceptance band.
"""

from __future__ import annotations

from ...rules import fleet_counts, fleet_records
from ...rules.fleet_counts import Band
from ...rules.quantities import (
    ACCEPTANCE,
    DRAFT_OUTPUT_SHARE,
    DRAFTED_EFFICIENCY,
    MEAN_ACCEPTANCE_LENGTH,
    MEAN_DRAFT_LENGTH,
    speedup_bound,
)
from ...rules.sources import SERVED, series
from .reads import Reads
from .selectors import (
    ACCEPTED,
    DRAFT_TOKENS,
    DRAFTS,
    guarded_ratio,
    join_matchers,
    only_when_selected,
    sum_by,
)


class AcceptanceQueries(Reads):
    """Acceptance, efficiency and speed-up."""

    def acceptance(self, by: tuple[str, ...] = ()) -> str:
        return self.quantity(ACCEPTANCE, by)

    def mean_acceptance_length(self, by: tuple[str, ...] = ()) -> str:
        return self.quantity(MEAN_ACCEPTANCE_LENGTH, by)

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

    def draft_output_share(self, by: tuple[str, ...] = ()) -> str:
        return self.quantity(DRAFT_OUTPUT_SHARE, by)

    def mean_draft_length(self, by: tuple[str, ...] = ()) -> str:
        return self.quantity(MEAN_DRAFT_LENGTH, by)

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
