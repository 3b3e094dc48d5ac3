"""The jsonnet mixin, evaluated by go-jsonnet (PyPI gojsonnet): what kube-prometheus users import.

- With the default `_config` it evaluates to exactly the committed rule groups
  (alerts/prometheus_rules.yaml, alerts/prometheus_alerts.yaml) and dashboards (dashboards/*.json),
  for the sidecar's bundle and the sidecar-less one under direct/.
- With `_config` overridden it evaluates to exactly what `vllm-spec-exporter generate --set`
  renders for the same values: selectors (their labels reach the fleet records' `by`), cluster
  and fleet labels, thresholds (their percentages and the holds derived from them), severities.
- Knobs it cannot change fail loudly (the scrape interval), and the generator refuses a knob that
  reaches the artifacts in a form it does not know.
- It imports the way `jb install` lays it out, and composes with another mixin.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import _gojsonnet
import pytest
import yaml

from support.manifests import crd_errors
from support.paths import ROOT
from vllm_spec_exporter.mixin import generate, links
from vllm_spec_exporter.mixin.config import MixinConfig, load_config
from vllm_spec_exporter.mixin.dashboards import dashboard_files
from vllm_spec_exporter.mixin.deploy import jsonnet
from vllm_spec_exporter.mixin.deploy.jsonnet_config import knob_fields
from vllm_spec_exporter.mixin.deploy.jsonnet_template import Template, parameterise
from vllm_spec_exporter.mixin.rules import fleet_records, rule_files

SIDECAR = ROOT / jsonnet.MIXIN_DIR
DIRECT = ROOT / generate.DIRECT_ROOT / jsonnet.MIXIN_DIR
FIELDS = ("prometheusRules", "prometheusAlerts", "grafanaDashboards")


def evaluate(mixin_dir: Path, config: dict[str, Any] | None = None, expression: str = "",
             entry: str = "mixin.libsonnet") -> Any:
    """The mixin at `mixin_dir` with `config` merged into `_config`: its three outputs, or `expression`
    over it (`m`)."""
    overrides = json.dumps(config or {})
    body = expression or "{" + ", ".join(f"{field}: m.{field}" for field in FIELDS) + "}"
    snippet = f"local m = (import '{entry}') + {{ _config+:: {overrides} }}; {body}"
    return json.loads(_gojsonnet.evaluate_snippet("test", snippet, jpathdir=[str(mixin_dir)]))


def rendered(files: dict[str, str], prefix: str = "") -> dict[str, Any]:
    """The three outputs as the rule files and dashboards of `files` (a render, or the checkout) hold them."""
    def groups(rel: str) -> dict[str, Any]:
        return {"groups": yaml.safe_load(files[prefix + rel])["groups"]}
    return {
        "prometheusRules": groups(rule_files.RULES_FILE),
        "prometheusAlerts": groups(rule_files.ALERTS_FILE),
        "grafanaDashboards": {dashboard_files.file_name(path): json.loads(files[prefix + path])
                              for path in dashboard_files.DASHBOARDS},
    }


def committed(prefix: str = "") -> dict[str, Any]:
    paths = (rule_files.RULES_FILE, rule_files.ALERTS_FILE, *dashboard_files.DASHBOARDS)
    return rendered({prefix + rel: (ROOT / prefix / rel).read_text() for rel in paths}, prefix)


def generate_set(sets: list[str], mixin_root: Path | None = None) -> dict[str, str]:
    """What `vllm-spec-exporter generate --set ...` writes; its mixin too when `mixin_root` is given."""
    files = generate.render_all(load_config(None, sets))
    if mixin_root is not None:
        for rel, text in files.items():
            if rel.startswith(jsonnet.MIXIN_DIR):
                (mixin_root / rel).parent.mkdir(parents=True, exist_ok=True)
                (mixin_root / rel).write_text(text)
    return files


# --- the committed mixin ------------------------------------------------------------------------


def test_committed_mixin_equals_a_fresh_render() -> None:
    for root, cfg in ((ROOT, MixinConfig()), (ROOT / generate.DIRECT_ROOT, MixinConfig().with_overrides(
            {"source": "vllm"}))):
        files = jsonnet.render(cfg)
        assert {rel: (root / rel).read_text() for rel in files} == files
        on_disk = {str(p.relative_to(root)) for p in (root / jsonnet.MIXIN_DIR).rglob("*") if p.is_file()}
        assert on_disk == set(files)
    manifest = json.loads((SIDECAR / "jsonnetfile.json").read_text())
    assert manifest["dependencies"] == []  # `jb install` needs nothing else


@pytest.mark.parametrize(("mixin_dir", "prefix"), [(SIDECAR, ""), (DIRECT, generate.DIRECT_ROOT)],
                         ids=["sidecar", "direct"])
def test_default_config_evaluates_to_the_committed_rules_and_dashboards(mixin_dir: Path, prefix: str) -> None:
    assert evaluate(mixin_dir) == committed(prefix)


# --- _config overrides = generate --set -------------------------------------------------------

OVERRIDES = {
    # Thresholds whose fast-tier holds differ from the defaults' (2m45s and 2m15s, not 3m and 2m30s).
    "thresholds-and-severities": (
        {"specDecodeAcceptanceWarningThreshold": 0.45, "specDecodeAcceptanceCriticalThreshold": 0.3,
         "specDecodeRaiseKThreshold": 0.85, "vllmSpecWarningSeverity": "ticket", "vllmSpecCriticalSeverity": "page"},
        ["acceptance_warning_threshold=0.45", "acceptance_critical_threshold=0.3",
         "acceptance_raise_k_threshold=0.85", "warning_severity=ticket", "critical_severity=page"]),
    # Selector labels the fleet records must keep (namespace, container); a cluster-wide fleet.
    "selectors-multi-cluster": (
        {"vllmSpecExporterSelector": 'namespace="llm", container="spec-exporter"',
         "vllmSelector": 'job="vllm-pods"', "showMultiCluster": True},
        ['exporter_selector=namespace="llm", container="spec-exporter"', 'vllm_selector=job="vllm-pods"',
         "fleet_labels=[cluster, job]"]),
    "cluster-label-and-fleet-labels": (
        {"clusterLabel": "k8s_cluster", "showMultiCluster": True, "vllmSpecFleetLabels": ["namespace", "job"],
         "vllmSpecExporterSelector": 'job="sidecars",team=~"inference|search"',
         "specDecodeAcceptanceWarningThreshold": 0.62},
        ["fleet_labels=[k8s_cluster, namespace, job]", 'exporter_selector=job="sidecars",team=~"inference|search"',
         "acceptance_warning_threshold=0.62"]),
}


@pytest.mark.parametrize("case", OVERRIDES)
def test_overridden_config_evaluates_to_what_generate_set_renders(case: str) -> None:
    config, sets = OVERRIDES[case]
    assert evaluate(SIDECAR, config) == rendered(generate_set(sets))


def test_direct_mixin_overrides_match_the_direct_render() -> None:
    config = {"vllmSelector": 'job="vllm-pods",team="x"', "specDecodeAcceptanceCriticalThreshold": 0.35}
    sets = ["source=vllm", 'vllm_selector=job="vllm-pods",team="x"', "acceptance_critical_threshold=0.35"]
    assert evaluate(DIRECT, config) == rendered(generate_set(sets))


def test_a_mixin_rendered_for_60s_scrapes_takes_overrides_too(tmp_path: Path) -> None:
    # The scrape interval is generate's; within that render the thresholds stay jsonnet's, holds
    # (rounded up to a 60 s evaluation interval) included.
    base = ["scrape_interval=60s"]
    generate_set(base, tmp_path)
    mixin_dir = tmp_path / jsonnet.MIXIN_DIR
    assert evaluate(mixin_dir) == rendered(generate_set(base))
    config = {"specDecodeAcceptanceWarningThreshold": 0.45, "specDecodeAcceptanceCriticalThreshold": 0.2}
    sets = [*base, "acceptance_warning_threshold=0.45", "acceptance_critical_threshold=0.2"]
    assert evaluate(mixin_dir, config) == rendered(generate_set(sets))


def test_an_explicit_hold_stays_as_rendered(tmp_path: Path) -> None:
    generate_set(["acceptance_low_for=5m"], tmp_path)
    mixin = evaluate(tmp_path / jsonnet.MIXIN_DIR, {"specDecodeAcceptanceWarningThreshold": 0.45})
    assert mixin == rendered(generate_set(["acceptance_low_for=5m", "acceptance_warning_threshold=0.45"]))


# --- the values jsonnet computes, against the Python that writes them -------------------------


def values(config: dict[str, Any], mixin_dir: Path = SIDECAR) -> dict[str, Any]:
    """config.libsonnet's values alone (the mixin's other files need not be parsed)."""
    return evaluate(mixin_dir, config, "m._vllmSpecValues", entry="config.libsonnet")


@pytest.mark.parametrize("threshold", [0.05, 0.1, 0.123, 0.25, 0.33, 0.4, 0.4125, 0.45, 0.5, 0.55, 0.5501, 0.6,
                                       0.625, 0.7, 0.75, 0.875, 0.95, 0.999])
def test_threshold_texts_and_holds_match_the_generators(threshold: float) -> None:
    got = values({"specDecodeAcceptanceWarningThreshold": threshold, "specDecodeAcceptanceCriticalThreshold": 0.01})
    cfg = MixinConfig().with_overrides({"acceptance_warning_threshold": threshold,
                                        "acceptance_critical_threshold": 0.01})
    assert got["warningThreshold"] == f"{threshold:g}" == str(threshold)
    assert got["warningPercent"] == links.percent(threshold)
    assert got["warningHold"] == cfg.windows.warning_hold


@pytest.mark.parametrize("selector", [
    'job="vllm-spec-exporter"',
    'namespace="llm",container="spec-exporter"',
    ' job = "a" , team=~"b|c", zone!="x"',
    "job='single', tier!~`raw`",
    'instance="pod-0:9850", job="a,b=c"',  # instance is never kept; a comma inside a value
    'job="a\\"b", team="t"',
    'app_kubernetes_io_name="x",_private="y",job2="z"',
])
def test_selector_labels_reach_the_fleet_records_as_in_python(selector: str) -> None:
    got = values({"vllmSpecExporterSelector": selector})
    cfg = MixinConfig().with_overrides({"exporter_selector": selector})
    assert got["fleetKeptLabels"] == ", ".join(fleet_records.kept_labels(cfg))


# --- what jsonnet cannot change fails loudly ------------------------------------------------


@pytest.mark.parametrize(("config", "message"), [
    ({"vllmSpecScrapeInterval": "60s"}, "generate --set scrape_interval"),
    ({"specDecodeAcceptanceCriticalThreshold": 0.6}, "specDecodeAcceptanceCriticalThreshold <="),
    ({"specDecodeAcceptanceWarningThreshold": 0.5234567}, "6 significant digits"),
    ({"vllmSelector": ""}, "vllm_selector"),
    ({"showMultiCluster": True, "vllmSpecFleetLabels": ["cluster", "job"]}, "already holds"),
])
def test_config_the_mixin_cannot_honour_is_an_error(config: dict[str, Any], message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        evaluate(SIDECAR, config, "m.prometheusAlerts")


CHANGED = {"vllmSpecExporterSelector": 'job="other"', "vllmSelector": 'job="other"',
           "vllmSpecFleetLabels": ["namespace"], "clusterLabel": "k8s", "showMultiCluster": True,
           "specDecodeAcceptanceWarningThreshold": 0.45, "specDecodeAcceptanceCriticalThreshold": 0.3,
           "specDecodeRaiseKThreshold": 0.8, "vllmSpecWarningSeverity": "x", "vllmSpecCriticalSeverity": "y"}


@pytest.mark.parametrize(("mixin_dir", "absent"), [(SIDECAR, set()), (DIRECT, {"vllmSpecExporterSelector"})],
                         ids=["sidecar", "direct"])
def test_every_config_field_is_a_knob_or_feeds_one(mixin_dir: Path, absent: set[str]) -> None:
    # Without the sidecar no rule or panel reads the exporter's selector: the mixin does not offer it.
    listed = set(evaluate(mixin_dir, expression="std.objectFieldsAll(m._config)", entry="config.libsonnet"))
    knobs = set(knob_fields().values()) - absent
    assert knobs <= listed and not absent & listed
    assert listed - knobs == {"clusterLabel", "showMultiCluster", "vllmSpecScrapeInterval"}
    # Each one changes a value the templates print (config.libsonnet lists only the values some
    # template uses), so the output: no field that does nothing.
    default = values({}, mixin_dir)
    templates = "".join((mixin_dir / name).read_text() for name in ("alerts.libsonnet", "rules.libsonnet",
                                                                      "dashboards.libsonnet"))
    assert all(f"%({name})s" in templates or f"v.{name}" in templates for name in default), default
    assert set(CHANGED) - absent == listed - {"vllmSpecScrapeInterval"}
    for field in listed - {"vllmSpecScrapeInterval"}:
        extra = {"showMultiCluster": True} if field == "clusterLabel" else {}
        assert values({field: CHANGED[field], **extra}, mixin_dir) != default, field


# --- the generator refuses what it cannot template -------------------------------------------


def test_parameterise_templates_forms_it_knows() -> None:
    def build(cfg: MixinConfig) -> dict[str, Any]:
        return {"expr": f"x{{{cfg.exporter_selector}}} < {cfg.acceptance_warning_threshold:g}",
                "step": cfg.acceptance_warning_threshold, "fixed": "5m"}
    tree = parameterise(build, MixinConfig()).tree
    assert tree["expr"] == Template(("x{", "exporterSelector", "} < ", "warningThreshold", ""))
    assert tree["fixed"] == "5m"


@pytest.mark.parametrize("build", [
    lambda cfg: {"expr": f"x < {1 - cfg.acceptance_warning_threshold:g}"},  # arithmetic on a threshold
    lambda cfg: {"text": cfg.exporter_selector.upper()},  # a spelling no form knows
    lambda cfg: {"panels": [1] * int(cfg.acceptance_warning_threshold * 10)},  # structure depends on it
    lambda cfg: {"step": cfg.acceptance_warning_threshold * 100},
], ids=["arithmetic", "unknown-spelling", "structure", "scaled-number"])
def test_parameterise_refuses_a_knob_in_an_unknown_form(build: Any) -> None:
    with pytest.raises(ValueError, match="jsonnet mixin"):
        parameterise(build, MixinConfig())


# --- how users import it ----------------------------------------------------------------------


def test_imports_as_jb_install_lays_it_out(tmp_path: Path) -> None:
    # `jb install github.com/vllm-spec-exporter/vllm-spec-exporter/jsonnet/vllm-spec-exporter-mixin@main`
    # vendors the folder under its path and (legacyImports) links its last element at vendor/.
    vendor = tmp_path / "vendor"
    package = vendor / "github.com/vllm-spec-exporter/vllm-spec-exporter" / jsonnet.MIXIN_DIR
    shutil.copytree(SIDECAR, package)
    (vendor / package.name).symlink_to(package)
    expected = committed()["prometheusAlerts"]
    for path in (f"{package.relative_to(vendor)}/mixin.libsonnet", f"{package.name}/mixin.libsonnet"):
        snippet = f"(import '{path}').prometheusAlerts"
        assert json.loads(_gojsonnet.evaluate_snippet("jb", snippet, jpathdir=[str(vendor)])) == expected


def test_composes_with_another_mixin_as_kube_prometheus_does() -> None:
    other = "{ _config+:: { clusterLabel: 'k8s' }, prometheusAlerts+:: { groups+: [{ name: 'other', rules: [] }] } }"
    names = evaluate(SIDECAR, expression=f"[g.name for g in (m + {other}).prometheusAlerts.groups]")
    assert names == [*(g["name"] for g in committed()["prometheusAlerts"]["groups"]), "other"]


def test_outputs_are_hidden_fields_and_make_a_valid_prometheusrule() -> None:
    # As in kubernetes-mixin: `+::` fields, found by std.objectHasAll (kube-prometheus' addMixin
    # looks them up that way), never manifested by themselves.
    visible = evaluate(SIDECAR, expression=f"[std.objectHas(m, f) for f in {json.dumps(FIELDS)}]")
    present = evaluate(SIDECAR, expression=f"[std.objectHasAll(m, f) for f in {json.dumps(FIELDS)}]")
    assert visible == [False] * 3 and present == [True] * 3
    groups = evaluate(SIDECAR, expression="m.prometheusAlerts.groups + m.prometheusRules.groups")
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "vllm-spec-exporter", "namespace": "monitoring"}, "spec": {"groups": groups}}
    assert crd_errors(rule) == []
