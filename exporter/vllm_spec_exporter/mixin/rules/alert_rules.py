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

# Alert names are a contract (routing, inhibition, runbook anchors, dashboards link to them).
LOSSY_VERIFICATION = "SpecDecodeLossyVerification"
ACCEPTANCE_LOW = "SpecDecodeAcceptanceLow"
ACCEPTANCE_CRITICAL = "SpecDecodeAcceptanceCritical"
DRAFTS_STOPPED = "SpecDecodeDraftsStopped"
NOT_PAYING = "SpecDecodeNotPaying"
METRICS_MISSING = "SpecDecodeMetricsMissing"
VLLM_UNREACHABLE = "SpecDecodeVllmUnreachable"
VLLM_RESTARTING = "SpecDecodeVllmRestarting"
EXPORTER_DOWN = "SpecDecodeExporterDown"
EXPORTER_ABSENT = "SpecDecodeExporterAbsent"
# source=vllm: no target of the vLLM job at all (a wrong vllm_selector); the sidecar's counterpart
# is EXPORTER_ABSENT (no exporter found): another job, another fix, so another name.
VLLM_ABSENT = "SpecDecodeVllmAbsent"

# Alerts about acceptance that a dead target makes meaningless (Alertmanager inhibits them).
TRAFFIC_ALERTS = (ACCEPTANCE_LOW, ACCEPTANCE_CRITICAL, DRAFTS_STOPPED, NOT_PAYING)
TARGET_DOWN_ALERTS = (VLLM_UNREACHABLE, EXPORTER_DOWN)

ACCEPTANCE_GROUP = "vllm-spec-decode.alerts"
EXPORTER_GROUP = "vllm-spec-exporter.alerts"
# source=vllm: the health alerts read vLLM's own scrape job (no exporter to watch).
HEALTH_GROUP = "vllm-spec-decode.health"

def _label_template(label: str) -> str:
    return "{{ $labels." + label + " }}"


# Who the alert is about, as the start of a sentence. llama.cpp's series read directly carry no
# `model_name` (only the sidecar asks /v1/models), so the model is named only when there is one.
MODEL_ON = "{{ with $labels.model_name }}Model {{ . }} on {{ end }}"
FOR_MODEL_ON = "{{ with $labels.model_name }}for model {{ . }} {{ end }}on "
MODEL_ON_SERVER = "{{ with $labels.model_name }}Model {{ . }} on server {{ else }}Server {{ end }}"


# Alert labels that select the overview dashboard's variables (job, instance, model_name), so the
# link opens on the failing server and model.
SERVER_VARIABLES = ("job", "instance")
SERVER_MODEL_VARIABLES = ("job", "instance", "model_name")


def _dashboard_link(cfg: MixinConfig, variables: tuple[str, ...]) -> str:
    label_of = {"job": "job", "instance": cfg.instance_label, "model_name": "model_name"}
    query = "&".join(f"var-{var}={{{{ $labels.{label_of[var]} | urlquery }}}}" for var in variables)
    return links.dashboard_url(cfg) + (f"?{query}" if query else "")


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
        "runbook_url": links.runbook_url(cfg, name),
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
    inst = _label_template(cfg.instance_label)
    return _alert(
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
    inst = _label_template(cfg.instance_label)
    w = cfg.windows.rate_window
    conf = cfg.confidence_label
    fast, slow = cfg.windows.fast_long, cfg.windows.slow_long

    def acceptance(name: str, threshold: float, severity: str, for_: str, consequence: str) -> dict[str, Any]:
        return _alert(
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
        _alert(
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
    inst = _label_template(cfg.instance_label)
    return _alert(
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


def metrics_missing(cfg: MixinConfig) -> dict[str, Any]:
    inst = _label_template(cfg.instance_label)
    if cfg.direct:
        # Without the sidecar nobody reports "no spec-decode families": output flowing with no
        # drafts counter scraped at all is the same finding (a vLLM counter at 0 is DraftsStopped's;
        # llama.cpp's at 0 is this, see sources.drafts_present).
        n = record_names(cfg)
        return _alert(
            cfg, METRICS_MISSING,
            expr=(f"{sources.own(cfg, n.generation_rate)} >= {cfg.min_generation_tokens_per_second:g}\nunless\n"
                  f"{sources.drafts_present(cfg)}"),
            severity=cfg.warning_severity,
            summary="The vLLM server exposes no speculative-decoding metrics.",
            description=(
                MODEL_ON_SERVER + inst + " generates {{ $value | humanize }} "
                "tokens/s, but its /metrics has no speculative-decoding series (or, from llama.cpp, only "
                "counters that never moved): it runs without speculative decoding (vLLM: --speculative-config; "
                "llama.cpp: --spec-type or a draft model), or an upgrade renamed the metrics. "
                "Acceptance is no longer monitored."
            ),
            for_=cfg.spec_decode_missing_for,
            dashboard_variables=SERVER_MODEL_VARIABLES,
        )
    return _alert(
        cfg, METRICS_MISSING,
        expr=f"{sources.series(SERVED.SPEC_DECODE_ENABLED, cfg.exporter_selector)} == 0",
        severity=cfg.warning_severity,
        summary="The vLLM server exposes no speculative-decoding metrics.",
        description=(
            "The vLLM server behind exporter " + inst + " serves /metrics without any "
            "speculative-decoding series: it runs without --speculative-config, or a vLLM "
            "upgrade renamed the metrics. Acceptance is no longer monitored."
        ),
        for_=cfg.spec_decode_missing_for,
    )


def direct_health_alerts(cfg: MixinConfig) -> list[dict[str, Any]]:
    """Health without the sidecar: the same names where the meaning is the same, read from `up`
    and the counters of vLLM's own scrape job."""
    inst = _label_template(cfg.instance_label)
    return [
        _alert(
            cfg, VLLM_UNREACHABLE,
            expr=f"{sources.scrape_up(cfg)} == 0",
            severity=cfg.warning_severity,
            summary="Prometheus cannot read vLLM's metrics.",
            description=(
                "Prometheus has failed to scrape vLLM server " + inst + " (job {{ $labels.job }}) for "
                f"{cfg.target_down_for}; vLLM is down, restarting, or unreachable. "
                "Acceptance alerts for this server are inhibited meanwhile."
            ),
            for_=cfg.target_down_for,
        ),
        _alert(
            cfg, VLLM_RESTARTING,
            expr=f"{sources.restarts(cfg, cfg.reset_window)}\n>= {cfg.counter_resets_threshold}",
            severity=cfg.warning_severity,
            summary="The vLLM server keeps restarting.",
            description=(
                "The counters of vLLM server " + inst + " reset "
                '{{ printf "%.0f" $value }} times in the last ' + cfg.reset_window + "; it is "
                "probably crash looping, and its acceptance figures cover only short runs."
            ),
        ),
        target_absent(cfg, VLLM_ABSENT, "No vLLM server is being scraped.", "vLLM server",
                      "every record of this bundle is empty and no speculative-decoding alert can fire "
                      "(is the scrape job named differently? vllm_selector sets it)"),
    ]


def target_absent(cfg: MixinConfig, name: str, summary: str, what: str, consequence: str) -> dict[str, Any]:
    """No scrape target at all matches the source's selector, for target_down_for.

    Every other rule of the bundle reads that job, so without this alert a wrong selector (or a
    job that service discovery lost) leaves every record empty and every alert silent, for ever.
    A warning, not a page: serving is not affected (the cause is a config or discovery change), but
    it must be fixed, as nothing else will fire meanwhile. absent() has no labels, so the alert names
    the selector it looked for, and has no server to open the dashboard on.
    """
    return _alert(
        cfg, name,
        expr=f"absent({sources.scrape_up(cfg)})",
        severity=cfg.warning_severity,
        summary=summary,
        description=(
            f"Prometheus has had no target matching {{{sources.source_matchers(cfg)}}} for "
            f"{cfg.target_down_for}: service discovery finds no {what}, so {consequence}."
        ),
        for_=cfg.target_down_for,
        dashboard_variables=(),
    )


def exporter_alerts(cfg: MixinConfig) -> list[dict[str, Any]]:
    target_up = sources.series(SERVED.TARGET_UP, cfg.exporter_selector)
    up = sources.series(sources.UP, cfg.exporter_selector)
    inst = _label_template(cfg.instance_label)
    return [
        _alert(
            cfg, VLLM_UNREACHABLE,
            expr=f"{target_up} == 0",
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
            expr=f"{sources.restarts(cfg, cfg.reset_window)} >= {cfg.counter_resets_threshold}",
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
            expr=f"{up} == 0",
            severity=cfg.warning_severity,
            summary="Prometheus cannot scrape the speculative-decoding exporter.",
            description=(
                "Prometheus has failed to scrape exporter " + inst + " (job {{ $labels.job }}) for "
                f"{cfg.target_down_for}. Speculative decoding on that server is "
                "not monitored."
            ),
            for_=cfg.target_down_for,
        ),
        target_absent(cfg, EXPORTER_ABSENT, "No speculative-decoding exporter is being scraped.", "exporter",
                      "no speculative-decoding alert can fire"),
    ]


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
