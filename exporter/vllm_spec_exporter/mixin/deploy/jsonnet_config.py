"""The jsonnet mixin's `_config`: which knobs jsonnet can set, and every form each takes in the artifacts.

A kube-prometheus user configures a mixin by overriding `_config` fields; a field is worth having
only if its value reaches the expressions. Each `ConfigField` names the MixinConfig knob it stands
for; each `Form` is one way the generators write a value into the rules and dashboards (the PromQL
number `0.5`, the percentage `50%`, the hold `3m` derived from a threshold, a selector, a `by (...)`
label list, a record-name prefix) together with the jsonnet expression that computes the same text
from `c` (= `$._config`, with the helpers of templates/jsonnet-config.libsonnet); a `NumberForm` is
a threshold written as a JSON number (dashboard threshold steps). jsonnet_template.py finds where
each form lands by rendering once with `probe` values and proves the result against the plain
render, so a form missing here is an error at generate time, never a silently fixed value.

Everything else reshapes the artifacts (the scrape interval sizes every window, the source picks
the series, ...) and is rendered by `vllm-spec-exporter generate --set`: the mixin's
`vllmSpecScrapeInterval` only states the interval it was rendered for (config.libsonnet asserts it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from .. import links
from ..config import MixinConfig
from ..rules import fleet_records, recording_rules

__all__ = ["FIELDS", "FORMS", "NUMBER_FORMS", "PROBES", "ConfigField", "Form", "NumberForm", "jsonnet_literal",
           "knob_fields", "probe", "quote"]


class ConfigField(NamedTuple):
    """One field of the mixin's `_config`."""

    name: str  # as jsonnet spells it
    knob: str  # the MixinConfig knob it stands for; "" for a field that only feeds others (clusterLabel)
    doc: str  # its comment in config.libsonnet
    default: Callable[[MixinConfig], Any]  # its value in a mixin rendered from this config
    check: str = ""  # a jsonnet condition over `c` that config.libsonnet asserts ...
    problem: str = ""  # ... and the message when it fails


def _knob(name: str) -> Callable[[MixinConfig], Any]:
    return lambda cfg: getattr(cfg, name)


FIELDS: tuple[ConfigField, ...] = (
    ConfigField("vllmSpecExporterSelector", "exporter_selector",
                "Label matchers (without braces) of the exporter's scrape job (MixinConfig exporter_selector).",
                _knob("exporter_selector"), "c.vllmSpecExporterSelector != ''", "vllmSpecExporterSelector is empty"),
    ConfigField("vllmSelector", "vllm_selector",
                "Label matchers of vLLM's own /metrics scrape job (MixinConfig vllm_selector).",
                _knob("vllm_selector"), "c.vllmSelector != ''",
                "vllmSelector is empty; render that with `vllm-spec-exporter generate --set vllm_selector=`"),
    ConfigField("vllmSpecFleetLabels", "fleet_labels",
                "Labels the fleet records keep besides model_name; they also prefix the fleet records' names "
                "(MixinConfig fleet_labels).",
                lambda cfg: list(cfg.fleet_labels)),
    ConfigField("clusterLabel", "",
                "The cluster label (kubernetes-mixin's convention). With showMultiCluster it leads the fleet "
                "labels, so fleets of different clusters are not summed together.",
                lambda cfg: "cluster"),
    ConfigField("showMultiCluster", "",
                "Keep clusterLabel in the fleet records (records named cluster_job_model:... by default).",
                lambda cfg: False,
                "!(c.showMultiCluster && std.member(c.vllmSpecFleetLabels, c.clusterLabel))",
                "showMultiCluster adds clusterLabel, which vllmSpecFleetLabels already holds"),
    ConfigField("specDecodeAcceptanceWarningThreshold", "acceptance_warning_threshold",
                "SpecDecodeAcceptanceLow and the dashboards' warning line (0-1).",
                _knob("acceptance_warning_threshold"),
                "0 < c.specDecodeAcceptanceCriticalThreshold && c.specDecodeAcceptanceCriticalThreshold <= "
                "c.specDecodeAcceptanceWarningThreshold && c.specDecodeAcceptanceWarningThreshold < 1",
                "need 0 < specDecodeAcceptanceCriticalThreshold <= specDecodeAcceptanceWarningThreshold < 1"),
    ConfigField("specDecodeAcceptanceCriticalThreshold", "acceptance_critical_threshold",
                "SpecDecodeAcceptanceCritical and the dashboards' critical line (0-1).",
                _knob("acceptance_critical_threshold")),
    ConfigField("specDecodeRaiseKThreshold", "acceptance_raise_k_threshold",
                "Above this the dashboards suggest a larger k (0-1).",
                _knob("acceptance_raise_k_threshold")),
    ConfigField("vllmSpecWarningSeverity", "warning_severity", "Severity label of the warning alerts.",
                _knob("warning_severity")),
    ConfigField("vllmSpecCriticalSeverity", "critical_severity", "Severity label of the paging alerts.",
                _knob("critical_severity")),
)
_THRESHOLD_FIELDS = {"acceptance_warning_threshold": "specDecodeAcceptanceWarningThreshold",
                     "acceptance_critical_threshold": "specDecodeAcceptanceCriticalThreshold",
                     "acceptance_raise_k_threshold": "specDecodeRaiseKThreshold"}


class Form(NamedTuple):
    """One way the generators write `_config` values into a string of the artifacts."""

    var: str  # its name among the mixin's values (`%(var)s`)
    text: Callable[[MixinConfig], str]  # the text the generators write, for a config
    jsonnet: str  # the same text computed in jsonnet from `c` and config.libsonnet's helpers
    fields: tuple[str, ...]  # the `_config` fields it reads
    applies: Callable[[MixinConfig], bool] = lambda cfg: True  # False: it does not depend on them
    # Knobs whose probe values locate it; by default those of its fields. A hold is located by
    # probing its own knob: durations repeat across the artifacts, a hold's value could be any of them.
    located_by: tuple[str, ...] = ()
    # It also reads the source's selector (the exporter's, or vLLM's without the sidecar).
    reads_source_selector: bool = False

    def reads(self, cfg: MixinConfig) -> tuple[str, ...]:
        """The `_config` fields it reads under `cfg`."""
        source = "vllmSelector" if cfg.direct else "vllmSpecExporterSelector"
        return (*self.fields, source) if self.reads_source_selector else self.fields


class NumberForm(NamedTuple):
    """A threshold written as a JSON number (a dashboard's threshold step, a value mapping)."""

    var: str
    knob: str
    field: str


def _threshold_forms(knob: str, name: str, hold: str = "") -> tuple[Form, ...]:
    field = _THRESHOLD_FIELDS[knob]
    forms = [
        # `{threshold:g}` in the alerts, `{threshold}` in the panels: one text while the value has at
        # most 6 significant digits, which config.libsonnet asserts.
        Form(f"{name}Threshold", lambda cfg: f"{getattr(cfg, knob):g}", f"number(c.{field})", (field,)),
        Form(f"{name}Percent", lambda cfg: links.percent(getattr(cfg, knob)), f"percent(c.{field})", (field,)),
    ]
    if hold:
        explicit = f"acceptance_{hold}_for"
        # The fast tier's hold derives from the threshold unless its knob is set (mixin/windows.py);
        # config.libsonnet's hold() is windows.dip_hold with this render's dip, window and interval.
        forms.append(Form(f"{name}Hold", lambda cfg: getattr(cfg.windows, f"{name}_hold"), f"hold(c.{field})",
                          (field,), lambda cfg: not getattr(cfg, explicit), (explicit,)))
    return tuple(forms)


_FLEET = ("vllmSpecFleetLabels", "clusterLabel", "showMultiCluster")

FORMS: tuple[Form, ...] = (
    Form("exporterSelector", lambda cfg: cfg.exporter_selector, "c.vllmSpecExporterSelector",
         ("vllmSpecExporterSelector",)),
    Form("vllmSelector", lambda cfg: cfg.vllm_selector, "c.vllmSelector", ("vllmSelector",)),
    # The fleet records' `by (...)` lists and name prefix (fleet_records, recording_rules); the
    # source selector's labels are among them, so the selector fields are read too.
    Form("fleetKeptLabels", lambda cfg: ", ".join(fleet_records.kept_labels(cfg)), "std.join(', ', keptLabels)",
         _FLEET, reads_source_selector=True),
    Form("fleetModelLabels", lambda cfg: ", ".join(recording_rules.fleet_model_labels(cfg)),
         "std.join(', ', modelLabels)", _FLEET, reads_source_selector=True),
    Form("fleetLevel", lambda cfg: "_".join(cfg.fleet_labels), "std.join('_', fleetLabels)", _FLEET),
    Form("warningSeverity", lambda cfg: cfg.warning_severity, "c.vllmSpecWarningSeverity",
         ("vllmSpecWarningSeverity",)),
    Form("criticalSeverity", lambda cfg: cfg.critical_severity, "c.vllmSpecCriticalSeverity",
         ("vllmSpecCriticalSeverity",)),
    *_threshold_forms("acceptance_warning_threshold", "warning", hold="low"),
    *_threshold_forms("acceptance_critical_threshold", "critical", hold="critical"),
    *_threshold_forms("acceptance_raise_k_threshold", "raiseK"),
)

NUMBER_FORMS: tuple[NumberForm, ...] = tuple(
    NumberForm(f"{name}Number", knob, field) for (knob, field), name in
    zip(_THRESHOLD_FIELDS.items(), ("warning", "critical", "raiseK"), strict=True))

# Probe values, tried in order: unlike anything the artifacts hold otherwise, so where their forms
# land is where the knob flows.
PROBES: dict[str, tuple[Any, ...]] = {
    "exporter_selector": ('vsx_exporter_label="vsx-exporter-value"',),
    "vllm_selector": ('vsx_vllm_label="vsx-vllm-value"',),
    "fleet_labels": (("vsx_fleet_a", "vsx_fleet_b"),),
    "warning_severity": ("vsx-warning-severity",),
    "critical_severity": ("vsx-critical-severity",),
    "acceptance_warning_threshold": (0.4731, 0.4517, 0.4419, 0.4913, 0.5417, 0.6173),
    "acceptance_critical_threshold": (0.3127, 0.2971, 0.3311, 0.2819, 0.3719, 0.2513),
    "acceptance_raise_k_threshold": (0.7319, 0.8123, 0.6871, 0.9137),
    "acceptance_low_for": ("7m13s", "7m17s", "7m19s"),
    "acceptance_critical_for": ("6m11s", "6m23s", "6m29s"),
}


def probe(cfg: MixinConfig, plain_text: str) -> MixinConfig:
    """`cfg` with every knob that locates a form set to the first probe value whose forms are new:
    different from `cfg`'s and nowhere in `plain_text` (the plain render, serialised). ValueError
    if none."""
    probed = cfg
    needed = {knob for form in FORMS if form.applies(cfg) for knob in _knobs(form, cfg)}
    for knob, candidates in PROBES.items():
        if knob not in needed:
            continue  # e.g. a hold set explicitly: the mixin writes it as rendered
        for candidate in candidates:
            try:
                trial = probed.with_overrides({knob: candidate})
            except ValueError:
                continue  # e.g. a critical threshold above the warning one
            if all(_acceptable(form, cfg, probed, trial, plain_text) for form in FORMS
                   if knob in _knobs(form, cfg) and form.applies(cfg)):
                probed = trial
                break
        else:
            raise ValueError(f"jsonnet mixin: no probe value of {knob} is unlike the rest of the artifacts; "
                             f"add one to jsonnet_config.PROBES")
    return probed


def _knobs(form: Form, cfg: MixinConfig) -> set[str]:
    if form.located_by:
        return set(form.located_by)
    by_field = {f.name: f.knob for f in FIELDS}
    return {by_field[name] for name in form.reads(cfg) if by_field[name]}


def _acceptable(form: Form, cfg: MixinConfig, before: MixinConfig, trial: MixinConfig, plain_text: str) -> bool:
    """The probe leaves the form alone (it does not depend on the knob under `cfg`), or makes it new."""
    text = form.text(trial)
    if text == form.text(before):
        return True
    return bool(text) and text != form.text(cfg) and text not in plain_text


def jsonnet_literal(value: Any) -> str:
    """A field's default as jsonnet source."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(jsonnet_literal(item) for item in value) + "]"
    if isinstance(value, float):
        return repr(value)
    raise TypeError(f"no jsonnet literal for {value!r}")


def quote(text: str) -> str:
    """A single-quoted jsonnet string (PromQL's double quotes stay unescaped)."""
    escaped = json.dumps(text, ensure_ascii=False)[1:-1].replace('\\"', '"').replace("'", "\\'")
    return f"'{escaped}'"


def knob_fields() -> dict[str, str]:
    """{MixinConfig knob: `_config` field} for every field that stands for a knob."""
    return {f.knob: f.name for f in FIELDS if f.knob}

