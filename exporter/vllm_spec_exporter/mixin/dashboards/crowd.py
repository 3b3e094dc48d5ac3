"""The crowded per-server panels: which few servers a panel draws over a fleet, decided once.

A per-server panel over 5,000 servers at "All" must not draw 5,000 lines, nor compute 5,000
servers at every step of its range to keep eight (seconds a panel at that size). Each
such panel has a *ranking*: a hidden dashboard variable `crowd_<name>` whose query_result query
Grafana runs once, instant at the end of the range (and again when the range changes): the
servers of the cfg.panel_worst_k worst and cfg.panel_best_k best series by their latest value.
Beside the rankings one hidden variable serves every crowded panel, `crowd_seen` (SEEN_VARIABLE):
every selected server seen in the range while they are at most cfg.panel_all_series_up_to, else
none (a selected server shows everything about it, also after it went quiet). It scans every
server's series over the whole range, so it runs once a dashboard load, not once a panel: that
scan is most of a ranking's cost, and a dashboard holds seven rankings. At All Grafana
substitutes every option, regex-escaped, as `(a|b|...)`, and `()` when there is none; the panel's
range query then reads the servers of its ranking and of crowd_seen only (Crowd.read).
promql.Queries.crowd builds one per panel.

Contract: a ranking reads no `$__rate_interval` (Grafana sets it for panel queries only), and its
subquery step is the evaluation interval, explicitly: MetricsQL defaults a subquery's step to the
query's, 5 minutes for an instant query, aligned, so the window held one point that could fall
before the latest records, and an empty ranking once drew every server.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...durations import format_duration, seconds
from ..config import MixinConfig

__all__ = ["CROWDED_RANK_EVALUATIONS", "CROWD_VARIABLE_PREFIX", "SEEN_VARIABLE", "Crowd", "SeriesLimit",
           "ServerVariable", "ranking", "seen_variable"]

# How many evaluation intervals back a ranking looks for each series' latest value: a few, not
# 5 minutes, since it evaluates the panel's expression once per subquery step, over every server.
CROWDED_RANK_EVALUATIONS = 4
# The hidden variables of the crowded panels' rankings are named with this prefix.
CROWD_VARIABLE_PREFIX = "crowd_"
# The servers every crowded panel draws while few are selected (seen_variable).
SEEN_VARIABLE = CROWD_VARIABLE_PREFIX + "seen"


@dataclass(frozen=True)
class SeriesLimit:
    """At most `all_up_to` series, else the `worst_k` worst and `best_k` best by their value at
    the end of the range (read once, `@ end()`); every series while none has a value then (a
    selected server that went quiet). On a ranking's few servers this costs little."""

    all_up_to: int
    worst_k: int
    best_k: int
    high_is_bad: bool
    window: str
    step: str

    def picked(self, latest: str) -> str:
        """The worst and best few series of `latest` (one value a series)."""
        worst, best = ("topk", "bottomk") if self.high_is_bad else ("bottomk", "topk")
        picked = f"{worst}({self.worst_k}, {latest})"
        return picked + (f" or {best}({self.best_k}, {latest})" if self.best_k else "")

    def apply(self, expr: str) -> str:
        latest = f"last_over_time(({expr})[{self.window}:{self.step}] @ end())"
        few = f"(count({latest}) <= {self.all_up_to} or absent({latest}))"
        return f"({expr}) and on () {few} or ({expr}) and ({self.picked(latest)})"


@dataclass(frozen=True)
class ServerVariable:
    """A hidden dashboard variable `variable` whose options are the servers (values of
    `instance_label`) the instant query `servers` returns (Grafana's query_result, with `regex`
    extracting the value)."""

    variable: str
    servers: str
    instance_label: str

    @property
    def query(self) -> str:
        return f"query_result({self.servers})"

    @property
    def regex(self) -> str:
        """The server in query_result's text of one row, `{instance="a"} 1 1700000000000`."""
        return f'/^\\{{{self.instance_label}="(.*)"\\}} /'


@dataclass(frozen=True)
class Crowd(ServerVariable):
    """A crowded per-server panel's ranking: `read` narrows a panel's query to the servers it and
    SEEN_VARIABLE pick, and keeps it readable where a server has several series (`limit`)."""

    limit: SeriesLimit

    def narrow(self, expr: str) -> str:
        """`expr` on the picked servers: each selector matching `$instance` also matches the variable."""
        selected = f'{self.instance_label}=~"$instance"'
        if selected not in expr:
            raise ValueError(f"a crowded query must select servers by {selected}: {expr}")
        return expr.replace(selected, f'{selected}, {self.instance_label}=~"${{{self.variable}}}|${{{SEEN_VARIABLE}}}"')

    def read(self, expr: str, several: bool = False) -> str:
        """`expr` on the picked servers; with `several` series a server (one per model or engine),
        at most `limit.all_up_to` of them (the worst and best few beyond)."""
        return self.limit.apply(self.narrow(expr)) if several else self.narrow(expr)


def ranking(cfg: MixinConfig, name: str, expr: str, high_is_bad: bool = False, latest: str = "") -> Crowd:
    """The ranking `crowd_<name>` of a panel drawing `expr` per server: the servers of its worst
    and best series by `latest` (default: `expr`'s last value in CROWDED_RANK_EVALUATIONS
    evaluation intervals)."""
    if CROWD_VARIABLE_PREFIX + name == SEEN_VARIABLE:
        raise ValueError(f"no ranking may be named {name!r}: {SEEN_VARIABLE} holds the servers seen while few")
    step = cfg.windows.evaluation_interval
    window = format_duration(CROWDED_RANK_EVALUATIONS * seconds(step))
    limit = SeriesLimit(cfg.panel_all_series_up_to, cfg.panel_worst_k, cfg.panel_best_k, high_is_bad, window, step)
    latest = latest or f"last_over_time(({expr})[{window}:{step}])"
    query = f"group by ({cfg.instance_label}) ({limit.picked(latest)})"
    if "$__rate_interval" in query:
        raise ValueError(f"ranking {name} reads $__rate_interval (set for panel queries only): "
                         "give it a `latest` on a fixed window")
    return Crowd(CROWD_VARIABLE_PREFIX + name, query, cfg.instance_label, limit)


def seen_variable(cfg: MixinConfig, seen: str) -> ServerVariable:
    """SEEN_VARIABLE: the servers of `seen` (one series a server seen in the range, on every
    variable) while they are at most cfg.panel_all_series_up_to, else none."""
    query = f"{seen} and on () (count({seen}) <= {cfg.panel_all_series_up_to})"
    return ServerVariable(SEEN_VARIABLE, query, cfg.instance_label)
