"""The crowded per-server panels on real Prometheus and VictoriaMetrics, loaded the way Grafana
loads them (vllm_spec_lab.grafana_query): each panel's hidden ranking variable (crowd.Crowd) is
refreshed first, an instant query at the end of the range, and the panel's range query then reads
only the servers it picked. Over few servers every server is drawn; over a fleet the worst
cfg.panel_worst_k and best cfg.panel_best_k; a selected server shows everything about it, also
after it went quiet (bench/fleet_scale.py measured 1,000 lines per panel at 1,000 pods before the
limit, and 17.7 s for one panel at 5,000 pods while every server was ranked at every step).

The fleet: servers `10.0.0.<i>:8000` (dots, so Grafana's regex escaping is exercised end to end)
whose acceptance is i / 100 and whose last poll is i * 10 s old, with their target_info."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.request import Request, urlopen

import pytest

from support.prom import require_binary, run_tool
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.dashboards import dashboard_files, overview
from vllm_spec_exporter.mixin.dashboards.crowd import SEEN_VARIABLE
from vllm_spec_exporter.mixin.dashboards.promql import Queries
from vllm_spec_exporter.mixin.rules import recording_rules, sources
from vllm_spec_exporter.names import MetricName
from vllm_spec_lab import grafana_render
from vllm_spec_lab.grafana_query import CROWD_ALL, multi_value, options, regex_escape, resolve_variables, row_text
from vllm_spec_lab.monitoring import PROMETHEUS_BIN, PROMTOOL_BIN, Prometheus
from vllm_spec_lab.victoria import VictoriaMetrics

CFG = MixinConfig()
STEP = 15  # the bundle's scrape and evaluation interval
HISTORY = 30 * 60  # seconds of samples before the end of the range
RANGE = 20 * 60  # the dashboard's range, ending at the last sample
QUIET = 10 * 60  # a server gone quiet stopped this long before the end
JOB = "vllm-spec-exporter"
ACCEPTANCE_PANEL = "Acceptance rate by instance"
POLL_AGE_PANEL = "Age of the last successful poll"


def server(i: int) -> str:
    return f"10.0.0.{i}:8000"


Sample = tuple[str, dict, float, int]


def fleet_samples(servers: int, end: int, quiet: frozenset[int] = frozenset(), engines: int = 1,
                  second_model: frozenset[int] = frozenset()) -> Iterator[Sample]:
    """(name, labels, value, timestamp) of every sample: the source records the acceptance panels
    read (engine e of server i accepts i / 100 + e / 1000) and their per-server sums (the records
    they read at engine All, recording_rules.server_rate_record), the evidence bounds, the poll
    timestamps, target_info and the running requests (what the model variable reads); servers in
    `quiet` stop drafting QUIET seconds before `end` (their gauges go on); servers in
    `second_model` serve model "m2", the others "m"."""
    evidence = recording_rules.evidence_names(CFG.windows.fast_long)
    counters = (sources.ACCEPTED, sources.DRAFT_TOKENS)
    accepted, drafted = (sources.rate_record(CFG, c) for c in counters)
    server_accepted, server_drafted = (recording_rules.server_rate_record(CFG, c) for c in counters)
    for i in range(servers):
        target = {"job": JOB, "instance": server(i)}
        model_name = "m2" if i in second_model else "m"
        series = {"model_name": model_name, "engine": "0", **target}
        for t in range(end - HISTORY, end + 1, STEP):
            yield MetricName.TARGET_INFO, {**target, "engine_family": "vllm", "schema": "v1", "version": "0"}, 1, t
            yield MetricName.LAST_SUCCESS_TIMESTAMP_SECONDS, target, t - 10 * i, t
            for engine in range(engines):
                yield MetricName.REQUESTS_RUNNING, {**series, "engine": str(engine)}, 1, t
            if i in quiet and t > end - QUIET:
                continue
            for engine in range(engines):
                yield accepted, {**series, "engine": str(engine)}, i / 10 + engine / 100, t
                yield drafted, {**series, "engine": str(engine)}, 10.0, t
            per_server = {"model_name": model_name, **target}
            yield server_accepted, per_server, sum(i / 10 + engine / 100 for engine in range(engines)), t
            yield server_drafted, per_server, 10.0 * engines, t
            for bound, shift in ((evidence.upper, 0.05), (evidence.lower, -0.05)):
                labels = {**target, "model_name": model_name, "confidence": CFG.confidence_label}
                yield bound, labels, i / 100 + shift, t


class PrometheusFleet:
    """A real Prometheus 3 on a TSDB backfilled with the fleet (promtool tsdb create-blocks-from)."""

    def __init__(self, tmp_path: Path, samples: Iterator[Sample]) -> None:
        lines: dict[str, list[str]] = {}
        for name, labels, value, t in samples:
            pairs = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            lines.setdefault(name, []).append(f"{name}{{{pairs}}} {value} {t}")
        text = "".join(f"# TYPE {name} gauge\n" + "\n".join(sorted(rows, key=lambda r: int(r.rsplit(' ', 1)[1])))
                       + "\n" for name, rows in lines.items())
        (tmp_path / "fleet.om").write_text(text + "# EOF\n")
        data = tmp_path / "data"
        result = run_tool([require_binary(PROMTOOL_BIN), "tsdb", "create-blocks-from", "openmetrics",
                           str(tmp_path / "fleet.om"), str(data)], cwd=tmp_path, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        self.server = Prometheus(data_path=data)

    def __enter__(self) -> str:
        require_binary(PROMETHEUS_BIN)
        self.server.start()
        return self.server.url

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


class VictoriaFleet:
    """A real VictoriaMetrics with the fleet imported (/api/v1/import, loopback)."""

    def __init__(self, tmp_path: Path, samples: Iterator[Sample]) -> None:
        series: dict[tuple, dict] = {}
        for name, labels, value, t in samples:
            key = (name, *sorted(labels.items()))
            row = series.setdefault(key, {"metric": {"__name__": name, **labels}, "values": [], "timestamps": []})
            row["values"].append(value)
            row["timestamps"].append(t * 1000)
        self.lines = "".join(json.dumps(row) + "\n" for row in series.values())
        self.server = VictoriaMetrics()

    def __enter__(self) -> str:
        self.server.start()
        url = self.server.url
        urlopen(Request(f"{url}/api/v1/import", data=self.lines.encode(), method="POST"), timeout=60).read()
        urlopen(f"{url}/internal/force_flush", timeout=60).read()
        return url

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


BACKENDS = {"prometheus": PrometheusFleet, "victoriametrics": VictoriaFleet}


def recent_end() -> int:
    """The end of the range: a sample time a few steps in the past."""
    return (int(time.time()) // STEP) * STEP - 4 * STEP


def load(url: str, model: dict, title: str, end: int, values: dict[str, str] | None = None) -> tuple[list[str], list]:
    """The servers the panel reads (its ranking's and crowd_seen's), and each target's result, as
    Grafana loads them."""
    variables = resolve_variables(url, model, end - RANGE, end, values)
    assert not [q for q in variables.queries if q.error], variables.queries
    panel = next(p for p in dashboard_files.iter_panels(model) if p["title"] == title)
    results = [grafana_render.grafana_query(url, panel, target, end - RANGE, end, STEP, variables=variables.values)
               for target in panel["targets"]]
    assert not [r for r in results if r.get("error")], results
    read = {name for name in variables.values if name.startswith("crowd_") and "${" + name + "}" in
            panel["targets"][0]["expr"]}
    assert SEEN_VARIABLE in read and len(read) == 2, read  # its own ranking and the servers seen while few
    return sorted({server for q in variables.queries if q.name in read for server in q.options}), results


def drawn(result: dict) -> list[str]:
    return sorted({row["metric"]["instance"] for row in result["result"]})


def expected(servers: list[int], high_is_bad: bool) -> list[str]:
    """The servers of the worst and best few among `servers` (ascending by value), or all of them."""
    if len(servers) > CFG.panel_all_series_up_to:
        worst, best = ((servers[-CFG.panel_worst_k:], servers[:CFG.panel_best_k]) if high_is_bad else
                       (servers[:CFG.panel_worst_k], servers[-CFG.panel_best_k:]))
        servers = [*worst, *best]
    return sorted(server(i) for i in servers)


@pytest.fixture(scope="module")
def model() -> dict:
    return overview.build(CFG)


@pytest.fixture(scope="module", params=list(BACKENDS))
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """60 servers, s17 quiet for the last QUIET seconds; (url, end of the range)."""
    end = recent_end()
    samples = fleet_samples(60, end, frozenset({17}))
    with BACKENDS[request.param](tmp_path_factory.mktemp(request.param), samples) as url:
        yield url, end


@pytest.mark.prometheus
@pytest.mark.server
def test_a_fleet_shows_the_worst_and_best_few(fleet: tuple[str, int], model: dict) -> None:
    url, end = fleet
    active = [i for i in range(60) if i != 17]
    picked, results = load(url, model, ACCEPTANCE_PANEL, end)
    assert picked == expected(active, high_is_bad=False)
    # Every target of the panel, the bounds too, reads the picked servers only, over the whole range.
    assert [drawn(r) for r in results] == [picked] * 3
    assert all(len(row["values"]) > RANGE / STEP / 2 for row in results[0]["result"])
    picked, (result,) = load(url, model, POLL_AGE_PANEL, end)  # high is bad: the oldest polls
    assert picked == expected(list(range(60)), high_is_bad=True) == drawn(result)
    # A quiet fleet: nothing ranks at the end, so the panel draws nothing (not 60 servers).
    picked, results = load(url, model, ACCEPTANCE_PANEL, end + QUIET)
    assert picked == [] and [drawn(r) for r in results] == [[]] * 3


@pytest.mark.prometheus
@pytest.mark.server
def test_a_selected_server_shows_everything_also_after_going_quiet(fleet: tuple[str, int], model: dict) -> None:
    url, end = fleet
    picked, results = load(url, model, ACCEPTANCE_PANEL, end, {"instance": multi_value([server(17)])})
    assert picked == [server(17)]
    (row,) = results[0]["result"]
    assert row["metric"]["instance"] == server(17)
    stamps = [float(t) for t, _ in row["values"]]
    assert max(stamps) <= end - QUIET + STEP + 300  # drawn until it went quiet (and the 5 m lookback)
    assert min(stamps) < end - QUIET - 60
    two = [server(17), server(40)]
    picked, results = load(url, model, ACCEPTANCE_PANEL, end, {"instance": multi_value(two)})
    assert picked == sorted(two) == drawn(results[0])


@pytest.mark.prometheus
@pytest.mark.server
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_few_servers_are_all_shown(tmp_path: Path, model: dict, backend: str) -> None:
    end = recent_end()
    servers = CFG.panel_all_series_up_to - 4
    with BACKENDS[backend](tmp_path, fleet_samples(servers, end, frozenset({3}))) as url:
        picked, results = load(url, model, ACCEPTANCE_PANEL, end)
        # Server 3 went quiet: it has no value now, and still is drawn over the range it had one.
        assert picked == drawn(results[0]) == expected(list(range(servers)), False)
        # A quiet small fleet: nothing ranks at the end, and every server seen in the range is drawn.
        picked, results = load(url, model, ACCEPTANCE_PANEL, end + QUIET)
        assert picked == drawn(results[0]) == sorted(server(i) for i in range(servers))


@pytest.mark.prometheus
@pytest.mark.server
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_selected_model_on_few_servers_shows_them_all(tmp_path: Path, model: dict, backend: str) -> None:
    """40 servers, 10 of them on model m2: with m2 selected the few are its 10 servers, all drawn
    (counting every server of the fleet would keep only the worst and best few of them)."""
    end = recent_end()
    on_m2 = frozenset(range(0, 40, 4))
    with BACKENDS[backend](tmp_path, fleet_samples(40, end, second_model=on_m2)) as url:
        picked, results = load(url, model, ACCEPTANCE_PANEL, end, {"model_name": "m2"})
    assert len(on_m2) > CFG.panel_worst_k + CFG.panel_best_k
    assert picked == drawn(results[0]) == sorted(server(i) for i in on_m2)


@pytest.mark.prometheus
@pytest.mark.server
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_servers_with_several_series_keep_the_panel_readable(tmp_path: Path, model: dict, backend: str) -> None:
    """Eight selected servers of four engines each: 32 series, more than panel_all_series_up_to,
    so the per-engine panel keeps the worst and best few series of those servers."""
    end = recent_end()
    selected = [server(i) for i in range(8)]
    with BACKENDS[backend](tmp_path, fleet_samples(12, end, engines=4)) as url:
        picked, (result,) = load(url, model, "Acceptance rate by engine", end, {"instance": multi_value(selected)})
    assert picked == sorted(selected)
    shown = sorted((row["metric"]["instance"], row["metric"]["engine"]) for row in result["result"])
    by_value = sorted(((i, e) for i in range(8) for e in range(4)), key=lambda p: p[0] / 100 + p[1] / 1000)
    kept = (*by_value[:CFG.panel_worst_k], *by_value[-CFG.panel_best_k:])
    assert shown == sorted((server(i), str(e)) for i, e in kept)


@pytest.mark.prometheus
@pytest.mark.server
def test_the_narrowing_is_what_keeps_the_panel_small(fleet: tuple[str, int], model: dict) -> None:
    """The checker is not vacuous: the same panel with the ranking variable at every server
    (what the lab substitutes without a server) draws the whole fleet."""
    url, end = fleet
    panel = next(p for p in dashboard_files.iter_panels(model) if p["title"] == ACCEPTANCE_PANEL)
    result = grafana_render.grafana_query(url, panel, panel["targets"][0], end - RANGE, end, STEP)
    assert len(drawn(result)) == 60
    assert CROWD_ALL == ".*"


@pytest.mark.server
def test_victoriametrics_ranks_records_younger_than_its_default_step() -> None:
    """On VictoriaMetrics an instant query's subquery defaults to a 5-minute step, aligned: with
    the series only 2 minutes old at the query time, that one point held nothing, the ranking
    was empty, and a 5,000-pod fleet's panel drew every server (bench/fleet_scale.py, 5,000 pods).
    The ranking as Grafana sends it (instant, no step) must still pick the worst and best few."""
    servers = 60
    end = (int(time.time()) // 300) * 300 - 150  # 2.5 minutes past a 5-minute boundary, in the past
    stamps = [(end - 120 + 15 * i) * 1000 for i in range(9)]  # samples from 2 minutes before
    lines = "".join(json.dumps({"metric": {"__name__": "acceptance", "instance": f"s{i:02d}"},
                                "values": [i / 100] * len(stamps), "timestamps": stamps}) + "\n"
                    for i in range(servers))
    crowd = Queries(CFG).crowd("test", 'max by (instance) (acceptance{instance=~".+"})')
    with VictoriaMetrics() as vm:
        urlopen(Request(f"{vm.url}/api/v1/import", data=lines.encode(), method="POST"), timeout=30).read()
        urlopen(f"{vm.url}/internal/force_flush", timeout=30).read()
        whole = vm.query("acceptance", at=end)
        ranking = crowd.servers.replace("$job", ".+").replace("$engine_family", ".*")
        shown = vm.query(ranking.replace("$instance", ".+"), at=end)
    assert len(whole) == servers  # the data is there
    assert sorted(s["metric"]["instance"] for s in shown) == [
        f"s{i:02d}" for i in (*range(CFG.panel_worst_k), *range(servers - CFG.panel_best_k, servers))]


def test_grafana_formats_a_ranking_as_its_prometheus_data_source_does() -> None:
    """packages/grafana-prometheus: query_result's text per row, the variable's regex, and the
    multi-value format: each value regex-escaped with two backslashes, `(a|b)`, `()` for none."""
    crowd = Queries(CFG).crowd("test", 'max by (instance) (acceptance{instance=~"$instance"})')
    rows = [{"metric": {"instance": server(i)}, "value": [1700000000.5, "1"]} for i in (2, 1, 2)]
    assert options(rows, crowd.regex) == [server(2), server(1)]
    assert regex_escape("10.0.0.1:8000") == "10\\\\.0\\\\.0\\\\.1:8000"
    assert regex_escape("a\\b(c)") == "a\\\\\\\\b\\\\(c\\\\)"
    assert multi_value(["a.b", "c"]) == "(a\\\\.b|c)" and multi_value(["a"]) == "a" and multi_value([]) == "()"
    # The row's text as Grafana writes it: labels, the value, the time in whole milliseconds.
    assert row_text(rows[0]) == f'{{instance="{server(2)}"}} 1 1700000000500'
    named = {"metric": {"__name__": "up", "job": "j"}, "value": [1700000000, "0.5"]}
    assert row_text(named) == 'up{job="j"} 0.5 1700000000000'
