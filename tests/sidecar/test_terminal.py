"""The shared terminal rendering (vllm_spec_exporter.terminal): the demo's view read back from the
exporter's own /metrics names, and what the lines say of it."""

from __future__ import annotations

from vllm_spec_exporter.names import MetricName
from vllm_spec_exporter.terminal import LoadView, ModelView, model_lines, view_from_exporter

SERIES = (("engine", "0"), ("model_name", "tiny"))


def exporter_metrics() -> dict[str, dict[tuple, float]]:
    one = {SERIES: 0}
    return {
        MetricName.ACCEPTANCE_RATIO: {SERIES: 0.8125},
        MetricName.NUM_SPECULATIVE_TOKENS: {SERIES: 2},
        MetricName.POSITION_ACCEPTANCE_RATIO: {(("engine", "0"), ("model_name", "tiny"), ("position", "1")): 0.75,
                                               (("engine", "0"), ("model_name", "tiny"), ("position", "0")): 0.875,
                                               (("engine", "1"), ("model_name", "tiny"), ("position", "0")): 0.1},
        MetricName.GENERATION_TOKENS_PER_SECOND: {SERIES: 42.0},
        MetricName.RECOMMENDED_K: {SERIES: 2},
        MetricName.RECOMMENDED_K_ESTIMATED_SPEEDUP: {SERIES: 2.41},
        MetricName.ESTIMATED_SPEEDUP: {SERIES: 2.41},
        MetricName.EFFICIENCY_RATIO: {(("engine", "1"), ("model_name", "tiny")): 0.5},  # another series
        "unrelated": one,
    }


def test_view_from_exporter_reads_one_series_by_served_names() -> None:
    view = view_from_exporter(exporter_metrics(), SERIES, draft_cost=0.0)
    assert view.model_name == "tiny" and view.engines == ("0",) and view.k == 2
    assert view.values == {MetricName.ACCEPTANCE_RATIO: 0.8125, MetricName.GENERATION_TOKENS_PER_SECOND: 42.0}
    assert view.positions == {0: 0.875, 1: 0.75}
    assert view.advisor is not None and view.advisor.recommended_k == 2
    assert view.advisor.estimated_speedup == {2: 2.41} and view.advisor.draft_cost_ratio == 0.0


def test_model_lines_say_what_is_there_and_nothing_else() -> None:
    text = "\n".join(model_lines(view_from_exporter(exporter_metrics(), SERIES, draft_cost=0.0), 0.5))
    assert "model tiny  engines 0 · k=2" in text
    assert " 81.2%" in text and "position  0        87.5%" in text and "position  1        75.0%" in text
    assert "tokens/s          generated 42.0" in text
    assert "best k = 2, est. speed-up 2.41× (draft cost 0)" in text
    assert "efficiency" not in text and "load" not in text  # absent figures are left out, never 0


def test_missing_acceptance_is_na_not_zero() -> None:
    view = ModelView(model_name="m", engines=(), k=None, values={}, load=LoadView(requests_running=3))
    lines = model_lines(view, 0.5)
    assert "n/a (too few draft tokens in the window)" in lines[1]
    assert lines[-1].strip() == "load              running 3"
