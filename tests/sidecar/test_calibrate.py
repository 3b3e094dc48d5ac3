"""calibrate.py: compute_bound_tokens and draft_cost_ratio recovered from step times the cost model
of advisor.speedup_at_load would produce, and the edge cases it documents."""

from __future__ import annotations

import pytest

from vllm_spec_exporter import advisor
from vllm_spec_exporter.calibrate import (
    compute_bound_from_free_drafts,
    compute_bound_tokens,
    draft_cost_ratio,
    step_seconds,
)


def plain_step(batch: float, n: float, a: float = 1e-4) -> float:
    return a * max(n, batch)


@pytest.mark.parametrize("n", [8.0, 24.0, 48.0])
def test_compute_bound_is_where_the_plain_step_time_starts_growing(n) -> None:
    points = [(b, plain_step(b, n)) for b in (1, 4, 16, 64)]
    found = compute_bound_tokens(points)
    assert found.kind == "fitted" and found.tokens == pytest.approx(n, rel=0.02)
    assert found.seconds_per_token == pytest.approx(1e-4, rel=0.02)


def test_step_time_growing_from_the_smallest_batch_gives_at_most_that_batch() -> None:
    # A CPU: every token costs, N is not identifiable below the smallest batch measured.
    found = compute_bound_tokens([(1, 0.01), (4, 0.04), (16, 0.16)])
    assert (found.tokens, found.kind) == (1, "at_most")


def test_flat_step_time_gives_at_least_the_largest_batch() -> None:
    found = compute_bound_tokens([(1, 0.010), (4, 0.0101), (16, 0.0099)])
    assert (found.tokens, found.kind) == (16, "at_least")


def test_compute_bound_needs_two_batches_and_positive_values() -> None:
    with pytest.raises(ValueError, match="two batches"):
        compute_bound_tokens([(4, 0.01), (4, 0.011)])
    with pytest.raises(ValueError, match="step time > 0"):
        compute_bound_tokens([(1, 0.01), (4, 0.0)])


@pytest.mark.parametrize(("batch", "n", "length", "c"), [(1, 256, 2.5, 0.1), (16, 32, 3.0, 0.05), (4, 1, 2.0, 0.3)])
def test_draft_cost_inverts_the_advisors_cost_model(batch, n, length, c) -> None:
    # speedup_at_load's cost(B) is the speculative step over the plain one: feed it back in.
    generated, accepted = 1000.0, 600.0
    steps = generated - accepted
    draft_tokens = length * steps
    speedup = advisor.speedup_at_load(generated, draft_tokens, accepted, batch, c, n)
    assert speedup is not None
    cost = (generated / steps) / speedup
    plain = 0.01
    assert draft_cost_ratio(plain, plain * cost, batch, length, n) == pytest.approx(c)


@pytest.mark.parametrize(("batch", "plain_batch", "n", "length", "c"),
                         [(3.0, 4.0, 2.0, 2.0, 0.1), (3.0, 4.0, 32.0, 2.0, 0.2), (6.0, 4.0, 8.0, 3.0, 0.05)])
def test_draft_cost_reads_each_server_at_its_own_batch(batch, plain_batch, n, length, c) -> None:
    # The plain server steps at its batch, the speculative one verifies batch (1 + L) tokens and
    # drafts at c L plain steps of its own batch: the calibration gives c back, where pairing both
    # servers at one batch would not (unless N covers both batches).
    plain = plain_step(plain_batch, n)
    speculative = plain_step(batch * (1 + length), n) + c * length * plain_step(batch, n)
    assert draft_cost_ratio(plain, speculative, batch, length, n, plain_batch=plain_batch) == pytest.approx(c)
    one_batch = draft_cost_ratio(plain, speculative, batch, length, n)
    assert (one_batch == pytest.approx(c)) == (n >= max(batch, plain_batch))


def test_draft_cost_is_clipped_at_zero_and_none_without_drafts() -> None:
    assert draft_cost_ratio(0.01, 0.009, 1, 2.0, 256) == 0.0  # faster than verification alone
    assert draft_cost_ratio(0.01, 0.02, 1, 0.0, 256) is None
    assert draft_cost_ratio(0.0, 0.02, 1, 2.0, 256) is None


@pytest.mark.parametrize("n", [6.0, 10.0])
def test_free_drafts_give_the_compute_bound_from_one_run(n) -> None:
    batch, length = 4.0, 2.0  # 12 tokens verified per speculative step
    found = compute_bound_from_free_drafts(plain_step(batch, n), plain_step(batch * (1 + length), n), batch, length)
    assert found is not None and found.kind == "fitted" and found.tokens == pytest.approx(n)


@pytest.mark.parametrize(("batch", "plain_batch", "n"), [(3.0, 5.0, 7.0), (4.0, 2.5, 9.0)])
def test_free_drafts_read_each_server_at_its_own_batch(batch, plain_batch, n) -> None:
    length = 2.0  # verified: batch x 3 tokens a speculative step, above N
    plain, speculative = plain_step(plain_batch, n), plain_step(batch * (1 + length), n)
    found = compute_bound_from_free_drafts(plain, speculative, batch, length, plain_batch=plain_batch)
    assert found is not None and found.kind == "fitted" and found.tokens == pytest.approx(n)
    assert found.seconds_per_token == pytest.approx(1e-4)
    # The baseline stepped as many tokens as the target verified: nothing to read N from.
    assert compute_bound_from_free_drafts(plain, speculative, batch, length, plain_batch=batch * 3) is None


def test_free_drafts_at_the_edges() -> None:
    assert compute_bound_from_free_drafts(0.01, 0.01, 4, 2.0).kind == "at_least"  # verification was free
    found = compute_bound_from_free_drafts(0.01, 0.035, 4, 2.0)  # dearer than linear: N <= B
    assert (found.tokens, found.kind) == (4, "at_most")
    assert compute_bound_from_free_drafts(0.01, 0.02, 4, 0.0) is None


def test_step_seconds_from_busy_time_and_steps() -> None:
    assert step_seconds(30.0, 1500.0) == pytest.approx(0.02)
    assert step_seconds(30.0, 0.0) is None


def test_the_value_to_set_keeps_the_configured_one_within_a_one_sided_bound() -> None:
    from vllm_spec_exporter.calibrate import ComputeBound, to_set

    assert to_set(ComputeBound(11.6, "fitted", 1e-3), 256) == 12
    assert to_set(ComputeBound(2.8, "at_most", 1e-3), 256) == 3  # 256 contradicts "3 or less"
    assert to_set(ComputeBound(2.8, "at_most", 1e-3), 2) == 2
    assert to_set(ComputeBound(12.0, "at_least", 1e-3), 256) == 256  # 256 agrees with "12 or more"
    assert to_set(ComputeBound(12.0, "at_least", 1e-3), 4) == 12
    assert to_set(ComputeBound(0.2, "at_most", 1e-3), 256) == 1  # the knob is a count >= 1


def test_step_time_flat_over_every_batch_is_at_least_the_largest() -> None:
    bound = compute_bound_tokens([(1, 0.01), (4, 0.01), (16, 0.01)])
    assert (bound.tokens, bound.kind) == (16, "at_least")
