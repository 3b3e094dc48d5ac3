"""support/workers.py, the suite's own xdist grouping: an inner pytest run on two workers, with the
suite's plugin, of a generated module whose tests share a module fixture and of single tests.
The grouped tests must run on one worker, in their order, with one fixture set-up; the single ones
may go anywhere. Both `--dist loadgroup` (scripts/test.sh) and a bare `-n 2` (xdist's `load`) group."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.paths import TESTS

pytestmark = pytest.mark.slow  # two inner pytest runs on two workers each: ~35 s

INNER = '''
import os, pytest

def record(what):
    with open(os.environ["WORKERS_LOG"], "a") as log:
        log.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {what}\\n")

@pytest.fixture(scope="module")
def stack():
    record("setup")
    yield
    record("teardown")

@pytest.mark.parametrize("i", range(6))
def test_grouped(stack, i):
    record(f"grouped{i}")

@pytest.mark.parametrize("i", range(6))
def test_single(i):
    record(f"single{i}")
'''


@pytest.mark.parametrize("dist", [("--dist", "loadgroup"), ()], ids=["loadgroup", "load"])
def test_a_module_fixtures_tests_share_one_worker_in_order(tmp_path: Path, dist: tuple[str, ...]) -> None:
    (tmp_path / "pytest.ini").write_text(f"[pytest]\npythonpath = {TESTS}\n")
    (tmp_path / "conftest.py").write_text("pytest_plugins = ['support.plugin']\n")
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER))
    log = tmp_path / "log"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", *dist,
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "WORKERS_LOG": str(log)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line.split() for line in log.read_text().splitlines()]
    grouped = [(worker, what) for worker, what in rows if not what.startswith("single")]
    assert {worker for worker, _ in grouped} == {grouped[0][0]}, rows
    assert [what for _, what in grouped] == ["setup", *(f"grouped{i}" for i in range(6)), "teardown"], rows
    assert sorted(what for _, what in rows if what.startswith("single")) == [f"single{i}" for i in range(6)]
    assert "workers: seconds busy, by group" in done.stdout


def test_a_test_starting_its_own_vllm_shares_the_shared_vllms_worker() -> None:
    """Two vLLMs' tokens/s are compared within one run: no other test's vLLM may run meanwhile."""
    from types import SimpleNamespace

    from support.workers import group_of

    own_pair, plain = SimpleNamespace(module="test_own_pair"), SimpleNamespace(module="test_plain")
    assert group_of(own_pair, {"vllm", "server"}, vllm_modules=set()) == "shared-vllm"
    assert group_of(plain, {"server"}, vllm_modules={"test_plain"}) == "shared-vllm"
    assert group_of(plain, {"server", "prometheus"}, vllm_modules=set()) is None
