"""The demo's verdict rules (lab/vllm_spec_lab/verdict.py) on recorded runs: constructed phase records and
notifications in the shape LocalStack.notifications() returns. The real stack's verdict is checked
by tests/test_demo_tmux.py."""

from __future__ import annotations

from vllm_spec_lab.verdict import PhaseRecord, judge, locate

T0 = 1_000_000.0


def phases(healthy=(0.875, 0.875), degraded=0.0, seen=None) -> list[PhaseRecord]:
    seen = seen or (0.87, 0.01, 0.88)
    measured = (healthy[0], degraded, healthy[1])
    out = []
    for i, (name, temperature, ok) in enumerate((("healthy", 0.0, True), ("degraded", 1.2, False),
                                                 ("healthy again", 0.0, True))):
        out.append(PhaseRecord(name, temperature, ok, started=T0 + 90 * i, ended=T0 + 90 * (i + 1),
                               drafted=1000, accepted=1000 * measured[i], exporter_acceptance=seen[i],
                               recommended_k=4 if ok else 0, speedup=3.7 if ok else 1.0))
    return out


def note(name: str, status: str, at: float, channel: str = "chat") -> dict:
    return {"alertname": name, "status": status, "time": T0 + at, "channel": channel, "summary": "s"}


GOOD = [note("SpecDecodeAcceptanceLow", "firing", 125), note("SpecDecodeAcceptanceCritical", "firing", 160, "pager"),
        note("SpecDecodeAcceptanceCritical", "resolved", 200, "pager"),
        note("SpecDecodeAcceptanceLow", "resolved", 205)]


def verdict(records=None, notes=GOOD):
    return judge(records or phases(), notes, 0.5, 0.4, {"vLLM": "/logs/vllm.log"}, 0.0)


def test_expected_run_passes_and_says_when_alerts_fired_relative_to_the_phase():
    v = verdict()
    assert v.ok and v.exit_code == 0, v.problems
    text = "\n".join(v.lines)
    assert "degraded +35 s         chat  FIRING   SpecDecodeAcceptanceLow" in text
    assert "healthy again +20 s    pager RESOLVED SpecDecodeAcceptanceCritical" in text
    assert "best k = 0" in text and "/logs/vllm.log" in text and "AS EXPECTED" in text


def test_a_page_after_recovery_began_is_unexpected():
    late = [*GOOD[:1], note("SpecDecodeAcceptanceCritical", "firing", 181, "pager"),
            note("SpecDecodeAcceptanceCritical", "resolved", 200, "pager"), GOOD[3]]
    v = verdict(notes=late)
    assert v.exit_code == 1
    assert v.problems == ["SpecDecodeAcceptanceCritical first notified after the degraded phase had ended"]


def test_no_alert_in_the_degraded_phase_fails():
    v = verdict(notes=[])
    assert not v.ok and v.problems == ["no acceptance alert notified during the degraded phase"]


def test_an_alert_that_never_resolves_or_fires_early_fails():
    v = verdict(notes=GOOD[:3])
    assert v.problems == ["SpecDecodeAcceptanceLow did not resolve during the healthy again phase (resolved: never)"]
    v = verdict(notes=[note("SpecDecodeAcceptanceLow", "firing", 30), *GOOD])
    assert any("before the degraded phase (healthy +30 s)" in p for p in v.problems)


def test_other_alerts_are_findings():
    v = verdict(notes=[*GOOD, note("SpecDecodeVllmUnreachable", "firing", 100)])
    assert v.problems == ["SpecDecodeVllmUnreachable notified (degraded +10 s): not expected in this demo"]


def test_traffic_that_did_not_steer_acceptance_and_a_disagreeing_exporter_fail():
    v = verdict(records=phases(healthy=(0.45, 0.9), seen=(0.44, 0.01, 0.3)))
    assert "healthy: acceptance 45.0% is below 50%; the traffic did not keep it healthy" in v.problems
    assert any(p.startswith("healthy again: the exporter showed 30.0% but vLLM measured 90.0%") for p in v.problems)
    v = verdict(records=phases(degraded=0.45))
    assert "degraded: acceptance 45.0% did not fall below 40%" in v.problems


def test_without_monitoring_alerts_are_not_judged():
    v = verdict(notes=None)
    assert v.ok and "alerts: not checked (Prometheus/Alertmanager not running)" in v.lines


def test_locate_names_the_phase_and_the_offset():
    records = phases()
    assert locate(records, T0 + 95) == (1, "degraded +5 s")
    assert locate(records, T0 - 1) == (-1, "before the phases")
    assert locate(records, T0 + 275) == (3, "after the phases (+5 s)")
