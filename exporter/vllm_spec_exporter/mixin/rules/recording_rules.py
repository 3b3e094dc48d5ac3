"""Recording rules for speculative decoding, built from one MixinConfig.

Three layers, each reading only the one before it (the kubernetes-mixin way: queries read records):

1. the *source* records (sources.py, group `vllm-spec-decode.source`): per (server, model, engine)
   rates of four of the five counters (sources.RECORDED: not the per-position one, which panels
   and runbooks read raw for the servers they select), from the sidecar or straight from vLLM
   (`source` knob), and without the sidecar k in a group of its own (positions.k_group); beside
   it the *fleet* records (fleet_records.py, group `vllm-spec-decode.fleet`), the same rates summed
   per model and engine across the fleet, from the same counters, for the dashboards at "All";
2. per server and model (`instance_model`: the data-parallel engines summed): rates and the ratios
   of `QUANTITIES` the runbooks read, and the drafting state the alerts and dashboards read; per
   model across the fleet (`<fleet labels>_model`, default `job_model`): acceptance only; beside
   it the *fleet counts* (fleet_counts.py, group `vllm-spec-decode.fleet.counts`) read layer 2:
   servers per acceptance band, and the sidecars' scrape errors by reason;
3. the *evidence* records of the acceptance alerts, one group per alert window: per server and
   model, the drafts (the trials) and the acceptance over the window, both from the counters, then
   the Wilson score bounds of acceptance `:confidence_upper_<w>` / `:confidence_lower_<w>` (the
   lower only where read: lower_bound_windows) with a `confidence` label (GitLab metrics-catalog
   style). An alert fires when the upper bound is below its threshold in a long and a short window
   of one tier, i.e. when the counters prove it.

Every record is read by an alert, a dashboard, a runbook, or is part of the documented API
(`PUBLIC_RECORDS`, the acceptance ratios for users' own alerts and panels): the dashboards compute
their quantities from the source records with `QUANTITIES` (per-engine filtering needs them; per
position, with servers selected, from the counters), so a layer-2 record no one reads would only
cost series.

Names follow Prometheus' `level:metric:operations` (https://prometheus.io/docs/practices/rules/):
operation `rate<window>`, `increase<window>`, `ratio_rate<window>` for a ratio of two rates and
`ratio_increase<window>` of two increases (the two metrics joined by `_per_`), `mean_rate<window>`
for the mean acceptance length, `count` for a number of servers now.

Each derived quantity is defined once in PromQL, in quantities.py, and once in Python (derive.py);
the records, the evidence and every dashboard panel build their PromQL from it. Ratios always
divide separately aggregated numerators and denominators (never an average of ratios), and the
denominator is guarded with `> 0`, so idle servers give no sample, not NaN.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from ..config import MixinConfig, once_per_config
from . import fleet_counts, fleet_records, load, measured, positions, sources
from .drafting_state import drafting_state_rules
from .fleet_records import FLEET_GROUP
from .quantities import ACCEPTANCE, MEAN_ACCEPTANCE_LENGTH, POSITION_ACCEPTANCE
from .sources import ACCEPTED, DRAFT_TOKENS, DRAFTS, GENERATED, SourceCounter, own

__all__ = [
    "EVIDENCE_GROUP",
    "FLEET_GROUP",
    "PUBLIC_RECORDS",
    "RECORDING_GROUP",
    "SERVER_RATE_RECORDS",
    "SOURCE_GROUP",
    "EvidenceNames",
    "RecordNames",
    "counts_group",
    "evidence_group_name",
    "evidence_meanings",
    "evidence_names",
    "evidence_rules",
    "fleet_model_labels",
    "lower_bound_windows",
    "position_acceptance",
    "public_records",
    "record_meaning",
    "record_names",
    "recording_groups",
    "recording_rules",
    "server_rate_record",
    "source_meanings",
    "wilson_bound",
]

SOURCE_GROUP = "vllm-spec-decode.source"
RECORDING_GROUP = "vllm-spec-decode.rules"
# One evidence group per alert window: `vllm-spec-decode.evidence.<window>` (evidence_group_name).
EVIDENCE_GROUP = "vllm-spec-decode.evidence"


@dataclass(frozen=True)
class RecordNames:
    """Names of the recording rules for one config (the window is part of each name)."""

    # Per server and model: tokens (or drafts) per second.
    accepted_rate: str
    draft_tokens_rate: str
    drafts_rate: str
    generation_rate: str
    # Per server and model: derived ratios.
    acceptance_ratio: str
    acceptance_length: str
    # Per server and model: drafting paused by design vs stopped (config.drafting_batch_memory).
    running_batch: str
    drafting_batch: str
    drafts_stopped: str
    drafting_paused: str
    # Across the fleet, per model: acceptance only (the API; its two rates feed it).
    fleet_accepted_rate: str
    fleet_draft_tokens_rate: str
    fleet_acceptance_ratio: str


# The RecordNames field of each counter's rate (without the fleet_ prefix).
_RATE_FIELD = {ACCEPTED: "accepted_rate", DRAFT_TOKENS: "draft_tokens_rate", DRAFTS: "drafts_rate",
               GENERATED: "generation_rate"}
# The counters whose rate has a per-server record (per server and model, the engines summed).
SERVER_RATE_RECORDS = tuple(_RATE_FIELD)


def server_rate_record(cfg: MixinConfig, counter: SourceCounter) -> str:
    """The per-server record (`instance_model`, engines summed) of one counter's rate."""
    return getattr(record_names(cfg), _RATE_FIELD[counter])


# The documented API (alerts/README.md, marked API): records kept for users' own alerts and
# Grafana panels, whether or not an alert, dashboard or runbook of ours reads them. Every other
# record exists because one does (a test fails on a record nothing reads).
PUBLIC_RECORDS = ("acceptance_ratio", "fleet_acceptance_ratio")


def position_acceptance(cfg: MixinConfig, matchers: str) -> str:
    """POSITION_ACCEPTANCE per server, model and position, from the scraped counters on `matchers`
    (the runbook's query for one server; its drafts read raw too, one layer for both). Not a
    record, nor is the per-position rate per server (sources.RECORDED): per position and server
    they cost more series and evaluation time than anything else per server (k series each), and
    only a person diagnosing one server reads them."""
    return POSITION_ACCEPTANCE.expr(lambda counter: sources.rate_sum(cfg, counter, matchers))


def public_records(cfg: MixinConfig) -> tuple[str, ...]:
    """The names of PUBLIC_RECORDS for `cfg` (the window and fleet labels are part of each name)."""
    names = dataclasses.asdict(record_names(cfg))
    return tuple(names[field_name] for field_name in PUBLIC_RECORDS)


@once_per_config
def record_names(cfg: MixinConfig) -> RecordNames:
    w = cfg.windows.rate_window
    fleet = "_".join((*cfg.fleet_labels, "model"))
    names: dict[str, str] = {
        "running_batch": f"instance_model:vllm_num_requests_running:min_active_over_time{w}",
        "drafting_batch": f"instance_model:vllm_num_requests_running:min_drafting_over_time{w}",
        "drafts_stopped": f"instance_model:vllm_spec_decode_drafts_stopped:rate{w}",
        "drafting_paused": f"instance_model:vllm_spec_decode_drafting_paused:rate{w}",
    }
    level = "instance_model"
    names |= {
        "drafts_rate": f"{level}:vllm_spec_decode_drafts:rate{w}",
        "generation_rate": f"{level}:vllm_generation_tokens:rate{w}",
        "acceptance_length": f"{level}:vllm_spec_decode_acceptance_length:mean_rate{w}",
    }
    for level, prefix in (("instance_model", ""), (fleet, "fleet_")):
        names |= {
            f"{prefix}accepted_rate": f"{level}:vllm_spec_decode_accepted_tokens:rate{w}",
            f"{prefix}draft_tokens_rate": f"{level}:vllm_spec_decode_draft_tokens:rate{w}",
            f"{prefix}acceptance_ratio": f"{level}:vllm_spec_decode_accepted_per_draft_tokens:ratio_rate{w}",
        }
    return RecordNames(**names)


@dataclass(frozen=True)
class EvidenceNames:
    """Evidence records of one window `w` (per server and model)."""

    window: str
    drafts: str  # drafts in the window (the trials; absent without drafts)
    acceptance: str  # the window's acceptance, accepted / draft tokens (absent without draft tokens)
    upper: str  # Wilson upper bound of acceptance (label confidence)
    lower: str  # Wilson lower bound (recorded for lower_bound_windows only)


@functools.cache
def evidence_names(window: str) -> EvidenceNames:
    return EvidenceNames(
        window=window,
        drafts=sources.increase_record(DRAFTS, window),
        acceptance=f"instance_model:vllm_spec_decode_accepted_per_draft_tokens:ratio_increase{window}",
        upper=f"instance_model:vllm_spec_decode_acceptance:confidence_upper_{window}",
        lower=f"instance_model:vllm_spec_decode_acceptance:confidence_lower_{window}",
    )


def lower_bound_windows(cfg: MixinConfig) -> tuple[str, ...]:
    """The windows whose lower bound something reads: the alerts' fast short window (recovery: the
    slow tier is ignored once it proves acceptance back) and the overview's band over the fast long
    window (the runbook shows that one too). The slow windows' lower bounds have no reader: the
    runbook shows the slow tier's acceptance beside its upper bound instead (the slow long
    window's lower bound was its group's costliest rule)."""
    w = cfg.windows
    return tuple(dict.fromkeys((w.fast_short, w.fast_long)))


def wilson_bound(cfg: MixinConfig, e: EvidenceNames, side: str) -> str:
    """PromQL for the Wilson score bound of acceptance over `e.window` (side "+" upper, "-" lower).

    With p the window's acceptance, n = drafts / acceptance_overdispersion the effective trials and
    z the one-sided quantile of acceptance_confidence:
        bound = (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    Multiplied through by the raw drafts D (n = D/φ), so every constant is folded in at generation
    time and p and D are each read three times (a rule cannot name a subexpression, and on a large
    fleet every read of a window's records costs):
        bound = (p·D + z²φ/2 ± z·sqrt(φ·p(1-p)·D + z²φ²/4)) / (D + z²φ)
    Only `sqrt` and arithmetic: valid on every Prometheus (and Thanos/Mimir ruler).
    p and D are records of the same group computed straight from the counters (evidence_rules):
    a bound one record away from the counters pages no later on vmalert (sources.py says why).
    """
    z, phi = cfg.confidence_z, cfg.acceptance_overdispersion
    z2 = z * z
    p, d = own(cfg, e.acceptance), own(cfg, e.drafts)
    bound = (f"(\n  {p} * {d}\n  + {z2 * phi / 2:.10g}\n"
             f"  {side} {z:.10g} * sqrt({phi:g} * {p} * (1 - {p}) * {d} + {z2 * phi * phi / 4:.10g})\n)\n"
             f"/\n({d} + {z2 * phi:.10g})")
    # Mathematically within [0, 1]; the clamp only removes float rounding (-1e-12 at p = 0).
    return f"clamp_min(\n{bound},\n0\n)" if side == "-" else f"clamp_max(\n{bound},\n1\n)"


def evidence_group_name(window: str) -> str:
    return f"{EVIDENCE_GROUP}.{window}"


def evidence_rules(cfg: MixinConfig, window: str) -> list[dict[str, Any]]:
    """The drafts and the acceptance of one alert window, per server and model, then its Wilson
    bounds (the lower one only where read: lower_bound_windows)."""
    confidence = {"confidence": cfg.confidence_label}
    e = evidence_names(window)
    lower = window in lower_bound_windows(cfg)

    def increase(counter: SourceCounter) -> str:
        return sources.increase_sum(cfg, counter, window)

    # increase(), not rate(): the bound needs counts. The drafts record keeps only windows with
    # drafts, so an idle server has no bound at all (no evidence never fires) instead of a NaN.
    # The acceptance is ACCEPTANCE over the window's increases, from the counters (not from two
    # more records): the bounds then read two records, not three, and stay one from the counters.
    return [
        {"record": e.drafts, "expr": f"{increase(DRAFTS)} > 0"},
        {"record": e.acceptance, "expr": ACCEPTANCE.expr(increase)},
        {"record": e.upper, "expr": wilson_bound(cfg, e, "+"), "labels": dict(confidence)},
        *([{"record": e.lower, "expr": wilson_bound(cfg, e, "-"), "labels": dict(confidence)}] if lower else []),
    ]


def evidence_meanings(cfg: MixinConfig) -> dict[str, str]:
    """Record name -> one-line meaning (alerts/README.md)."""
    conf = cfg.confidence_label
    meanings: dict[str, str] = {}
    for window in cfg.windows.evidence:
        e = evidence_names(window)
        meanings |= {
            e.drafts: f"Per server and model (engines summed): drafts over the last {window} "
                      "(the trials behind the bound); absent without drafts.",
            e.acceptance: f"Per server and model (engines summed): acceptance over the last {window}, "
                          "accepted / proposed draft tokens; absent without draft tokens.",
            e.upper: f"Per server and model. Upper Wilson bound of acceptance over {window}, label "
                     f"confidence=\"{conf}\": acceptance is below it with {conf} confidence.",
        }
        if window in lower_bound_windows(cfg):
            meanings[e.lower] = (f"Per server and model. Lower Wilson bound over {window}: acceptance is above it "
                                 f"with {conf} confidence.")
    return meanings


def fleet_model_labels(cfg: MixinConfig) -> tuple[str, ...]:
    """What the per-model fleet records keep besides model_name: the fleet labels and the source
    selector's labels (`own()` reads these records back with it), never the instance label."""
    kept = dict.fromkeys((*cfg.fleet_labels, *sources.selector_labels(cfg)))
    return tuple(label for label in kept if label != cfg.instance_label)


def recording_rules(cfg: MixinConfig) -> list[dict[str, Any]]:
    """Per server and model, then per model across the fleet: rates and QUANTITIES' ratios (those read)."""
    n = record_names(cfg)
    fields = dataclasses.asdict(n)
    by_fleet = ", ".join((*fleet_model_labels(cfg), "model_name"))
    rules: list[dict[str, Any]] = []

    def record(name: str, expr: str) -> None:
        rules.append({"record": name, "expr": expr})

    def read(counter: SourceCounter, prefix: str = "") -> str:
        return own(cfg, fields[prefix + _RATE_FIELD[counter]])

    # Per server: sum the data-parallel engines (`without` keeps job, instance and any other
    # target labels such as namespace or pod). Then QUANTITIES' ratios divide those sums.
    for counter, field_name in _RATE_FIELD.items():
        record(fields[field_name], f"sum without (engine) ({own(cfg, sources.rate_record(cfg, counter))})")
    record(n.acceptance_ratio, ACCEPTANCE.expr(read))
    record(n.acceptance_length, MEAN_ACCEPTANCE_LENGTH.expr(read))
    # Per model across the fleet: sum the servers' rates, then divide (acceptance, the API).
    for counter in ACCEPTANCE.numerator + ACCEPTANCE.denominator:
        field_name = _RATE_FIELD[counter]
        record(fields["fleet_" + field_name], f"sum by ({by_fleet}) ({read(counter)})")
    record(n.fleet_acceptance_ratio, ACCEPTANCE.expr(lambda counter: read(counter, "fleet_")))
    return rules + drafting_state_rules(cfg, n)


def recording_groups(cfg: MixinConfig) -> list[dict[str, Any]]:
    # Rules in a group run in order, so each evidence group's bounds see this cycle's increases.
    # The groups stay small (mixtool's lint: <= 20 rules); a group reads the source records of
    # the previous evaluation at worst, never a stale window. `interval:` pins the evaluation
    # interval the holds were rounded to, whatever the server's global evaluation_interval is.
    interval = cfg.windows.evaluation_interval
    return [{"name": SOURCE_GROUP, "interval": interval, "rules": sources.source_rules(cfg)},
            *([positions.k_group(cfg)] if cfg.direct else []),
            fleet_records.fleet_group(cfg),
            {"name": RECORDING_GROUP, "interval": interval, "rules": recording_rules(cfg)},
            counts_group(cfg),
            load.load_group(cfg),
            measured.measured_group(cfg),
            *({"name": evidence_group_name(window), "interval": interval, "rules": evidence_rules(cfg, window)}
              for window in cfg.windows.evidence)]


def counts_group(cfg: MixinConfig) -> dict[str, Any]:
    """The fleet counts (fleet_counts.py), each server's acceptance read from this module's
    per-server records (engines summed), its models summed before dividing."""
    fields = dataclasses.asdict(record_names(cfg))
    by = ", ".join(fleet_counts.server_labels(cfg))
    acceptance = ACCEPTANCE.expr(lambda counter: f"sum by ({by}) ({own(cfg, fields[_RATE_FIELD[counter]])})",
                                 separator=" ")
    drafting = f"{own(cfg, fields['draft_tokens_rate'])} > 0"
    return fleet_counts.fleet_counts_group(cfg, acceptance, drafting)


def source_meanings(cfg: MixinConfig) -> dict[str, str]:
    """Source record name -> one-line meaning (alerts/README.md)."""
    origin = (f"vLLM's own counters (`{cfg.vllm_selector}`, any spelling)" if cfg.direct
              else f"the exporter's counters (`{cfg.exporter_selector}`)")
    return {sources.rate_record(cfg, c): f"Source layer, per server, model and engine, from {origin}: "
                                          f"{sources.COUNTER_MEANINGS[c]} per second."
            for c in sources.RECORDED}


def record_meaning(name: str, n: RecordNames) -> str:
    """One line for alerts/README.md: what a record of `record_names` holds."""
    meanings = {
        "accepted_rate": "Accepted draft tokens per second.",
        "draft_tokens_rate": "Draft tokens proposed per second.",
        "drafts_rate": "Drafts (verification steps with a draft) per second.",
        "generation_rate": "Generated (output) tokens per second, accepted drafts included.",
        "acceptance_ratio": "Acceptance rate: accepted / proposed draft tokens (0..1).",
        "acceptance_length": "Mean acceptance length: 1 + accepted tokens / drafts (1..k+1).",
        "running_batch": "The smallest running batch (requests, engines summed) of the window, idle moments left "
                         "out; absent when idle throughout.",
        "drafting_batch": "The smallest running batch of the window, when the server drafted in it: a batch size "
                          "at which it drafts.",
        "drafts_stopped": "Output tokens/s while no draft is proposed at a batch where the server drafted before "
                          "(speculation stopped; SpecDecodeDraftsStopped).",
        "drafting_paused": "Output tokens/s while drafting is paused by design: no drafts, and the batch is larger"
                           " than any at which the server drafted (vLLM dynamic k = 0 under load).",
    }
    for field_name, record in dataclasses.asdict(n).items():
        if record == name:
            key = field_name.removeprefix("fleet_")
            scope = "Per model across the fleet" if field_name.startswith("fleet_") else "Per server and model"
            api = " **API**: kept for your own alerts and panels." if field_name in PUBLIC_RECORDS else ""
            return f"{scope}. {meanings[key]}{api}"
    raise KeyError(name)
