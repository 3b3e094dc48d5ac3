"""`vllm_spec_lab.ports`: every worker's servers on their own ports, handed out in turn."""

from __future__ import annotations

import itertools
import os
import socket

import pytest

from vllm_spec_lab import ports


def test_a_range_hands_out_its_ports_in_turn_and_skips_one_in_use() -> None:
    low = 32100  # above every worker's range (WORKER_PORTS), below the kernel's
    pool = ports.PortRange(low, low + 3)
    first = pool.take()
    order = [first] + [pool.take() for _ in range(3)]
    assert sorted(order) == [low, low + 1, low + 2, low + 3]  # each once before any comes back
    assert pool.take() == first  # then round again, from where it started
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", order[1]))
        taken.listen()
        assert pool.take() == order[2]  # order[1] is skipped while something listens there


def test_a_full_range_says_so() -> None:
    low = 32200
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", low))
        with pytest.raises(OSError, match="every port in the range is in use"):
            ports.PortRange(low, low).take()


def test_free_port_reads_the_range_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ports.RANGE_VARIABLE, "32300-32309")
    assert {ports.free_port() for _ in range(10)} == set(range(32300, 32310))
    monkeypatch.setenv(ports.RANGE_VARIABLE, "32300")
    with pytest.raises(ValueError, match="expected LOW-HIGH"):
        ports.free_port()
    monkeypatch.delenv(ports.RANGE_VARIABLE)
    assert ports.free_port() >= 32768  # the kernel's ephemeral range (Linux's default)


def test_worker_ranges_are_disjoint_and_below_the_kernels() -> None:
    for workers in (1, 2, 3, 16, 64, 1000):
        bounds = [tuple(int(n) for n in ports.worker_range(i, workers).split("-")) for i in range(workers)]
        assert all(low <= high for low, high in bounds)
        assert all(high < next_low for (_, high), (next_low, _) in itertools.pairwise(bounds)), workers
        assert bounds[0][0] >= ports.WORKER_PORTS[0] and bounds[-1][1] < 32000, workers
    with pytest.raises(ValueError, match="no such worker"):
        ports.worker_range(3, 3)
    with pytest.raises(ValueError, match="fewer than 10 ports"):
        ports.worker_range(0, 5000)


def test_this_worker_has_its_own_range() -> None:
    """Under `scripts/test.sh` (xdist) the plugin set this worker's range; alone, nothing is set."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        assert ports.RANGE_VARIABLE not in os.environ
    else:
        assert os.environ[ports.RANGE_VARIABLE] == ports.worker_range(
            int(worker.removeprefix("gw")), int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
