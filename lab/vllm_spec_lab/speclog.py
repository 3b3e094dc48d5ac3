"""Parse vLLM's periodic speculative-decoding log lines into numbers.

vLLM prints one line per stats interval, computed from the same per-step stats that feed the
Prometheus counters, so these lines are an independent oracle for the exporter. Formats handled
(see shared/reference/vllm-metrics.md §1.5 and §2.4):

* V1 0.8.3–0.8.4: ``SpecDecoding metrics: Draft acceptance rate: 100.0%, Accepted: 66 tokens,
  Drafted: 66 tokens``
* V1 0.8.5: ``SpecDecoding metrics: Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f,
  Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s`` where the mean
  acceptance length does NOT include the bonus token;
* V1 0.9–0.11: the same text, mean acceptance length includes the bonus token;
* V1 ≥ 0.12 (0.32 captured here): ``SpecDecoding metrics: Mean acceptance length: %.2f, Accepted
  throughput: %.2f tokens/s, Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d
  tokens, Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%``;
* V1 before PR #15902 and V0: ``Speculative metrics: Draft acceptance rate: 0.607, ...`` with
  ``Number of accepted tokens`` / ``Number of draft tokens`` (V0 values are cumulative).

The 0.8.5 and 0.9–0.11 texts are identical, so which convention the mean acceptance length uses
cannot be read from one line; ``mean_acceptance_length_includes_bonus`` is ``None`` for them and
callers that know the version decide.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum


class SpecLogFormat(Enum):
    V1_0_8_3 = "v1-0.8.3"  # acceptance rate + accepted + drafted only
    V1_0_8_5 = "v1-0.8.5"  # also MAL and per-position; 0.8.5 (MAL without bonus) .. 0.11 (with)
    V1_CURRENT = "v1-current"  # >= 0.12: throughputs first, "Avg Draft acceptance rate" last
    V1_EARLY = "v1-early"  # pre-#15902 V1: "Speculative metrics: ... Number of accepted tokens"
    V0 = "v0"  # "Speculative metrics:" with system efficiency and emitted tokens (cumulative)


@dataclass(frozen=True)
class SpecDecodeLogLine:
    """One parsed log line. Fields a format does not print are ``None`` (or empty)."""

    format: SpecLogFormat
    accepted_tokens: int
    drafted_tokens: int
    # Percent (0-100) as printed by V1; V0 prints a 0-1 ratio which is converted to percent here.
    acceptance_rate_percent: float | None = None
    mean_acceptance_length: float | None = None
    mean_acceptance_length_includes_bonus: bool | None = None
    per_position_acceptance_rate: tuple[float, ...] = field(default_factory=tuple)
    accepted_throughput: float | None = None  # tokens/s over the log interval
    drafted_throughput: float | None = None
    # V0 only.
    system_efficiency: float | None = None
    num_speculative_tokens: int | None = None
    emitted_tokens: int | None = None
    # Everything before "SpecDecoding metrics:" / "Speculative metrics:" (level, time, process tag).
    prefix: str = ""

    @property
    def drafts_estimate(self) -> float | None:
        """Number of drafts implied by the mean acceptance length (rounded print: an estimate).

        V1 does not print the draft count; MAL = 1 + accepted/drafts when it includes the bonus.
        """
        mal = self.mean_acceptance_length
        if mal is None or self.mean_acceptance_length_includes_bonus is None or self.accepted_tokens == 0:
            return None
        per_draft = mal - 1 if self.mean_acceptance_length_includes_bonus else mal
        return self.accepted_tokens / per_draft if per_draft > 0 else None


_NUMBER = r"(nan|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_RATES = r"((?:nan|[-+]?\d+(?:\.\d+)?)(?:, (?:nan|[-+]?\d+(?:\.\d+)?))*)"

_CURRENT = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: "
    + _NUMBER
    + r", Accepted throughput: "
    + _NUMBER
    + r" tokens/s"
    + r", Drafted throughput: "
    + _NUMBER
    + r" tokens/s"
    + r", Accepted: (\d+) tokens, Drafted: (\d+) tokens"
    + r", Per-position acceptance rate: "
    + _RATES
    + r", Avg Draft acceptance rate: "
    + _NUMBER
    + "%"
)
_V0_8_5 = re.compile(
    r"SpecDecoding metrics: Draft acceptance rate: "
    + _NUMBER
    + "%"
    + r", Mean acceptance length: "
    + _NUMBER
    + r", Accepted: (\d+) tokens, Drafted: (\d+) tokens"
    + r", Per-position acceptance rate: "
    + _RATES
)
_V0_8_3 = re.compile(
    r"SpecDecoding metrics: Draft acceptance rate: "
    + _NUMBER
    + "%"
    + r", Accepted: (\d+) tokens, Drafted: (\d+) tokens"
)
_V0 = re.compile(
    r"Speculative metrics: Draft acceptance rate: "
    + _NUMBER
    + r", System efficiency: "
    + _NUMBER
    + r", Number of speculative tokens: (\d+)"
    + r", Number of accepted tokens: (\d+)"
    + r", Number of draft tokens(?: tokens)?: (\d+)"
    + r", Number of emitted tokens(?: tokens)?: (\d+)"
)
_V1_EARLY = re.compile(
    r"Speculative metrics: Draft acceptance rate: "
    + _NUMBER
    + r", Number of accepted tokens: (\d+)"
    + r", Number of draft tokens: (\d+)"
)
_MARKERS = ("SpecDecoding metrics:", "Speculative metrics:")


def _rates(text: str) -> tuple[float, ...]:
    return tuple(float(part) for part in text.split(", "))


def parse_line(line: str) -> SpecDecodeLogLine | None:
    """Parse one log line; ``None`` if it is not a spec-decode metrics line (or is malformed)."""
    marker_at = min((i for i in (line.find(m) for m in _MARKERS) if i >= 0), default=-1)
    if marker_at < 0:
        return None
    prefix, body = line[:marker_at], line[marker_at:]

    if match := _CURRENT.match(body):
        mal, acc_tp, draft_tp, accepted, drafted, rates, rate = match.groups()
        return SpecDecodeLogLine(
            format=SpecLogFormat.V1_CURRENT,
            accepted_tokens=int(accepted),
            drafted_tokens=int(drafted),
            acceptance_rate_percent=float(rate),
            mean_acceptance_length=float(mal),
            mean_acceptance_length_includes_bonus=True,
            per_position_acceptance_rate=_rates(rates),
            accepted_throughput=float(acc_tp),
            drafted_throughput=float(draft_tp),
            prefix=prefix,
        )
    if match := _V0_8_5.match(body):
        rate, mal, accepted, drafted, rates = match.groups()
        return SpecDecodeLogLine(
            format=SpecLogFormat.V1_0_8_5,
            accepted_tokens=int(accepted),
            drafted_tokens=int(drafted),
            acceptance_rate_percent=float(rate),
            mean_acceptance_length=float(mal),
            mean_acceptance_length_includes_bonus=None,  # 0.8.5: without, 0.9-0.11: with
            per_position_acceptance_rate=_rates(rates),
            prefix=prefix,
        )
    if match := _V0_8_3.match(body):
        rate, accepted, drafted = match.groups()
        return SpecDecodeLogLine(
            format=SpecLogFormat.V1_0_8_3,
            accepted_tokens=int(accepted),
            drafted_tokens=int(drafted),
            acceptance_rate_percent=float(rate),
            prefix=prefix,
        )
    if match := _V0.match(body):
        ratio, efficiency, k, accepted, drafted, emitted = match.groups()
        return SpecDecodeLogLine(
            format=SpecLogFormat.V0,
            accepted_tokens=int(accepted),
            drafted_tokens=int(drafted),
            acceptance_rate_percent=float(ratio) * 100,
            system_efficiency=float(efficiency),
            num_speculative_tokens=int(k),
            emitted_tokens=int(emitted),
            prefix=prefix,
        )
    if match := _V1_EARLY.match(body):
        ratio, accepted, drafted = match.groups()
        return SpecDecodeLogLine(
            format=SpecLogFormat.V1_EARLY,
            accepted_tokens=int(accepted),
            drafted_tokens=int(drafted),
            acceptance_rate_percent=float(ratio) * 100,
            prefix=prefix,
        )
    return None


def parse_lines(lines: Iterable[str]) -> list[SpecDecodeLogLine]:
    """All spec-decode metrics lines among ``lines``, in order; other lines are ignored."""
    return [parsed for line in lines if (parsed := parse_line(line)) is not None]


@dataclass(frozen=True)
class SpecDecodeTotals:
    """Sums over several V1 interval lines (V1 lines are per-interval, so they add up)."""

    accepted_tokens: int
    drafted_tokens: int

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else math.nan


def sum_lines(lines: Iterable[SpecDecodeLogLine]) -> SpecDecodeTotals:
    collected = list(lines)
    if any(line.format is SpecLogFormat.V0 for line in collected):
        # V0 prints running totals; adding them would double count.
        raise ValueError("V0 'Speculative metrics' lines are cumulative and cannot be summed")
    return SpecDecodeTotals(
        accepted_tokens=sum(line.accepted_tokens for line in collected),
        drafted_tokens=sum(line.drafted_tokens for line in collected),
    )
