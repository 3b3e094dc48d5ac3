"""deploy/gmp/: Google Managed Prometheus objects, rendered from the one config, validated offline.

- the PodMonitorings, ClusterRules and Rules against GMP's CRD schemas, reconstructed in
  tests/schemas/gmp/ (README there: upstream repository, files and commit);
- what GMP's operator checks beyond the CRD (pkg/operator/apis/monitoring/v1/rules_config.go):
  every group's `interval` and every `for` parse as Prometheus durations, and no selector or rule
  label conflicts with the scope GMP adds (`cluster`, ... and `namespace` under Rules);
- the rules are exactly the promtool-tested groups of the PrometheusRule;
- the labels GMP gives a scraped target (job = the PodMonitoring's name, instance = pod:port, pod
  labels copied by targetLabels) satisfy the selectors the rules and dashboards use.

Each validator is also shown to reject a broken object, so a pass means something.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import promql_parser
import pytest
import yaml
from jsonschema.exceptions import best_match

from support.manifests import by_kind, kustomize_build, selector_holds, write_tree
from support.paths import ROOT
from vllm_spec_exporter.durations import is_prometheus_duration
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig, load_config
from vllm_spec_exporter.mixin.deploy import gmp, kubernetes
from vllm_spec_exporter.mixin.rules import rule_files

SCHEMAS = ROOT / "tests" / "schemas" / "gmp"
FILES = {"PodMonitoring": gmp.EXPORTER_PODMONITORING_FILE, "ClusterRules": gmp.CLUSTER_RULES_FILE,
         "Rules": gmp.RULES_FILE}


def load(rel: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / rel).read_text())


def validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{kind.lower()}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(obj: dict[str, Any]) -> list[str]:
    errors = list(validator(obj["kind"]).iter_errors(obj))
    return [f"{best_match(errors).json_path}: {best_match(errors).message}"] if errors else []


def gmp_files(cfg: MixinConfig) -> dict[str, str]:
    return {rel: text for rel, text in generate.render_all(cfg).items() if rel.startswith(gmp.ROOT + "/")}


# --- GMP's own checks, as its operator makes them -----------------------------------------------


def operator_problems(obj: dict[str, Any], scope: dict[str, str]) -> list[str]:
    """What GMP's operator would refuse in a rules object applied with `scope` (label -> the value
    GMP adds): unparsable durations, a selector matcher on a scope label other than `="<value>"`,
    a rule label on a scope label (rules_config.go fromAPIRules, scope, setSelector, setLabel).
    And a group without its own `interval`, which GMP would evaluate every minute."""
    problems = []
    for group in obj["spec"]["groups"]:
        if not is_prometheus_duration(group.get("interval", "")):
            problems.append(f"{group['name']}: interval {group.get('interval')!r}")
        for rule in group["rules"]:
            name = rule.get("record") or rule.get("alert")
            if "for" in rule and not is_prometheus_duration(rule["for"]):
                problems.append(f"{name}: for {rule['for']!r}")
            problems.extend(f"{name}: sets label {label}" for label in scope if label in rule.get("labels", {}))

            def visit(node: promql_parser.Expr, name: str = name) -> bool:
                if isinstance(node, promql_parser.VectorSelector):
                    for m in node.matchers.matchers:
                        if m.name in scope and (m.op != promql_parser.MatchOp.Equal or m.value != scope[m.name]):
                            problems.append(f"{name}: {node} conflicts with {m.name}={scope[m.name]!r}")
                return True

            promql_parser.walk(promql_parser.parse(rule["expr"]), visit)
    return problems


def scope_of(kind: str, namespace: str = "llm") -> dict[str, str]:
    values = {"project_id": "my-project", "location": "europe-west4", "cluster": "prod", "namespace": namespace}
    return {label: values[label] for label in gmp.SCOPE_LABELS[kind]}


# --- committed files ------------------------------------------------------------------------


def test_committed_files_equal_a_fresh_render() -> None:
    files = gmp_files(MixinConfig())
    assert {rel: (ROOT / rel).read_text() for rel in files} == files
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / gmp.ROOT).rglob("*") if p.is_file()}
    assert on_disk == set(files)


def test_kustomization_builds_both_podmonitorings_and_the_clusterrules() -> None:
    docs = kustomize_build(ROOT / gmp.ROOT)
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [
        ("ClusterRules", "vllm-spec-exporter"), ("PodMonitoring", "vllm"), ("PodMonitoring", "vllm-spec-exporter")]
    for doc in docs:
        assert doc["apiVersion"] == "monitoring.googleapis.com/v1"
        assert "namespace" not in doc["metadata"]  # applied with -n <vLLM's namespace>


@pytest.mark.parametrize("rel", [gmp.EXPORTER_PODMONITORING_FILE, gmp.VLLM_PODMONITORING_FILE,
                                 gmp.CLUSTER_RULES_FILE, gmp.RULES_FILE])
def test_objects_match_gmps_crd_schemas(rel: str) -> None:
    assert schema_errors(load(rel)) == []


@pytest.mark.parametrize(("kind", "break_it", "where"), [
    ("PodMonitoring", lambda o: o["spec"]["endpoints"][0].update(intervall="15s"), "intervall"),
    ("PodMonitoring", lambda o: o["spec"]["endpoints"][0].update(interval="15 seconds"), "interval"),
    ("PodMonitoring", lambda o: o["spec"]["endpoints"][0].pop("interval"), "interval"),
    ("PodMonitoring", lambda o: o["spec"]["endpoints"][0].update(port=0), "port"),
    ("PodMonitoring", lambda o: o["spec"]["endpoints"][0].update(
        metricRelabeling=[{"action": "replace", "targetLabel": "job", "replacement": "x"}]), "targetLabel"),
    ("PodMonitoring", lambda o: o["spec"].update(targetLabels={"fromPod": [{"from": "team", "to": "namespace"}]}),
     "to"),
    ("PodMonitoring", lambda o: o["metadata"].update(name="My_Job"), "name"),
    ("PodMonitoring", lambda o: o["spec"].update(endpoints=[]), "endpoints"),
    ("ClusterRules", lambda o: o["spec"]["groups"][0].update(interval="1d"), "interval"),  # Go durations only
    ("ClusterRules", lambda o: o["spec"]["groups"][-1]["rules"][0].update(keep_firing_for="5m"), "keep_firing_for"),
    ("ClusterRules", lambda o: o["spec"]["groups"][-1]["rules"][0].update(record="x:y"), "rules"),  # record + alert
    ("ClusterRules", lambda o: o["spec"]["groups"][0]["rules"][0].update(annotations={"a": "b"}), "rules"),
    ("ClusterRules", lambda o: o["spec"]["groups"][0]["rules"][0].update(record="not a name"), "record"),
    ("ClusterRules", lambda o: o["metadata"].update(namespace="llm"), "namespace"),
    ("Rules", lambda o: o["spec"]["groups"][0]["rules"][0].pop("expr"), "expr"),
], ids=["unknown-field", "bad-interval", "no-interval", "port-0", "relabel-onto-job", "from-pod-onto-namespace",
        "bad-name", "no-endpoints", "interval-in-days", "keep-firing-for", "record-and-alert",
        "annotations-on-a-record", "bad-record-name", "cluster-object-in-namespace", "no-expr"])
def test_gmp_schemas_reject_broken_objects(kind: str, break_it: Callable[[dict], None], where: str) -> None:
    obj = copy.deepcopy(load(FILES[kind]))
    break_it(obj)
    errors = schema_errors(obj)
    assert errors and where in errors[0], errors


# --- the rules: the PrometheusRule's groups, acceptable to GMP's operator ---------------------


@pytest.mark.parametrize("kind", ["ClusterRules", "Rules"])
def test_rules_carry_exactly_the_prometheusrule_groups(kind: str) -> None:
    groups = load(FILES[kind])["spec"]["groups"]
    promtool_tested = [g for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE) for g in load(rel)["groups"]]
    assert groups == load(rule_files.PROMETHEUS_RULE_FILE)["spec"]["groups"] == promtool_tested
    # Byte-identical groups, as in the PrometheusRule: only the header differs.
    assert (ROOT / FILES[kind]).read_text().split("spec:\n", 1)[1] == \
        (ROOT / rule_files.PROMETHEUS_RULE_FILE).read_text().split("spec:\n", 1)[1]


@pytest.mark.parametrize("kind", ["ClusterRules", "Rules"])
def test_gmps_operator_accepts_the_rules(kind: str) -> None:
    assert operator_problems(load(FILES[kind]), scope_of(kind)) == []


def test_operator_check_finds_a_conflicting_scope() -> None:
    # A selector on namespace holds under Rules in that namespace and conflicts in any other;
    # a cluster matcher conflicts under ClusterRules unless it names the very cluster.
    cfg = load_config(None, ['exporter_selector=namespace="llm", container="spec-exporter"'])
    rules = yaml.safe_load(gmp_files(cfg)[gmp.RULES_FILE])
    assert operator_problems(rules, scope_of("Rules", "llm")) == []
    assert any("conflicts with namespace" in p for p in operator_problems(rules, scope_of("Rules", "other")))
    cfg = load_config(None, ['exporter_selector=job="vllm-spec-exporter", cluster=~"prod|staging"'])
    cluster_rules = yaml.safe_load(gmp_files(cfg)[gmp.CLUSTER_RULES_FILE])
    assert any("conflicts with cluster" in p for p in operator_problems(cluster_rules, scope_of("ClusterRules")))
    broken = copy.deepcopy(load(gmp.CLUSTER_RULES_FILE))
    broken["spec"]["groups"][-1]["rules"][0]["labels"]["cluster"] = "x"
    broken["spec"]["groups"][0]["interval"] = "1 minute"
    assert len(operator_problems(broken, scope_of("ClusterRules"))) == 2


# --- scrape targets: GMP's labels meet the selectors -----------------------------------------


def gmp_target_labels(podmonitoring: dict[str, Any], pod: dict[str, Any], port: str | int) -> dict[str, str]:
    """The labels GMP's collector gives a target of `podmonitoring` on `pod` (pod_config.go):
    job = the object's name, namespace, instance = <pod>:<port>, container for a named port, pod,
    plus targetLabels.fromPod copies of pod labels."""
    labels = {"job": podmonitoring["metadata"]["name"], "namespace": pod["namespace"],
              "instance": f"{pod['name']}:{port}", "pod": pod["name"], "cluster": "prod", "location": "europe-west4",
              "project_id": "my-project"}
    if isinstance(port, str):
        labels["container"] = pod["container"]
    for mapping in podmonitoring["spec"].get("targetLabels", {}).get("fromPod", []):
        if mapping["from"] in pod["labels"]:
            labels[mapping.get("to") or mapping["from"]] = pod["labels"][mapping["from"]]
    return labels


@pytest.mark.parametrize(("selector", "name"), [
    ('job="vllm-spec-exporter"', "vllm-spec-exporter"),
    ('job="llm-spec-sidecars",team="inference"', "llm-spec-sidecars"),
    ('namespace="llm", container="spec-exporter"', "vllm-spec-exporter"),
])
def test_gmps_target_labels_match_exporter_selector(selector: str, name: str) -> None:
    cfg = load_config(None, [f"exporter_selector={selector}"])
    pm = yaml.safe_load(gmp_files(cfg)[gmp.EXPORTER_PODMONITORING_FILE])
    assert pm["metadata"]["name"] == name
    assert schema_errors(pm) == []
    endpoint = pm["spec"]["endpoints"][0]
    pod_labels = {kubernetes.POD_LABEL[0]: kubernetes.POD_LABEL[1], "team": "inference"}
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    pod = {"name": "my-vllm-0", "namespace": "llm", "container": kubernetes.CONTAINER_NAME, "labels": pod_labels}
    assert selector_holds(selector, gmp_target_labels(pm, pod, endpoint["port"]))
    # Without the pod label GMP copies, the selector does not hold: the README's requirement is real.
    if "team" in selector:
        bare = {**pod, "labels": {kubernetes.POD_LABEL[0]: kubernetes.POD_LABEL[1]}}
        assert not selector_holds(selector, gmp_target_labels(pm, bare, endpoint["port"]))


@pytest.mark.parametrize(("selector", "left_out"), [
    ('exporter_selector=job="My_Sidecars"', gmp.EXPORTER_PODMONITORING_FILE),
    ('vllm_selector=job="vllm:8000"', gmp.VLLM_PODMONITORING_FILE),
])
def test_a_job_gmp_cannot_name_leaves_its_podmonitoring_out(selector: str, left_out: str) -> None:
    # generate still renders everything (the Prometheus Operator objects can relabel any job); the
    # GMP README says what is missing and why, and the kustomization lists what is there.
    files = gmp_files(load_config(None, [selector]))
    assert left_out not in files
    name = left_out.rsplit("/", 1)[1]
    assert f"No `{name}`" in files[gmp.README_FILE] and "Kubernetes object name" in files[gmp.README_FILE]
    kustomization = yaml.safe_load(files[gmp.KUSTOMIZATION])
    assert name not in kustomization["resources"] and "clusterrules.yaml" in kustomization["resources"]
    assert "Left out" not in (ROOT / gmp.README_FILE).read_text()


def test_a_container_the_sidecar_does_not_have_is_an_error() -> None:
    with pytest.raises(ValueError, match="container"):
        gmp.render(load_config(None, ['exporter_selector=container="exporter"']))


def test_podmonitorings_scrape_the_ports_the_sidecar_uses() -> None:
    patch = load(kubernetes.SIDECAR_PATCH_FILE)["spec"]["template"]
    container = patch["spec"]["containers"][0]
    exporter, vllm = load(gmp.EXPORTER_PODMONITORING_FILE), load(gmp.VLLM_PODMONITORING_FILE)
    for pm in (exporter, vllm):
        assert pm["spec"]["selector"]["matchLabels"].items() <= patch["metadata"]["labels"].items()
        assert pm["spec"]["endpoints"][0]["interval"] == MixinConfig().scrape_interval
    assert exporter["spec"]["endpoints"][0]["port"] in {p["name"] for p in container["ports"]}
    assert f"--target=http://127.0.0.1:{vllm['spec']['endpoints'][0]['port']}" in container["args"]


def test_a_regenerated_tree_with_other_selectors_still_builds_and_validates(tmp_path: Path) -> None:
    cfg = load_config(None, ['exporter_selector=job="llm-spec-sidecars",team="inference"',
                             'vllm_selector=job="vllm-pods"', "scrape_interval=30s"])
    write_tree(gmp_files(cfg), tmp_path)
    objects = kustomize_build(tmp_path / gmp.ROOT)
    for obj in objects:
        assert schema_errors(obj) == [], obj["metadata"]["name"]
    by_name = {o["metadata"]["name"]: o for o in objects}
    assert by_name["llm-spec-sidecars"]["spec"]["targetLabels"] == {"fromPod": [{"from": "team", "to": "team"}]}
    assert by_name["vllm-pods"]["spec"]["endpoints"][0]["interval"] == "30s"
    assert operator_problems(by_kind([o for o in objects if o["kind"] == "ClusterRules"])["ClusterRules"],
                             scope_of("ClusterRules")) == []
