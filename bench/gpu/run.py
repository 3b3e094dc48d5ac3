"""Measure vLLM speculative decoding on a GPU against the bundle's estimate, and capture /metrics.

Contract. Run on the GPU machine from the repository root after bench/gpu/install.sh (vLLM importable
with PYTHONPATH=/tmp/site, set here if not set)::

    PYTHONUNBUFFERED=1 python3 .gpu/kit/run.py --out "$OUT"      # or bench/gpu/run.py

1. Builds a random-weight Llama target (bf16, ~1B parameters by default) and a 2-layer draft that
   shares its tokenizer, embeddings, final norm and LM head, with the byte-level BPE tokenizer of
   lab/vllm_spec_lab/tinymodel.py. The target's residual branches are scaled by ``residual_scale``
   so that its greedy output stays close to the shared embedding→LM-head map: greedy output loops
   (n-gram drafts are accepted) and the draft agrees with the target part of the time.
2. For each method (plain, n-gram k=4, draft model k=3) starts vLLM's OpenAI API server on 127.0.0.1
   (lab's VllmServer), drives each concurrency with the same prompts, ``max_tokens`` fixed,
   ``ignore_eos``, temperature 0 (lab's traffic.run_phase), with a bracket /metrics scrape (idle,
   stats window flushed: tests/fixtures/capture.py's Recorder) before and after every phase.
3. Writes ``OUT/results.json`` (every phase: tokens/s, counter deltas, steps, step time, tokens per
   step; per method and concurrency the measured speed-up against advisor.speedup_at_load and
   advisor.speedup_bound; the step-time table and the compute-bound tokens it implies),
   ``OUT/results.md`` (the same as tables) and ``OUT/captures.tgz`` (the fixture folders in
   tests/fixtures/vllm-0.32.0's layout, one per method: spec_off, ngram, draft_model, rewritten after
   each method so a timeout still returns what ran).

This file is the driver: the plan (methods, concurrencies), each method's server and traffic, the
captures and results.json. Beside it, model_recipe.py builds the models and phase_results.py holds
the figures (counter deltas, phase statistics, the comparison with the estimate, the tables). run.py
puts its own folder and the repository's packages on the path, so it runs as a script from
bench/gpu/ or .gpu/kit/ (copy all three there). The pure parts (model building at any size,
counter deltas, the estimate, the tables) run on a CPU and are tested by
tests/tooling/test_gpu_kit.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _path in (HERE, REPO / "exporter", REPO / "lab", REPO / "tests/fixtures"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from model_recipe import DRAFT, TARGET, build_models  # noqa: E402
from phase_results import (  # noqa: E402
    PhaseStats,
    compare,
    compute_bound_tokens,
    deltas,
    fmt,
    phase_stats,
    render_tables,
)

from vllm_spec_exporter import advisor  # noqa: E402
from vllm_spec_lab.traffic import LOOPING_PROMPTS, Phase, run_phase  # noqa: E402

SERVED_MODEL_NAME = "gpu-llama"
SITE = Path(os.environ.get("SITE", "/tmp/site"))
GPU_NAME_DEFAULT = "NVIDIA H100 80GB HBM3"


@dataclass(frozen=True)
class Method:
    name: str  # fixture scenario name
    advisor_method: str | None  # key of advisor.DEFAULT_DRAFT_COST, None when plain
    description: str

    def speculative_config(self, draft_dir: Path) -> dict[str, Any] | None:
        if self.advisor_method == "ngram":
            return {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
        if self.advisor_method == "draft_model":
            return {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": 3}
        return None


METHODS = (
    Method("spec_off", None, "no speculative config, the baseline: the spec-decode families must be absent"),
    Method("ngram", "ngram", "n-gram speculation (k=4), greedy looping prompts, concurrency 1, 8, 32, 128"),
    Method("draft_model", "draft_model",
           "draft-model speculation (k=3), a 2-layer random draft sharing the target's embeddings and LM head"),
)
CONCURRENCY = (1, 8, 32, 128)
# Plain only: more batches to see where the step time starts growing with the tokens.
PLAIN_EXTRA_CONCURRENCY = (64, 256, 512)


# ---------------------------------------------------------------- the GPU run


@dataclass
class Run:
    out: Path
    work: Path
    max_tokens: int = 128
    log_interval_s: int = 3
    phases: list[PhaseStats] = field(default_factory=list)
    startup_s: dict[str, float | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def requests_for(concurrency: int) -> int:
    return max(8, 2 * concurrency)


def run_method(run: Run, method: Method, target: Path, draft: Path, gpu_name: str) -> None:
    import capture

    from vllm_spec_lab.server import VllmServer

    capture.LOG_STATS_INTERVAL_S = run.log_interval_s
    capture.SERVED_MODEL_NAME = SERVED_MODEL_NAME  # index.json names the model the server serves
    scenario = capture.Scenario(name=method.name, description=method.description,
                                speculative=method.advisor_method or "none", steps=())
    out_dir = run.work / "captures" / method.name
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_config = method.speculative_config(draft)
    server = VllmServer(
        Path(sys.executable), target, speculative_config=spec_config, served_model_name=SERVED_MODEL_NAME,
        extra_args=("--max-num-seqs", "512", "--seed", "0", "--gpu-memory-utilization", "0.85"),
        # FlashInfer is not in the wheel set (no network there to fetch its JIT kernels); vLLM 0.26's
        # sampler imports it unless told not to, and the engine core then fails at start-up.
        extra_env={"VLLM_USE_FLASHINFER_SAMPLER": "0",
                   "VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_LOG_STATS_INTERVAL": str(run.log_interval_s),
                   "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        log_path=run.out / f"server-{method.name}.log", startup_timeout_s=240, niceness=0,
    )
    concurrencies = CONCURRENCY + (PLAIN_EXTRA_CONCURRENCY if method.advisor_method is None else ())
    bursts: list[dict[str, Any]] = []
    print(f"[{method.name}] starting: {shlex.join(server.command)}", flush=True)
    with server:
        run.startup_s[method.name] = server.startup_seconds
        print(f"[{method.name}] healthy after {server.startup_seconds:.1f} s", flush=True)
        recorder = capture.Recorder(server, out_dir)
        capture._flush_then_scrape(recorder, scenario, "idle-start")
        warm = Phase("warm-up", 0.0, max_requests=16, concurrency=16, max_tokens=32, prompts=LOOPING_PROMPTS)
        run_phase(server.url, server.model_name, warm)
        capture._flush_then_scrape(recorder, scenario, "after-warm-up")
        for concurrency in sorted(concurrencies):
            phase = Phase(f"c{concurrency}", 0.0, max_requests=requests_for(concurrency), max_seconds=120,
                          concurrency=concurrency, max_tokens=run.max_tokens, prompts=LOOPING_PROMPTS)
            server.wait_for_stats_log(server.log_offset(), timeout_s=30)
            before = recorder.scrapes[-1].file
            result = run_phase(server.url, server.model_name, phase)
            capture._flush_then_scrape(recorder, scenario, f"after-{phase.name}")
            after = recorder.scrapes[-1].file
            delta = deltas((out_dir / before).read_text(), (out_dir / after).read_text())
            stats = phase_stats(method.name, phase, result, delta)
            run.phases.append(stats)
            bursts.append(asdict(phase) | asdict(result))
            print(f"[{method.name}] c={concurrency}: {stats.tokens_per_s:.0f} tok/s, steps {stats.steps:.0f}, "
                  f"step {fmt(stats.step_time_s and 1000 * stats.step_time_s)} ms, "
                  f"accepted/drafted {stats.accepted:.0f}/{stats.draft_tokens:.0f}", flush=True)
    try:
        capture._write_outputs(scenario, server, recorder, bursts, spec_config, target, server.startup_seconds)
    except RuntimeError as error:  # the oracle check; the tests check it again
        run.errors[f"{method.name}-oracle"] = str(error)
        print(f"[{method.name}] oracle: {error}", flush=True)
    write_fixture_readme(out_dir, method, spec_config, gpu_name, server.command, run)


def write_fixture_readme(out_dir: Path, method: Method, spec_config: dict[str, Any] | None, gpu_name: str,
                         command: Sequence[str], run: Run) -> None:
    env = ("PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_LOGGING_LEVEL=DEBUG "
           f"VLLM_LOG_STATS_INTERVAL={run.log_interval_s} ")
    (out_dir / "command.txt").write_text(env + shlex.join(str(c) for c in command) + "\n")
    (out_dir / "README.md").write_text(
        f"# Fixture `{method.name}`: vLLM 0.26.0 on a GPU\n\n"
        f"Captured on {gpu_name}, vLLM 0.26.0, {time.strftime('%Y-%m-%d', time.gmtime())}, by bench/gpu/run.py.\n\n"
        f"{method.description}.\n\n"
        f"Model: a random-weight bf16 Llama built by bench/gpu/run.py ({json.dumps(asdict(TARGET))}), "
        f"served as `{SERVED_MODEL_NAME}`. Speculative config: `{json.dumps(spec_config)}`.\n\n"
        "Traffic: completions API, `ignore_eos`, temperature 0, the lab's looping prompts, "
        f"{run.max_tokens} tokens a request; a warm-up burst, then one burst per concurrency "
        "(see `index.json` `bursts`), each between two bracket scrapes (idle, stats window flushed).\n\n"
        "Layout as tests/fixtures/vllm-0.32.0/ (see its README and tests/fixtures/capture.py): "
        "`scrape-NNN.prom`, `index.json`, `speclog.txt`, `command.txt`.\n")


def pack_captures(run: Run) -> None:
    with tarfile.open(run.out / "captures.tgz", "w:gz") as tar:
        tar.add(run.work / "captures", arcname="captures")


def summarise(run: Run, gpu_name: str) -> dict[str, Any]:
    phases = [asdict(p) for p in run.phases]
    plain = {p.concurrency: p for p in run.phases if p.method == "spec_off"}
    rows = [(p.tokens_per_step, p.step_time_s) for p in plain.values() if p.tokens_per_step and p.step_time_s]
    measured_n = compute_bound_tokens(rows)
    costs = {m: advisor.DEFAULT_DRAFT_COST[m] for m in ("ngram", "draft_model")}
    comparisons = [asdict(compare(plain[p.concurrency], p, costs[p.method], measured_n))
                   for p in run.phases if p.method != "spec_off" and p.concurrency in plain]
    return {"gpu": gpu_name, "vllm": "0.26.0", "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "target": asdict(TARGET), "draft": asdict(DRAFT), "max_tokens": run.max_tokens,
            "draft_costs": costs, "startup_s": run.startup_s, "errors": run.errors,
            "compute_bound_tokens_measured": measured_n, "phases": phases, "comparisons": comparisons}


def write_results(run: Run, gpu_name: str) -> dict[str, Any]:
    results = summarise(run, gpu_name)
    (run.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (run.out / "results.md").write_text(render_tables(results) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/gpu-out")))
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu-run"))
    parser.add_argument("--methods", default=",".join(m.name for m in METHODS))
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    if str(SITE) not in os.environ.get("PYTHONPATH", ""):
        os.environ["PYTHONPATH"] = f"{SITE}:{os.environ.get('PYTHONPATH', '')}".rstrip(":")
        sys.path.insert(0, str(SITE))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    gpu_name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else GPU_NAME_DEFAULT
    started = time.monotonic()
    target, draft = build_models(args.work / "models")
    print(f"models built in {time.monotonic() - started:.0f} s: {target}, {draft}", flush=True)
    run = Run(out=args.out, work=args.work, max_tokens=args.max_tokens)
    for method in METHODS:
        if method.name not in args.methods.split(","):
            continue
        try:
            run_method(run, method, target, draft, gpu_name)
        except Exception as error:  # keep the other methods' numbers
            run.errors[method.name] = f"{type(error).__name__}: {error}"[-4000:]
            print(f"[{method.name}] FAILED: {run.errors[method.name]}", flush=True)
        pack_captures(run) if (run.work / "captures").exists() else None
        write_results(run, gpu_name)
        print(f"[{method.name}] done at {time.monotonic() - started:.0f} s", flush=True)
    print(render_tables(write_results(run, gpu_name)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
