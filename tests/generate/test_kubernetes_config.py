"""deploy/kubernetes/ from the one config: the committed tree is what `generate` renders today, and
each knob that reaches the manifests arrives there intact, rebuilt by real kustomize and validated
offline.

- the committed files equal a fresh render, and the base's PrometheusRule and dashboards ConfigMap
  are byte-identical copies of the rendered artifacts;
- `exporter_selector`: the PodMonitor relabels the labels prometheus-operator discovers so that the
  rules' selector holds (never a static namespace, pod or container), and a tree regenerated with
  other selectors still builds and validates; `scrape_interval` is the PodMonitor's interval;
- `release_label` (kube-prometheus-stack's rule and monitor selector) reaches both operator objects
  of both bundles and replaces the example overlay's patch, and is checked as a label value;
- docs/speculation-config.md's recipe: one generated ConfigMap feeds vLLM and the sidecar.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.manifests import by_kind, crd_errors, kustomize_build, selector_holds, write_tree
from support.paths import ROOT
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig, load_config
from vllm_spec_exporter.mixin.dashboards import dashboard_files
from vllm_spec_exporter.mixin.deploy import kubernetes
from vllm_spec_exporter.mixin.rules import rule_files

# --- generated files ------------------------------------------------------------------------


def kubernetes_files(cfg: MixinConfig) -> dict[str, str]:
    """Everything generate writes under deploy/kubernetes/: kubernetes.render's files and the copies."""
    return {path: text for path, text in generate.render_all(cfg).items() if path.startswith(kubernetes.ROOT + "/")}


def test_committed_files_equal_a_fresh_render() -> None:
    # What `generate --check` does for this folder; also no stray files.
    files = kubernetes_files(MixinConfig())
    stale = [rel for rel, text in files.items() if not (ROOT / rel).exists() or (ROOT / rel).read_text() != text]
    assert not stale, f"stale (run vllm-spec-exporter generate): {stale}"
    committed = {str(p.relative_to(ROOT)) for p in (ROOT / kubernetes.ROOT).rglob("*") if p.is_file()}
    assert committed == set(files)


def test_copies_in_the_base_are_byte_identical_to_the_rendered_artifacts() -> None:
    cfg = MixinConfig().with_overrides({"exporter_selector": 'job="x"', "acceptance_warning_threshold": 0.6})
    files = kubernetes_files(cfg)
    assert files[kubernetes.PROMETHEUS_RULE_FILE] == generate.render_all(cfg)[rule_files.PROMETHEUS_RULE_FILE]
    assert files[kubernetes.DASHBOARDS_CONFIGMAP_FILE] == dashboard_files.render(cfg)[dashboard_files.CONFIGMAP_PATH]


# --- config: selectors and relabeling -------------------------------------------------------


def relabel(labels: dict[str, str], relabelings: list[dict[str, Any]]) -> dict[str, str]:
    """The subset of Prometheus relabeling the PodMonitor uses: `replace` of a static value."""
    out = dict(labels)
    for rule in relabelings:
        assert rule["action"] == "replace" and "sourceLabels" not in rule, rule
        out[rule["targetLabel"]] = rule["replacement"]
    return out


@pytest.mark.parametrize("selector", [
    'job="vllm-spec-exporter"',
    'job="llm-spec-sidecars",team="inference"',
    'namespace="llm", container="spec-exporter"',
    'job="a\\"b"',
])
def test_scraped_labels_match_exporter_selector(selector: str) -> None:
    cfg = load_config(None, [f"exporter_selector={selector}"])
    podmonitor = yaml.safe_load(kubernetes.render(cfg)[kubernetes.PODMONITOR_FILE])
    endpoint = podmonitor["spec"]["podMetricsEndpoints"][0]
    # Labels Prometheus Operator gives a PodMonitor target before user relabelings.
    discovered = {"job": f"llm/{podmonitor['metadata']['name']}", "namespace": "llm", "pod": "my-vllm-0",
                  "container": kubernetes.CONTAINER_NAME, "endpoint": kubernetes.PORT_NAME,
                  "instance": "10.0.0.7:9850"}
    assert not selector_holds(selector, {**discovered, "job": "other", "namespace": "other"})
    relabelings = endpoint.get("relabelings", [])
    assert selector_holds(selector, relabel(discovered, relabelings))
    # Never a static namespace/pod/container: that would hide where a series really comes from.
    assert not {r["targetLabel"] for r in relabelings} & kubernetes.DISCOVERED_LABELS
    # The rules use the very same selector.
    rule = yaml.safe_load(kubernetes_files(cfg)[kubernetes.PROMETHEUS_RULE_FILE])
    exprs = [r["expr"].replace(" ", "") for g in rule["spec"]["groups"] for r in g["rules"]]
    assert any(selector.replace(" ", "") in expr for expr in exprs)


def test_selector_on_another_container_name_is_an_error() -> None:
    cfg = load_config(None, ['exporter_selector=container="exporter"'])
    with pytest.raises(ValueError, match="container"):
        kubernetes.render(cfg)


@pytest.mark.parametrize("interval", ["15s", "30s", "60s", "2m"])
def test_podmonitor_scrapes_at_the_configs_scrape_interval(interval: str) -> None:
    cfg = MixinConfig().with_overrides({"scrape_interval": interval})
    assert kubernetes.podmonitor(cfg)["spec"]["podMetricsEndpoints"][0]["interval"] == interval


def test_a_regenerated_tree_with_other_selectors_still_builds_and_validates(tmp_path: Path) -> None:
    cfg = load_config(None, ['exporter_selector=job="llm-spec-sidecars",team="inference"',
                             "prometheus_rule_labels={release: prom, app.kubernetes.io/name: x}"])
    write_tree(kubernetes_files(cfg), tmp_path)
    objects = by_kind(kustomize_build(tmp_path / kubernetes.EXAMPLE))
    assert objects["PrometheusRule"]["metadata"]["labels"]["release"] == kubernetes.KUBE_PROMETHEUS_RELEASE
    assert 'job="llm-spec-sidecars",team="inference"' in json.dumps(objects["PrometheusRule"]["spec"]).replace(
        "\\", "")
    relabelings = objects["PodMonitor"]["spec"]["podMetricsEndpoints"][0]["relabelings"]
    assert {r["targetLabel"]: r["replacement"] for r in relabelings} == {"job": "llm-spec-sidecars",
                                                                         "team": "inference"}
    for kind in ("PodMonitor", "PrometheusRule"):
        assert crd_errors(objects[kind]) == []


# --- config: kube-prometheus-stack's release label ------------------------------------------


def test_default_operator_objects_carry_no_release_label() -> None:
    # The label is opt-in: the committed base stays selector-neutral, the example overlay adds it.
    for rel in (kubernetes.PODMONITOR_FILE, kubernetes.PROMETHEUS_RULE_FILE, rule_files.PROMETHEUS_RULE_FILE,
                generate.DIRECT_ROOT + rule_files.PROMETHEUS_RULE_FILE):
        assert "release" not in yaml.safe_load((ROOT / rel).read_text())["metadata"]["labels"], rel


def test_release_label_reaches_both_operator_objects_and_replaces_the_overlays_patch(tmp_path: Path) -> None:
    cfg = load_config(None, ["release_label=prom-stack"])
    files = generate.render_all(cfg)
    for rel in (kubernetes.PODMONITOR_FILE, kubernetes.PROMETHEUS_RULE_FILE, rule_files.PROMETHEUS_RULE_FILE,
                generate.DIRECT_ROOT + rule_files.PROMETHEUS_RULE_FILE):
        obj = yaml.safe_load(files[rel])
        assert obj["metadata"]["labels"]["release"] == "prom-stack", rel
        assert crd_errors(obj) == [], rel
    # Everything else about the PrometheusRule is the default's.
    default = yaml.safe_load((ROOT / rule_files.PROMETHEUS_RULE_FILE).read_text())
    labelled = yaml.safe_load(files[rule_files.PROMETHEUS_RULE_FILE])
    del labelled["metadata"]["labels"]["release"]
    assert labelled == default
    write_tree(kubernetes_files(cfg), tmp_path)
    objects = by_kind(kustomize_build(tmp_path / kubernetes.EXAMPLE))
    for kind in ("PodMonitor", "PrometheusRule"):
        assert objects[kind]["metadata"]["labels"]["release"] == "prom-stack"  # the overlay's patch is gone
    base = by_kind(kustomize_build(tmp_path / kubernetes.BASE))
    assert {kind: base[kind]["metadata"]["labels"]["release"] for kind in ("PodMonitor", "PrometheusRule")} == {
        "PodMonitor": "prom-stack", "PrometheusRule": "prom-stack"}


@pytest.mark.parametrize(("sets", "message"), [
    (["release_label=my release"], "label value"),
    (["release_label=" + "x" * 64], "label value"),
    (["release_label=a", "prometheus_rule_labels={release: b}"], "disagree"),
])
def test_release_label_is_checked(sets: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_config(None, sets)


def test_one_generated_configmap_feeds_vllm_and_the_sidecar(tmp_path: Path) -> None:
    """docs/speculation-config.md's recipe, built by real kustomize: a configMapGenerator in the
    overlay (its name gets a hash suffix) and vLLM's container reading the same key; the sidecar's
    optional reference follows the hashed name, so both containers read one JSON."""
    write_tree(kubernetes_files(MixinConfig()), tmp_path)
    overlay = tmp_path / kubernetes.EXAMPLE
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    name, key = kubernetes.SPEC_CONFIG_MAP
    spec = '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}'
    kustomization["configMapGenerator"] = [{"name": name, "literals": [f"{key}={spec}"]}]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    deployment = yaml.safe_load((overlay / "vllm-deployment.yaml").read_text())
    vllm = deployment["spec"]["template"]["spec"]["containers"][0]
    vllm["env"] = [{"name": "SPECULATIVE_CONFIG", "valueFrom": {"configMapKeyRef": {"name": name, "key": key}}}]
    vllm["args"] = [arg for arg in vllm["args"] if not arg.startswith("--speculative-config")] + [
        "--speculative-config=$(SPECULATIVE_CONFIG)"]
    (overlay / "vllm-deployment.yaml").write_text(yaml.safe_dump(deployment))
    docs = kustomize_build(overlay)
    generated = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith(name + "-")]
    assert len(generated) == 1 and generated[0]["data"] == {key: spec}
    hashed = generated[0]["metadata"]["name"]
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    refs = {c["name"]: [e["valueFrom"]["configMapKeyRef"]["name"] for e in c.get("env", []) if "valueFrom" in e]
            for c in pod["containers"]}
    assert refs == {"vllm": [hashed], kubernetes.CONTAINER_NAME: [hashed]}
