"""The house's one duration parser and formatter (vllm_spec_exporter.durations)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vllm_spec_exporter.durations import format_duration, is_prometheus_duration, seconds


@pytest.mark.parametrize(("text", "expected"), [
    ("90s", 90), ("2m30s", 150), ("1h", 3600), ("1h30m", 5400), ("500ms", 0.5), ("1d", 86400),
    ("1w", 604800), ("1y", 365 * 86400), ("1.5s", 1.5), ("1m30.25s", 90.25), ("0s", 0),
])
def test_seconds_reads_prometheus_and_go_durations(text: str, expected: float) -> None:
    assert seconds(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "5", "abc", "5 m", "m5", "1h-5m", "-5s", "1.s", "5mins"])
def test_seconds_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        seconds(text)


@pytest.mark.parametrize(("text", "accepted"), [
    ("1h30m", True), ("90s", True), ("500ms", True), ("1.5s", False), ("30m1h", False), ("", False), ("5", False)])
def test_is_prometheus_duration_is_the_rule_file_grammar(text: str, accepted: bool) -> None:
    assert is_prometheus_duration(text) is accepted


@given(st.integers(min_value=1, max_value=10 * 86400))
def test_format_duration_round_trips_whole_seconds(total: int) -> None:
    text = format_duration(total)
    assert is_prometheus_duration(text)
    assert seconds(text) == total


def test_format_duration_rounds_up() -> None:
    assert format_duration(149.2) == "2m30s"
    assert format_duration(0) == "0s"
