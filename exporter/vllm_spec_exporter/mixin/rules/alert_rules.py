"""The alerting rules for speculative decoding, built from one MixinConfig.

Two groups: acceptance (SpecDecodeAcceptanceLow/Critical decide on evidence, the Wilson bounds of
recording_rules; drafts stopped; metrics missing) and health: with the sidecar, vLLM unreachable or
restarting, exporter down or absent; without it (source=vllm), vLLM's own scrape job down,
restarting or absent. Every alert carries `summary`, `description`, a
`runbook_url` and a `dashboard_url` that opens the overview on the failing server (links.py).
Alert names are a contract: routing, inhibition, runbook anchors and dashboards refer to them.
"""

from __future__ import annotations

from typing import Any

from .. import links
from ..config import MixinConfig
from . import load, sources
from .alert_parts import (
    ACCEPTANCE_CRITICAL,
    ACCEPTANCE_GROUP,
    ACCEPTANCE_LOW,
    DRAFTS_STOPPED,
    EXPORTER_ABSENT,
    EXPORTER_DOWN,
    EXPORTER_GROUP,
    FOR_MODEL_ON,
    HEALTH_GROUP,
    LOSSY_VERIFICATION,
    METRICS_MISSING,
    MODEL_ON,
    NOT_PAYING,
    SERVER_MODEL_VARIABLES,
    TARGET_DOWN_ALERTS,
    TRAFFIC_ALERTS,
    VLLM_ABSENT,
    VLLM_RESTARTING,
    VLLM_UNREACHABLE,
    alert,
    label_template,
)
from .health_alerts import direct_health_alerts, exporter_alerts, metrics_missing, target_absent
from .recording_rules import EvidenceNames, evidence_names, record_names
from .sources import SERVED

__all__ = [
    "ACCEPTANCE_CRITICAL",
    "ACCEPTANCE_GROUP",
    "ACCEPTANCE_LOW",
    "DRAFTS_STOPPED",
    "EXPORTER_ABSENT",
    "EXPORTER_DOWN",
    "EXPORTER_GROUP",
    "HEALTH_GROUP",
    "LOSSY_VERIFICATION",
    "METRICS_MISSING",
    "NOT_PAYING",
    "TARGET_DOWN_ALERTS",
    "TRAFFIC_ALERTS",
    "VLLM_ABSENT",
    "VLLM_RESTARTING",
    "VLLM_UNREACHABLE",
    "acceptance_alerts",
    "acceptance_condition",
    "alert_groups",
    "all_alerts",
    "config_note",
    "direct_health_alerts",
    "exporter_alerts",
    "lossy_verification",
    "metrics_missing",
    "target_absent",
]


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
    w = cfg.windows
    fl, fs, sl, ss = (evidence_names(window) for window in (w.fast_long, w.fast_short, w.slow_long, w.slow_short))
    def held(short: EvidenceNames, sustained: str, indent: str) -> str:
        # Below T at every evaluation in the last `sustained`, and already `sustained` ago: a
        # series younger than that (a new pod) waits the full time too. The `offset` term also
        # keeps the check the same on Prometheus 3.x, whose left-open range drops the start.
        upper = sources.own(cfg, short.upper)
        return (f"max_over_time({upper}[{sustained}]) < {t}\n{indent}and\n"
                f"{indent}  {upper} offset {sustained} < {t}")

    return (
        f"(\n"
        f"  (\n    {sources.own(cfg, fl.upper)} < {t}\n  and\n    {held(fs, sustained, '  ')}\n  )\n"
        f"or\n"
        f"  (\n    (\n      {sources.own(cfg, sl.upper)} < {t}\n    and\n      {held(ss, w.slow_hold, '    ')}\n    )\n"
        f"  unless\n    {sources.own(cfg, fs.lower)} > {t}\n  )\n"
        f")\n"
        f"and ignoring (confidence)\n"
        f"  {sources.drafts_present(cfg)}"
    )


def drafts_stopped_condition(cfg: MixinConfig) -> str:
    """No drafts while output flows, and not paused by design, labelled with the engine family.

    vLLM and llama.cpp: the recording rule drafts_stopped (no drafts at a batch size at which the
    server drafted before; a dynamic-k pause under load is drafting_paused, never alerted).
    TensorRT-LLM switches speculation off by itself when its rolling acceptance falls below a
    threshold and keeps it off: any stop there is the engine's own gate. `group_left` copies
    target_info's engine_family, so the description can name the engine.
    """
    n = record_names(cfg)
    if cfg.direct:
        # No sidecar, no target_info: vLLM's own counters, whose stops the records classify.
        return sources.own(cfg, n.drafts_stopped)
    info = sources.series(SERVED.TARGET_INFO, cfg.exporter_selector)
    target_only = "ignoring (model_name, engine_family, schema, version)"
    trtllm = sources.series(SERVED.TARGET_INFO, f'{cfg.exporter_selector},engine_family="trtllm"')
    return (
        f"(\n  {sources.own(cfg, n.drafts_stopped)}\nor\n"
        f"  (\n    {sources.own(cfg, n.generation_rate)} >= {cfg.min_generation_tokens_per_second:g}\n  and\n"
        f"    {sources.own(cfg, n.draft_tokens_rate)} == 0\n  )\n  and {target_only}\n    {trtllm}\n)\n"
        f"* {target_only} group_left (engine_family)\n  {info}"
    )


def config_note(cfg: MixinConfig) -> str:
    """The alert's server's speculative config, as a sentence of its description: a lookup of the
    sidecar's config_info series (specconfig.py) for the alert's job and instance when the
    description is rendered, so the alert's labels, its expression and when it fires never depend on
    that series; absent (source=vllm, an older sidecar, a failed scrape), the sentence is left out.
    Empty without the sidecar."""
    if cfg.direct:
        return ""
    info = sources.series(SERVED.SPEC_CONFIG_INFO, f"job=%q,{cfg.instance_label}=%q")
    lookup = f"printf `{info}` $labels.job $labels.{cfg.instance_label}"
    return (
        "{{ with " + lookup + " | query }}{{ with . | first }} Speculative config: method {{ .Labels.method }}, "
        "k {{ .Labels.k }}, verification {{ .Labels.verification }}"
        '{{ if eq .Labels.dynamic_k "true" }}, dynamic k{{ end }}'
        '{{ if eq .Labels.lossy "true" }}; lossy verification accepts drafts exact verification rejects, so '
        "acceptance reads higher than the threshold assumes{{ end }}.{{ end }}{{ end }}"
    )


def lossy_verification(cfg: MixinConfig) -> dict[str, Any]:
    """The target verifies drafts with a lossy method (specconfig.LOSSY_VERIFICATION: synthetic,
    fly, typical acceptance). A warning, to chat, never a page: it is a config, mostly a deliberate
    one, and serving goes on; but nothing else would ever say it. A lossy verifier changes what the
    server outputs (synthetic accepts drafts without asking the target at all: a benchmarking mode)
    and inflates acceptance, so the acceptance alerts' thresholds no longer mean what they were set
    for. Labels: the server and the method only (k or the config's source changing is not a new
    finding). A deliberate choice is silenced by its labels (runbook)."""
    lossy = sources.series(SERVED.SPEC_CONFIG_INFO, f'{cfg.exporter_selector}, lossy="true"')
    inst = label_template(cfg.instance_label)
    return alert(
        cfg, LOSSY_VERIFICATION,
        expr=(f"max by (job, {cfg.instance_label}, method, verification) (\n"
              f"  {lossy}\n)"),
        severity=cfg.warning_severity,
        summary="Speculative decoding verifies drafts with a lossy method.",
        description=(
            "Server " + inst + " runs speculative method {{ $labels.method }} with verification "
            "{{ $labels.verification }}, which accepts draft tokens that exact verification would reject: "
            '{{ if eq $labels.verification "synthetic" }}acceptance is whatever the config sets and the output '
            "is not the target model's (a benchmarking mode){{ else }}the output may differ from the target "
            "model's, and acceptance reads higher than it would with standard verification{{ end }}. The "
            "acceptance alerts' thresholds assume exact verification. Silence this alert if the choice is "
            "deliberate."
        ),
        for_=cfg.lossy_verification_for,
    )


def acceptance_alerts(cfg: MixinConfig) -> list[dict[str, Any]]:
    inst = label_template(cfg.instance_label)
    w = cfg.windows.rate_window
    conf = cfg.confidence_label
    fast, slow = cfg.windows.fast_long, cfg.windows.slow_long

    def acceptance(name: str, threshold: float, severity: str, for_: str, consequence: str) -> dict[str, Any]:
        return alert(
            cfg, name,
            expr=acceptance_condition(cfg, threshold, for_),
            severity=severity,
            summary=f"Speculative decoding acceptance is below {links.percent(threshold)}.",
            description=(
                f"We are {conf} sure that acceptance of the draft tokens proposed " + FOR_MODEL_ON + inst
                + f" is below {links.percent(threshold)}: over the "
                f"last {fast} (or {slow} at low traffic) it is at most "
                "{{ $value | humanizePercentage }}, and still low now." + config_note(cfg) + " " + consequence
            ),
            dashboard_variables=SERVER_MODEL_VARIABLES,
        )

    return [
        acceptance(ACCEPTANCE_LOW, cfg.acceptance_warning_threshold, cfg.warning_severity,
                   cfg.windows.warning_hold,
                   "Speculation is probably saving little or nothing; check the draft model and k."),
        acceptance(ACCEPTANCE_CRITICAL, cfg.acceptance_critical_threshold, cfg.critical_severity,
                   cfg.windows.critical_hold,
                   "Speculation is now costing latency and GPU time instead of saving them."),
        alert(
            cfg, DRAFTS_STOPPED,
            expr=drafts_stopped_condition(cfg),
            severity=cfg.warning_severity,
            summary="Speculative decoding proposes no drafts while tokens are generated.",
            description=(
                MODEL_ON + inst + " generated {{ $value | humanize }} "
                f"tokens/s over the last {w} without a single draft, although speculative decoding is "
                "configured. "
                '{{ if eq $labels.engine_family "trtllm" }}TensorRT-LLM switched speculation off by itself: '
                "its rolling acceptance fell below acceptance_rate_threshold (PR #12905), and it stays off "
                "until the server restarts.{{ else }}The batch is no larger than batches at which it drafted "
                f"in the last {cfg.drafting_batch_memory}, so this is not a dynamic-k pause under load."
                "{{ end }} Every request runs at plain decoding speed."
            ),
            for_=cfg.spec_decode_stopped_for,
            dashboard_variables=SERVER_MODEL_VARIABLES,
        ),
        not_paying(cfg),
        metrics_missing(cfg),
        *([] if cfg.direct else [lossy_verification(cfg)]),  # the config is the sidecar's to read
    ]


def not_paying(cfg: MixinConfig) -> dict[str, Any]:
    inst = label_template(cfg.instance_label)
    return alert(
        cfg, NOT_PAYING,
        expr=load.not_paying_condition(cfg),
        severity=cfg.warning_severity,
        summary="Speculative decoding costs more than it saves at the current load.",
        description=(
            MODEL_ON + inst + "{{ with $labels.engine }} (engine {{ . }}){{ end }}: at its running batch, "
            "speculation is estimated to decode at {{ $value | printf \"%.2f\" }}x the speed of plain "
            f"decoding, below 1x for {cfg.not_paying_for}. The batch verifies more draft tokens than the target "
            f"handles for free (compute_bound_tokens {cfg.compute_bound_tokens}), and the drafts it accepts no "
            "longer make up for that work. Lower k or turn speculation off above this batch size."
        ),
        for_=cfg.not_paying_for,
        dashboard_variables=SERVER_MODEL_VARIABLES,
    )


def alert_groups(cfg: MixinConfig) -> list[dict[str, Any]]:
    interval = cfg.windows.evaluation_interval
    if cfg.direct:
        return [{"name": ACCEPTANCE_GROUP, "interval": interval, "rules": acceptance_alerts(cfg)},
                {"name": HEALTH_GROUP, "interval": interval, "rules": direct_health_alerts(cfg)}]
    return [
        {"name": ACCEPTANCE_GROUP, "interval": interval, "rules": acceptance_alerts(cfg)},
        {"name": EXPORTER_GROUP, "interval": interval, "rules": exporter_alerts(cfg)},
    ]


def all_alerts(cfg: MixinConfig) -> list[dict[str, Any]]:
    return [rule for group in alert_groups(cfg) for rule in group["rules"]]

