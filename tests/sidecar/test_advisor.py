"""advisor.py: closed-form cases of the k advisor's math."""

from __future__ import annotations

import pytest

from vllm_spec_exporter.advisor import advise, expected_tokens_per_step


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 0.8, 0.95])
@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_constant_acceptance_gives_the_geometric_series(alpha, k):
    curve = [alpha ** (i + 1) for i in range(k)]  # prefix acceptance: position i needs all before it
    expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert expected_tokens_per_step(curve, k) == pytest.approx(expected)
    advice = advise(curve, draft_cost=0.0)
    assert advice.tokens_per_step[k] == pytest.approx(expected)


def test_free_drafting_never_recommends_fewer_tokens_when_every_position_helps():
    advice = advise([0.9, 0.8, 0.7, 0.6], draft_cost=0.0)
    assert advice.recommended_k == 4 and advice.gain_vs_current == 1.0


def test_costly_drafting_with_a_collapsing_tail_recommends_lowering_k():
    curve = [0.8, 0.3, 0.05, 0.01]
    advice = advise(curve, draft_cost=0.1)
    speed = {k: (1 + sum(curve[:k])) / (1 + 0.1 * k) for k in range(1, 5)}
    best = max(speed, key=speed.get)
    assert advice.recommended_k == best == 2
    assert advice.gain_vs_current == pytest.approx(speed[2] / speed[4])
    assert advice.current_speedup == pytest.approx(speed[4])
    assert not advice.try_raising


def test_ties_go_to_the_smaller_k_and_raising_is_only_a_suggestion():
    assert advise([0.5, 0.0, 0.0], draft_cost=0.0).recommended_k == 1
    high = advise([0.95, 0.9, 0.85], draft_cost=0.0, raise_threshold=0.7)
    assert high.recommended_k == 3 and high.try_raising


@pytest.mark.parametrize(("curve", "cost", "message"), [
    ([], 0.0, "no draft positions"), ([1.2], 0.0, "within"), ([0.5], -1.0, ">= 0")])
def test_bad_input_is_named(curve, cost, message):
    with pytest.raises(ValueError, match=message):
        advise(curve, cost)


def test_speculation_that_never_pays_recommends_k_zero():
    advice = advise([0.05, 0.01, 0.0], draft_cost=0.1)
    assert advice.speedup[0] == 1.0 and advice.recommended_k == 0
    assert advice.current_speedup < 1.0
    assert advice.gain_vs_current == pytest.approx(1 / advice.current_speedup)
