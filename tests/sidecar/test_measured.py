"""measured.py: the measured speed-up and the histogram arithmetic (mean, Prometheus' quantile)."""

from __future__ import annotations

import math

import pytest

from vllm_spec_exporter.measured import bucket_deltas, histogram_mean, histogram_quantile, measured_speedup

INF = math.inf


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
