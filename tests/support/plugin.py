"""The test suite's pytest plugin (loaded by tests/conftest.py): tiers, time limits, shared servers
and the end-of-run summary. The CI policy itself is support/policy.py (`require`).

Tiers. Tests marked `vllm`, `docker`, `browser` or `llamacpp`, and modules marked `server` (they
start Prometheus, Alertmanager, VictoriaMetrics or an exporter against a simulation for long), all
carry the `server` marker; tests that need minutes of CPU without a server are marked `slow`.
`scripts/test.sh --fast` runs `-m "not server and not slow"`: unit, fuzz, promtool and lint tests,
under two minutes. Plain `scripts/test.sh` runs everything (CI: `.ci/run`).

Time limits (pytest-timeout, its signal method: the test fails and its fixtures still stop their
servers). The default for every test is `timeout` in pyproject.toml's [tool.pytest.ini_options];
tests in a slower tier get that tier's limit below unless they set `@pytest.mark.timeout` themselves.
A test that hits its limit fails with a line naming it, its limit and where the limit comes from.
Fixture set-up counts: the first test to use the shared vLLM pays its start-up.

Shared servers: the session fixture `real_vllm` (support/servers.py) and the function fixture
`alert_stack` (support/alertstack.py). In one process the modules using `real_vllm` run last, so the
one vLLM is started when the first of them needs it and lives only while they run.

Workers (pytest-xdist, as `scripts/test.sh` runs both tiers): which tests share a worker and in which
order they are queued is support/workers.py; workers send their report rows (support/report.py) to
the controller, which prints them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import report, workers
from support.alertstack import AlertStackFactory
from support.proctree import survivors
from support.prom import require_version
from support.servers import count_vllm_starts, shared_vllm
from vllm_spec_lab.monitoring import PROMTOOL_BIN, PROMTOOL_OLDEST_BIN
from vllm_spec_lab.warden import tree

SERVER_MARKERS = ("vllm", "docker", "browser", "llamacpp")
# Seconds, per marker; the longest applies. A real vLLM start takes 45 s on quiet cores and
# minutes at load 15; test_e2e runs ~8 min of phases; the docker tier builds images first.
TIER_TIMEOUTS = {"slow": 1200, "server": 900, "browser": 1200, "llamacpp": 1200, "vllm": 1800, "docker": 2400}
_current_test = ["(collection)"]


def pytest_configure(config: pytest.Config) -> None:
    count_vllm_starts(lambda: _current_test[0])
    workers.install(config)
    workers.isolate_ports(config)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Name the real servers this run uses, once, at the start, whatever the verbosity
    (`vllm-spec-lab versions`)."""
    from vllm_spec_lab.versions import server_versions

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("real servers (vllm-spec-lab versions):")
        for server in server_versions():
            reporter.write_line(f"  {server.line()}")


def _limit_source(item: pytest.Item) -> tuple[float | None, str]:
    """The time limit pytest-timeout applies to `item`, and where it comes from."""
    own = item.get_closest_marker("timeout")
    if own is not None and own.args:
        return float(own.args[0]), "its @pytest.mark.timeout"
    configured = item.config.getini("timeout")
    return (float(configured), "[tool.pytest.ini_options] timeout") if configured else (None, "none")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sharing = {item.module for item in items if "real_vllm" in getattr(item, "fixturenames", ())}
    groups: dict[str, str] = {}
    for item in items:
        names = {mark.name for mark in item.iter_markers()}
        if names & set(SERVER_MARKERS):
            item.add_marker(pytest.mark.server)
            names.add("server")
        if (group := workers.group_of(item, names, sharing)) is not None:
            groups[item.nodeid] = group
        if item.get_closest_marker("timeout") is None:
            tiers = [(TIER_TIMEOUTS[name], name) for name in names if name in TIER_TIMEOUTS]
            if tiers:
                limit, tier = max(tiers)
                item.add_marker(pytest.mark.timeout(limit))
                item.user_properties.append(("time_limit_source", f"the {tier} tier (support/plugin.py)"))
    if workers.in_worker(config):
        workers.queue_order(items, groups)
        workers.publish(config, groups)
    else:
        # One process: the modules that use the shared vLLM run last, one after the other, so that it
        # lives (and holds its memory) only while they run; whole modules move, so their module
        # fixtures (the container tests' dockerd and image) are still set up once.
        items.sort(key=lambda item: getattr(item, "module", None) in sharing)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _current_test[0] = item.nodeid
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A timeout names the test, its limit and where the limit is set, above pytest-timeout's dump."""
    outcome = yield
    result = outcome.get_result()
    if call.excinfo is None or "from pytest-timeout" not in str(call.excinfo.value):
        return
    limit, source = _limit_source(item)
    tier = dict(item.user_properties).get("time_limit_source")
    seconds = f"{limit:.0f} s" if limit is not None else "(unknown)"
    line = (f"TIME LIMIT: {item.nodeid} ran out of its {seconds} during {call.when} "
            f"(set by {tier or source}; fixture set-up counts, e.g. the shared vLLM's start-up)")
    if hasattr(result.longrepr, "addsection"):
        result.longrepr.addsection("time limit", line)
    else:
        result.sections.append(("time limit", line))
    crash = getattr(result.longrepr, "reprcrash", None)
    if crash is not None:  # the short summary's line, too
        crash.message = f"ran out of its {seconds} time limit (set by {tier or source})"


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: its report rows go to the controller
        workeroutput["report_rows"] = report.rows()


@pytest.hookimpl(optionalhook=True)  # an xdist hook: only called when xdist runs the suite
def pytest_testnodedown(node, error) -> None:
    report.add_rows(getattr(node, "workeroutput", {}).get("report_rows", {}))


def pytest_terminal_summary(terminalreporter) -> None:
    report.write_summary(terminalreporter.write_line)


@pytest.fixture(scope="session")
def real_vllm(tmp_path_factory: pytest.TempPathFactory):
    """The run's ONE real vLLM (see support/servers.py): started on first use, stopped at the end."""
    server = shared_vllm(tmp_path_factory.mktemp("shared-vllm"))
    started = time.monotonic()
    with server:
        print(f"\nshared vLLM ready at {server.url} in {time.monotonic() - started:.0f} s (log {server.log_path})")
        yield server
        # Its real process tree (API server, engine core, workers), taken just before the stop.
        recorded = tree((server.process.pid,))
    # The stop must take the whole tree down, not just the process it started.
    left = survivors(recorded)
    report.VLLM_STOPS.append(f"shared vLLM stopped: {len(recorded)} processes in its tree, {len(left)} survived")
    if left:
        pytest.fail(f"the shared vLLM's processes outlived its stop: {left}", pytrace=False)


@pytest.fixture
def alert_stack(tmp_path: Path) -> Iterator[AlertStackFactory]:
    """Start webhook + Alertmanager (+ a rule engine) with `alert_stack(overrides, ...)`; everything
    it started is stopped when the test ends."""
    with AlertStackFactory(tmp_path / "alert-stack") as factory:
        yield factory


# (path, version prefix): the newest and the oldest promtool we support; the oldest runs in the full
# tier only (`--fast` proves the rules on the newest).
PROMTOOLS = [pytest.param((PROMTOOL_BIN, "3."), id="promtool-3"),
             pytest.param((PROMTOOL_OLDEST_BIN, "2."), id="promtool-2.42", marks=pytest.mark.slow)]


@pytest.fixture(params=PROMTOOLS)
def promtool(request: pytest.FixtureRequest) -> str:
    """Each promtool we support in turn (a test using it runs once per version)."""
    path, prefix = request.param
    return require_version(path, prefix)
