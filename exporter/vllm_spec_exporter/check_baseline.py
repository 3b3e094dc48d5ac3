"""`check --baseline URL`: sample the speculative target and a baseline server (the same model
served without speculation) at once, and print the measured speed-up beside the estimate.

Two pollers, one thread each, poll both servers every BASELINE_INTERVAL over the same `--duration`
(the same fetch -> parse -> normalise path as `check`); the first and last snapshot of each give
the histogram and counter deltas, and every poll the running batch, read by the function `check`
uses for its own batch (passed in as `batch_of`). baseline_compare does the arithmetic.

Bad input says so in one line and measures nothing: the baseline unreachable, the baseline itself
speculating, the two serving different models, no finished request on one side. Then `check`
exits EXIT_BASELINE (4) unless its own verdict already says something worse (1, 3). A measured
speed-up below 1 at comparable batches, agreeing with the tokens/s ratio (neither warning of
baseline_compare), turns a healthy verdict into EXIT_BELOW (1): speculation is measured to cost
more than it saves.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import calibrate, settings
from .baseline_compare import BATCH_MISMATCH_FACTOR, QUANTILES, Comparison, compare, side_figures
from .engines import ALL_HISTOGRAMS
from .normalise import Snapshot
from .poller import Poller

__all__ = ["EXIT_BASELINE", "Companion", "Comparison", "add_arguments", "combined_verdict", "json_block", "start",
           "table_lines"]

EXIT_BASELINE = 4
BASELINE_INTERVAL = 1.0  # seconds between polls of each server (the batch is a mean over them)
EPILOG = (f"4 (--baseline) cannot compare with the baseline: unreachable, speculating itself, another model, "
          f"or no finished request on one side; 1 also when the speed-up measured against the baseline is "
          f"below 1 at batches at most {BATCH_MISMATCH_FACTOR:g}x apart, agreeing with the tokens/s ratio")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", default=None, metavar="URL",
                        help="base URL of the same model served WITHOUT speculation: both servers are sampled "
                             "at once and the measured speed-up (time per output token) is printed beside the "
                             "estimate; send both the same traffic")


@dataclass
class _Side:
    """What one server's poller saw: first and last snapshot, every poll's batch."""

    url: str
    first: Snapshot | None = None
    last: Snapshot | None = None
    first_at: float = 0.0
    last_at: float = 0.0
    batches: dict[str, list[float]] = field(default_factory=dict)
    error: str = ""


class Companion:
    """Polls the target and the baseline on two threads until `duration` has passed."""

    def __init__(self, pollers: dict[str, Poller], duration: float, interval: float,
                 batch_of: Callable[[Snapshot], dict[str, float]]) -> None:
        self.sides = {name: _Side(poller.fetcher.url) for name, poller in pollers.items()}
        self._batch_of = batch_of
        self._stop = threading.Event()
        self._deadline = time.monotonic() + duration
        self._threads = [threading.Thread(target=self._run, args=(name, poller, interval), daemon=True,
                                          name=f"check-{name}") for name, poller in pollers.items()]
        for thread in self._threads:
            thread.start()

    def _run(self, name: str, poller: Poller, interval: float) -> None:
        side = self.sides[name]
        try:
            while not self._stop.is_set():
                result = poller.poll_once()
                if result.target_up and result.snapshot is not None:
                    snap, answered = result.snapshot, poller.answered_at  # when the server read its counters
                    if side.first is None:
                        side.first, side.first_at = snap, answered
                    side.last, side.last_at = snap, answered
                    for model, batch in self._batch_of(snap).items():
                        side.batches.setdefault(model, []).append(batch)
                elif not side.error:
                    side.error = result.error_message
                left = self._deadline - time.monotonic()
                if left <= 0:
                    break
                self._stop.wait(min(interval, left))
        finally:
            poller.fetcher.close()

    def finish(self, compute_bound_tokens: float, free_drafts: bool) -> list[Comparison]:
        """Wait for both pollers, then compare every model the target serves."""
        for thread in self._threads:
            thread.join()
        return comparisons(self.sides["target"], self.sides["baseline"], compute_bound_tokens, free_drafts)

    def stop(self) -> None:
        self._stop.set()


def start(args: argparse.Namespace, duration: float, batch_of: Callable[[Snapshot], dict[str, float]]) -> Companion:
    """Start sampling `args.target` and `args.baseline` (the same connection options for both)."""
    interval = min(BASELINE_INTERVAL, duration / 2)
    pollers = {}
    for name, url in (("target", args.target), ("baseline", args.baseline)):
        conf = settings.resolve_connection(argparse.Namespace(**{**vars(args), "target": url}))
        fetcher = settings.make_fetcher(conf, args.timeout, 64 * 1024 * 1024)
        pollers[name] = Poller(fetcher, interval, window=duration + 2 * interval,
                               min_draft_tokens=args.min_draft_tokens, histograms=ALL_HISTOGRAMS)
    return Companion(pollers, duration, interval, batch_of)


def comparisons(target: _Side, baseline: _Side, compute_bound_tokens: float, free_drafts: bool) -> list[Comparison]:
    """One comparison per model of the target; one line saying why, when none can be made."""
    def models(side: _Side) -> list[str]:
        assert side.last is not None
        return sorted({key.series.model_name for key in side.last.histograms} | set(side.batches))

    if target.last is None:
        return [compare("", None, None, compute_bound_tokens, free_drafts,
                        f"TARGET DOWN — {target.url}: {target.error or 'no answer'}")]
    if baseline.last is None:
        return [compare("", None, None, compute_bound_tokens, free_drafts,
                        f"BASELINE DOWN — {baseline.url}: {baseline.error or 'no answer'}")]
    if baseline.last.spec_enabled:
        return [compare("", None, None, compute_bound_tokens, free_drafts,
                        f"BASELINE SPECULATES — {baseline.url} exposes speculative-decoding metrics (schema "
                        f"{baseline.last.schema}): serve the same model there without --speculative-config")]
    ours, theirs = models(target), models(baseline)
    common = [m for m in ours if m in theirs]
    if not common:
        return [compare("", None, None, compute_bound_tokens, free_drafts,
                        f"MODEL MISMATCH — the target serves {', '.join(ours) or 'no model'}, the baseline "
                        f"{', '.join(theirs) or 'no model'}: compare the same model")]
    out = []
    for model in common:
        sides = [side_figures(s.first, s.last, s.last_at - s.first_at, model, s.batches.get(model, []))
                 if s.first is not None and s.last_at > s.first_at else None for s in (target, baseline)]
        problem = None if all(sides) else "NO TRAFFIC — only one poll answered on one side: sample longer"
        out.append(compare(model, sides[0], sides[1], compute_bound_tokens, free_drafts, problem))
    return out


def combined_verdict(code: int, line: str, found: list[Comparison], exit_healthy: int,
                     exit_below: int) -> tuple[int, str]:
    """`check`'s verdict with the comparison's: a problem is EXIT_BASELINE where check was healthy;
    a measured speed-up below 1 at comparable batches is EXIT_BELOW."""
    problems = [c.problem for c in found if c.problem]
    if problems:
        return (EXIT_BASELINE, problems[0]) if code == exit_healthy else (code, line)
    slower = [c for c in found if c.speedup is not None and c.speedup < 1 and c.batch_warning is None
              and c.agreement_warning is None]
    if slower and code == exit_healthy:
        worst = min(slower, key=lambda c: c.speedup or 0)
        return exit_below, (f"NOT PAYING — {worst.model} measured {worst.speedup:.2f}x the baseline's speed "
                            "(time per output token): speculation costs more than it saves")
    return code, line


def _s(value: float | None, scale: float = 1e3, unit: str = " ms") -> str:
    return "—" if value is None else f"{value * scale:.3g}{unit}"


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def table_lines(found: list[Comparison], compute_bound_tokens: float) -> list[str]:
    lines = ["", "measured against the baseline (same model, no speculation, sampled at the same time):"]
    for c in found:
        if c.problem:
            lines.append(f"  {c.problem}")
            continue
        t, b = c.target, c.baseline
        assert t is not None and b is not None
        q = " · ".join(f"p{round(k * 100)} {_x(v)}" for k, v in c.speedup_quantiles.items())
        lines += [f"  {c.model}: measured speed-up {_x(c.speedup)} (time per output token, mean; {q} from buckets)"]
        for name, side in (("speculative", t), ("baseline", b)):
            tq = " ".join(f"p{round(k * 100)} {_s(v)}" for k, v in side.tpot_quantiles.items())
            lines.append(f"    {name:<11} TPOT {_s(side.tpot_mean)} ({tq}) · ITL per chunk {_s(side.itl_mean)} · "
                         f"{_s(side.output_tokens_per_second, 1, '')} tok/s · batch "
                         f"{'—' if side.batch is None else f'{side.batch:.1f}'} · {side.requests:g} requests")
        lines.append(f"    end to end {_x(c.end_to_end_speedup)} (request latency per output token, queueing and "
                     f"prefill included) · tokens/s ratio {_x(c.tokens_per_second_ratio)} · ITL ratio "
                     f"{_x(c.chunk_latency_ratio)} (per emitted chunk: step times, not speed)")
        for warning in (c.batch_warning, c.agreement_warning):
            if warning:
                lines.append(f"    WARNING: {warning}")
        if c.draft_cost_ratio is not None or c.compute_bound is not None:
            lines.append("    " + calibration_line(c, compute_bound_tokens))
    return lines


def calibration_line(c: Comparison, compute_bound_tokens: float) -> str:
    """"calibrated: compute_bound_tokens ≈ …, draft_cost_ratio ≈ …; put these in your config (…)"."""
    bound = c.compute_bound
    n = compute_bound_tokens if bound is None else calibrate.to_set(bound, compute_bound_tokens)
    known = {"fitted": "", "at_most": " or less", "at_least": " or more"}
    found = (f"compute_bound_tokens {n:g} (as set)" if bound is None else
             f"compute_bound_tokens ≈ {max(1, round(bound.tokens))}{known[bound.kind]} (use {n:g})")
    sets = [] if bound is None else [f"--set compute_bound_tokens={n:g}"]
    if c.draft_cost_ratio is not None:
        found += f", draft_cost_ratio ≈ {c.draft_cost_ratio:.3g}"
        sets.append(f"--set draft_cost_ratio={c.draft_cost_ratio:.3g}")
    return f"calibrated: {found}; put these in your config (`{' '.join(sets)}`; docs/calibration.md)"


def json_block(found: list[Comparison], baseline_url: str) -> dict[str, Any]:
    """The `baseline` block of `check --json`."""
    def side(s: Any) -> dict[str, Any] | None:
        if s is None:
            return None
        return {"seconds": s.seconds, "requests": s.requests, "time_per_output_token_seconds": s.tpot_mean,
                "time_per_output_token_quantiles": {str(q): v for q, v in s.tpot_quantiles.items()},
                "inter_token_latency_seconds": s.itl_mean,
                "inter_token_latency_quantiles": {str(q): v for q, v in s.itl_quantiles.items()},
                "output_tokens_per_second": s.output_tokens_per_second, "running_per_engine": s.batch,
                "engine_steps": s.steps, "draft_tokens_per_request_step": s.draft_length,
                "end_to_end_seconds_per_token": s.e2e_per_token}

    models = []
    for c in found:
        models.append({"model_name": c.model, "problem": c.problem, "measured_speedup": c.speedup,
                       "measured_speedup_quantiles": {str(q): c.speedup_quantiles.get(q) for q in QUANTILES},
                       "measured_speedup_end_to_end": c.end_to_end_speedup,
                       "inter_token_latency_ratio": c.chunk_latency_ratio,
                       "tokens_per_second_ratio": c.tokens_per_second_ratio, "batch_warning": c.batch_warning,
                       "agreement_warning": c.agreement_warning,
                       "speculative": side(c.target), "baseline": side(c.baseline),
                       "calibrated": {"draft_cost_ratio": c.draft_cost_ratio,
                                      "compute_bound_tokens": None if c.compute_bound is None else
                                      {"tokens": c.compute_bound.tokens, "kind": c.compute_bound.kind}}})
    return {"url": baseline_url, "batch_mismatch_factor": BATCH_MISMATCH_FACTOR, "models": models}
