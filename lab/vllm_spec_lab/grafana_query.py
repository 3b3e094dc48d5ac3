"""What Grafana does to a panel query before sending it, for tests that run the queries themselves.

Grafana 13 (Scenes, the Prometheus data source in packages/grafana-prometheus) takes two steps:

1. The dashboard's query variables refresh with the time range, each after the variables it reads.
   The `label_values` ones (job, instance, model, engine) stay at All here: their allValue. The
   `query_result(<query>)` ones, the crowded panels' hidden rankings (crowd.Crowd), run `<query>`
   with the variables it reads and `$__range` (the range in whole seconds + "s"; Grafana sets no
   `$__rate_interval` for variable queries) substituted, as an instant query at the end of the
   range (metric_find_query.ts queryResultQuery: `time` = the range's end rounded up to a second).
   Each row becomes the text `name{a="x",b="y"} value timestamp_ms`; the variable's regex keeps its
   first capture group (a group named `value`, if any); options are deduplicated by value
   (scenes' metricNamesToVariableValues). `resolve_variables` does this against a real server.
2. The panel query: every variable substituted (`expand_variables`). A variable without multi or
   include-all would be inserted as is; ours are multi-value, so each value is regex-escaped
   (prometheusSpecialRegexEscape: `\\` and `$^*{}[]+?.()|` get two backslashes) and several are
   joined `(a|b)`, one stays alone, and none (an empty ranking at All) is `()`, which matches no
   server (MultiValueVariable.getValue: All without a custom allValue is every option's value).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.error import HTTPError
from urllib.parse import urlencode

from vllm_spec_exporter.mixin.dashboards.crowd import CROWD_VARIABLE_PREFIX
from vllm_spec_exporter.mixin.dashboards.frame import ALL_VALUES
from vllm_spec_lab.monitoring import LOCAL_API_TIMEOUT_SECONDS, http_get_json

# Without a server to rank them, a crowded panel's ranking stands for every server: what it picks
# while the selection is small (the promtool tests run panel queries on a few servers).
CROWD_ALL = ".*"
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
_QUERY_RESULT = re.compile(r"^query_result\((.+)\)\s*$", re.DOTALL)
_REGEX_META = re.compile(r"[$^*{}\[\]+?.()|]")


def expand_variables(expr: str, rate_interval: str | None, values: Mapping[str, str] | None = None,
                     range_seconds: float | None = None) -> str:
    """Substitute Grafana's variables the way Grafana would before sending a query: All is the
    variables' allValue (`.+`; ALL_VALUES where a label may be missing), a crowded panel's ranking
    CROWD_ALL. `values` overrides single variables (already formatted: `multi_value`).
    `$__rate_interval` and `$__range` stay as they are without a value (Grafana sets no
    `$__rate_interval` for a variable's query)."""
    chosen = {"job": ".+", "instance": ".+", **ALL_VALUES, **(values or {})}
    if rate_interval is not None:
        chosen["__rate_interval"] = rate_interval
    if range_seconds is not None:
        chosen["__range"] = f"{round(range_seconds)}s"

    def substitute(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name in chosen:
            return chosen[name]
        return CROWD_ALL if name.startswith(CROWD_VARIABLE_PREFIX) else match.group(0)

    return _VARIABLE.sub(substitute, expr)


def regex_escape(value: str) -> str:
    """prometheusSpecialRegexEscape (classic): one value of a multi-value variable in a PromQL string."""
    return _REGEX_META.sub(lambda m: "\\\\" + m.group(0), value.replace("\\", "\\\\\\\\"))


def multi_value(values: Iterable[str]) -> str:
    """interpolateQueryExpr for a multi-value variable: `a`, `(a|b)`, or `()` for none."""
    escaped = [regex_escape(value) for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def js_regex(pattern: str) -> re.Pattern:
    """stringToJsRegex: `/pattern/flags`, or a bare pattern anchored at both ends."""
    if not pattern.startswith("/"):
        return re.compile(f"^{pattern}$")
    match = re.fullmatch(r"/(.*?)/([gimys]*)", pattern, re.DOTALL)
    if not match:
        raise ValueError(f"{pattern!r} is not a valid regular expression")
    flags = (re.IGNORECASE if "i" in match.group(2) else 0) | (re.MULTILINE if "m" in match.group(2) else 0)
    if "g" in match.group(2):
        raise ValueError(f"{pattern!r}: global regexes (several options per row) are not emulated")
    return re.compile(match.group(1), flags | (re.DOTALL if "s" in match.group(2) else 0))


def _js_number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def row_text(row: dict) -> str:
    """queryResultQuery's text of one instant-vector row: `name{a="x",b="y"} value timestamp_ms`."""
    labels = dict(row["metric"])
    name = labels.pop("__name__", "")
    pairs = ",".join(f'{key}="{value}"' for key, value in labels.items())
    return f"{name}{{{pairs}}} {row['value'][1]} {_js_number(float(row['value'][0]) * 1000)}"


def options(rows: list[dict], regex: str) -> list[str]:
    """The variable's option values from query_result's rows, through its regex, deduplicated."""
    pattern = js_regex(regex) if regex else None
    out: list[str] = []
    for row in rows:
        value = row_text(row)
        if pattern is not None:
            match = pattern.search(value)
            if match is None:
                continue
            if "value" in pattern.groupindex and match.group("value") is not None:
                value = match.group("value")
            elif pattern.groups:
                value = match.group(1)
        if value not in out:
            out.append(value)
    return out


@dataclass(frozen=True)
class VariableQuery:
    """One query_result variable's refresh: the query as sent, its time, options and duration."""

    name: str
    expr: str
    time: float
    options: tuple[str, ...]
    seconds: float
    error: str = ""


@dataclass
class Variables:
    """The dashboard's variables after a refresh: formatted values, and each query it ran."""

    values: dict[str, str] = field(default_factory=dict)
    queries: list[VariableQuery] = field(default_factory=list)


def query_result_variables(model: dict) -> dict[str, dict]:
    """The dashboard's query_result variables by name, each after the ones its query reads."""
    variables = {v["name"]: v for v in model.get("templating", {}).get("list", [])
                 if v.get("type") == "query" and isinstance(v.get("query"), str)
                 and _QUERY_RESULT.match(v["query"])}
    ordered: dict[str, dict] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in ordered:
            return
        if name in path:
            raise ValueError(f"variables read each other: {' -> '.join((*path, name))}")
        for match in _VARIABLE.finditer(variables[name]["query"]):
            needed = match.group(1) or match.group(2)
            if needed in variables:
                visit(needed, (*path, name))
        ordered[name] = variables[name]

    for name in variables:
        visit(name, ())
    return ordered


def resolve_variables(url: str, model: dict, start: float, end: float, values: Mapping[str, str] | None = None,
                      timeout: float = LOCAL_API_TIMEOUT_SECONDS) -> Variables:
    """Refresh the dashboard's query_result variables against the server at `url` for the range
    [start, end], the others at `values` or All; returns every variable's formatted value."""
    resolved = Variables(dict(values or {}))
    at = math.ceil(end)
    for name, variable in query_result_variables(model).items():
        query = _QUERY_RESULT.match(variable["query"]).group(1)
        expr = expand_variables(query, None, resolved.values, range_seconds=end - start)
        started = time.perf_counter()
        try:
            data = http_get_json(f"{url}/api/v1/query?{urlencode({'query': expr, 'time': at})}", timeout)
        except HTTPError as error:  # a rejected query: the variable has no options
            data = {"status": "error", "error": f"{error.code} {error.read().decode(errors='replace')}"}
        except OSError as error:  # a timeout or a dropped connection
            data = {"status": "error", "error": f"{type(error).__name__}: {error}"}
        seconds = time.perf_counter() - started
        error = "" if data.get("status") == "success" else str(data.get("error", "failed"))[-300:]
        rows = data["data"]["result"] if not error else []
        if not error and data["data"]["resultType"] != "vector":
            error = f"query_result of a {data['data']['resultType']} is not emulated"
            rows = []
        found = tuple(options(rows, variable.get("regex", "")))
        resolved.values[name] = multi_value(found)
        resolved.queries.append(VariableQuery(name, expr, at, found, seconds, error))
    return resolved
