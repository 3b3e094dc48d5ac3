"""`vllm-spec-exporter demo`: the whole pipeline on this machine, with a live terminal view.

Without --target: a real vLLM (the CPU build, a tiny model generated locally, n-gram speculation)
is started and driven through phases — healthy (temperature 0), degraded (temperature 1.2), healthy
again — while the exporter, Prometheus with the generated rules and Alertmanager with the generated
routing watch it. With --target: the same view of an existing server, without traffic.
Ctrl-C stops everything it started.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any

from .pipeline import MODEL_NAME, LocalStack, StackOptions, TrafficDriver, exporter_snapshot

PHASES = (("healthy", 0.0), ("degraded", 1.2), ("healthy again", 0.0))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default=None,
                        help="watch this existing vLLM instead of starting one (no traffic is sent)")
    parser.add_argument("--phase-seconds", type=float, default=90.0,
                        help="length of each traffic phase (default 90 s)")
    parser.add_argument("--no-monitoring", action="store_true",
                        help="do not start Prometheus and Alertmanager even when installed")
    parser.add_argument("--exit-after-phases", action="store_true",
                        help="stop after the last phase instead of watching until Ctrl-C")
    parser.add_argument("--refresh", type=float, default=2.0, help="seconds between screen updates")


def run(args: argparse.Namespace) -> int:
    if args.phase_seconds < 10:
        raise ValueError("--phase-seconds must be at least 10")
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("vllm-spec-exporter demo: real vLLM -> exporter -> Prometheus -> Alertmanager -> webhook\n", flush=True)
    stack = LocalStack(StackOptions(target=args.target, monitoring=not args.no_monitoring),
                       progress=lambda m: print(m, flush=True))
    try:
        stack.start()
    except KeyboardInterrupt:
        stack.stop()
        return 130
    traffic = None if args.target else TrafficDriver(stack.target, MODEL_NAME).start()
    try:
        _loop(args, stack, traffic, stop)
    finally:
        print("\nstopping everything the demo started ...", flush=True)
        if traffic:
            traffic.stop()
        stack.stop()
        print("done.")
    return 0


def _loop(args: argparse.Namespace, stack: LocalStack, traffic: TrafficDriver | None, stop: threading.Event) -> None:
    started = time.monotonic()
    tty = sys.stdout.isatty()
    while not stop.is_set():
        elapsed = time.monotonic() - started
        phase_index = int(elapsed // args.phase_seconds)
        if traffic is not None:
            if phase_index < len(PHASES):
                traffic.temperature = PHASES[phase_index][1]
            else:
                traffic.temperature = None
                if args.exit_after_phases:
                    return
        if traffic is None or phase_index >= len(PHASES):
            phase = "watching (Ctrl-C to stop)"
        else:
            name, temperature = PHASES[phase_index]
            left = args.phase_seconds * (phase_index + 1) - elapsed
            phase = f"phase {phase_index + 1}/{len(PHASES)}: {name} (temperature {temperature}), {left:.0f} s left"
        screen = render(stack, phase)
        if tty:
            sys.stdout.write("\033[2J\033[H" + screen + "\n")
        else:
            sys.stdout.write(screen + "\n" + "-" * 60 + "\n")
        sys.stdout.flush()
        stop.wait(args.refresh)


def _bar(value: float, width: int = 30) -> str:
    filled = round(max(0.0, min(1.0, value)) * width)
    return "█" * filled + "·" * (width - filled)


def render(stack: LocalStack, phase: str) -> str:
    lines = [f"vllm-spec-exporter demo — {phase}", ""]
    try:
        m = exporter_snapshot(stack.exporter_url)
    except Exception as error:  # the view must survive a slow or restarting exporter
        return "\n".join([*lines, f"exporter not answering: {error}"])
    up = m.get("vllm_spec_exporter_target_up", {}).get((), 0)
    lines.append(f"vLLM {stack.target}: {'up' if up else 'DOWN'}")
    series = sorted(m.get("vllm_spec_decode_draft_tokens_per_second", {}))
    if not series:
        lines.append("no spec-decode series yet (waiting for the first polls)")
    for labels in series:
        label = dict(labels)
        lines.append(f"\nmodel {label.get('model_name')} engine {label.get('engine')}")
        lines += _series_lines(m, labels)
    lines.append("")
    if stack.prometheus is not None:
        alerts = stack.firing_alerts()
        lines.append("alerts: " + (", ".join(alerts) if alerts else "none"))
        notes = stack.notifications()
        lines.append(f"notifications received by the local webhook: {len(notes)}")
        for note in notes[-4:]:
            when = time.strftime("%H:%M:%S", time.localtime(note["time"]))
            lines.append(f"  {when} {note['path'][1:]:<5} {note['status']:<8} {note['title'][:70]}")
        lines.append("")
        lines.append(f"Prometheus   {stack.prometheus.url}/alerts   (rules generated with short windows)")
        lines.append(f"Alertmanager {stack.alertmanager.url}")
    elif stack.missing_tools:
        lines.append("alerts: Prometheus/Alertmanager not installed (apt-get install prometheus "
                     "prometheus-alertmanager)")
    lines.append(f"Exporter     {stack.exporter_url}/metrics")
    if stack.vllm is not None:
        lines.append(f"vLLM         {stack.target}   (log: {stack.vllm.log_path})")
    return "\n".join(lines)


def _series_lines(m: dict[str, dict[tuple, float]], labels: tuple) -> list[str]:
    def get(name: str) -> Any:
        return m.get(name, {}).get(labels)

    out = []
    rate = get("vllm_spec_decode_acceptance_ratio")
    out.append("  acceptance          " + (f"{rate:6.1%} {_bar(rate)}" if rate is not None else
                                          "   n/a (no drafts in the window)"))
    positions = sorted(((dict(k)["position"], v) for k, v in m.get("vllm_spec_decode_position_acceptance_ratio",
                                                                    {}).items()
                        if tuple(x for x in k if x[0] != "position") == labels), key=lambda pv: int(pv[0]))
    for position, value in positions:
        out.append(f"  position {position:>2}         {value:6.1%} {_bar(value)}")
    mal, k = get("vllm_spec_decode_mean_acceptance_length"), get("vllm_spec_decode_num_speculative_tokens")
    if mal is not None and k:
        out.append(f"  tokens per step     {mal:6.2f} of k+1 = {k + 1:.0f}")
    flow = [("generated", "vllm_generation_tokens_per_second"), ("drafted", "vllm_spec_decode_draft_tokens_per_second"),
            ("accepted", "vllm_spec_decode_accepted_tokens_per_second"),
            ("rejected", "vllm_spec_decode_rejected_tokens_per_second")]
    out.append("  tokens/s            " + " · ".join(f"{name} {get(key):.1f}" for name, key in flow
                                                    if get(key) is not None))
    best, speedup = get("vllm_spec_decode_recommended_k"), get("vllm_spec_decode_estimated_speedup")
    if best is not None and speedup is not None:
        out.append(f"  advisor             est. speed-up {speedup:.2f}x at k={k:.0f}; best k = {best:.0f}")
    return out
