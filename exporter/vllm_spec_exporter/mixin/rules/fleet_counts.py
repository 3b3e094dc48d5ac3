"""The fleet counts: what the dashboards count over every server, counted once a fleet interval.

Two panels summarise every server of the fleet at each step of their range: the fleet dashboard's
"Servers per acceptance band" (how many servers' acceptance lies in each band) and the overview's
"Scrape errors by reason" (the sidecars' failed polls). Computed from every server's series at
every step they take seconds over an hour on a fleet of thousands. These records hold the
answers at the dashboards' default, "All":

    <fleet labels>_acceptance_band:vllm_spec_decode_servers:count{acceptance_band="ok|low|critical"}
    <fleet labels>_reason:vllm_spec_exporter_scrape_errors:rate<w>        (the sidecar's bundle only)

Contract:
- Kept labels are fleet_records.kept_labels: the fleet labels, `job` and the selector's labels,
  never the instance label, model_name or engine. A panel tells them from the servers' series by
  that (promql.Queries.servers_in_band): a selected server, model or engine matches no band
  count, a selected server no scrape-error count (per target: it has no model or engine).
- A server's acceptance sums its models and engines before dividing (ACCEPTANCE, built by the
  caller), read from the per-server records of `vllm-spec-decode.rules` (engines already summed:
  fewer series than the source records wherever servers run data-parallel engines). Records of
  records of another group, counted every `windows.fleet_interval` (fleet_records says why): up
  to a fleet interval and two evaluations behind the counters on any ruler, and on vmalert the
  two rates of one server may come from different evaluations, so a server near a threshold can
  sit in the neighbouring band for a fleet interval. A panel can afford that; a page could not
  (the evidence groups read the counters).
- Each band is 0, not absent, while some server has draft traffic, and absent while none has:
  an idle fleet is not a healthy one (the panels show "No traffic").
- Scrape errors are rates of the sidecars' own counter, per reason, read straight from it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..config import MixinConfig
from . import sources
from .fleet_records import kept_labels

__all__ = ["BAND_LABEL", "FLEET_COUNTS_GROUP", "Band", "acceptance_bands", "band_record", "band_rules",
           "fleet_count_meanings", "fleet_counts_group", "in_band", "scrape_error_rules", "scrape_errors_record",
           "server_labels"]

FLEET_COUNTS_GROUP = "vllm-spec-decode.fleet.counts"
BAND_LABEL = "acceptance_band"


class Band(NamedTuple):
    """One acceptance band: servers whose acceptance lies in [low, high) (None: unbounded)."""

    name: str  # the value of BAND_LABEL
    low: float | None
    high: float | None


def acceptance_bands(cfg: MixinConfig) -> tuple[Band, Band, Band]:
    """At or above the warning threshold, between critical and warning (the range of
    SpecDecodeAcceptanceLow), below critical (SpecDecodeAcceptanceCritical's)."""
    warn, crit = cfg.acceptance_warning_threshold, cfg.acceptance_critical_threshold
    return Band("ok", warn, None), Band("low", crit, warn), Band("critical", None, crit)


def server_labels(cfg: MixinConfig) -> tuple[str, ...]:
    """What one server's acceptance is summed by, here and in the panels' per-server branches:
    the kept labels and the instance label (instances may repeat across clusters)."""
    return (*kept_labels(cfg), cfg.instance_label)


def _level(cfg: MixinConfig, label: str) -> str:
    return "_".join((*cfg.fleet_labels, label))


def band_record(cfg: MixinConfig) -> str:
    return f"{_level(cfg, BAND_LABEL)}:vllm_spec_decode_servers:count"


def scrape_errors_record(cfg: MixinConfig) -> str:
    metric = sources.SERVED.SCRAPE_ERRORS_TOTAL.removesuffix("_total")
    return f"{_level(cfg, 'reason')}:{metric}:rate{cfg.windows.rate_window}"


def in_band(acceptance: str, band: Band) -> str:
    """`acceptance` kept only where band.low <= acceptance < band.high (comparison filters)."""
    expr = f"({acceptance})"
    if band.high is not None:
        expr += f" < {band.high}"
    if band.low is not None:
        expr += f" >= {band.low}"
    return expr


def band_rules(cfg: MixinConfig, server_acceptance: str, drafting: str) -> list[dict[str, Any]]:
    """One rule per band: `server_acceptance` (per server, kept labels and the instance label),
    counted by the kept labels; 0 where `drafting` (per server, only where it drafts) has a server."""
    by = ", ".join(kept_labels(cfg))
    return [{"record": band_record(cfg),
             "expr": f"count by ({by}) (\n{in_band(server_acceptance, band)}\n)\nor\n0 * group by ({by}) ({drafting})",
             "labels": {BAND_LABEL: band.name}}
            for band in acceptance_bands(cfg)]


def scrape_error_rules(cfg: MixinConfig) -> list[dict[str, Any]]:
    if cfg.direct:  # no sidecar, no scrape errors of its own
        return []
    errors = sources.series(sources.SERVED.SCRAPE_ERRORS_TOTAL, sources.source_matchers(cfg))
    by = ", ".join((*kept_labels(cfg), "reason"))
    return [{"record": scrape_errors_record(cfg),
             "expr": f"sum by ({by}) (rate({errors}[{cfg.windows.rate_window}]))"}]


def fleet_counts_group(cfg: MixinConfig, server_acceptance: str, drafting: str) -> dict[str, Any]:
    return {"name": FLEET_COUNTS_GROUP, "interval": cfg.windows.fleet_interval,
            "rules": band_rules(cfg, server_acceptance, drafting) + scrape_error_rules(cfg)}


def fleet_count_meanings(cfg: MixinConfig) -> dict[str, str]:
    """Record name -> one-line meaning (alerts/README.md)."""
    scope = f"Across the fleet (labels {', '.join(kept_labels(cfg))}), for the dashboards at All"
    ok, low, critical = acceptance_bands(cfg)
    meanings = {band_record(cfg): (
        f"{scope}: servers with draft traffic per acceptance band, label `{BAND_LABEL}`: `{ok.name}` at or above "
        f"{ok.low:g}, `{low.name}` from {low.low:g} to {low.high:g}, `{critical.name}` below {critical.high:g} "
        "(each server's models and engines summed); 0 while some server drafts, absent while none does.")}
    if not cfg.direct:
        meanings[scrape_errors_record(cfg)] = (f"{scope}: the sidecars' failed or partly rejected polls of vLLM per "
                                               "second, by reason.")
    return meanings
