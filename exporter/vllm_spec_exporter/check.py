"""`vllm-spec-exporter check`: sample a live vLLM server and print a verdict, without Grafana.

The same fetch -> parse -> normalise -> window -> derive path as the sidecar; per model, the deltas of
all its engines are summed before dividing.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from . import advisor, check_baseline, check_sampling, durations, settings, specconfig_reader, terminal
from .derive import SeriesFigures, derive_series, derive_v0, figures
from .engines import COUNTER_SCHEMAS
from .names import MetricName, Schema
from .normalise import Snapshot
from .poller import UNKNOWN_CONFIG, Poller, checked_against_positions
from .specconfig import SpecConfig

EXIT_HEALTHY, EXIT_BELOW, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 3
EPILOG = """exit codes: 0 acceptance at or above the threshold; 1 below it; 2 bad arguments;
3 cannot judge (target down, target busy: it accepted connections but fewer than two polls
answered in time, speculative decoding off, or no draft traffic while sampling);
""" + check_baseline.EPILOG
# Per poll: a loaded vLLM answers /metrics from the event loop that streams its tokens, seconds late
# under saturation; `check` polls one at a time, so a long deadline never piles polls up.
DEFAULT_POLL_TIMEOUT_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="http://127.0.0.1:8000",
                        help="vLLM base URL (default http://127.0.0.1:8000)")
    parser.add_argument("--duration", default="30s", help="how long to sample, e.g. 30s, 2m (default 30s)")
    parser.add_argument("--threshold", type=float, default=0.5,
                        help="acceptance below this is reported as a problem (default 0.5)")
    parser.add_argument("--min-draft-tokens", type=float, default=100,
                        help="fewer draft tokens than this while sampling means 'no traffic' (default 100)")
    parser.add_argument("--method", choices=sorted(advisor.DEFAULT_DRAFT_COST), default=None,
                        help="drafting method, to pick the advisor's draft cost "
                             f"({advisor.draft_cost_help()}; default {advisor.UNKNOWN_METHOD_DRAFT_COST:g})")
    parser.add_argument("--draft-cost-ratio", type=float, default=None,
                        help="cost of drafting one token relative to one target step (overrides --method)")
    parser.add_argument("--compute-bound-tokens", type=float, default=advisor.DEFAULT_COMPUTE_BOUND_TOKENS,
                        help="tokens per forward pass from which the target's step time grows with the tokens "
                             "verified, for the speed-up at the running batch (default "
                             f"{advisor.DEFAULT_COMPUTE_BOUND_TOKENS}; about the GPU's FLOP/s over its bytes/s)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_POLL_TIMEOUT_S,
                        help=f"seconds allowed per poll; a poll answered later counts as timed out, not as "
                             f"the target down (default {DEFAULT_POLL_TIMEOUT_S:g})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    check_baseline.add_arguments(parser)
    settings.add_arguments(parser, only=settings.CONNECTION_OPTIONS + settings.SPEC_CONFIG_OPTIONS)
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the table: auto (when stdout is a terminal), always or never (default auto)")


def validate_arguments(args: argparse.Namespace) -> None:
    if not (math.isfinite(args.threshold) and 0 <= args.threshold <= 1):
        raise ValueError(f"--threshold must lie within [0, 1], got {args.threshold:g}")
    if not (math.isfinite(args.min_draft_tokens) and args.min_draft_tokens >= 0):
        raise ValueError(f"--min-draft-tokens must be a finite number >= 0, got {args.min_draft_tokens:g}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ValueError(f"--timeout must be a finite number of seconds > 0, got {args.timeout:g}")
    if args.draft_cost_ratio is not None and not (math.isfinite(args.draft_cost_ratio) and args.draft_cost_ratio >= 0):
        raise ValueError(f"--draft-cost-ratio must be a finite number >= 0, got {args.draft_cost_ratio:g}")
    if not (math.isfinite(args.compute_bound_tokens) and args.compute_bound_tokens > 0):
        raise ValueError(f"--compute-bound-tokens must be a finite number > 0, got {args.compute_bound_tokens:g}")


def parse_duration(text: str) -> float:
    """--duration: a duration (`30s`, `2m`, `1m30s`) or a bare number of seconds."""
    try:
        value = float(text) if text.replace(".", "", 1).isdigit() else durations.seconds(text)
    except ValueError:
        raise ValueError(f"--duration: cannot read {text!r}; use e.g. 30s or 2m") from None
    if not math.isfinite(value) or value < 1 or value > 86400:
        raise ValueError("--duration must be between 1s (two polls are needed for a rate) and 24h")
    return value


@dataclass(frozen=True)
class ModelReport:
    """One model's figures over the sampled window (engines summed); `figures` None: no counters."""

    model: str
    engines: list[str]
    figures: SeriesFigures | None
    values: dict[MetricName, float]  # derived figures, by the name the exporter serves them under
    positions: dict[int, float]  # 0-based draft position -> acceptance
    load: terminal.LoadView
    advice: advisor.Advice | None
    paying: terminal.PayingView | None = None  # the speed-up at the running batch

    def view(self) -> terminal.ModelView:
        a = self.advice
        shown = None if a is None else terminal.AdvisorView(
            recommended_k=a.recommended_k, current_k=a.current_k, estimated_speedup=a.speedup,
            tokens_per_step=a.tokens_per_step, draft_cost_ratio=a.draft_cost, gain_vs_current=a.gain_vs_current,
            try_raising_k=a.try_raising)
        return terminal.ModelView(model_name=self.model, engines=tuple(self.engines),
                                  k=self.figures.k if self.figures is not None else None, values=self.values,
                                  positions=self.positions, load=self.load, advisor=shown, paying=self.paying,
                                  positions_exact=bool(self.figures is not None and self.figures.drafted_by_position))


class CheckReport(NamedTuple):
    """What `check` found: `--json` prints `to_json(report)`, the table is `render_table(report, ...)`."""

    target: str
    vllm_version: str
    schema: str
    engine_family: str
    sampled_seconds: float
    polls: int
    models: list[ModelReport]
    verdict: str
    exit_code: int
    spec_config: SpecConfig = UNKNOWN_CONFIG
    polls_timed_out: int = 0  # polls that got no answer in time (the figures come from the others)
    baseline: list[check_baseline.Comparison] | None = None  # --baseline: the measured comparison
    baseline_url: str = ""
    compute_bound_tokens: float = advisor.DEFAULT_COMPUTE_BOUND_TOKENS


def sum_figures(parts: list[SeriesFigures]) -> SeriesFigures:
    def total(attr: str) -> float | None:
        vals = [getattr(p, attr) for p in parts if getattr(p, attr) is not None]
        return sum(vals) if vals else None

    def by_position(attr: str) -> dict[str, float]:
        summed: dict[str, float] = {}
        for p in parts:
            for pos, v in getattr(p, attr).items():
                summed[pos] = summed.get(pos, 0.0) + v
        return summed

    # Drafts per position are exact only when every engine counts them.
    drafted = by_position("drafted_by_position") if all(p.drafted_by_position for p in parts) else {}
    return replace(parts[0], seconds=max(p.seconds for p in parts), drafts=total("drafts"),
                   draft_tokens=total("draft_tokens"), accepted=total("accepted"),
                   generation=total("generation"), accepted_by_position=by_position("accepted_by_position"),
                   k=max(p.k for p in parts), drafted_by_position=drafted)


def _gauge(snap: Snapshot, family: str, series_keys: list, combine: Callable[[list[float]], float]) -> float | None:
    """A context gauge over the model's engines (None when no engine exposes it)."""
    found = [snap.gauges[(family, s)] for s in series_keys if (family, s) in snap.gauges]
    return combine(found) if found else None


def build_reports(poller: Poller, snap: Snapshot, min_draft_tokens: float, draft_cost: float,
                  batches: dict[str, list[float]] | None = None,
                  compute_bound_tokens: float = advisor.DEFAULT_COMPUTE_BOUND_TOKENS) -> list[ModelReport]:
    """One report per model. `batches`: model -> its running requests per engine at each answered
    poll, whose mean is the batch the speed-up at load is estimated at where no engine serves the
    running-seconds counter (check_sampling)."""
    reports = []
    models = sorted({series[0] for series in snap.series_keys()})
    for model in models:
        series_keys = [s for s in snap.series_keys() if s[0] == model]
        engines = [s[1] for s in series_keys]
        load = terminal.LoadView(requests_running=_gauge(snap, "requests_running", series_keys, sum),
                                 requests_waiting=_gauge(snap, "requests_waiting", series_keys, sum),
                                 kv_cache_usage=_gauge(snap, "kv_cache_usage", series_keys, max))
        if snap.schema == Schema.V0:
            values = {name: value for name, labels, value in derive_v0(snap) if labels[0] == model}
            reports.append(ModelReport(model, engines, None, values, {}, load, None))
            continue
        parts = [f for f in (figures(poller.store, snap, s) for s in series_keys) if f is not None]
        if not parts:
            reports.append(ModelReport(model, engines, None, {}, {}, load, None))
            continue
        total = sum_figures(parts)
        values = {}
        positions: dict[int, float] = {}
        for name, labels, value in derive_series((model, "*"), total, min_draft_tokens, draft_cost):
            if name == MetricName.POSITION_ACCEPTANCE_RATIO:
                positions[int(labels[2])] = value
            else:
                values[MetricName(name)] = value
        # The advisor reads accepted per draft (derive.py's curve), also where `positions` are exact.
        per_draft = {int(p): a / total.drafts for p, a in total.accepted_by_position.items()} if total.drafts else {}
        curve = [per_draft[p] for p in sorted(positions) if p in per_draft]
        advice = advisor.advise(curve, draft_cost) if curve else None
        reports.append(ModelReport(model, engines, total, values, positions, load, advice,
                                   paying_at(total, (batches or {}).get(model), draft_cost, compute_bound_tokens,
                                             min_draft_tokens)))
    return reports


def paying_at(total: SeriesFigures, batches: list[float] | None, draft_cost: float, compute_bound_tokens: float,
              min_draft_tokens: float) -> terminal.PayingView | None:
    """The speed-up at the sampled batch, when the counters had enough drafts to say anything: the
    batch from the step counter, else the gauge's mean over `batches` (check_sampling); neither,
    no estimate."""
    G, T, A = total.generation, total.draft_tokens, total.accepted
    if G is None or T is None or A is None or max(min_draft_tokens, 1) > T:
        return None
    batch, source = check_sampling.counter_batch(total), check_sampling.BATCH_COUNTER
    if batch is None:
        if not batches:
            return None
        batch, source = sum(batches) / len(batches), check_sampling.BATCH_GAUGE
    speedup = advisor.speedup_at_load(G, T, A, batch, draft_cost, compute_bound_tokens)
    return None if speedup is None else terminal.PayingView(speedup, batch, compute_bound_tokens, source)


def verdict(schema: str, reports: list[ModelReport], threshold: float) -> tuple[int, str]:
    if schema == Schema.NONE:
        return EXIT_UNKNOWN, "SPEC DECODING OFF — the server exposes no speculative-decoding metrics"
    if schema not in COUNTER_SCHEMAS and schema != Schema.V0:
        return EXIT_UNKNOWN, (f"CANNOT JUDGE — schema {schema} has no acceptance counters "
                              "(https://github.com/vllm-spec-exporter/vllm-spec-exporter/blob/main/docs/engines.md)")
    rates = {r.model: r.values.get(MetricName.ACCEPTANCE_RATIO) for r in reports}
    judged = {m: a for m, a in rates.items() if a is not None}
    if not judged:
        return EXIT_UNKNOWN, "NO TRAFFIC — too few draft tokens while sampling to judge acceptance"
    low = {m: a for m, a in judged.items() if a < threshold}
    if low:
        worst = min(low, key=low.get)
        return EXIT_BELOW, (f"BELOW {threshold:.0%} — {worst} accepts {low[worst]:.1%} of draft tokens: "
                            "speculation likely costs more than it saves")
    return EXIT_HEALTHY, f"HEALTHY — acceptance {min(judged.values()):.1%} ≥ {threshold:.0%}"


def run(args: argparse.Namespace) -> int:
    duration = parse_duration(args.duration)
    validate_arguments(args)
    draft_cost = args.draft_cost_ratio
    if draft_cost is None:
        draft_cost = advisor.draft_cost_for(args.method)
    # The verdict says it when the target is down; the poller's own log line would say it twice.
    logging.getLogger("vllm_spec_exporter").setLevel(logging.CRITICAL)
    interval = min(5.0, duration / 2)
    conf = settings.resolve_connection(args)
    fetcher = settings.make_fetcher(conf, args.timeout, 64 * 1024 * 1024)
    poller = Poller(fetcher, interval, window=duration + 2 * interval + args.timeout,
                    min_draft_tokens=args.min_draft_tokens)
    companion = check_baseline.start(args, duration, check_sampling.running_per_engine) if args.baseline else None
    seen = check_sampling.sample(poller, duration, interval)
    fetcher.close()
    result = seen.answered
    if result is None or result.snapshot is None or seen.polls_answered < 2:
        if companion is not None:
            companion.stop()
        return print_unjudged(fetcher.url, seen, args.timeout, args.json)
    snap = result.snapshot
    reports = build_reports(poller, snap, args.min_draft_tokens, draft_cost, seen.gauge_batches,
                            args.compute_bound_tokens)
    code, line = verdict(snap.schema, reports, args.threshold)
    compared = None
    if companion is not None:
        compared = companion.finish(args.compute_bound_tokens, free_drafts=draft_cost == 0)
        code, line = check_baseline.combined_verdict(code, line, compared, EXIT_HEALTHY, EXIT_BELOW)
    report = CheckReport(target=fetcher.url, vllm_version=result.version, schema=snap.schema,
                         engine_family=snap.engine_family, sampled_seconds=duration, polls=seen.polls, models=reports,
                         verdict=line, exit_code=code, spec_config=read_spec_config(conf, snap),
                         polls_timed_out=seen.polls_timed_out, baseline=compared,
                         baseline_url=args.baseline or "", compute_bound_tokens=args.compute_bound_tokens)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    print(json.dumps(to_json(report), indent=2, sort_keys=True) if args.json else
          render_table(report, args.threshold, color))
    return code


def print_unjudged(url: str, seen: check_sampling.Sampled, timeout: float, as_json: bool) -> int:
    """Fewer than two polls answered: TARGET BUSY when the target accepted connections while its
    polls timed out (too loaded to report in time, or hung: a connection alone cannot tell which),
    TARGET DOWN otherwise."""
    if seen.busy:
        head = "TARGET BUSY"
        error = (f"{seen.polls_answered} of {seen.polls} polls answered within {timeout:g} s (two are needed); "
                 f"{seen.polls_timed_out} timed out while the server accepted connections: too loaded to "
                 "answer /metrics in time, or hung (raise --timeout; if it still times out, look at the server)")
    else:
        head, error = "TARGET DOWN", seen.last_error or "no poll answered"
    print(json.dumps({"target": url, "verdict": head, "error": error, "polls": seen.polls,
                      "polls_timed_out": seen.polls_timed_out}, indent=2, sort_keys=True) if as_json else
          f"vllm-spec-exporter check — {url}\nverdict: {head} — {error}")
    return EXIT_UNKNOWN


def read_spec_config(conf: settings.Settings, snap: Snapshot) -> SpecConfig:
    """The target's speculative config from the sources `serve` reads (specconfig_reader), its k
    checked against the draft positions sampled; problems go to the log, which `check` silences."""
    reader = specconfig_reader.reader_for(conf)  # the same reader, read once on this thread
    try:
        config = reader.read_once()
    finally:
        reader.stop()
    return checked_against_positions(config, snap)[0]


def to_json(report: CheckReport) -> dict[str, Any]:
    """The `--json` document (its keys are a public format: served names without the `vllm_` prefix)."""
    models = []
    for r in report.models:
        context = {name: value for name, value in r.load._asdict().items() if value is not None}
        entry: dict[str, Any] = {"model_name": r.model, "engines": r.engines, "context": context,
                                 **{name.removeprefix("vllm_"): v for name, v in r.values.items()}}
        if r.positions:
            entry["positions"] = {str(position): v for position, v in r.positions.items()}
        if r.figures is not None:
            entry["k"] = r.figures.k
            entry["window"] = {"seconds": r.figures.seconds, "drafts": r.figures.drafts,
                               "draft_tokens": r.figures.draft_tokens, "accepted_tokens": r.figures.accepted,
                               "generation_tokens": r.figures.generation}
        if r.advice is not None:
            a = r.advice
            entry["advisor"] = {"draft_cost_ratio": a.draft_cost, "current_k": a.current_k,
                                "recommended_k": a.recommended_k, "tokens_per_step": a.tokens_per_step,
                                "estimated_speedup": a.speedup, "gain_vs_current": a.gain_vs_current,
                                "try_raising_k": a.try_raising}
        if r.paying is not None:
            entry["at_load"] = {"estimated_speedup": r.paying.speedup, "running_per_engine": r.paying.batch,
                                "batch_source": r.paying.batch_source,
                                "compute_bound_tokens": r.paying.compute_bound_tokens}
        models.append(entry)
    return {"target": report.target, "vllm_version": report.vllm_version, "schema": report.schema,
            "engine_family": report.engine_family, "sampled_seconds": report.sampled_seconds,
            "polls": report.polls, "polls_timed_out": report.polls_timed_out,
            "models": models, "verdict": report.verdict, "exit_code": report.exit_code,
            "speculative_config": report.spec_config.labels(),
            **({} if report.baseline is None else
               {"baseline": check_baseline.json_block(report.baseline, report.baseline_url)})}


def timed_out_note(timed_out: int) -> str:
    """' (2 timed out: …)' after the poll count, or nothing."""
    if not timed_out:
        return ""
    return (f" ({timed_out} timed out: the server answered /metrics late, busy rather than down; "
            "the figures come from the polls that answered)")


def render_table(report: CheckReport, threshold: float, color: bool) -> str:
    paint = terminal.painter(color)
    lines = [paint(f"vllm-spec-exporter check — {report.target}", "1"),
             f"schema {report.schema} · vLLM {report.vllm_version or 'version unknown'} · "
             f"sampled {report.sampled_seconds:g} s in {report.polls} polls" + timed_out_note(report.polls_timed_out),
             f"speculation: {report.spec_config.line()}"]
    if report.schema == Schema.V0:
        lines.append("V0 engine: lifetime gauges, not windowed (V0's counters are unusable).")
    for m in report.models:
        lines.append("")
        lines += terminal.model_lines(m.view(), threshold, color)
    if report.baseline is not None:
        lines += check_baseline.table_lines(report.baseline, report.compute_bound_tokens)
    code = report.exit_code
    lines += ["", "verdict: " + paint(report.verdict, {0: "32;1", 1: "31;1"}.get(code, "33;1"))]
    return "\n".join(lines)
