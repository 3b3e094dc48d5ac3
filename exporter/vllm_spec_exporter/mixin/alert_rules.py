"""Recording and alerting rules for speculative decoding, built from one MixinConfig.

Recording rules follow Prometheus' `level:metric:operations` convention
(https://prometheus.io/docs/practices/rules/):

* level `instance_model`: one server (all its data-parallel engines summed) and one model;
  `instance_model_position` adds the 0-based draft `position`;
* level `<fleet labels>_model` (default `job_model`): every server of a model summed;
* operation `rate<window>` for per-second rates, `ratio_rate<window>` for a ratio of two rates
  (the two metrics joined by `_per_`), `mean_rate<window>` for the mean acceptance length.

Ratios always divide separately aggregated numerators and denominators (never an average of
ratios), and the denominator is guarded with `> 0` so idle servers give no sample instead of NaN.
All inputs are the exporter's colon-free counters.

The acceptance alerts read a second family, the *evidence* records, one set per alert window:
drafts (the trials) and the acceptance ratio over the window from `increase()`, and the Wilson
score bounds `:confidence_upper_<w>` / `:confidence_lower_<w>` with a `confidence` label
(GitLab metrics-catalog style). An alert fires when the upper bound is below its threshold in a
long and a short window of one tier, i.e. when the counters prove acceptance is low.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import schema
from .config import MixinConfig

# Alert names are a contract (routing, inhibition, runbook anchors, dashboards link to them).
ACCEPTANCE_LOW = "SpecDecodeAcceptanceLow"
ACCEPTANCE_CRITICAL = "SpecDecodeAcceptanceCritical"
DRAFTS_STOPPED = "SpecDecodeDraftsStopped"
METRICS_MISSING = "SpecDecodeMetricsMissing"
VLLM_UNREACHABLE = "SpecDecodeVllmUnreachable"
VLLM_RESTARTING = "SpecDecodeVllmRestarting"
EXPORTER_DOWN = "SpecDecodeExporterDown"
EXPORTER_ABSENT = "SpecDecodeExporterAbsent"

# Alerts about acceptance that a dead target makes meaningless (Alertmanager inhibits them).
TRAFFIC_ALERTS = (ACCEPTANCE_LOW, ACCEPTANCE_CRITICAL, DRAFTS_STOPPED)
TARGET_DOWN_ALERTS = (VLLM_UNREACHABLE, EXPORTER_DOWN)

RECORDING_GROUP = "vllm-spec-decode.rules"
EVIDENCE_GROUP = "vllm-spec-decode.evidence"
ACCEPTANCE_GROUP = "vllm-spec-decode.alerts"
EXPORTER_GROUP = "vllm-spec-exporter.alerts"


ACCEPTED = schema.served("vllm_spec_decode_accepted_tokens_total")
DRAFT_TOKENS = schema.served("vllm_spec_decode_draft_tokens_total")
DRAFTS = schema.served("vllm_spec_decode_drafts_total")
ACCEPTED_BY_POSITION = schema.served("vllm_spec_decode_accepted_tokens_by_position_total")
GENERATION = schema.served("vllm_generation_tokens_total")
TARGET_UP = schema.served("vllm_spec_exporter_target_up")
SPEC_ENABLED = schema.served("vllm_spec_decode_enabled")
COUNTER_RESETS = schema.served("vllm_spec_exporter_counter_resets_total")


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
    w = cfg.rate_window
    fleet = "_".join((*cfg.fleet_labels, "model"))
    names: dict[str, str] = {}
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
    """Every window the acceptance alerts use, each once, in tier order."""
    windows = (cfg.acceptance_fast_long_window, cfg.acceptance_fast_short_window,
               cfg.acceptance_slow_long_window, cfg.acceptance_slow_short_window)
    return list(dict.fromkeys(windows))


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
    sel = _selector(cfg)
    confidence = {"confidence": cfg.confidence_label}
    rules: list[dict[str, Any]] = []
    for window in alert_windows(cfg):
        e = evidence_names(window)
        # increase(), not rate(): the bound needs counts. `> 0` drops windows without drafts, so
        # an idle server has no bound at all (no evidence never fires) instead of a NaN.
        rules.append({"record": e.drafts,
                      "expr": f"sum without (engine) (increase({DRAFTS}{sel}[{window}])) > 0"})
        rules.append({"record": e.ratio, "expr": (
            f"sum without (engine) (increase({ACCEPTED}{sel}[{window}]))\n/\n"
            f"(sum without (engine) (increase({DRAFT_TOKENS}{sel}[{window}])) > 0)")})
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


def _selector(cfg: MixinConfig) -> str:
    return "{" + cfg.exporter_selector + "}"


def _label_template(label: str) -> str:
    return "{{ $labels." + label + " }}"


def _percent(ratio: float) -> str:
    return f"{ratio * 100:g}%"


def recording_rules(cfg: MixinConfig) -> list[dict[str, Any]]:
    n = record_names(cfg)
    sel, w = _selector(cfg), cfg.rate_window
    by_fleet = ", ".join((*cfg.fleet_labels, "model_name"))
    rules: list[dict[str, Any]] = []

    def record(name: str, expr: str) -> None:
        rules.append({"record": name, "expr": expr})

    # Per server: sum the data-parallel engines (`without` keeps job, instance and any other
    # target labels such as namespace or pod).
    for name, counter in ((n.accepted_rate, ACCEPTED), (n.draft_tokens_rate, DRAFT_TOKENS),
                          (n.drafts_rate, DRAFTS), (n.generation_rate, GENERATION),
                          (n.accepted_by_position_rate, ACCEPTED_BY_POSITION)):
        record(name, f"sum without (engine) (rate({counter}{sel}[{w}]))")
    record(n.acceptance_ratio, f"{n.accepted_rate}\n/\n({n.draft_tokens_rate} > 0)")
    # Mean acceptance length counts the bonus token the target emits with every verification.
    record(n.acceptance_length, f"1 + {n.accepted_rate}\n/\n({n.drafts_rate} > 0)")
    # vLLM exports no per-position draft counter; its own per-position rate divides by drafts.
    record(n.position_acceptance_ratio,
           f"{n.accepted_by_position_rate}\n/ ignoring (position) group_left ()\n({n.drafts_rate} > 0)")

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


def dashboard_url(cfg: MixinConfig) -> str:
    return f"{cfg.grafana_url.rstrip('/')}/d/{cfg.dashboard_uid_prefix}-overview"


# Alert labels that select the overview dashboard's variables (job, instance, model_name), so the
# link opens on the failing server and model.
SERVER_VARIABLES = ("job", "instance")
SERVER_MODEL_VARIABLES = ("job", "instance", "model_name")


def _dashboard_link(cfg: MixinConfig, variables: tuple[str, ...]) -> str:
    label_of = {"job": "job", "instance": cfg.instance_label, "model_name": "model_name"}
    query = "&".join(f"var-{var}={{{{ $labels.{label_of[var]} | urlquery }}}}" for var in variables)
    return dashboard_url(cfg) + (f"?{query}" if query else "")


def _alert(cfg: MixinConfig, name: str, expr: str, severity: str, summary: str, description: str,
           for_: str | None = None,
           dashboard_variables: tuple[str, ...] = SERVER_VARIABLES) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ and for_ not in ("0s", "0m"):
        rule["for"] = for_
    rule["labels"] = dict(sorted({**cfg.extra_alert_labels, "severity": severity}.items()))
    rule["annotations"] = {
        "dashboard_url": _dashboard_link(cfg, dashboard_variables),
        "description": description,
        "runbook_url": cfg.runbook_url_pattern % name.lower(),
        "summary": summary,
    }
    return rule


def acceptance_condition(cfg: MixinConfig, threshold: float, sustained: str) -> str:
    """"The counters prove acceptance < threshold, and have for `sustained`", as PromQL.

    fast tier:  upper(fast long) < T  and  max_over_time(upper(fast short)[sustained]) < T
    slow tier: (upper(slow long) < T  and  max_over_time(upper(slow short)[slow_for]) < T)
               unless lower(fast short) > T
    then `and` the server's draft counter still exists.

    The long window is the evidence; the short window says "still bad now" and, held over
    `sustained`, tells a dip from a collapse (both look the same for their first minutes). The
    `for` is not on the whole expression, so the evidence window and the duration run in
    parallel: a collapse pages after max(evidence, short window + sustained), not their sum. One
    recovered short window ends the alert at once (max_over_time sees it), with no lag.
    The `unless` lets a high-traffic recovery (the last fast short window alone proves
    acceptance is back above T) end the alert without waiting for the slow windows. The last
    clause ends the alert when the series vanish (pod deleted, model unloaded): range windows
    keep returning old samples for a whole window after a target is gone, an instant selector
    stops at once (stale marker). The left-most bound is the alert's $value.
    """
    t = f"{threshold:g}"
    fl, fs, sl, ss = (evidence_names(w) for w in (
        cfg.acceptance_fast_long_window, cfg.acceptance_fast_short_window,
        cfg.acceptance_slow_long_window, cfg.acceptance_slow_short_window))
    def held(short: EvidenceNames, sustained: str, indent: str) -> str:
        # Below T at every evaluation in the last `sustained`, and already `sustained` ago: a
        # series younger than that (a new pod) waits the full time too. The `offset` term also
        # keeps the check the same on Prometheus 3.x, whose left-open range drops the start.
        return (f"max_over_time({short.upper}[{sustained}]) < {t}\n{indent}and\n"
                f"{indent}  {short.upper} offset {sustained} < {t}")

    return (
        f"(\n"
        f"  (\n    {fl.upper} < {t}\n  and\n    {held(fs, sustained, '  ')}\n  )\n"
        f"or\n"
        f"  (\n    (\n      {sl.upper} < {t}\n    and\n      {held(ss, cfg.acceptance_slow_for, '    ')}\n    )\n"
        f"  unless\n    {fs.lower} > {t}\n  )\n"
        f")\n"
        f"and ignoring (confidence)\n"
        f"  group without (engine) ({DRAFTS}{_selector(cfg)})"
    )


def acceptance_alerts(cfg: MixinConfig) -> list[dict[str, Any]]:
    n = record_names(cfg)
    inst = _label_template(cfg.instance_label)
    w = cfg.rate_window
    conf = cfg.confidence_label
    fast, slow = cfg.acceptance_fast_long_window, cfg.acceptance_slow_long_window

    def acceptance(name: str, threshold: float, severity: str, for_: str, consequence: str) -> dict[str, Any]:
        return _alert(
            cfg, name,
            expr=acceptance_condition(cfg, threshold, for_),
            severity=severity,
            summary=f"Speculative decoding acceptance is below {_percent(threshold)}.",
            description=(
                f"We are {conf} sure that acceptance of the draft tokens proposed for model "
                "{{ $labels.model_name }} on " + inst + f" is below {_percent(threshold)}: over the "
                f"last {fast} (or {slow} at low traffic) it is at most "
                "{{ $value | humanizePercentage }}, and still low now. " + consequence
            ),
            dashboard_variables=SERVER_MODEL_VARIABLES,
        )

    return [
        acceptance(ACCEPTANCE_LOW, cfg.acceptance_warning_threshold, cfg.warning_severity,
                   cfg.acceptance_low_for,
                   "Speculation is probably saving little or nothing; check the draft model and k."),
        acceptance(ACCEPTANCE_CRITICAL, cfg.acceptance_critical_threshold, cfg.critical_severity,
                   cfg.acceptance_critical_for,
                   "Speculation is now costing latency and GPU time instead of saving them."),
        _alert(
            cfg, DRAFTS_STOPPED,
            expr=(f"(\n  {n.generation_rate} >= {cfg.min_generation_tokens_per_second:g}\n)\nand\n"
                  f"(\n  {n.drafts_rate} == 0\n)"),
            severity=cfg.warning_severity,
            summary="Speculative decoding proposes no drafts while tokens are generated.",
            description=(
                "Model {{ $labels.model_name }} on " + inst + " generated {{ $value | humanize }} "
                f"tokens/s over the last {w} without a single draft, although speculative decoding is "
                "configured. Every request runs at plain decoding speed."
            ),
            for_=cfg.spec_decode_stopped_for,
            dashboard_variables=SERVER_MODEL_VARIABLES,
        ),
        _alert(
            cfg, METRICS_MISSING,
            expr=f"{SPEC_ENABLED}{_selector(cfg)} == 0",
            severity=cfg.warning_severity,
            summary="The vLLM server exposes no speculative-decoding metrics.",
            description=(
                "The vLLM server behind exporter " + inst + " serves /metrics without any "
                "speculative-decoding series: it runs without --speculative-config, or a vLLM "
                "upgrade renamed the metrics. Acceptance is no longer monitored."
            ),
            for_=cfg.spec_decode_missing_for,
        ),
    ]


def exporter_alerts(cfg: MixinConfig) -> list[dict[str, Any]]:
    sel = _selector(cfg)
    inst = _label_template(cfg.instance_label)
    return [
        _alert(
            cfg, VLLM_UNREACHABLE,
            expr=f"{TARGET_UP}{sel} == 0",
            severity=cfg.warning_severity,
            summary="The exporter cannot read vLLM's metrics.",
            description=(
                "Exporter " + inst + " has failed to poll its vLLM server's /metrics for "
                f"{cfg.target_down_for}; vLLM is down, restarting, or unreachable "
                "from the sidecar. Acceptance alerts for this server are inhibited meanwhile."
            ),
            for_=cfg.target_down_for,
        ),
        _alert(
            cfg, VLLM_RESTARTING,
            # increase() counts across restarts of the exporter itself (its counter restarts at 0).
            expr=f"increase({COUNTER_RESETS}{sel}[{cfg.reset_window}]) >= {cfg.counter_resets_threshold}",
            severity=cfg.warning_severity,
            summary="The vLLM server keeps restarting.",
            description=(
                "The counters of the vLLM server behind exporter " + inst + " reset "
                '{{ printf "%.0f" $value }} times in the last ' + cfg.reset_window + "; it is "
                "probably crash looping, and its acceptance figures cover only short runs."
            ),
        ),
        _alert(
            cfg, EXPORTER_DOWN,
            expr=f"up{sel} == 0",
            severity=cfg.warning_severity,
            summary="Prometheus cannot scrape the speculative-decoding exporter.",
            description=(
                "Prometheus has failed to scrape exporter " + inst + " (job {{ $labels.job }}) for "
                f"{cfg.target_down_for}. Speculative decoding on that server is "
                "not monitored."
            ),
            for_=cfg.target_down_for,
        ),
        _alert(
            cfg, EXPORTER_ABSENT,
            expr=f"absent(up{sel})",
            severity=cfg.warning_severity,
            summary="No speculative-decoding exporter is being scraped.",
            description=(
                f"Prometheus has had no target matching {{{cfg.exporter_selector}}} for "
                f"{cfg.target_down_for}: service discovery finds no exporter, so "
                "no speculative-decoding alert can fire."
            ),
            for_=cfg.target_down_for,
            dashboard_variables=(),  # absent() has no server to select
        ),
    ]


def recording_groups(cfg: MixinConfig) -> list[dict[str, Any]]:
    # Rules in a group run in order, so the fleet rules see this cycle's server rules and the
    # bounds this cycle's drafts and ratios. The evidence records are their own group: they feed
    # the acceptance alerts only, and both groups stay small (mixtool's lint: <= 20 rules).
    return [{"name": RECORDING_GROUP, "rules": recording_rules(cfg)},
            {"name": EVIDENCE_GROUP, "rules": evidence_rules(cfg)}]


def alert_groups(cfg: MixinConfig) -> list[dict[str, Any]]:
    return [
        {"name": ACCEPTANCE_GROUP, "rules": acceptance_alerts(cfg)},
        {"name": EXPORTER_GROUP, "rules": exporter_alerts(cfg)},
    ]


def all_alerts(cfg: MixinConfig) -> list[dict[str, Any]]:
    return [rule for group in alert_groups(cfg) for rule in group["rules"]]
