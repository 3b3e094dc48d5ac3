"""A prometheus_client Collector that formats the poller's latest PollResult on each scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from . import __version__
from .names import SCRAPE_ERROR_REASONS, Family, HistogramKey, MetricName, Schema
from .poller import Poller, PollResult
from .schema import BY_NAME, CONTEXT, COUNTERS, DERIVED, ENGINE_GAUGES, HISTOGRAMS

__all__ = ["SpecDecodeCollector"]

# Canonical counter family -> exposed counter name.
_COUNTER_NAMES = {
    Family.DRAFTS: MetricName.DRAFTS_TOTAL,
    Family.DRAFT_TOKENS: MetricName.DRAFT_TOKENS_TOTAL,
    Family.ACCEPTED_TOKENS: MetricName.ACCEPTED_TOKENS_TOTAL,
    Family.ACCEPTED_PER_POS: MetricName.ACCEPTED_TOKENS_BY_POSITION_TOTAL,
    Family.DRAFTED_PER_POS: MetricName.DRAFT_TOKENS_BY_POSITION_TOTAL,
    Family.GENERATION_TOKENS: MetricName.GENERATION_TOKENS_TOTAL,
    Family.ENGINE_STEPS: MetricName.ENGINE_STEPS_TOTAL,
}
_PLAIN_COUNTERS = {family: _COUNTER_NAMES[family] for family in (Family.GENERATION_TOKENS, Family.ENGINE_STEPS)}
_CONTEXT_NAMES = {
    Family.REQUESTS_RUNNING: MetricName.REQUESTS_RUNNING,
    Family.REQUESTS_WAITING: MetricName.REQUESTS_WAITING,
    Family.KV_CACHE_USAGE: MetricName.KV_CACHE_USAGE_RATIO,
}
# The latency histograms served (engines.SERVED_HISTOGRAMS, the ones the poller parses): vLLM's
# histogram key -> served histogram (a summary of the totals-only ones: schema.HISTOGRAMS).
_HISTOGRAM_NAMES = {
    Family.TIME_PER_OUTPUT_TOKEN: MetricName.REQUEST_TPOT_SECONDS,
    Family.INTER_TOKEN_LATENCY: MetricName.INTER_TOKEN_LATENCY_SECONDS,
    Family.E2E_LATENCY: MetricName.E2E_REQUEST_LATENCY_SECONDS,
    Family.REQUEST_GENERATION_TOKENS: MetricName.REQUEST_GENERATION_TOKENS,
}
# The engine's own gauges (SGLang, TensorRT-LLM), served as they are: not windowed.
_ENGINE_GAUGE_NAMES = {
    Family.ENGINE_ACCEPTANCE_LENGTH: MetricName.ENGINE_ACCEPTANCE_LENGTH,
    Family.ENGINE_ACCEPTANCE_RATE: MetricName.ENGINE_ACCEPTANCE_RATIO,
    Family.ENGINE_DRAFT_OVERHEAD: MetricName.ENGINE_DRAFT_OVERHEAD_RATIO,
    Family.ENGINE_DRAFT_STEPS: MetricName.ENGINE_DRAFT_STEPS,
    Family.ENGINE_VERIFY_TOKENS: MetricName.ENGINE_VERIFY_TOKENS,
}


def _gauge(name: MetricName) -> GaugeMetricFamily:
    m = BY_NAME[name]
    return GaugeMetricFamily(name, m.help, labels=list(m.labels))


def _counter(name: MetricName) -> CounterMetricFamily:
    m = BY_NAME[name]
    return CounterMetricFamily(name, m.help, labels=list(m.labels))


def _info(name: MetricName) -> InfoMetricFamily:
    # prometheus_client appends `_info` to the family name itself.
    return InfoMetricFamily(name.removesuffix("_info"), BY_NAME[name].help)


class SpecDecodeCollector(Collector):
    """Formats the poller's latest PollResult on each scrape; never fetches, never waits.

    Invariants: one `poller.current()` result per scrape, so every sample of a scrape comes from
    the same poll; while the target is down only the health series are served (every vLLM series
    is omitted, never repeated stale); metric names, help and label order come from schema.py.
    Safe to call from any number of scrape threads: it only reads an immutable result.
    """

    def __init__(self, poller: Poller) -> None:
        self.poller = poller

    def describe(self) -> list[Metric]:
        # Registering must not trigger a collect() (which would read a half-built poller).
        return []

    def collect(self) -> Iterator[Metric]:
        result = self.poller.current()  # one immutable snapshot for the whole scrape
        yield from self._health(result)
        snap = result.snapshot
        if not result.target_up or snap is None:
            return  # target down: omit every vLLM series rather than repeat stale values
        if snap.spec_enabled is not None:  # a diffusion model's config is not speculative decoding
            spec = _info(MetricName.SPEC_CONFIG_INFO)
            spec.add_metric([], result.spec_config.labels())
            yield spec
        derived = {m.name: _gauge(m.name) for m in DERIVED}
        for name, labels, value in result.derived:
            derived[name].add_metric(list(labels), value)
        yield from (f for f in derived.values() if f.samples)
        # A server without speculation serves its generated tokens and engine steps only (never
        # spec counters, e.g. llama.cpp's all-zero ones): a baseline's tokens/s and its batch
        # (request-steps per engine step) come from them, not from a point gauge.
        served = _COUNTER_NAMES if snap.windowed else _PLAIN_COUNTERS if snap.schema == Schema.NONE else {}
        if served:
            counters = {m.name: _counter(m.name) for m in COUNTERS}
            for (family, series, position), value in sorted(snap.exported_counters().items()):
                if family not in served:
                    continue
                labels = [*series, position] if position else list(series)
                counters[_COUNTER_NAMES[family]].add_metric(labels, value)
            yield from (f for f in counters.values() if f.samples)
        context = {m.name: _gauge(m.name) for m in (*CONTEXT, *ENGINE_GAUGES)}
        for (family, series), value in sorted(snap.gauges.items()):
            name = _CONTEXT_NAMES.get(family) or _ENGINE_GAUGE_NAMES.get(family)
            if name:
                context[name].add_metric(list(series), value)
        yield from (f for f in context.values() if f.samples)
        yield from _histograms(snap.histograms)

    def _health(self, result: PollResult) -> Iterator[Metric]:
        poller = self.poller
        up = _gauge(MetricName.TARGET_UP)
        up.add_metric([], 1.0 if result.target_up else 0.0)
        yield up
        if result.target_up and result.snapshot is not None and result.snapshot.spec_enabled is not None:
            enabled = _gauge(MetricName.SPEC_DECODE_ENABLED)  # omitted for a diffusion model: not "off"
            enabled.add_metric([], 1.0 if result.snapshot.spec_enabled else 0.0)
            yield enabled
        duration = _gauge(MetricName.SCRAPE_DURATION_SECONDS)
        duration.add_metric([], result.duration_seconds)
        yield duration
        last = _gauge(MetricName.LAST_SUCCESS_TIMESTAMP_SECONDS)
        last.add_metric([], result.last_success_unix)
        yield last
        errors = _counter(MetricName.SCRAPE_ERRORS_TOTAL)
        for reason in SCRAPE_ERROR_REASONS:
            errors.add_metric([reason], float(result.errors.get(reason, 0)))
        yield errors
        resets = _counter(MetricName.TARGET_RESTARTS_TOTAL)
        resets.add_metric([], float(result.counter_resets))
        yield resets
        info = _info(MetricName.TARGET_INFO)
        info.add_metric([], {"engine_family": result.engine_family, "schema": result.schema,
                             "version": result.version})
        yield info
        window = _gauge(MetricName.CONFIG_WINDOW_SECONDS)
        window.add_metric([], poller.store.window_seconds)
        yield window
        guard = _gauge(MetricName.CONFIG_MIN_DRAFT_TOKENS)
        guard.add_metric([], poller.min_draft_tokens)
        yield guard
        build = _info(MetricName.BUILD_INFO)
        build.add_metric([], {"version": __version__})
        yield build


def _histograms(samples: dict[HistogramKey, float]) -> Iterator[Metric]:
    """The served latency histograms as vLLM wrote them, buckets in `le` order (the text format's);
    the totals-only ones as summaries of their sum and count."""
    families = {m.name: Metric(m.name, m.help, m.type) for m in HISTOGRAMS}
    served = [(key, value) for key, value in samples.items() if key.family in _HISTOGRAM_NAMES]
    for key, value in sorted(served, key=lambda item: (
            item[0].family, item[0].series, item[0].part, float(item[0].le) if item[0].le else 0.0)):
        name = _HISTOGRAM_NAMES[key.family]
        labels = dict(zip(("model_name", "engine"), key.series, strict=True))
        if key.part == "bucket":
            labels["le"] = floatToGoString(float(key.le))
        families[name].add_sample(f"{name}_{key.part}", labels, value)
    yield from (f for f in families.values() if f.samples)
