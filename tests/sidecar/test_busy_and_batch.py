"""Busy is not down, and the batch from counters: the sidecar's poller and `check` against a target
that accepts connections but answers late (lab/vllm_spec_lab/fakes/badtarget.py), one that refuses
them, and the running batch read from vLLM's step count rather than a sampled gauge.

A real vLLM at saturation, and the batch against a fine poll of vLLM's own gauge, are in
tests/stack/test_busy_real_vllm.py.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from prometheus_client import generate_latest

from vllm_spec_exporter import advisor, check_sampling
from vllm_spec_exporter.check import paying_at
from vllm_spec_exporter.derive import SeriesFigures
from vllm_spec_exporter.fetch import Fetcher, FetchError
from vllm_spec_exporter.names import Family, MetricName
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse
from vllm_spec_exporter.poller import BUSY_GRACE_SECONDS, Poller
from vllm_spec_lab.exporter_process import SCRIPT
from vllm_spec_lab.fakes.badtarget import BadTarget, http_response
from vllm_spec_lab.fakes.vllm import FakeVllm
from vllm_spec_lab.ports import free_port

STEPS = ('# HELP vllm:iteration_tokens_total Number of tokens per engine_step.\n'
         '# TYPE vllm:iteration_tokens_total histogram\n'
         'vllm:iteration_tokens_total_sum{engine="0",model_name="tiny-llama"} 5000.0\n'
         'vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="tiny-llama"} 10.0\n'
         'vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="tiny-llama"} {count}\n'
         'vllm:iteration_tokens_total_count{engine="0",model_name="tiny-llama"} {count}\n')


def body(fake: FakeVllm, steps: float) -> bytes:
    """The fake's exposition with vLLM's tokens-per-step histogram at `steps` steps."""
    fake.step(40, 0.5)
    return (generate_latest(fake.registry).decode() + STEPS.replace("{count}", f"{steps:.1f}")).encode()


def figures(steps: float | None, generation: float = 1200, accepted: float = 300) -> SeriesFigures:
    return SeriesFigures(seconds=30, drafts=100, draft_tokens=400, accepted=accepted, generation=generation,
                         accepted_by_position={}, k=4, steps=steps)


def test_the_step_count_is_read_from_the_histograms_count_alone() -> None:
    snap = normalise(parse(STEPS.replace("{count}", "150.0")
                           + 'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny-llama"} 1.0\n'))
    steps = {key.family: value for key, value in snap.counters.items() if key.family == Family.ENGINE_STEPS}
    assert steps == {Family.ENGINE_STEPS: 150.0}  # neither _sum (5000) nor a bucket


def test_the_batch_is_request_steps_per_engine_step() -> None:
    # 1200 generated of which 300 accepted drafts: 900 request-steps in 150 steps, 6 a step.
    assert advisor.batch_per_step(1200, 300, 150) == 6
    assert advisor.batch_per_step(1200, 300, 0) is None  # no step taken: no batch, never 0
    assert check_sampling.counter_batch(figures(150)) == 6
    assert check_sampling.counter_batch(figures(None)) is None


def test_check_estimates_at_the_counted_batch_and_falls_back_to_the_gauge() -> None:
    counted = paying_at(figures(150), [0, 0, 0], 0.0, 256, min_draft_tokens=100)
    assert counted is not None and counted.batch == 6 and counted.batch_source == check_sampling.BATCH_COUNTER
    assert counted.speedup == pytest.approx(advisor.speedup_at_load(1200, 400, 300, 6, 0.0, 256))
    sampled = paying_at(figures(None), [2, 4], 0.0, 256, min_draft_tokens=100)
    assert sampled is not None and sampled.batch == 3 and sampled.batch_source == check_sampling.BATCH_GAUGE
    assert paying_at(figures(None), [], 0.0, 256, 100) is None  # neither: no estimate, never 1


def test_the_sidecar_serves_the_step_count_under_its_own_name() -> None:
    from vllm_spec_lab.exporter_process import ExporterProcess
    from vllm_spec_lab.waiting import wait_until

    with BadTarget() as target, FakeVllm(k=4) as fake:
        target.set(lambda conn: conn.sendall(http_response(body(fake, 150))))
        with ExporterProcess(target.url, interval=0.5, window=4, timeout=0.4, min_draft_tokens=1) as exporter:
            assert wait_until(lambda: MetricName.ENGINE_STEPS_TOTAL in exporter.metrics(), 30)
            served = exporter.metrics()[MetricName.ENGINE_STEPS_TOTAL]
    assert served == {(("engine", "0"), ("model_name", "tiny-llama")): 150.0}


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_poll_that_times_out_on_a_server_that_accepts_is_busy_until_the_grace_ends() -> None:
    clock = _Clock()
    with BadTarget() as target, FakeVllm(k=4) as fake:
        target.set(lambda conn: conn.sendall(http_response(body(fake, 150))))
        fetcher = Fetcher(target.url, 0.5, 1 << 22)
        poller = Poller(fetcher, interval=1, window=10, min_draft_tokens=0, wall_clock=clock)
        try:
            assert poller.poll_once().target_up
            target.set(target.hang())
            busy = poller.poll_once()
            assert busy.target_up and busy.busy and busy.snapshot is None and busy.errors["timeout"] == 1
            clock.now += BUSY_GRACE_SECONDS + 1  # no answer for longer than the grace: down
            down = poller.poll_once()
            assert not down.target_up and not down.busy and down.errors["timeout"] == 2
        finally:
            fetcher.close()


def test_a_refused_connection_is_down_at_once() -> None:
    with BadTarget() as target, FakeVllm(k=4) as fake:
        target.set(lambda conn: conn.sendall(http_response(body(fake, 150))))
        fetcher = Fetcher(target.url, 0.5, 1 << 22)
        poller = Poller(fetcher, interval=1, window=10, min_draft_tokens=0)
        assert poller.poll_once().target_up
    try:
        # The target is gone (its port closed): refused, not busy.
        result = poller.poll_once()
        assert not result.target_up and not result.busy and result.errors["connect"] == 1
        with pytest.raises(FetchError):
            fetcher.get_metrics()
        assert not fetcher.accepts_connections()
    finally:
        fetcher.close()


def run_check(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), "check", "--target", url, "--duration", "2s", "--json", *args],
                          capture_output=True, text=True, timeout=120)


def test_check_calls_a_server_that_accepts_but_never_answers_busy_and_a_refused_one_down() -> None:
    with BadTarget() as target:
        target.set(target.hang())
        busy = run_check(target.url, "--timeout", "0.5")
    report = json.loads(busy.stdout)
    assert busy.returncode == 3 and report["verdict"] == "TARGET BUSY", busy.stdout
    assert report["polls_timed_out"] == report["polls"] >= 2
    down = run_check(f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 3 and json.loads(down.stdout)["verdict"] == "TARGET DOWN", down.stdout


def test_check_judges_from_the_polls_that_answered_and_says_how_many_timed_out() -> None:
    """The target answers every other request: every other poll times out, the verdict stands."""
    with BadTarget() as target, FakeVllm(k=4) as fake:
        answered = [0]

        def alternate(conn) -> None:
            answered[0] += 1
            if answered[0] % 2:
                conn.sendall(http_response(body(fake, 150 * answered[0])))
            else:
                target.hang()(conn)

        target.set(alternate)
        done = subprocess.run([str(SCRIPT), "check", "--target", target.url, "--duration", "6s", "--timeout", "0.5",
                               "--min-draft-tokens", "1", "--color", "never"],
                              capture_output=True, text=True, timeout=120)
    assert "TARGET" not in done.stdout and done.returncode in (0, 1), done.stdout + done.stderr
    assert "timed out: the server answered /metrics late, busy rather than down" in done.stdout, done.stdout


def test_check_reads_the_batch_from_the_steps_where_the_gauge_reads_0_between_bursts() -> None:
    """Six requests a step, the running gauge back at 0 whenever /metrics is read (short requests
    read between bursts): check's batch is 6, not the gauge's 0."""
    import threading

    with FakeVllm(k=4) as fake:
        url = fake.start()
        stop = threading.Event()

        def bursts() -> None:
            while not stop.wait(0.05):
                fake.step(60, 0.5, running=6)
                fake.running.labels("tiny-llama", "0").set(0)

        thread = threading.Thread(target=bursts, daemon=True)
        thread.start()
        try:
            done = run_check(url, "--min-draft-tokens", "1")
        finally:
            stop.set()
            thread.join()
    at_load = json.loads(done.stdout)["models"][0]["at_load"]
    assert at_load["batch_source"] == check_sampling.BATCH_COUNTER
    assert at_load["running_per_engine"] == pytest.approx(6, rel=0.05)
