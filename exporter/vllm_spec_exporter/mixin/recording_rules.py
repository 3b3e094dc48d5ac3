"""Recording rules for speculative decoding, built from one MixinConfig.

Recording rules follow Prometheus' `level:metric:operations` convention
(https://prometheus.io/docs/practices/rules/):

* level `instance_model`: one server (all its data-parallel engines summed) and one model;
  `instance_model_position` adds the 0-based draft `position`;
* level `<fleet labels>_model` (default `job_model`): every server of a model summed;
* operation `rate<window>` for per-second rates, `ratio_rate<window>` for a ratio of two rates
  (the two metrics joined by `_per_`), `mean_rate<window>` for the mean acceptance length.

Ratios always divide separately aggregated numerators and denominators (never an average of
ratios), and the denominator is guarded with `> 0` so idle servers give no sample instead of NaN.
All inputs are the exporter's colon-free counters (names.MetricName).

The acceptance alerts read a second family, the *evidence* records, one set per alert window:
drafts (the trials) and the acceptance ratio over the window from `increase()`, and the Wilson
score bounds `:confidence_upper_<w>` / `:confidence_lower_<w>` with a `confidence` label
(GitLab metrics-catalog style). An alert fires when the upper bound is below its threshold in a
long and a short window of one tier, i.e. when the counters prove acceptance is low.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..names import MetricName
from . import links
from .config import MixinConfig

__all__ = [
    "EVIDENCE_GROUP",
    "RECORDING_GROUP",
    "EvidenceNames",
    "RecordNames",
    "alert_windows",
    "engine_tier_steps",
    "evidence_meanings",
    "evidence_names",
    "evidence_rules",
    "record_meaning",
    "record_names",
    "recording_groups",
    "recording_rules",
    "wilson_bound",
]

RECORDING_GROUP = "vllm-spec-decode.rules"
EVIDENCE_GROUP = "vllm-spec-decode.evidence"


@dataclass(frozen=True)
class RecordNames:
    """Names of the recording rules for one config (the window is part of each name)."""

    # Per server and model: tokens (or drafts) per second.
    accepted_rate: str
    draft_tokens_rate: str
    drafts_rate: str
    generation_rate: str
    accepted_by_position_rate: str
    # Per server and model: derived ratios.
    acceptance_ratio: str
    acceptance_length: str
    position_acceptance_ratio: str
    # Per server and model: drafting paused by design vs stopped (config.drafting_batch_memory).
    running_batch: str
    drafting_batch: str
    drafts_stopped: str
    drafting_paused: str
    # The same across the fleet, per model.
    fleet_accepted_rate: str
    fleet_draft_tokens_rate: str
    fleet_drafts_rate: str
    fleet_generation_rate: str
    fleet_accepted_by_position_rate: str
    fleet_acceptance_ratio: str
    fleet_acceptance_length: str
    fleet_position_acceptance_ratio: str


def record_names(cfg: MixinConfig) -> RecordNames:
    w = cfg.windows.rate_window
    fleet = "_".join((*cfg.fleet_labels, "model"))
    names: dict[str, str] = {
        "running_batch": f"instance_model:vllm_num_requests_running:min_active_over_time{w}",
        "drafting_batch": f"instance_model:vllm_num_requests_running:min_drafting_over_time{w}",
        "drafts_stopped": f"instance_model:vllm_spec_decode_drafts_stopped:rate{w}",
        "drafting_paused": f"instance_model:vllm_spec_decode_drafting_paused:rate{w}",
    }
    for level, prefix in (("instance_model", ""), (fleet, "fleet_")):
        names |= {
            f"{prefix}accepted_rate": f"{level}:vllm_spec_decode_accepted_tokens:rate{w}",
            f"{prefix}draft_tokens_rate": f"{level}:vllm_spec_decode_draft_tokens:rate{w}",
            f"{prefix}drafts_rate": f"{level}:vllm_spec_decode_drafts:rate{w}",
            f"{prefix}generation_rate": f"{level}:vllm_generation_tokens:rate{w}",
            f"{prefix}accepted_by_position_rate":
                f"{level}_position:vllm_spec_decode_accepted_tokens_by_position:rate{w}",
            f"{prefix}acceptance_ratio": f"{level}:vllm_spec_decode_accepted_per_draft_tokens:ratio_rate{w}",
            f"{prefix}acceptance_length": f"{level}:vllm_spec_decode_acceptance_length:mean_rate{w}",
            f"{prefix}position_acceptance_ratio":
                f"{level}_position:vllm_spec_decode_accepted_by_position_per_drafts:ratio_rate{w}",
        }
    return RecordNames(**names)


@dataclass(frozen=True)
class EvidenceNames:
    """Evidence records of one window `w` (per server and model)."""

    window: str
    drafts: str  # drafts in the window: the trial count behind the bound
    ratio: str  # accepted / proposed draft tokens in the window
    upper: str  # Wilson upper bound of acceptance (label confidence)
    lower: str  # Wilson lower bound


def evidence_names(window: str) -> EvidenceNames:
    return EvidenceNames(
        window=window,
        drafts=f"instance_model:vllm_spec_decode_drafts:increase{window}",
        ratio=f"instance_model:vllm_spec_decode_accepted_per_draft_tokens:ratio_increase{window}",
        upper=f"instance_model:vllm_spec_decode_acceptance:confidence_upper_{window}",
        lower=f"instance_model:vllm_spec_decode_acceptance:confidence_lower_{window}",
    )


def alert_windows(cfg: MixinConfig) -> list[str]:
    """Every window the acceptance alerts use, each once, in tier order (AlertWindows.evidence)."""
    return list(cfg.windows.evidence)


def wilson_bound(cfg: MixinConfig, e: EvidenceNames, side: str) -> str:
    """PromQL for the Wilson score bound of acceptance over `e.window` (side "+" upper, "-" lower).

    With p the ratio, n = drafts / acceptance_overdispersion the effective trials and z the
    one-sided quantile of acceptance_confidence:
        bound = (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    Written over the raw drafts D (n = D/φ) so every constant is folded in at generation time:
        bound = (p + (z²φ/2)/D ± z·sqrt(φ·p(1-p)/D + (z²φ²/4)/D²)) / (1 + (z²φ)/D)
    Only `sqrt`, `^` and arithmetic: valid on every Prometheus (and Thanos/Mimir ruler).
    """
    z, phi = cfg.confidence_z, cfg.acceptance_overdispersion
    z2 = z * z
    p, d = e.ratio, e.drafts
    bound = (f"(\n  {p}\n  + {z2 * phi / 2:.10g} / {d}\n"
             f"  {side} {z:.10g} * sqrt({phi:g} * {p} * (1 - {p}) / {d} + {z2 * phi * phi / 4:.10g} / {d} ^ 2)\n)\n"
             f"/\n(1 + {z2 * phi:.10g} / {d})")
    # Mathematically within [0, 1]; the clamp only removes float rounding (-1e-12 at p = 0).
    return f"clamp_min(\n{bound},\n0\n)" if side == "-" else f"clamp_max(\n{bound},\n1\n)"


def evidence_rules(cfg: MixinConfig) -> list[dict[str, Any]]:
    """Drafts, ratio and both Wilson bounds for every alert window, per server and model."""
    sel = links.exporter_selector(cfg)
    confidence = {"confidence": cfg.confidence_label}
    rules: list[dict[str, Any]] = []
    for window in alert_windows(cfg):
        e = evidence_names(window)
        # increase(), not rate(): the bound needs counts. `> 0` drops windows without drafts, so
        # an idle server has no bound at all (no evidence never fires) instead of a NaN.
        rules.append({"record": e.drafts,
                      "expr": f"sum without (engine) (increase({MetricName.DRAFTS_TOTAL}{sel}[{window}])) > 0"})
        rules.append({"record": e.ratio, "expr": (
            f"sum without (engine) (increase({MetricName.ACCEPTED_TOKENS_TOTAL}{sel}[{window}]))\n/\n"
            f"(sum without (engine) (increase({MetricName.DRAFT_TOKENS_TOTAL}{sel}[{window}])) > 0)")})
        rules.append({"record": e.upper, "expr": wilson_bound(cfg, e, "+"), "labels": dict(confidence)})
        rules.append({"record": e.lower, "expr": wilson_bound(cfg, e, "-"), "labels": dict(confidence)})
    return rules


def evidence_meanings(cfg: MixinConfig) -> dict[str, str]:
    """Record name -> one-line meaning (alerts/README.md)."""
    conf = cfg.confidence_label
    meanings: dict[str, str] = {}
    for window in alert_windows(cfg):
        e = evidence_names(window)
        meanings |= {
            e.drafts: f"Per server and model. Drafts over the last {window} (the trials behind the bound); "
                      "absent without drafts.",
            e.ratio: f"Per server and model. Acceptance over the last {window}: accepted / proposed draft tokens.",
            e.upper: f"Per server and model. Upper Wilson bound of acceptance over {window}, label "
                     f"confidence=\"{conf}\": acceptance is below it with {conf} confidence.",
            e.lower: f"Per server and model. Lower Wilson bound over {window}: acceptance is above it with "
                     f"{conf} confidence.",
        }
    return meanings


def recording_rules(cfg: MixinConfig) -> list[dict[str, Any]]:
    n = record_names(cfg)
    sel, w = links.exporter_selector(cfg), cfg.windows.rate_window
    by_fleet = ", ".join((*cfg.fleet_labels, "model_name"))
    rules: list[dict[str, Any]] = []

    def record(name: str, expr: str) -> None:
        rules.append({"record": name, "expr": expr})

    # Per server: sum the data-parallel engines (`without` keeps job, instance and any other
    # target labels such as namespace or pod).
    for name, counter in ((n.accepted_rate, MetricName.ACCEPTED_TOKENS_TOTAL),
                          (n.draft_tokens_rate, MetricName.DRAFT_TOKENS_TOTAL),
                          (n.drafts_rate, MetricName.DRAFTS_TOTAL),
                          (n.generation_rate, MetricName.GENERATION_TOKENS_TOTAL),
                          (n.accepted_by_position_rate, MetricName.ACCEPTED_TOKENS_BY_POSITION_TOTAL)):
        record(name, f"sum without (engine) (rate({counter}{sel}[{w}]))")
    record(n.acceptance_ratio, f"{n.accepted_rate}\n/\n({n.draft_tokens_rate} > 0)")
    # Mean acceptance length counts the bonus token the target emits with every verification.
    record(n.acceptance_length, f"1 + {n.accepted_rate}\n/\n({n.drafts_rate} > 0)")
    # vLLM exports no per-position draft counter; its own per-position rate divides by drafts.
    record(n.position_acceptance_ratio,
           f"{n.accepted_by_position_rate}\n/ ignoring (position) group_left ()\n({n.drafts_rate} > 0)")
    rules += drafting_state_rules(cfg, n)

    # Fleet: sum the per-server rates, then divide the sums.
    for fleet_name, instance_name in ((n.fleet_accepted_rate, n.accepted_rate),
                                      (n.fleet_draft_tokens_rate, n.draft_tokens_rate),
                                      (n.fleet_drafts_rate, n.drafts_rate),
                                      (n.fleet_generation_rate, n.generation_rate)):
        record(fleet_name, f"sum by ({by_fleet}) ({instance_name})")
    record(n.fleet_accepted_by_position_rate, f"sum by ({by_fleet}, position) ({n.accepted_by_position_rate})")
    record(n.fleet_acceptance_ratio, f"{n.fleet_accepted_rate}\n/\n({n.fleet_draft_tokens_rate} > 0)")
    record(n.fleet_acceptance_length, f"1 + {n.fleet_accepted_rate}\n/\n({n.fleet_drafts_rate} > 0)")
    record(n.fleet_position_acceptance_ratio,
           f"{n.fleet_accepted_by_position_rate}\n/ ignoring (position) group_left ()\n({n.fleet_drafts_rate} > 0)")
    return rules


def drafting_state_rules(cfg: MixinConfig, n: RecordNames) -> list[dict[str, Any]]:
    """Drafting paused by design vs speculation stopped, per server and model.

    vLLM's dynamic k (num_speculative_tokens_per_batch_size) sets k = 0 above a batch size, and
    such steps count no draft at all: drafts/s falls to 0 under load while output flows. The
    server's running batch tells the two apart. `drafting_batch` is the smallest batch of a window
    in which the server drafted (a batch size at which it drafts, whatever its k table); with no
    drafts now, a batch still larger than any such size over drafting_batch_memory is a pause by
    design, and a batch at or below one is speculation stopped. Idle moments (no running request)
    are left out, so bursts separated by idle gaps do not look like a small batch. A server with
    no drafting on record is neither: nothing to compare with, so nothing is claimed.

    Engines that say which tier they run need no inference: SGLang's adaptive mode serves the
    active tier's draft steps, and a tier of 0 steps drafts nothing on purpose (its own acceptance
    gauges then read 0 %). drafts_stopped never holds while engine_tier_steps is 0. (An expression,
    not a record: the recording group is at mixtool's 20-rule limit.)
    """
    sel, w = links.exporter_selector(cfg), cfg.windows.rate_window
    no_drafts = (f"(\n  {n.generation_rate} >= {cfg.min_generation_tokens_per_second:g}\nand\n"
                 f"  {n.draft_tokens_rate} == 0\n)")
    drafted_at = f"max_over_time({n.drafting_batch}[{cfg.drafting_batch_memory}])"
    return [
        # A subquery at the evaluation interval, so idle moments (no sample above 0) are skipped. The
        # step is explicit: MetricsQL (vmalert) defaults a subquery's step to the query's, not to the
        # evaluation interval, and then the window can hold no point at all.
        {"record": n.running_batch,
         "expr": f"min_over_time((sum without (engine) ({MetricName.REQUESTS_RUNNING}{sel}) > 0)"
                 f"[{w}:{cfg.windows.evaluation_interval}])"},
        {"record": n.drafting_batch, "expr": f"{n.running_batch}\nand\n({n.draft_tokens_rate} > 0)"},
        {"record": n.drafts_stopped,
         "expr": f"{no_drafts}\nand\n({n.running_batch} <= {drafted_at})\nunless\n({engine_tier_steps(sel)} == 0)"},
        {"record": n.drafting_paused, "expr": f"{no_drafts}\nand\n({n.running_batch} > {drafted_at})"},
    ]


def engine_tier_steps(selector: str) -> str:
    """Per server and model: the draft steps of an adaptive engine's active tier (SGLang
    --speculative-adaptive), the highest engine; 0 = the tier drafts nothing, paused by design.
    Only servers with a drafter (verify tokens >= 1: SGLang reports 0 / 0 without one)."""
    return (f"(max without (engine) ({MetricName.ENGINE_DRAFT_STEPS}{selector}) "
            f"and max without (engine) ({MetricName.ENGINE_VERIFY_TOKENS}{selector}) > 0)")


def recording_groups(cfg: MixinConfig) -> list[dict[str, Any]]:
    # Rules in a group run in order, so the fleet rules see this cycle's server rules and the
    # bounds this cycle's drafts and ratios. The evidence records are their own group: they feed
    # the acceptance alerts only, and both groups stay small (mixtool's lint: <= 20 rules).
    # `interval:` pins the evaluation interval the holds were rounded to, whatever the server's
    # global evaluation_interval is.
    interval = cfg.windows.evaluation_interval
    return [{"name": RECORDING_GROUP, "interval": interval, "rules": recording_rules(cfg)},
            {"name": EVIDENCE_GROUP, "interval": interval, "rules": evidence_rules(cfg)}]


def record_meaning(name: str, n: RecordNames) -> str:
    """One line for alerts/README.md: what a record of `record_names` holds."""
    meanings = {
        "accepted_rate": "Accepted draft tokens per second.",
        "draft_tokens_rate": "Draft tokens proposed per second.",
        "drafts_rate": "Drafts (verification steps with a draft) per second.",
        "generation_rate": "Generated (output) tokens per second, accepted drafts included.",
        "accepted_by_position_rate": "Accepted draft tokens per second at each 0-based position.",
        "acceptance_ratio": "Acceptance rate: accepted / proposed draft tokens (0..1).",
        "acceptance_length": "Mean acceptance length: 1 + accepted tokens / drafts (1..k+1).",
        "position_acceptance_ratio": "Share of drafts whose token at this position was accepted (drafts of any "
                                     "length count in the denominator: a lower bound when drafts are shorter than"
                                     " k, e.g. n-gram misses or dynamic k).",
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
            return f"{scope}. {meanings[key]}"
    raise KeyError(name)
