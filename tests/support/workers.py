"""Spreading the suite over pytest-xdist workers (`scripts/test.sh` runs both tiers with
`-n N --dist loadgroup`): which tests must share a worker, and in which order the work is queued.

Most tests wait on real servers' clocks (scrape, evaluation, `for:`), so several run at once. What
shares something costly stays on one worker, one test after the other (its *group*):

- `shared-vllm`: every module that uses the run's one real vLLM (`real_vllm`), so it is started once
  per run, not once per worker, and every test that starts vLLMs of its own (`vllm` marker): a
  vLLM on the CPU takes the machine's cores, and the tests that compare two vLLMs' tokens/s must
  not share them with a third (a speculative server starved next to another test's pair finished
  no request in 30 s);
- `docker`, `browser`, `llamacpp`: the tiers whose tests share one private dockerd and image, one
  renderer stack, one llama-server (test_containers also uses the shared vLLM, so it is in
  `shared-vllm`: the data-root lock of its dockerd allows one at a time anyway);
- a module's own path: each module whose tests share a module- or class-scoped fixture (a stack, an
  image, an exporter), so that fixture is set up once;
- none: any worker may run the test.

The groups are queued first, longest first (`SHARED_GROUPS`, then module groups), so the run lasts
as long as its longest group, not the sum of all; single tests fill the other workers meanwhile,
the `server` and `slow` ones first (`queue_order`). A cheap module-level fixture that would group
tests for nothing is better session-scoped (computed once per worker).

Each worker has its own loopback port range (`isolate_ports`, `vllm_spec_lab.ports`): a scraper of
one worker still holding a stopped server's address must never reach another worker's new server.

Why not xdist's own `loadgroup`: it passes a test's group by appending it to the node id, which
pytest 9.2 no longer lets a plugin change (pytest-xdist#1386; the group is silently dropped and the
tests are spread one by one). Here each worker writes `{node id: group}` to a file the controller
named (`pytest_configure_node`), and the controller's scheduler (`GroupScheduling`) reads it when
it schedules, which is after every worker finished collecting.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

from vllm_spec_lab.ports import RANGE_VARIABLE, worker_range

# The groups that hold a costly shared thing, in the order they are queued: longest first (worker
# seconds in a full run: shared-vllm ≈ 940 — test_measured_real_vllm, test_e2e, test_baseline_real_vllm,
# test_containers, test_real_vllm and the vLLMs' starts —, browser ≈ 150, llamacpp ≈ 5; the worker
# summary prints them).
SHARED_GROUPS = ("docker", "shared-vllm", "browser", "llamacpp")
_GROUP_FILES = "vllm_spec_test_group_files"  # workerinput key: the folder the workers write to


def group_of(item: pytest.Item, markers: set[str], vllm_modules: set) -> str | None:
    """The group `item` runs in (see the module docstring); None when any worker may run it."""
    if getattr(item, "module", None) in vllm_modules or "vllm" in markers:
        return "shared-vllm"
    for group in SHARED_GROUPS:
        if group in markers:
            return group
    if _uses_module_fixture(item):
        return item.nodeid.split("::", 1)[0]
    return None


def _uses_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    return any(defs and defs[-1].scope in ("module", "package", "class") for defs in definitions)


def in_worker(config: pytest.Config) -> bool:
    """True in an xdist worker (the controller collects nothing: only workers order and publish)."""
    return hasattr(config, "workerinput")


def isolate_ports(config: pytest.Config) -> None:
    """Give this worker (and the servers it starts) its own loopback port range, so a scraper of
    one worker never reaches a server of another (`vllm_spec_lab.ports`)."""
    if in_worker(config):  # whatever the controller inherited: a shared range would undo the isolation
        os.environ[RANGE_VARIABLE] = worker_range(int(config.workerinput["workerid"].removeprefix("gw")),
                                                  int(config.workerinput["workercount"]))


def queue_order(items: list[pytest.Item], groups: dict[str, str]) -> None:
    """Sort `items` in place for a distributed run, longest work first so that short tests fill the
    end: shared groups (in `SHARED_GROUPS` order), module groups, single tests of the `server` or
    `slow` tier, then the other single tests; the order within each is kept (the sort is stable)."""
    def position(item: pytest.Item) -> int:
        group = groups.get(item.nodeid)
        if group in SHARED_GROUPS:
            return SHARED_GROUPS.index(group)
        if group is not None:
            return len(SHARED_GROUPS)
        long = item.get_closest_marker("server") or item.get_closest_marker("slow")
        return len(SHARED_GROUPS) + (1 if long else 2)

    items.sort(key=position)


def publish(config: pytest.Config, groups: dict[str, str]) -> None:
    """In a worker: write `{node id: group}` where the controller's scheduler reads it."""
    folder = getattr(config, "workerinput", {}).get(_GROUP_FILES)
    if folder is None:
        return
    worker = config.workerinput["workerid"]
    staged = Path(folder) / f".{worker}.json"
    staged.write_text(json.dumps(groups))
    staged.replace(Path(folder) / f"{worker}.json")  # whole or absent, never half-written


class GroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduler (whole work units to one worker, queued in collection order) whose
    unit is a test's group as `groups()` gives it, or the test itself when it has none."""

    def __init__(self, config: pytest.Config, log, groups: Callable[[], dict[str, str]]) -> None:
        super().__init__(config, log)
        self._groups = groups

    def _split_scope(self, nodeid: str) -> str:
        return self._groups().get(nodeid, nodeid)


def read_groups(folder: Path) -> dict[str, str]:
    """{node id: group} as the workers published it (`publish`)."""
    groups: dict[str, str] = {}
    for written in sorted(folder.glob("*.json")):
        groups.update(json.loads(written.read_text()))
    return groups


class WorkerPlugin:
    """The controller's side: a folder for the workers' group files, the scheduler, and at the end
    how long each worker was busy and with which groups (the longest group is the run's floor)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="pytest-groups-"))
        self.busy: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._groups: dict[str, str] | None = None

    def groups(self) -> dict[str, str]:
        """{node id: group}, read once at the first call: the scheduler's first call comes after
        every worker finished collecting, so the files are all there."""
        if self._groups is None:
            self._groups = read_groups(self.folder)
        return self._groups

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        group = self.groups().get(report.nodeid, "(single tests)")
        self.busy[getattr(gateway, "id", "?")][group] += report.duration

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.busy:
            return
        terminalreporter.write_line("")
        terminalreporter.write_line("workers: seconds busy, by group (setup + call + teardown)")
        for worker, groups in sorted(self.busy.items()):
            ranked = sorted(groups.items(), key=lambda entry: -entry[1])
            shown = ", ".join(f"{group} {seconds:.0f}" for group, seconds in ranked[:6])
            more = f", {len(ranked) - 6} more" if len(ranked) > 6 else ""
            terminalreporter.write_line(f"  {worker}: {sum(groups.values()):.0f} s ({shown}{more})")

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[_GROUP_FILES] = str(self.folder)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        # `-n N` alone means `--dist load`: group too, or the shared vLLM starts once per worker.
        config.option.loadscopereorder = False  # our queue order (`queue_order`), not by unit size
        return GroupScheduling(config, log, self.groups)

    def pytest_unconfigure(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def install(config: pytest.Config) -> None:
    """Register the controller's side in a distributed run's controller (workers need nothing)."""
    dist = config.getoption("dist", "no")
    if dist == "no" or hasattr(config, "workerinput"):
        return
    if dist not in ("load", "loadgroup"):
        raise pytest.UsageError(f"--dist {dist}: this suite groups its tests itself; use --dist loadgroup "
                                "(tests/support/workers.py)")
    config.pluginmanager.register(WorkerPlugin(), "vllm-spec-test-workers")
