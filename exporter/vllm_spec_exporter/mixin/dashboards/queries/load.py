"""The load and latency panels' queries: the speed-up estimated at the running batch, the batch
and where verification stops being free, the tokens the target sampled itself, vLLM's load gauges
and its latency histograms (read from vLLM's own /metrics in every spelling).
"""

from __future__ import annotations

from ...rules import load, sources
from ...rules.sources import series
from .reads import Reads
from .selectors import (
    ACCEPTED,
    DRAFT_TOKENS,
    GENERATED,
    RATE_INTERVAL,
    guarded_ratio,
    sum_by,
    vllm_name_pattern,
)


class LoadQueries(Reads):
    """Load, the speed-up at it, and latency."""

    def speedup_at_load(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """The estimated speed-up at the running batch (rules/load.py), the worst engine of `by`:
        a non-linear estimate per engine does not sum, and the one that does not pay is the news."""
        return sum_by(by, series(load.load_names(self.cfg).speedup, self.sel.series), op="min")

    def load_batch(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """Running requests per engine, averaged over the rate window: the largest engine's of `by`."""
        return sum_by(by, series(load.load_names(self.cfg).batch, self.sel.series), op="max")

    def compute_bound_batch(self, by: tuple[str, ...] = ("model_name",)) -> str:
        """The batch from which a speculative step holds more than compute_bound_tokens tokens:
        compute_bound_tokens / (1 + draft tokens per request-step) = N x R / (R + draft tokens), with R
        = generated - accepted the request-steps, as the estimate at load counts them
        (quantities.speedup_at_load). Above it verification stops being free."""
        steps = self.target_sampled_tokens(by)
        return f"{self.cfg.compute_bound_tokens} * ({steps}) / ({steps} + {self.sum_rate(DRAFT_TOKENS, by)} > 0)"

    def target_sampled_tokens(self, by: tuple[str, ...] = ()) -> str:
        """Output tokens the target model sampled itself (one per step, incl. the bonus token)."""
        return f"{self.sum_rate(GENERATED, by)} - {self.sum_rate(ACCEPTED, by)}"

    def load_gauge(self, metric: str, by: tuple[str, ...], op: str = "sum") -> str:
        """A per-series load gauge: the sidecar's, or with source=vllm vLLM's own."""
        return sum_by(by, sources.raw_gauge(self.cfg, metric, self.sel.series), op=op)

    def vllm_rate(self, sample_name: str) -> str:
        """rate() of one of vLLM's own series under either spelling of its name."""
        return f"rate({sources.by_name(vllm_name_pattern(sample_name), self.sel.vllm, regex=True)}[{RATE_INTERVAL}])"

    def latency_quantile(self, histogram: str, quantile: float, by: tuple[str, ...] = ()) -> str:
        return f"histogram_quantile({quantile}, {sum_by(('le', *by), self.vllm_rate(histogram + '_bucket'))})"

    def latency_mean(self, histogram: str, by: tuple[str, ...] = ()) -> str:
        return guarded_ratio(
            sum_by(by, self.vllm_rate(histogram + "_sum")),
            sum_by(by, self.vllm_rate(histogram + "_count")),
        )
