"""Re-create the vendored prometheus-operator schemas in this folder (see README.md).

Not run by the tests: it needs cloudcoil-models-prometheus-operator, which the project does not
install. Run it in a throw-away venv:

    python3 -m venv /tmp/po && /tmp/po/bin/pip install cloudcoil-models-prometheus-operator==0.80.1.0
    /tmp/po/bin/python tests/schemas/export_prometheus_operator.py
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

from cloudcoil.models.prometheus_operator import v1  # type: ignore[import-not-found]

PACKAGE = "cloudcoil-models-prometheus-operator"
OUT = Path(__file__).parent / "prometheus-operator"


def strict(node: Any) -> Any:
    """Close every object that lists its properties (additionalProperties: false).

    The pydantic models ignore unknown keys; the API server rejects them under strict field
    validation (kubectl's default since 1.27), and a misspelt key is exactly the mistake a hand
    edit makes, so the vendored schema rejects them too. Maps (labels, annotations) keep their
    `additionalProperties` schema.
    """
    if isinstance(node, dict):
        out = {key: strict(value) for key, value in node.items()}
        pattern = out.get("pattern")
        if isinstance(pattern, str) and "(?i)" in pattern[1:]:
            # Go's RE2 takes `^(?i)x$`; Python's re needs global flags first. Same language.
            out["pattern"] = "(?i)" + pattern.replace("(?i)", "")
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [strict(item) for item in node]
    return node


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for kind in ("PodMonitor", "PrometheusRule"):
        schema = strict(getattr(v1, kind).model_json_schema(by_alias=True, mode="validation"))
        schema["$comment"] = (f"{kind} (monitoring.coreos.com/v1) exported from {PACKAGE} "
                              f"{version(PACKAGE)} by tests/schemas/export_prometheus_operator.py")
        path = OUT / f"{kind.lower()}.schema.json"
        path.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
