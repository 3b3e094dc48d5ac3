"""What Grafana does to a panel query before sending it, for tests that run the queries themselves."""

from __future__ import annotations

from vllm_spec_exporter.mixin.frame import ALL_VALUES


def expand_variables(expr: str, rate_interval: str, values: dict[str, str] | None = None) -> str:
    """Substitute Grafana's variables the way Grafana would before sending a query: All is the
    variables' allValue (`.+`; ALL_VALUES where a label may be missing). `values` overrides single
    variables (already regex-escaped)."""
    chosen = {"job": ".+", "instance": ".+", **ALL_VALUES, **(values or {})}
    expr = expr.replace("$__rate_interval", rate_interval)
    # Longest names first so $model_name is not read as $model followed by _name.
    for name in sorted(chosen, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", chosen[name]).replace("$" + name, chosen[name])
    return expr
