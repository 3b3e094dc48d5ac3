"""The fleet records: each counter's rate summed over a fleet's servers, per model and engine.

A panel over the whole fleet (the default "All") reads one series per (fleet, model, engine
[, position]) from these records instead of summing every server's source record at every step of
its range: on a fleet of thousands that is thousands of series a step and seconds a panel, against
milliseconds from these records.

    <fleet labels>_model_engine[_position]:<metric>:rate<rate_window>     every counter
    <fleet labels>_model_engine:vllm_spec_decode_emitted_tokens:rate<w>   efficiency's numerator
    <fleet labels>_model_engine:vllm_spec_decode_emittable_tokens:rate<w> efficiency's denominator

Contract:
- The records sum `by (kept_labels(cfg), model_name, engine[, position])`: the fleet labels, `job`
  (the dashboards' job variable) and every label the source's selector matches on (an
  `exporter_selector` on namespace and container must still find them). They carry no instance
  label, which is how a panel tells them from the servers' records (promql.Queries.fleet_or_servers).
- They read the scraped counters (sources.raw_rate), not the source records: vmalert writes
  records back asynchronously, so a sum of source records could mix two of their evaluations (a
  per-position acceptance above 1 was seen); raw counters give every record of a cycle one
  consistent set of samples, as the source layer has. The one exception is k.
- Without the sidecar they sum the spellings' per-series `or` (sources.raw_rate), as the source
  records read them. Summing each spelling on its own and then the spellings would let
  VictoriaMetrics aggregate as it reads (about three times faster), but it counts a server twice while two of
  its spellings are live at once with the same labels (a Prometheus 2 and a Prometheus 3 scraping
  the same pods into one TSDB during a migration: client_python#1177 changes only the name), and a
  fleet total must not double. (While a job switches spelling, the `or` reads the new name's
  partial window: the total runs low for one rate window, as the servers' records do.) `or`-ing
  each spelling's fleet sum instead (the first spelling of each job, model, engine and position)
  costs about what one spelling's sum does (half the per-series `or`) and never doubles, but while a
  job's servers mix spellings (a canary on a vLLM whose prometheus_client escapes names; Ray
  Serve beside plain vLLM) it leaves the later spelling's servers out of the total. Any per-series `or` stops
  VictoriaMetrics aggregating as it reads (two spellings cost as much as five): the price of exact
  totals, about twice the sum of one spelling.
- The group runs every `windows.fleet_interval` (`fleet_evaluation_interval`: a minute at a 15 s
  evaluation), not every evaluation: no alert reads these records, a panel steps once a minute
  (each value a full rate window, so none skips traffic), and on a large fleet without the
  sidecar this group is among the costliest.
- Efficiency weights each server's drafts by its own k, so its two terms are summed here per
  server before the fleet sum (efficiency_terms, which Queries.efficiency also uses per server).
  Without the sidecar k is the k group's record (positions.k_group, once a minute; with the
  sidecar, its gauge): its value changes only when a server restarts with another k, so a
  minute-old k mixes nothing but a new or restarted server's first minute (positions.k_group says
  what that leaves out). What can mix: a server whose k record starts or ends between the
  two terms' queries (a k write landing between them) counts on one side only, for that one
  evaluation, with its share of the fleet's drafts.
"""

from __future__ import annotations

from typing import Any

from ..config import MixinConfig
from . import positions, sources
from .sources import ACCEPTED, COUNTER_MEANINGS, COUNTERS, DRAFTS, SourceCounter

__all__ = [
    "EFFICIENCY_TERMS",
    "FLEET_GROUP",
    "efficiency_record",
    "efficiency_terms",
    "fleet_group",
    "fleet_meanings",
    "fleet_rate_record",
    "fleet_rules",
    "kept_labels",
    "level",
]

FLEET_GROUP = "vllm-spec-decode.fleet"
# Efficiency's terms: tokens emitted per second (drafts' bonus tokens plus accepted), and the
# most one could emit (every draft all k accepted, plus its bonus token).
EFFICIENCY_TERMS = ("vllm_spec_decode_emitted_tokens", "vllm_spec_decode_emittable_tokens")


def kept_labels(cfg: MixinConfig) -> tuple[str, ...]:
    """The labels a fleet-level sum keeps besides model_name (and engine, position): the fleet
    labels, `job` and the source selector's labels, each once, never the instance label."""
    labels = (*cfg.fleet_labels, "job", *sources.selector_labels(cfg))
    return tuple(label for label in dict.fromkeys(labels) if label != cfg.instance_label)


def level(cfg: MixinConfig, position: bool = False) -> str:
    """The level of the fleet records' names: `job_model_engine` for the default fleet labels."""
    return "_".join((*cfg.fleet_labels, "model_engine")) + ("_position" if position else "")


def fleet_rate_record(cfg: MixinConfig, counter: SourceCounter) -> str:
    """Name of `counter`'s fleet rate record."""
    return f"{level(cfg, counter.position)}:{counter.metric}:rate{cfg.windows.rate_window}"


def efficiency_record(cfg: MixinConfig, term: str) -> str:
    """Name of one of EFFICIENCY_TERMS' fleet records."""
    return f"{level(cfg)}:{term}:rate{cfg.windows.rate_window}"


def efficiency_terms(drafts: str, accepted: str, k: str) -> tuple[str, str]:
    """Efficiency's numerator and denominator per (server, model, engine), before any sum: tokens
    emitted, (drafts + accepted), and the most emittable, drafts x (k + 1). Both cover exactly the
    series with a k: a series whose k is missing (the exporter's first poll, a target just gone
    down) must not add to the numerator alone."""
    return f"({drafts} + {accepted}) and {k}", f"{drafts} * ({k} + 1)"


def fleet_rules(cfg: MixinConfig) -> list[dict[str, str]]:
    """The fleet group's rules: every counter's rate, then efficiency's two terms."""
    def fleet_sum(inner: str, position: bool = False) -> str:
        by = ", ".join((*kept_labels(cfg), "model_name", "engine", *(("position",) if position else ())))
        return f"sum by ({by}) (\n{inner}\n)"

    def raw(counter: SourceCounter) -> str:
        return sources.operand(cfg, sources.spelled_out(cfg, sources.raw_rate(cfg, counter)))

    rules = [{"record": fleet_rate_record(cfg, c), "expr": fleet_sum(sources.raw_rate(cfg, c), c.position)}
             for c in COUNTERS]
    terms = efficiency_terms(raw(DRAFTS), raw(ACCEPTED), positions.k_series(cfg, sources.source_matchers(cfg)))
    rules += [{"record": efficiency_record(cfg, name), "expr": fleet_sum(term)}
              for name, term in zip(EFFICIENCY_TERMS, terms, strict=True)]
    return rules


def fleet_group(cfg: MixinConfig) -> dict[str, Any]:
    return {"name": FLEET_GROUP, "interval": cfg.windows.fleet_interval, "rules": fleet_rules(cfg)}


def fleet_meanings(cfg: MixinConfig) -> dict[str, str]:
    """Fleet record name -> one-line meaning (alerts/README.md)."""
    scope = f"Per model and engine across the fleet (labels {', '.join(kept_labels(cfg))}), for the dashboards at All"
    meanings = {fleet_rate_record(cfg, c): f"{scope}: {COUNTER_MEANINGS[c]} per second." for c in COUNTERS}
    emitted, emittable = (efficiency_record(cfg, term) for term in EFFICIENCY_TERMS)
    meanings[emitted] = (f"{scope}: tokens emitted per second by verification steps with a draft (each step's "
                         "bonus token plus its accepted drafts), efficiency's numerator.")
    meanings[emittable] = (f"{scope}: the most those steps could emit per second, drafts x (k + 1), each server "
                           "weighted by its own k; efficiency's denominator.")
    return meanings
