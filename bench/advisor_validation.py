"""Does the k advisor predict a lower k correctly? Checked on a real vLLM (CPU build, n-gram).

1. Serve with k=4, send a fixed greedy workload, measure the per-position acceptance p_i from the
   counter deltas, and let the advisor predict tokens per step at k' = 1..3: E(k') = 1 + sum p_i.
2. Serve the same model with k = k' and the same workload; measure the real tokens per step
   (mean acceptance length 1 + accepted/drafts).
Greedy decoding is lossless under speculation, so both runs generate the same text; what changes is
where drafts start, which is why the prediction is an estimate. Prints predicted vs measured and the
relative error; the stated tolerance is 10 %.

Usage: python bench/advisor_validation.py [--ks 2] [--requests 24]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from vllm_spec_exporter.advisor import advise
from vllm_spec_lab import default_cache_dir
from vllm_spec_lab.server import NGRAM_SPEC_CONFIG, VllmServer, spec_counters
from vllm_spec_lab.tinymodel import ensure_tiny_models
from vllm_spec_lab.traffic import high_acceptance_phase, run_phase
from vllm_spec_lab.venv import ensure_vllm_venv

TOLERANCE = 0.10


def measure(python: Path, model: Path, k: int, requests_n: int, workdir: Path) -> dict[str, float]:
    config = {**NGRAM_SPEC_CONFIG, "num_speculative_tokens": k}
    with VllmServer(python, model, speculative_config=config, served_model_name="tiny-llama",
                    log_path=workdir / f"vllm-k{k}.log", niceness=0) as server:
        before = spec_counters(server.url)
        result = run_phase(server.url, server.model_name,
                           high_acceptance_phase(max_requests=requests_n, concurrency=1, max_tokens=128))
        assert result.requests_ok == requests_n, result.errors
        after = spec_counters(server.url)
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    drafts = delta["vllm:spec_decode_num_drafts_total"]
    return {
        "drafts": drafts,
        "tokens_per_step": 1 + delta["vllm:spec_decode_num_accepted_tokens_total"] / drafts,
        **{f"p{i}": delta[f"vllm:spec_decode_num_accepted_tokens_per_pos_total/{i}"] / drafts for i in range(k)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="advisor prediction vs a measured run with a lower k")
    parser.add_argument("--ks", type=int, nargs="+", default=[2], help="lower k values to measure")
    parser.add_argument("--requests", type=int, default=24)
    args = parser.parse_args()
    python = ensure_vllm_venv()
    model, _ = ensure_tiny_models(python, default_cache_dir())
    with tempfile.TemporaryDirectory() as tmp:
        base = measure(python, model, 4, args.requests, Path(tmp))
        curve = [base[f"p{i}"] for i in range(4)]
        advice = advise(curve, draft_cost=0.0)
        print(f"k=4 measured: per-position acceptance {', '.join(f'{p:.3f}' for p in curve)}, "
              f"tokens/step {base['tokens_per_step']:.3f}")
        within = f"within {TOLERANCE:.0%}"
        print(f"{'k':>3} {'predicted tokens/step':>22} {'measured':>10} {'error':>8} {within:>11}")
        for k in args.ks:
            run = measure(python, model, k, args.requests, Path(tmp))
            predicted = advice.tokens_per_step[k]
            error = (predicted - run["tokens_per_step"]) / run["tokens_per_step"]
            print(f"{k:>3} {predicted:>22.3f} {run['tokens_per_step']:>10.3f} {error:>+8.1%} "
                  f"{'yes' if abs(error) <= TOLERANCE else 'NO':>11}")


if __name__ == "__main__":
    main()
