"""The fleet records change where a panel reads from, never what it shows.

At "All" a per-model or fleet-wide panel reads the fleet records (mixin/rules/fleet_records.py); with
servers selected it reads their source records, or per position their scraped counters
(promql.Queries.fleet_or_servers, counter_rate). Here every
generated query that reads a fleet record is evaluated by promtool's own PromQL engine next to the
same panel built without fleet records (`Queries.fleet_scope` patched off, every server's source
records summed, as before the fleet records existed), on the same synthetic series, under five
selections (All, one server, two servers, one engine, one model) and five configs: the defaults;
the sidecar-less bundle with vLLM servers under two spellings and a llama.cpp server whose series
have no engine or model label; an exporter selector on namespace and container (no job matcher),
and the same in single quotes;
and fleet labels without job (two clusters). The results must be equal. At All the fleet side must
hold data and the per-server side read no series; with a server selected, the other way round; and
server a's acceptance, selected, must be its own 0.6.

The series are synthetic (their shape is the exporter's output and vLLM's, as tests/fixtures hold
them): what is compared is two PromQL forms of the same quantity, not an engine's numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from support.fleet_scope import SELECTOR_BODY, server_selectors
from support.prom import run_tool
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.dashboards import dashboard_files, promql
from vllm_spec_exporter.mixin.rules import fleet_counts, fleet_records, recording_rules, sources
from vllm_spec_exporter.names import MetricName
from vllm_spec_lab.grafana_query import expand_variables

pytestmark = pytest.mark.prometheus

RATE_INTERVAL = "1m"
EVAL_TIME = "10m"
MINUTES = 12
# Grafana's form of a selection: a single value as it is, several as `(a|b)`.
SELECTIONS = {
    "all": {},
    "one server": {"instance": "a"},
    "two servers": {"instance": "(a|c)"},
    "one engine": {"engine": "1"},
    "one model": {"model_name": "m2"},
    "two models": {"model_name": "(m1|m2)"},
}


class Server(NamedTuple):
    """One synthetic server: its per-scrape-interval counter increases, per engine."""

    instance: str
    model: str | None  # None: no model_name label (llama.cpp read directly)
    engines: tuple[str | None, ...]  # None: no engine label
    k: int
    drafts: int
    accepted_by_position: tuple[int, ...]
    labels: str = ""  # extra target labels
    prefix: str = "vllm:"  # direct: the spelling of vLLM's names ("llamacpp:" for llama-server)


def servers(extra: dict[str, str] | None = None) -> list[Server]:
    extra = extra or {}
    return [
        # a: acceptance (90 + 70 + 50 + 30) / (4 x 100) = 0.6, two data-parallel engines.
        Server("a", "m1", ("0", "1"), 4, 100, (90, 70, 50, 30), extra.get("a", "")),
        Server("b", "m1", ("0",), 4, 60, (40, 20, 10, 5), extra.get("b", ""), "vllm_"),
        Server("c", "m2", ("0",), 3, 50, (45, 40, 35), extra.get("c", "")),
        # e: another k for the same model and engine as c (k counted over the fleet's union of positions).
        Server("e", "m2", ("0",), 5, 20, (15, 10, 5, 3, 1), extra.get("e", "")),
    ]


LLAMACPP = Server("d", None, (None,), 3, 30, (20, 10, 5), prefix="llamacpp:")


class Case(NamedTuple):
    cfg: MixinConfig
    servers: list[Server]
    job: str


def _cases() -> dict[str, Case]:
    default = MixinConfig()
    direct = default.with_overrides({"source": "vllm"})
    selector = default.with_overrides({"exporter_selector": 'namespace="llm",container="spec"'})
    single_quoted = default.with_overrides({"exporter_selector": "namespace='llm',container='spec'"})
    clusters = default.with_overrides({"fleet_labels": ["cluster"]})
    in_namespace = 'namespace="llm",container="spec"'
    return {
        "defaults": Case(default, servers(), "vllm-spec-exporter"),
        "direct with llama.cpp": Case(direct, [*servers(), LLAMACPP], "vllm"),
        "selector without job": Case(selector, servers({s: in_namespace for s in "abc"}), "sidecars"),
        "single-quoted selector": Case(single_quoted, servers({s: in_namespace for s in "abc"}), "sidecars"),
        "fleet labels without job": Case(clusters, servers({"a": 'cluster="east"', "b": 'cluster="east"',
                                                            "c": 'cluster="west"'}), "vllm-spec-exporter"),
    }


CASES = _cases()


def input_series(case: Case) -> list[dict[str, str]]:
    """promtool input series: each server's counters (and the sidecar's k gauge) per engine."""
    series = []

    def counter(name: str, labels: str, step: int) -> None:
        series.append({"series": f"{name}{{{labels}}}", "values": f"0+{step}x{MINUTES * 4}"})

    for server in case.servers:
        for engine in server.engines:
            labels = ",".join(part for part in (
                f'job="{case.job}"', f'instance="{server.instance}"', server.labels,
                f'model_name="{server.model}"' if server.model else "",
                f'engine="{engine}"' if engine is not None else "") if part)
            accepted = sum(server.accepted_by_position)
            totals = {sources.DRAFTS: server.drafts, sources.DRAFT_TOKENS: server.k * server.drafts,
                      sources.ACCEPTED: accepted, sources.GENERATED: server.drafts + accepted}
            for source_counter, step in totals.items():
                counter(_name(case, server, source_counter), labels, step)
            for position, step in enumerate(server.accepted_by_position):
                counter(_name(case, server, sources.ACCEPTED_BY_POSITION), f'{labels},position="{position}"', step)
                # Server a counts its drafts per position too (every draft k long: each position is
                # drafted as often as there are drafts); the others do not, as vLLM upstream.
                if server.instance == "a" and _name(case, server, sources.DRAFTED_AT_POSITION):
                    counter(_name(case, server, sources.DRAFTED_AT_POSITION), f'{labels},position="{position}"',
                            server.drafts)
            if not case.cfg.direct:
                series.append({"series": f"vllm_spec_decode_num_speculative_tokens{{{labels}}}",
                               "values": f"{server.k}x{MINUTES * 4}"})
        if not case.cfg.direct:  # the sidecar's own failed polls, per target
            target = ",".join(p for p in (f'job="{case.job}"', f'instance="{server.instance}"', server.labels) if p)
            for reason, step in (("timeout", 1), ("parse", len(server.engines))):
                counter(str(MetricName.SCRAPE_ERRORS_TOTAL), f'{target},reason="{reason}"', step)
    return series


def _name(case: Case, server: Server, counter: sources.SourceCounter) -> str:
    if not case.cfg.direct:
        return str(counter.exporter)
    if server.prefix == "llamacpp:":
        return counter.llamacpp
    return server.prefix + counter.vllm


class PanelQuery(NamedTuple):
    where: str  # dashboard, panel title and target index
    expr: str  # with fleet records
    reference: str  # the same panel without them


def fleet_queries(cfg: MixinConfig, monkeypatch: pytest.MonkeyPatch) -> list[PanelQuery]:
    """Every panel query of both dashboards that reads a fleet record, with its reference."""
    def targets() -> Iterator[tuple[str, str]]:
        for path, build in dashboard_files.DASHBOARDS.items():
            for panel in dashboard_files.iter_panels(build(cfg)):
                for index, target in enumerate(panel.get("targets", [])):
                    yield f"{Path(path).stem} / {panel['title']} / {index}", target["expr"]

    with_fleet = list(targets())
    with monkeypatch.context() as patch:
        patch.setattr(promql.Queries, "fleet_scope", lambda self, by: False)
        patch.setattr(promql.Queries, "server_scope", lambda self, counter, by: False)
        without = list(targets())
    assert [w for w, _ in with_fleet] == [w for w, _ in without]
    return [PanelQuery(where, expr, reference)
            for (where, expr), (_, reference) in zip(with_fleet, without, strict=True)
            if fleet_selectors(cfg, expr, reference) and "@" not in expr]


def fleet_selectors(cfg: MixinConfig, expr: str, reference: str) -> list[tuple[str, set[str]]]:
    """The record selectors the switches added to a query (absent from its `reference`), each with
    the variables whose selection it must not match (the labels its record lacks): the fleet
    records have model and engine, not the instance; the acceptance-band counts none of the
    three; the per-server records (engines summed) have the instance and model, not the engine."""
    levels = "|".join(re.escape(level) for level in (fleet_records.level(cfg), fleet_records.level(cfg, True)))
    records = {fleet_counts.band_record(cfg): {"instance", "model_name", "engine"},
               fleet_counts.scrape_errors_record(cfg): {"instance"},
               **{recording_rules.server_rate_record(cfg, counter): {"engine"}
                  for counter in recording_rules.SERVER_RATE_RECORDS}}
    found = [(s, {"instance"}) for s in re.findall(rf"(?<![\w:])(?:{levels}):[\w:]+\{{{SELECTOR_BODY}\}}", expr)]
    for name, lacks in records.items():
        found += [(s, lacks) for s in re.findall(rf"(?<![\w:]){re.escape(name)}\{{{SELECTOR_BODY}\}}", expr)]
    return [(s, lacks) for s, lacks in found if s not in reference]


def checks(case: Case, queries: list[PanelQuery]) -> list[dict]:
    def test(expr: str, value: float, where: str) -> dict:
        return {"expr": f"# {where}\n{expr}", "eval_time": EVAL_TIME,
                "exp_samples": [{"labels": "{}", "value": value}]}

    tests = []
    for selection, values in SELECTIONS.items():
        for query in queries:
            expr, reference = (f"({expand_variables(e, RATE_INTERVAL, values)})" for e in (query.expr, query.reference))
            where = f"{selection}: {query.where}"
            differing = f"abs({expr} - {reference}) / (abs({reference}) + 1) > 1e-9"
            tests.append(test(f"(count({differing}) or vector(0)) + (count({expr} unless {reference}) or vector(0))"
                              f" + (count({reference} unless {expr}) or vector(0))", 0, where))
            if selection in ("all", "one server"):  # both have data in every config
                tests.append(test(f"count({expr}) > bool 0", 1, where + " (has data)"))
            # A selection the fleet side cannot show: the servers' records answer, the fleet's match nothing.
            for fleet_side, lacks in fleet_selectors(case.cfg, query.expr, query.reference):
                fleet_side = expand_variables(fleet_side, RATE_INTERVAL, values)
                selected = lacks & values.keys()
                tests.append(test(f"count({fleet_side}) or vector(0)", 0, f"{where}: fleet side") if selected
                             else test(f"count({fleet_side}) > bool 0", 1, f"{where}: fleet side"))
            for server_side, variable in spellings_joined(server_selectors(query.expr)):
                server_side = expand_variables(server_side, RATE_INTERVAL, values)
                tests.append(test(f"count({server_side}) > bool 0", 1, f"{where}: per-server side ${variable}")
                             if variable in values else
                             test(f"count({server_side}) or vector(0)", 0, f"{where}: per-server side ${variable}"))
    return tests


def spellings_joined(selectors: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The per-server side's selectors, the spellings of one counter in one read (a direct raw
    read: a server is stored under one of them) joined by `or`: one side to have data."""
    counter_of = {name: counter.metric for counter in sources.COUNTERS for name in sources.direct_names(counter)}
    joined: dict[tuple[str, str, str], list[str]] = {}
    for selector, variable in selectors:
        name = re.search(r'__name__="([^"]*)"', selector)
        if name is None:  # a record or the sidecar's counter: a read of its own
            joined[(selector, "", variable)] = [selector]
            continue
        key = (re.sub(r'__name__="[^"]*", ', "", selector), counter_of[name[1]], variable)
        joined.setdefault(key, []).append(selector)
    return [(" or ".join(spellings), variable) for (_, _, variable), spellings in joined.items()]


def acceptance_of_server_a(case: Case) -> dict:
    """The overview's "Acceptance rate" stat with server a selected: a's own 0.6."""
    overview = dashboard_files.DASHBOARDS[dashboard_files.OVERVIEW_PATH](case.cfg)
    panel = next(p for p in dashboard_files.iter_panels(overview) if p["title"] == "Acceptance rate")
    expr = expand_variables(panel["targets"][0]["expr"], RATE_INTERVAL, {"instance": "a"})
    return {"expr": f"round(1e9 * {expr})", "eval_time": EVAL_TIME, "exp_samples": [{"labels": "{}", "value": 6e8}]}


@pytest.mark.parametrize("name", list(CASES))
def test_fleet_records_show_what_the_servers_records_show(name: str, promtool: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[name]
    queries = fleet_queries(case.cfg, monkeypatch)
    # What must read the fleet records does (a panel per quantity of both dashboards).
    assert len(queries) >= 15, [q.where for q in queries]
    titles = ["Acceptance rate by model", "Efficiency by model", "Acceptance by draft position over time",
              "Servers per acceptance band", "Servers by acceptance", "Servers, worst acceptance first",
              "Acceptance rate by instance"]
    for title in titles + ([] if case.cfg.direct else ["Scrape errors by reason"]):
        assert any(f"/ {title} /" in q.where for q in queries), title
    # Each has a per-server side that matches nothing at All (without it `or` would hide a double read).
    assert all(server_selectors(q.expr) for q in queries), [q.where for q in queries if not server_selectors(q.expr)]
    groups = recording_rules.recording_groups(case.cfg)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, width=1_000_000))
    scenario = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "15s",
        "group_eval_order": [g["name"] for g in groups],
        "tests": [{"interval": "15s", "input_series": input_series(case),
                   "promql_expr_test": [*checks(case, queries), acceptance_of_server_a(case)]}],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False, width=1_000_000))
    result = run_tool([promtool, "test", "rules", "test.yaml"], cwd=tmp_path, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]


def test_band_counts_of_an_idle_fleet_are_absent(promtool: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """No server drafts: no band record, and the band panels show nothing ("No traffic"), never a
    healthy-looking 0, at All and with a server selected. Then one server drafts: every band is 0
    or more, and the fleet side holds the three records."""
    case = CASES["defaults"]
    series = input_series(case)
    idle = [{**s, "values": f"0x{MINUTES * 4}"} if "_total{" in s["series"] else s for s in series]
    band_queries = [q for q in fleet_queries(case.cfg, monkeypatch)
                    if "/ Servers per acceptance band /" in q.where or "/ Servers by acceptance /" in q.where]
    assert len(band_queries) == 6
    record = fleet_counts.band_record(case.cfg)

    def empty(expr: str, where: str) -> dict:
        return {"expr": f"# {where}\ncount({expr}) or vector(0)", "eval_time": EVAL_TIME,
                "exp_samples": [{"labels": "{}", "value": 0}]}
    tests = [empty(record, "the band record")]
    for selection in ("all", "one server"):
        tests += [empty(expand_variables(q.expr, RATE_INTERVAL, SELECTIONS[selection]), f"{selection}: {q.where}")
                  for q in band_queries]
    groups = recording_rules.recording_groups(case.cfg)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, width=1_000_000))
    scenario = {
        "rule_files": ["rules.yaml"], "evaluation_interval": "15s", "group_eval_order": [g["name"] for g in groups],
        "tests": [{"interval": "15s", "input_series": idle, "promql_expr_test": tests},
                  {"interval": "15s", "input_series": series, "promql_expr_test": [
                      {"expr": f"count({record})", "eval_time": EVAL_TIME,
                       "exp_samples": [{"labels": "{}", "value": 3}]}]}],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False, width=1_000_000))
    result = run_tool([promtool, "test", "rules", "test.yaml"], cwd=tmp_path, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
