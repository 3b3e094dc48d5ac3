"""`vllm-spec-lab demo` (also `vllm-spec-exporter demo`): the whole pipeline on this machine, with a live terminal view.

Without --target: a real vLLM (the CPU build, a tiny model generated locally, n-gram speculation)
is started and driven through four phases — healthy (temperature 0), a warning band (greedy prompts
that loop only partly: acceptance between the critical and the warning threshold), degraded
(temperature 1.2), healthy again — while the exporter, Prometheus with the generated rules and
Alertmanager with the generated routing watch it. Then a verdict screen (per phase: acceptance
measured by vLLM and shown by the exporter, the advisor's k, when each alert fired and resolved;
where the logs are) and exit 0 when the pipeline behaved as expected, 1 when not; --watch keeps
watching after the verdict.
With --target: the same live view of an existing server, without traffic, until Ctrl-C.

Whatever ends it (Ctrl-C, SIGTERM, a closed terminal, a closed output pipe, an error, even
SIGKILL) nothing it started keeps running and its temporary folders go (vllm_spec_lab/processes.py).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from vllm_spec_exporter import terminal
from vllm_spec_exporter.fetch import metrics_url
from vllm_spec_exporter.names import MetricName

from . import default_cache_dir
from .exporter_process import exporter_snapshot
from .pipeline import MODEL_NAME, LocalStack, StackOptions, TrafficDriver
from .server import spec_counters
from .traffic import COLLAPSE, HEALTHY, WARNING_BAND, TrafficMix
from .verdict import BAND, PhaseRecord, Verdict, judge, locate
from .verdict import COLLAPSE as COLLAPSED
from .verdict import HEALTHY as HEALTHY_INTENT

# (name, traffic, intent) — temperature 0 makes the tiny model loop (n-gram acceptance ~90 %),
# partly looping greedy prompts give ~42 % (between the critical and warning thresholds: the
# warning fires, the critical must not), 1.2 makes its output noise (~0 %).
PHASES: tuple[tuple[str, TrafficMix, str], ...] = (
    ("healthy", HEALTHY, HEALTHY_INTENT), ("warning band", WARNING_BAND, BAND),
    ("degraded", COLLAPSE, COLLAPSED), ("healthy again", HEALTHY, HEALTHY_INTENT))
KEEP_LOG_RUNS = 5  # older demo log folders are pruned
# Long enough for each alert to land inside its phase with the lab's fast windows (pipeline.py
# FAST_ALERTS). Four first demo runs on fresh clones (two with 90 s phases, load 2-18;
# two with 60 s, load 0-7): the warning at band +27-29 s, the page at degraded +39-45 s (the
# degraded traffic starts once the band's batch in flight is done: later on a busy machine), both
# resolved at healthy again +4-8 s. 60 s leaves 15 s after the latest page seen; 90 s was 2 min more.
DEFAULT_PHASE_SECONDS = 60.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default=None,
                        help="watch this existing vLLM instead of starting one (no traffic, no verdict; "
                             "Ctrl-C ends it)")
    parser.add_argument("--phase-seconds", type=float, default=DEFAULT_PHASE_SECONDS,
                        help="length of each of the four traffic phases, at least 10 (default "
                             f"{DEFAULT_PHASE_SECONDS:.0f} s; "
                             "shorter phases may end before the alerts' windows and fail the verdict)")
    parser.add_argument("--watch", action="store_true",
                        help="after the verdict, keep the live view running until Ctrl-C "
                             "(the exit code is still the verdict's)")
    parser.add_argument("--exit-after-phases", action="store_true",
                        help="accepted for old scripts: ending after the phases is now the default")
    parser.add_argument("--no-monitoring", action="store_true",
                        help="do not start Prometheus and Alertmanager even when installed")
    parser.add_argument("--refresh", type=float, default=2.0, help="seconds between screen updates (default 2)")


class Interrupted(BaseException):
    """A stop signal arrived (BaseException: no `except Exception` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP (a closed terminal) raise `Interrupted` once in the main thread;
    after `shield()` — the clean-up has begun — they are only noted, so nothing can cut the
    clean-up short. SIGHUP is left alone when it is ignored (`nohup`)."""

    def __init__(self) -> None:
        self.shielded = False
        self.received: int | None = None
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
                continue
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.received is None:
            self.received = signum
        if not self.shielded:
            self.shielded = True
            raise Interrupted(signum)

    def shield(self) -> None:
        self.shielded = True


class Output:
    """The terminal (or pipe). A write that fails (reader gone: BrokenPipe; terminal gone: EIO)
    marks it closed instead of raising, so no print can stand between a stop and the clean-up;
    the demo then ends as there is nobody left to show anything to."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.closed = False
        self.tty = stream.isatty()

    def write(self, text: str) -> None:
        if self.closed:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.closed = True
            # Point the descriptor at /dev/null, or the interpreter's final flush raises again.
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.stream.fileno())
                os.close(devnull)
            except (OSError, ValueError):
                pass

    def line(self, text: str = "") -> None:
        self.write(text + "\n")

    @property
    def width(self) -> int:
        return shutil.get_terminal_size((100, 24)).columns


def run(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.phase_seconds) and args.phase_seconds >= 10):
        raise ValueError("--phase-seconds must be a number of seconds, at least 10")
    if not (math.isfinite(args.refresh) and 0.2 <= args.refresh <= 60):
        raise ValueError("--refresh must be between 0.2 and 60 seconds")
    if args.target is not None:
        metrics_url(args.target)  # a bad URL fails here, in one line, not in the exporter's log
    out = Output(sys.stdout)
    signals = StopSignals()
    stack: LocalStack | None = None
    traffic: TrafficDriver | None = None
    demo: Demo | None = None
    code, message = 0, ""
    try:
        out.line("vllm-spec-exporter demo: real vLLM -> exporter -> Prometheus -> Alertmanager -> webhook\n")
        stack = LocalStack(StackOptions(target=args.target, monitoring=not args.no_monitoring, log_dir=new_log_dir()),
                           progress=out.line)
        stack.start()
        if args.target is None:
            traffic = TrafficDriver(stack.target, MODEL_NAME, counters=spec_counters).start()
        demo = Demo(args, stack, traffic, out)
        code = demo.run()
    except Interrupted as stop:
        code = demo.verdict.exit_code if demo and demo.verdict else 128 + stop.signum
        if stop.signum == signal.SIGINT and args.target and demo is not None:
            code = 0  # Ctrl-C is how watching an existing server ends
    except Exception as error:  # start-up failures: one message, the logs, exit 1
        code = 1
        message = f"demo failed: {error}"
    finally:
        signals.shield()
        # Stop first, print after: a print to a closed pipe must never skip the clean-up.
        out.line("\nstopping everything the demo started ...")
        if traffic is not None:
            traffic.stop(timeout=0)
        if stack is not None:
            stack.stop()
        if traffic is not None:
            traffic.join(5)
        out.line("done.")
    if message:
        out.line(message)
        if stack is not None and stack.log_paths():
            out.line("logs: " + ", ".join(str(p) for p in stack.log_paths().values()))
    if demo is not None and demo.verdict is not None:
        out.line("")
        for line in demo.verdict.lines:
            out.line(terminal.fit(line, out.width) if out.tty else line)
    if out.closed and demo is not None and demo.verdict is None:
        return 128 + signal.SIGPIPE
    return code


def new_log_dir() -> Path:
    """A fresh, kept folder for this run's logs under the cache; older runs beyond the last few go."""
    root = default_cache_dir() / "demo-logs"
    root.mkdir(parents=True, exist_ok=True)
    for old in sorted(p for p in root.iterdir() if p.is_dir())[:-(KEEP_LOG_RUNS - 1)]:
        shutil.rmtree(old, ignore_errors=True)
    path = root / time.strftime("%Y%m%d-%H%M%S")
    suffix = 0
    while path.exists():
        suffix += 1
        path = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{suffix}"
    path.mkdir()
    return path


class Demo:
    """The phase clock, the recording the verdict is judged on, and the live screen."""

    def __init__(self, args: argparse.Namespace, stack: LocalStack, traffic: TrafficDriver | None,
                 out: Output) -> None:
        self.args, self.stack, self.traffic, self.out = args, stack, traffic, out
        self.phases: list[PhaseRecord] = []
        self.verdict: Verdict | None = None
        self.started = time.time()
        config = stack.config
        self.warning = config.acceptance_warning_threshold if config else 0.5
        self.critical = config.acceptance_critical_threshold if config else 0.4
        self.first_seen: dict[str, tuple[str, float]] = {}  # alertname -> (state, unix time) in Prometheus

    def run(self) -> int:
        while not self.out.closed:
            now = time.time()
            if self.traffic is not None and self.verdict is None:
                index = int((now - self.started) // self.args.phase_seconds)
                if index >= len(PHASES):
                    self._finish(now)
                    if not self.args.watch:
                        return self.verdict.exit_code  # type: ignore[union-attr]
                elif index >= len(self.phases):
                    self._enter_phase(index, now)
            metrics = self._read_exporter()
            self._record(metrics, now)
            screen = self.render(metrics, now)
            self.out.write(("\033[2J\033[H" + screen + "\n") if self.out.tty else screen + "\n" + "-" * 60 + "\n")
            time.sleep(self.args.refresh)
        return 128 + signal.SIGPIPE if self.verdict is None else self.verdict.exit_code

    # --- phases and recording -------------------------------------------------------------------
    def _enter_phase(self, index: int, now: float) -> None:
        if self.phases:
            self.phases[-1].ended = now
        name, mix, intent = PHASES[index]
        self.phases.append(PhaseRecord(name, mix.temperature, intent, started=now))
        assert self.traffic is not None
        self.traffic.phase = name
        self.traffic.steer(mix)

    def _finish(self, now: float) -> None:
        assert self.traffic is not None
        self.traffic.temperature = None
        self.phases[-1].ended = now
        # The last batch may still be in flight; its tokens count for the phase it began in.
        self.traffic.pause(timeout=30)
        for phase in self.phases:
            tally = self.traffic.tally.get(phase.name, {})
            phase.drafted, phase.accepted = tally.get("drafted", 0.0), tally.get("accepted", 0.0)
        notes = self.stack.notifications() if self.stack.prometheus is not None else None
        logs = {name: str(path) for name, path in self.stack.log_paths().items()}
        self.verdict = judge(self.phases, notes, self.warning, self.critical, logs, self.stack.draft_cost)
        verdict_file = self.stack.log_dir / "verdict.txt"
        verdict_file.write_text("\n".join(self.verdict.lines) + "\n")

    def _read_exporter(self) -> dict[str, dict[tuple, float]] | None:
        try:
            return exporter_snapshot(self.stack.exporter_url)
        except Exception:  # the view must survive a slow or restarting exporter
            return None

    def _record(self, metrics: dict[str, dict[tuple, float]] | None, now: float) -> None:
        if self.stack.prometheus is not None:
            try:
                for name, state in self.stack.alert_states().items():
                    if self.first_seen.get(name, ("",))[0] != state:
                        self.first_seen[name] = (state, now)
            except OSError:
                pass
        if metrics is None or not self.phases or self.verdict is not None:
            return
        phase = self.phases[-1]
        # Only a window that lies wholly inside the phase speaks for it.
        if now - phase.started < self.stack.options.exporter_window + 2 * self.stack.options.exporter_interval:
            return
        for labels in metrics.get("vllm_spec_decode_draft_tokens_per_second", {}):
            view = terminal.view_from_exporter(metrics, labels)
            acceptance = view.values.get(MetricName.ACCEPTANCE_RATIO)
            if acceptance is not None:
                phase.exporter_acceptance = acceptance
            if view.advisor is not None:
                phase.recommended_k = view.advisor.recommended_k
                phase.speedup = view.advisor.estimated_speedup.get(view.advisor.recommended_k)

    # --- the live screen ------------------------------------------------------------------------
    def _phase_line(self, now: float) -> str:
        if self.traffic is None:
            return "watching an existing server (no traffic; Ctrl-C to stop)"
        if self.verdict is not None:
            outcome = "AS EXPECTED" if self.verdict.ok else "UNEXPECTED"
            return f"phases done — verdict {outcome}; watching (Ctrl-C to stop)"
        index = len(self.phases) - 1
        name, mix, _ = PHASES[index]
        left = self.args.phase_seconds * (index + 1) - (now - self.started)
        return f"phase {index + 1}/{len(PHASES)}: {name} ({mix.describe()}), {left:.0f} s left"

    def render(self, metrics: dict[str, dict[tuple, float]] | None, now: float) -> str:
        width = self.out.width
        stack = self.stack
        lines = [f"vllm-spec-exporter demo — {self._phase_line(now)}", ""]
        if metrics is None:
            lines.append("exporter not answering (restarting or busy); retrying")
        else:
            up = metrics.get("vllm_spec_exporter_target_up", {}).get((), 0)
            lines.append(f"vLLM {stack.target}: {'up' if up else 'DOWN'} · the exporter polls every "
                         f"{stack.options.exporter_interval:g} s, window {stack.options.exporter_window:g} s")
            series = sorted(metrics.get("vllm_spec_decode_draft_tokens_per_second", {}))
            if not series:
                lines.append("no spec-decode series yet (waiting for the first polls)")
            for labels in series:
                view = terminal.view_from_exporter(metrics, labels, draft_cost=stack.draft_cost)
                lines.append("")
                lines += terminal.model_lines(view, self.warning)
        lines.append("")
        if stack.prometheus is not None:
            lines += self._alert_lines(now, width)
        elif stack.missing_tools:
            lines.append("alerts: Prometheus/Alertmanager not installed (run scripts/bootstrap.sh: "
                         "Prometheus 3 / Alertmanager 0.3x, or Debian 12's as the fallback)")
        lines.append("")
        lines += self._where_lines()
        return "\n".join(terminal.fit(line, width) if self.out.tty else line for line in lines)

    def _alert_lines(self, now: float, width: int) -> list[str]:
        try:
            states = self.stack.alert_states()
        except OSError:
            states = {}
        shown = ", ".join(f"{name} {state}" for name, state in sorted(states.items())) or "none"
        lines = [f"alerts in Prometheus: {shown}"]
        if any(state == "pending" for state in states.values()):
            lines.append("  (pending: the condition holds but has not lasted its `for:` yet; nothing is sent)")
        notes = self.stack.notifications()
        lines.append(f"notifications at the local webhook (standing in for pager and chat): {len(notes)}")
        for note in notes[-6:]:
            lines.append("  " + self.notification_line(note))
        return lines

    def notification_line(self, note: dict[str, Any]) -> str:
        """One format for pages and chat messages; the caller cuts it to the terminal width."""
        when = time.strftime("%H:%M:%S", time.localtime(note["time"]))
        _, where = locate(self.phases, note["time"])
        return (f"{when}  {where:<20} {note['channel']:<5} {note['status'].upper():<8} "
                f"{note['alertname']}: {note['summary']}")

    def _where_lines(self) -> list[str]:
        stack = self.stack
        lines = []
        if stack.vllm is not None:
            lines.append(f"vLLM          {stack.target}   (OpenAI API, /metrics)")
        lines.append(f"exporter      {stack.exporter_url}/metrics")
        if stack.prometheus is not None and stack.alertmanager is not None and stack.webhook is not None:
            lines.append(f"Prometheus    {stack.prometheus.url}/alerts   (the generated rules, windows shortened)")
            lines.append(f"Alertmanager  {stack.alertmanager.url}   webhook {stack.webhook.url}")
        lines.append(f"logs          {stack.log_dir}")
        return lines
