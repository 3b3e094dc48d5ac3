"""The demo's verdict: did the pipeline behave as expected over the phases it drove?

Pure functions over what the demo recorded (no servers here), so the rules are unit-tested:

- per phase, vLLM's own counters (batch-bracketed, `TrafficDriver.tally`) give the measured
  acceptance; the traffic must have steered it where the phase intends (healthy phases at or
  above the warning threshold, a warning band between the critical and the warning threshold,
  the degraded phase below the critical one);
- the exporter's last full-window reading in each phase lies on the same side of the warning
  threshold as that measurement;
- with monitoring: no notification before the first unhealthy phase; in a warning band the
  warning notifies and the critical does not; an acceptance alert (the critical, after a band)
  notifies during the degraded phase; every acceptance alert that fired resolves during the last
  (healthy) phase; no other alert notifies at all (an unreachable vLLM or exporter would be a
  finding).

Times are reported relative to the start of the phase they fall in ("degraded +35 s").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm_spec_exporter.mixin.rules.alert_rules import ACCEPTANCE_CRITICAL, ACCEPTANCE_LOW

ACCEPTANCE_ALERT_PREFIX = "SpecDecodeAcceptance"
# Said after an alert that missed its phase: on a busy machine the traffic and the alert windows run
# late, and the default phases leave the page ~15 s of margin (demo.DEFAULT_PHASE_SECONDS).
LATE_HINT = " (on a busy machine, give the alerts more time: --phase-seconds 90)"
# What a phase's traffic is meant to do to acceptance.
HEALTHY, BAND, COLLAPSE = "healthy", "warning band", "collapse"


@dataclass
class PhaseRecord:
    name: str
    temperature: float
    intent: str  # HEALTHY (at or above warning), BAND (between critical and warning) or COLLAPSE
    started: float  # unix seconds
    ended: float | None = None
    drafted: float = 0.0  # vLLM's counters over the phase's batches
    accepted: float = 0.0
    exporter_acceptance: float | None = None  # last reading whose window lay inside the phase
    recommended_k: int | None = None  # the exporter's advisor at that reading
    speedup: float | None = None

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted > 0 else None

    @property
    def healthy(self) -> bool:
        return self.intent == HEALTHY


@dataclass
class Verdict:
    ok: bool
    lines: list[str] = field(default_factory=list)  # the verdict screen, without colour
    problems: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def locate(phases: list[PhaseRecord], when: float) -> tuple[int, str]:
    """(phase index or -1 before the first / len after the last, 'name +N s')."""
    for index, phase in enumerate(phases):
        end = phase.ended if phase.ended is not None else float("inf")
        if phase.started <= when < end:
            return index, f"{phase.name} +{when - phase.started:.0f} s"
    if not phases or when < phases[0].started:
        return -1, "before the phases"
    last = phases[-1]
    return len(phases), f"after the phases (+{when - (last.ended or last.started):.0f} s)"


def judge(phases: list[PhaseRecord], notifications: list[dict[str, Any]] | None, warning: float,
          critical: float, logs: dict[str, str], draft_cost: float) -> Verdict:
    """`notifications`: LocalStack.notifications() (None: monitoring was not running)."""
    problems: list[str] = []
    lines = ["verdict of the demo run", "", "phase            temperature  acceptance (vLLM)  exporter   advisor"]
    for phase in phases:
        measured, seen = phase.acceptance, phase.exporter_acceptance
        advice = (f"best k = {phase.recommended_k}" + (f", est. {phase.speedup:.2f}×" if phase.speedup else "")
                  if phase.recommended_k is not None else "—")
        lines.append(f"{phase.name:<16} {phase.temperature:>11g}  {_pct(measured):>17}  {_pct(seen):>8}   {advice}")
        if measured is None:
            problems.append(f"{phase.name}: no draft tokens measured (did the traffic reach vLLM?)")
            continue
        if phase.intent == HEALTHY and measured < warning:
            problems.append(f"{phase.name}: acceptance {measured:.1%} is below {warning:.0%}; the traffic "
                            "did not keep it healthy")
        if phase.intent == BAND and not critical <= measured < warning:
            problems.append(f"{phase.name}: acceptance {measured:.1%} is not between {critical:.0%} and "
                            f"{warning:.0%}; the traffic missed the warning band")
        if phase.intent == COLLAPSE and measured >= critical:
            problems.append(f"{phase.name}: acceptance {measured:.1%} did not fall below {critical:.0%}")
        if seen is None:
            problems.append(f"{phase.name}: the exporter served no full-window acceptance during the phase")
            continue
        # The warning line only: one 20 s reading of a band ~1.5 points above the critical line may
        # cut a batch at its edges and fall just below it, which the alerts' evidence never would.
        if (seen >= warning) != (measured >= warning):
            problems.append(f"{phase.name}: the exporter showed {seen:.1%} but vLLM measured {measured:.1%} "
                            f"(opposite sides of {warning:.0%})")
    lines.append(f"(advisor draft cost {draft_cost:g}; the exporter column is its last full-window "
                 "reading in the phase)")
    lines.append("")
    if notifications is None:
        lines.append("alerts: not checked (Prometheus/Alertmanager not running)")
    else:
        lines += _alert_lines(phases, notifications, problems)
    lines.append("")
    lines.append("logs (kept):")
    lines += [f"  {name:<13} {path}" for name, path in logs.items()]
    lines.append("")
    if problems:
        lines.append(f"verdict: UNEXPECTED — {len(problems)} problem(s):")
        lines += [f"  - {p}" for p in problems]
    else:
        lines.append("verdict: AS EXPECTED — acceptance followed the traffic, the exporter agreed, "
                     "and the alerts fired and resolved in the right phases")
    return Verdict(ok=not problems, lines=lines, problems=problems)


def _alert_lines(phases: list[PhaseRecord], notifications: list[dict[str, Any]], problems: list[str]) -> list[str]:
    degraded = next((i for i, p in enumerate(phases) if p.intent == COLLAPSE), None)
    band = next((i for i, p in enumerate(phases) if p.intent == BAND), None)
    first_unhealthy = next((i for i, p in enumerate(phases) if not p.healthy), None)
    lines = ["alert notifications (time after the start of the phase they arrived in):"]
    if not notifications:
        lines.append("  none")
    fired: dict[str, int] = {}  # alertname -> phase index of its first firing notification
    resolved: dict[str, int] = {}  # alertname -> phase index of its last resolved notification
    early: dict[str, list[str]] = {}  # acceptance alerts resolved before the last phase: where
    for note in sorted(notifications, key=lambda n: n["time"]):
        index, where = locate(phases, note["time"])
        name = note["alertname"]
        lines.append(f"  {where:<22} {note['channel']:<5} {note['status'].upper():<8} {name}")
        if note["status"] == "firing":
            fired.setdefault(name, index)
        else:
            resolved[name] = index
            if index < len(phases) - 1:
                early.setdefault(name, []).append(where)
        if not name.startswith(ACCEPTANCE_ALERT_PREFIX) and note["status"] == "firing":
            problems.append(f"{name} notified ({where}): not expected in this demo")
        elif note["status"] == "firing" and first_unhealthy is not None and index < first_unhealthy:
            problems.append(f"{name} notified before the {phases[first_unhealthy].name} phase ({where})")
        elif note["status"] == "firing" and index == band and name == ACCEPTANCE_CRITICAL:
            problems.append(f"{name} paged during the {phases[band].name} phase ({where}): acceptance there is "
                            "above the critical threshold")
    acceptance_fired = {n: i for n, i in fired.items() if n.startswith(ACCEPTANCE_ALERT_PREFIX)}
    def hint(name: str, phase: int) -> str:  # more time helps an alert that came late or never, not an early one
        return LATE_HINT if acceptance_fired.get(name, phase + 1) > phase else ""

    if band is not None and acceptance_fired.get(ACCEPTANCE_LOW) != band:
        problems.append(f"{ACCEPTANCE_LOW} did not notify during the {phases[band].name} phase"
                        f"{hint(ACCEPTANCE_LOW, band)}")
    if band is not None and degraded is not None and acceptance_fired.get(ACCEPTANCE_CRITICAL) != degraded:
        problems.append(f"{ACCEPTANCE_CRITICAL} did not page during the {phases[degraded].name} phase"
                        f"{hint(ACCEPTANCE_CRITICAL, degraded)}")
    if degraded is not None and band is None and degraded not in acceptance_fired.values():
        problems.append(f"no acceptance alert notified during the {phases[degraded].name} phase")
    last = len(phases) - 1
    for name, wheres in early.items():
        if name.startswith(ACCEPTANCE_ALERT_PREFIX):
            problems.append(f"{name} resolved while acceptance was still low ({', '.join(wheres)}): it flapped")
    for name, index in acceptance_fired.items():
        if degraded is not None and index > degraded:
            problems.append(f"{name} first notified after the {phases[degraded].name} phase had ended{LATE_HINT}")
        if resolved.get(name) != last:
            when = "never" if name not in resolved else locate_name(phases, resolved[name])
            problems.append(f"{name} did not resolve during the {phases[last].name} phase (resolved: {when})")
    return lines


def locate_name(phases: list[PhaseRecord], index: int) -> str:
    if index < 0:
        return "before the phases"
    if index >= len(phases):
        return "after the phases"
    return f"in {phases[index].name}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"
