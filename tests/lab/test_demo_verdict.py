"""The demo's verdict rules (lab/vllm_spec_lab/verdict.py) on recorded runs: constructed phase records and
notifications in the shape LocalStack.notifications() returns. The real stack's verdict is checked
by tests/stack/test_demo_tmux.py."""

from __future__ import annotations

from vllm_spec_lab.verdict import BAND, COLLAPSE, HEALTHY, LATE_HINT, PhaseRecord, judge, locate

T0 = 1_000_000.0
# The demo's phases: healthy, a warning band, degraded, healthy again (90 s each here).
NAMES = (("healthy", 0.0, HEALTHY), ("warning band", 0.0, BAND), ("degraded", 1.2, COLLAPSE),
         ("healthy again", 0.0, HEALTHY))


def phases(healthy=(0.875, 0.875), band=0.433, degraded=0.0, seen=None) -> list[PhaseRecord]:
    seen = seen or (0.87, 0.44, 0.01, 0.88)
    measured = (healthy[0], band, degraded, healthy[1])
    out = []
    for i, (name, temperature, intent) in enumerate(NAMES):
        ok = intent == HEALTHY
        out.append(PhaseRecord(name, temperature, intent, started=T0 + 90 * i, ended=T0 + 90 * (i + 1),
                               drafted=1000, accepted=1000 * measured[i], exporter_acceptance=seen[i],
                               recommended_k=4 if ok else 0, speedup=3.7 if ok else 1.0))
    return out


def note(name: str, status: str, at: float, channel: str = "chat") -> dict:
    return {"alertname": name, "status": status, "time": T0 + at, "channel": channel, "summary": "s"}


GOOD = [note("SpecDecodeAcceptanceLow", "firing", 135), note("SpecDecodeAcceptanceCritical", "firing", 250, "pager"),
        note("SpecDecodeAcceptanceCritical", "resolved", 290, "pager"),
        note("SpecDecodeAcceptanceLow", "resolved", 295)]


def verdict(records=None, notes=GOOD):
    return judge(records or phases(), notes, 0.5, 0.4, {"vLLM": "/logs/vllm.log"}, 0.0)


def test_expected_run_passes_and_says_when_alerts_fired_relative_to_the_phase():
    v = verdict()
    assert v.ok and v.exit_code == 0, v.problems
    text = "\n".join(v.lines)
    assert "warning band +45 s     chat  FIRING   SpecDecodeAcceptanceLow" in text
    assert "degraded +70 s         pager FIRING   SpecDecodeAcceptanceCritical" in text
    assert "healthy again +20 s    pager RESOLVED SpecDecodeAcceptanceCritical" in text
    assert "best k = 0" in text and "/logs/vllm.log" in text and "AS EXPECTED" in text


def test_a_page_in_the_warning_band_or_after_recovery_began_is_unexpected():
    early = [GOOD[0], note("SpecDecodeAcceptanceCritical", "firing", 170, "pager"), *GOOD[2:]]
    v = verdict(notes=early)
    assert v.problems == [
        "SpecDecodeAcceptanceCritical paged during the warning band phase (warning band +80 s): acceptance there "
        "is above the critical threshold",
        "SpecDecodeAcceptanceCritical did not page during the degraded phase"]  # early: more time would not help
    late = [GOOD[0], note("SpecDecodeAcceptanceCritical", "firing", 271, "pager"),
            note("SpecDecodeAcceptanceCritical", "resolved", 290, "pager"), GOOD[3]]
    v = verdict(notes=late)
    assert v.exit_code == 1
    assert "SpecDecodeAcceptanceCritical first notified after the degraded phase had ended" + LATE_HINT in v.problems


def test_a_warning_band_without_the_warning_or_a_collapse_without_the_page_fails():
    v = verdict(notes=GOOD[1:3])
    assert v.problems == ["SpecDecodeAcceptanceLow did not notify during the warning band phase" + LATE_HINT]
    v = verdict(notes=[])
    assert v.problems == ["SpecDecodeAcceptanceLow did not notify during the warning band phase" + LATE_HINT,
                          "SpecDecodeAcceptanceCritical did not page during the degraded phase" + LATE_HINT]


def test_without_a_band_any_acceptance_alert_in_the_collapse_will_do():
    records = [p for p in phases() if p.intent != BAND]
    v = verdict(records=records, notes=[])
    assert not v.ok and v.problems == ["no acceptance alert notified during the degraded phase"]


def test_an_alert_that_never_resolves_or_fires_early_fails():
    v = verdict(notes=GOOD[:3])
    assert v.problems == ["SpecDecodeAcceptanceLow did not resolve during the healthy again phase (resolved: never)"]
    v = verdict(notes=[note("SpecDecodeAcceptanceLow", "firing", 30), *GOOD])
    assert any("before the warning band phase (healthy +30 s)" in p for p in v.problems)


def test_a_warning_that_flaps_in_the_band_is_a_finding():
    flapping = [GOOD[0], note("SpecDecodeAcceptanceLow", "resolved", 147),
                note("SpecDecodeAcceptanceLow", "firing", 160), *GOOD[1:]]
    v = verdict(notes=flapping)
    assert v.problems == ["SpecDecodeAcceptanceLow resolved while acceptance was still low (warning band +57 s): "
                          "it flapped"]


def test_other_alerts_are_findings():
    v = verdict(notes=[*GOOD, note("SpecDecodeVllmUnreachable", "firing", 190)])
    assert v.problems == ["SpecDecodeVllmUnreachable notified (degraded +10 s): not expected in this demo"]


def test_traffic_that_did_not_steer_acceptance_and_a_disagreeing_exporter_fail():
    v = verdict(records=phases(healthy=(0.45, 0.9), seen=(0.44, 0.44, 0.01, 0.3)))
    assert "healthy: acceptance 45.0% is below 50%; the traffic did not keep it healthy" in v.problems
    assert any(p.startswith("healthy again: the exporter showed 30.0% but vLLM measured 90.0%") for p in v.problems)
    v = verdict(records=phases(degraded=0.45))
    assert "degraded: acceptance 45.0% did not fall below 40%" in v.problems
    # The band must land between the thresholds, and the exporter below the warning line too.
    v = verdict(records=phases(band=0.55, seen=(0.87, 0.55, 0.01, 0.88)))
    assert v.problems == ["warning band: acceptance 55.0% is not between 40% and 50%; the traffic missed the "
                          "warning band"]
    v = verdict(records=phases(seen=(0.87, 0.52, 0.01, 0.88)))
    assert v.problems == ["warning band: the exporter showed 52.0% but vLLM measured 43.3% (opposite sides of 50%)"]


def test_without_monitoring_alerts_are_not_judged():
    v = verdict(notes=None)
    assert v.ok and "alerts: not checked (Prometheus/Alertmanager not running)" in v.lines


def test_locate_names_the_phase_and_the_offset():
    records = phases()
    assert locate(records, T0 + 185) == (2, "degraded +5 s")
    assert locate(records, T0 - 1) == (-1, "before the phases")
    assert locate(records, T0 + 365) == (4, "after the phases (+5 s)")
