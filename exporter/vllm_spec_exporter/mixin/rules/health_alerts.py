"""The health alerts: with the sidecar, vLLM unreachable or restarting, exporter down or absent;
without it (source=vllm), vLLM's own scrape job down, restarting or absent; and metrics missing
(speculation off, or renamed by an upgrade), never for a server `baseline_selector` names: a
baseline runs without speculation on purpose.
alert_rules.py groups them with the acceptance alerts.
"""

from __future__ import annotations

from typing import Any

from ..config import MixinConfig
from . import sources
from .alert_parts import (
    EXPORTER_ABSENT,
    EXPORTER_DOWN,
    METRICS_MISSING,
    MODEL_ON_SERVER,
    SERVER_MODEL_VARIABLES,
    VLLM_ABSENT,
    VLLM_RESTARTING,
    VLLM_UNREACHABLE,
    alert,
    label_template,
)
from .fleet_counts import server_labels
from .recording_rules import record_names
from .sources import SERVED


def declared_baselines(cfg: MixinConfig, missing: str) -> str:
    """`missing` less the servers `baseline_selector` names: run without speculation on purpose.
    Only the knob declares: a config read as `method="none"` is just as likely a dropped
    --speculative-config, the very finding this alert is for."""
    if not cfg.baseline_selector:
        return missing
    on = ", ".join(dict.fromkeys(server_labels(cfg)))
    any_series = record_names(cfg).generation_rate if cfg.direct else SERVED.SPEC_DECODE_ENABLED
    return f"({missing})\nunless on ({on})\n{sources.own(cfg, any_series, cfg.baseline_selector)}"


def metrics_missing(cfg: MixinConfig) -> dict[str, Any]:
    inst = label_template(cfg.instance_label)
    if cfg.direct:
        # Without the sidecar nobody reports "no spec-decode families": output flowing with no
        # drafts counter scraped at all is the same finding (a vLLM counter at 0 is DraftsStopped's;
        # llama.cpp's at 0 is this, see sources.drafts_present).
        n = record_names(cfg)
        return alert(
            cfg, METRICS_MISSING,
            expr=declared_baselines(cfg, f"{sources.own(cfg, n.generation_rate)} >= "
                                         f"{cfg.min_generation_tokens_per_second:g}\nunless\n{sources.drafts_present(cfg)}"),
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
    return alert(
        cfg, METRICS_MISSING,
        expr=declared_baselines(cfg, f"{sources.series(SERVED.SPEC_DECODE_ENABLED, cfg.exporter_selector)} == 0"),
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
    inst = label_template(cfg.instance_label)
    return [
        alert(
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
        alert(
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
    return alert(
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
    inst = label_template(cfg.instance_label)
    return [
        alert(
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
        alert(
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
        alert(
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

