"""The per-position panels' queries: k, its ceiling k+1, acceptance at each draft position, the
positions that pay and the servers speculating each model.
"""

from __future__ import annotations

from ...rules import fleet_records, positions
from ...rules.quantities import (
    POSITION_ACCEPTANCE,
)
from ...rules.sources import series
from .reads import Reads
from .selectors import (
    ACCEPTED_BY_POSITION,
    all_or_selected,
    sum_by,
)


class PositionQueries(Reads):
    """k and acceptance per draft position."""

    def max_acceptance_length(self, by: tuple[str, ...] = ()) -> str:
        """k + 1: the most tokens one verification step can emit (all drafts + the bonus)."""
        return self.k(by) + " + 1"

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

    def servers_per_model(self) -> str:
        """Servers exposing a k for each model: the servers speculating it."""
        return sum_by(("model_name",), self.k((self.cfg.instance_label, "model_name")), op="count")
