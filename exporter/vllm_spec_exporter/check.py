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
import time
from dataclasses import dataclass, replace
from typing import Any

from . import advisor, durations, settings, terminal
from .derive import SeriesFigures, derive_series, derive_v0, figures
from .engines import COUNTER_SCHEMAS
from .names import Schema
from .normalise import Snapshot
from .poller import Poller

EXIT_HEALTHY, EXIT_BELOW, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 3
EPILOG = """exit codes: 0 acceptance at or above the threshold; 1 below it; 2 bad arguments;
3 cannot judge (target unreachable, speculative decoding off, or no draft traffic while sampling)"""


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
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds allowed per poll (default 3)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    settings.add_arguments(parser, only=settings.CONNECTION_OPTIONS)
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
    model: str
    engines: list[str]
    figures: SeriesFigures | None
    values: dict[str, Any]  # derived metric name -> value (positions: {position: value})
    context: dict[str, float]
    advice: advisor.Advice | None


def sum_figures(parts: list[SeriesFigures]) -> SeriesFigures:
    def total(attr: str) -> float | None:
        vals = [getattr(p, attr) for p in parts if getattr(p, attr) is not None]
        return sum(vals) if vals else None

    by_pos: dict[str, float] = {}
    for p in parts:
        for pos, v in p.accepted_by_position.items():
            by_pos[pos] = by_pos.get(pos, 0.0) + v
    return replace(parts[0], seconds=max(p.seconds for p in parts), drafts=total("drafts"),
                   draft_tokens=total("draft_tokens"), accepted=total("accepted"),
                   generation=total("generation"), accepted_by_position=by_pos,
                   k=max(p.k for p in parts))


def build_reports(poller: Poller, snap: Snapshot, min_draft_tokens: float,
                  draft_cost: float) -> list[ModelReport]:
    reports = []
    models = sorted({series[0] for series in snap.series_keys()})
    for model in models:
        series_keys = [s for s in snap.series_keys() if s[0] == model]
        context = {}
        for name in ("requests_running", "requests_waiting"):
            vals = [snap.gauges[(name, s)] for s in series_keys if (name, s) in snap.gauges]
            if vals:
                context[name] = sum(vals)
        kv = [snap.gauges[("kv_cache_usage", s)] for s in series_keys if ("kv_cache_usage", s) in snap.gauges]
        if kv:
            context["kv_cache_usage"] = max(kv)
        if snap.schema == Schema.V0:
            values = {name: value for name, labels, value in derive_v0(snap) if labels[0] == model}
            reports.append(ModelReport(model, [s[1] for s in series_keys], None, values, context, None))
            continue
        parts = [f for f in (figures(poller.store, snap, s) for s in series_keys) if f is not None]
        if not parts:
            reports.append(ModelReport(model, [s[1] for s in series_keys], None, {}, context, None))
            continue
        total = sum_figures(parts)
        values: dict[str, Any] = {}
        for name, labels, value in derive_series((model, "*"), total, min_draft_tokens, draft_cost):
            if name == "vllm_spec_decode_position_acceptance_ratio":
                values.setdefault("positions", {})[labels[2]] = value
            else:
                values[name] = value
        positions = values.get("positions", {})
        curve = [positions[p] for p in sorted(positions, key=int)]
        advice = advisor.advise(curve, draft_cost) if curve else None
        reports.append(ModelReport(model, [s[1] for s in series_keys], total, values, context, advice))
    return reports


def verdict(schema: str, reports: list[ModelReport], threshold: float) -> tuple[int, str]:
    if schema == Schema.NONE:
        return EXIT_UNKNOWN, "SPEC DECODING OFF — the server exposes no speculative-decoding metrics"
    if schema not in COUNTER_SCHEMAS and schema != Schema.V0:
        return EXIT_UNKNOWN, (f"CANNOT JUDGE — schema {schema} has no acceptance counters "
                              "(README: Engine support)")
    rates = {r.model: r.values.get("vllm_spec_decode_acceptance_ratio") for r in reports}
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
    fetcher = settings.make_fetcher(conf, min(args.timeout, interval * 0.9), 64 * 1024 * 1024)
    poller = Poller(fetcher, interval, window=duration + 2 * interval, min_draft_tokens=args.min_draft_tokens)
    started = time.monotonic()
    polls = 0
    last_error = ""
    while True:
        result = poller.poll_once()
        polls += 1
        if not result.target_up:
            last_error = result.error_message
            if polls == 1:
                break  # unreachable from the start: say so now rather than after the duration
        left = duration - (time.monotonic() - started)
        if left <= 0:
            break
        time.sleep(min(interval, left))
    fetcher.close()
    result = poller.result
    if not result.target_up or result.snapshot is None:
        report = {"target": fetcher.url, "verdict": "TARGET DOWN", "error": last_error or result.error_message}
        _print(args, report, lambda: f"vllm-spec-exporter check — {fetcher.url}\nverdict: TARGET DOWN — "
                                     f"{report['error']}")
        return EXIT_UNKNOWN
    snap = result.snapshot
    reports = build_reports(poller, snap, args.min_draft_tokens, draft_cost)
    code, line = verdict(snap.schema, reports, args.threshold)
    data = to_json(fetcher.url, result.version, snap.schema, duration, polls, reports, line, code)
    data["engine_family"] = snap.engine_family
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    _print(args, data, lambda: render_table(data, args.threshold, color))
    return code


def _print(args: argparse.Namespace, data: dict, table) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else table())


def to_json(url: str, version: str, schema: str, duration: float, polls: int, reports: list[ModelReport],
            verdict_line: str, code: int) -> dict[str, Any]:
    models = []
    for r in reports:
        entry: dict[str, Any] = {"model_name": r.model, "engines": r.engines, "context": r.context,
                                 **{k.removeprefix("vllm_"): v for k, v in r.values.items()}}
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
        models.append(entry)
    return {"target": url, "vllm_version": version, "schema": schema, "sampled_seconds": duration,
            "polls": polls, "models": models, "verdict": verdict_line, "exit_code": code}


def render_table(data: dict[str, Any], threshold: float, color: bool) -> str:
    paint = terminal.painter(color)
    lines = [paint(f"vllm-spec-exporter check — {data['target']}", "1"),
             f"schema {data['schema']} · vLLM {data['vllm_version'] or 'version unknown'} · "
             f"sampled {data['sampled_seconds']:g} s in {data['polls']} polls"]
    if data["schema"] == Schema.V0:
        lines.append("V0 engine: lifetime gauges, not windowed (V0's counters are unusable).")
    for m in data["models"]:
        lines.append("")
        lines += terminal.model_lines(m, threshold, color)
    code = data["exit_code"]
    lines += ["", "verdict: " + paint(data["verdict"], {0: "32;1", 1: "31;1"}.get(code, "33;1"))]
    return "\n".join(lines)
