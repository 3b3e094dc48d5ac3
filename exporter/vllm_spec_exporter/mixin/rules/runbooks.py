"""docs/runbooks.md: one section per alert — Meaning, Impact, Diagnosis, Mitigation.

One page per bundle, each at docs/runbooks.md of its root: the sidecar's (templates/runbooks.md)
and the sidecar-less one's (templates/runbooks-direct.md, committed as direct/docs/runbooks.md),
whose steps read vLLM's own series and never need a sidecar. The acceptance alerts mean the same
in both and share their sections (templates/runbook-acceptance-*.md). The prose is reviewed as
Markdown; this module fills it from the config and the rules (thresholds, windows, record names,
each alert's expression). The structure follows prometheus-operator/runbooks and llm-d's alerting
runbook. Each heading is exactly the alert name, so GitHub's anchor is the lower-cased name that
`runbook_url` points at (links.runbook_url: the page of the alert's own bundle).
"""

from __future__ import annotations

import dataclasses

from .. import links
from ..config import MixinConfig
from ..templates import fill
from . import alert_rules, load, recording_rules, sources

__all__ = ["RUNBOOKS_FILE", "markdown", "render", "values"]

RUNBOOKS_FILE = "docs/runbooks.md"
# The page template of each bundle.
SIDECAR_TEMPLATE = "runbooks.md"
DIRECT_TEMPLATE = "runbooks-direct.md"


def render(cfg: MixinConfig) -> dict[str, str]:
    return {RUNBOOKS_FILE: markdown(cfg)}


def template(cfg: MixinConfig) -> str:
    """The page template of `cfg`'s bundle."""
    return DIRECT_TEMPLATE if cfg.direct else SIDECAR_TEMPLATE


def markdown(cfg: MixinConfig) -> str:
    text = fill(template(cfg), values(cfg))
    missing = [a["alert"] for a in alert_rules.all_alerts(cfg) if f"\n## {a['alert']}\n" not in text]
    if missing:
        raise RuntimeError(f"alerts without a runbook in templates/{template(cfg)}: {missing}")
    return text


def values(cfg: MixinConfig) -> dict[str, object]:
    """Every placeholder of templates/runbooks.md for `cfg`."""
    alerts = alert_rules.all_alerts(cfg)
    out: dict[str, object] = {
        "alert_table": "\n".join(f"| [{a['alert']}](#{a['alert'].lower()}) | {a['labels']['severity']} "
                                 f"| {a['annotations']['summary']} |" for a in alerts),
        "dashboard_url": links.dashboard_url(cfg),
        "warning_percent": links.percent(cfg.acceptance_warning_threshold),
        "critical_percent": links.percent(cfg.acceptance_critical_threshold),
        "confidence": cfg.confidence_label,
        "min_generation_tokens_per_second": f"{cfg.min_generation_tokens_per_second:g}",
    }
    # Each alert's severity, duration and expression, as its section opens.
    for a in alerts:
        out[a["alert"].lower() + "_rule"] = (
            f"Severity: `{a['labels']['severity']}`. Fires after: `{a.get('for', '0s')}`. Expression:\n\n"
            f"```promql\n{a['expr']}\n```")
    for name, record in dataclasses.asdict(recording_rules.record_names(cfg)).items():
        out[name + "_record"] = record
    one_server = f'{cfg.instance_label}="<instance>", model_name="<model>"'
    # Indented as the numbered step's code block it fills.
    out["position_acceptance_query"] = recording_rules.position_acceptance(cfg, one_server).replace("\n", "\n   ")
    w = cfg.windows
    out |= {"rate_window": w.rate_window, "fast_long_window": w.fast_long, "fast_short_window": w.fast_short,
            "slow_long_window": w.slow_long, "slow_short_window": w.slow_short, "low_for": w.warning_hold,
            "critical_for": w.critical_hold, "slow_for": w.slow_hold, "scrape_interval": w.scrape_interval}
    for key in ("exporter_selector", "vllm_selector", "instance_label", "target_down_for", "spec_decode_stopped_for",
                "drafting_batch_memory",
                "spec_decode_missing_for", "lossy_verification_for", "reset_window", "counter_resets_threshold"):
        out[key] = getattr(cfg, key)
    # What each bundle reads the running batch and the restarts from.
    one_server = f'{sources.source_matchers(cfg)}, {cfg.instance_label}="<instance>", model_name="<model>"'
    running = sources.raw_gauge(cfg, sources.SERVED.REQUESTS_RUNNING, one_server)
    out["running_requests_query"] = running
    # A reader's query (one regex over the names; the rules' `or` of each name only matters while
    # a server switches spelling).
    generated = "|".join(sources.direct_names(sources.GENERATED))
    out["generated_names"] = generated
    one_target = f'{cfg.vllm_selector}, {cfg.instance_label}="<instance>"'
    out["restarts_query"] = (f"max by ({cfg.instance_label}) "
                             f"(resets({sources.by_name(generated, one_target, regex=True)}[1h]))")
    out["sidecar_runbooks_url"] = links.runbook_index_url(cfg.with_overrides({"source": "exporter"}))
    out["direct_runbooks_url"] = links.runbook_index_url(cfg.with_overrides({"source": "vllm"}))
    # The two acceptance alerts share their meaning (with their own threshold and duration),
    # diagnosis and mitigation; the critical one adds a first step.
    for alert, percent, sustained in (("low", out["warning_percent"], w.warning_hold),
                                      ("critical", out["critical_percent"], w.critical_hold)):
        out[f"acceptance_{alert}_meaning"] = _partial(
            "runbook-acceptance-meaning.md", {**out, "threshold_percent": percent, "sustained": sustained})
    one_sidecar = f'{cfg.exporter_selector}, {cfg.instance_label}="<instance>"'
    out["config_step"] = (
        "The speculative config the sidecar reads (method, k, verification, dynamic k; the alert's description "
        "names it, the overview's **Speculative config** table draws it over time): a new method or k explains a "
        "new acceptance level, and a lossy verification inflates it (SpecDecodeLossyVerification).\n"
        "   ```promql\n"
        f"   {sources.series(sources.SERVED.SPEC_CONFIG_INFO, one_sidecar)}\n"
        "   ```"
    ) if not cfg.direct else (
        "Without the sidecar no series names the speculative config: read `--speculative-config` (method, "
        "`num_speculative_tokens`, `rejection_sample_method`) from the server's command line or pod spec.")
    out["acceptance_diagnosis"] = _partial("runbook-acceptance-diagnosis.md", out)
    out["acceptance_low_mitigation"] = _partial(
        "runbook-acceptance-mitigation.md", {**out, "first_step": "Pick by what the diagnosis showed;"})
    out["acceptance_critical_mitigation"] = _partial("runbook-acceptance-mitigation.md", {
        **out, "first_step": "If users are affected now, first turn speculation off on the affected servers "
                             "(restart without `--speculative-config`) or roll back the last change; then pick "
                             "by what the diagnosis showed;"})
    out["acceptance_sections"] = _partial("runbook-acceptance-alerts.md", out)
    loads = load.load_names(cfg)
    out["not_paying_section"] = _partial("runbook-not-paying.md", {
        **out, "speedup_at_load_record": loads.speedup, "load_batch_record": loads.batch,
        "compute_bound_tokens": cfg.compute_bound_tokens, "draft_cost_ratio": f"{cfg.draft_cost_ratio:g}",
        "not_paying_for": cfg.not_paying_for})
    return out


def _partial(template: str, values: dict[str, object]) -> str:
    """A template that fills a placeholder of runbooks.md (its final newline dropped)."""
    return fill(template, values).removesuffix("\n")
