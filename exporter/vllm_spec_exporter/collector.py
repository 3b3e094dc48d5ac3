"""A prometheus_client Collector that formats the poller's latest PollResult on each scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from . import __version__
from .poller import Poller
from .schema import BY_NAME, CONTEXT, COUNTERS, DERIVED, SCRAPE_ERROR_REASONS

# Canonical counter family (normalise.py) -> exposed counter name.
_COUNTER_NAMES = {
    "drafts": "vllm_spec_decode_drafts_total",
    "draft_tokens": "vllm_spec_decode_draft_tokens_total",
    "accepted_tokens": "vllm_spec_decode_accepted_tokens_total",
    "accepted_per_pos": "vllm_spec_decode_accepted_tokens_by_position_total",
    "generation_tokens": "vllm_generation_tokens_total",
}
_CONTEXT_NAMES = {
    "requests_running": "vllm_num_requests_running",
    "requests_waiting": "vllm_num_requests_waiting",
    "kv_cache_usage": "vllm_kv_cache_usage_ratio",
}


def _gauge(name: str) -> GaugeMetricFamily:
    m = BY_NAME[name]
    return GaugeMetricFamily(name, m.help, labels=list(m.labels))


def _counter(name: str) -> CounterMetricFamily:
    m = BY_NAME[name]
    return CounterMetricFamily(name, m.help, labels=list(m.labels))


class SpecDecodeCollector(Collector):
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
        derived = {m.name: _gauge(m.name) for m in DERIVED}
        for name, labels, value in result.derived:
            derived[name].add_metric(list(labels), value)
        yield from (f for f in derived.values() if f.samples)
        if snap.schema == "v1":
            counters = {m.name: _counter(m.name) for m in COUNTERS}
            for (family, series, position), value in sorted(snap.exported_counters().items()):
                labels = [*series, position] if position else list(series)
                counters[_COUNTER_NAMES[family]].add_metric(labels, value)
            yield from (f for f in counters.values() if f.samples)
        context = {m.name: _gauge(m.name) for m in CONTEXT}
        for (family, series), value in sorted(snap.gauges.items()):
            if family in _CONTEXT_NAMES:
                context[_CONTEXT_NAMES[family]].add_metric(list(series), value)
        yield from (f for f in context.values() if f.samples)

    def _health(self, result) -> Iterator[Metric]:
        poller = self.poller
        up = _gauge("vllm_spec_exporter_target_up")
        up.add_metric([], 1.0 if result.target_up else 0.0)
        yield up
        if result.target_up:
            enabled = _gauge("vllm_spec_decode_enabled")
            enabled.add_metric([], 1.0 if result.schema != "none" else 0.0)
            yield enabled
        duration = _gauge("vllm_spec_exporter_scrape_duration_seconds")
        duration.add_metric([], result.duration_seconds)
        yield duration
        last = _gauge("vllm_spec_exporter_last_success_timestamp_seconds")
        last.add_metric([], result.last_success_unix)
        yield last
        errors = _counter("vllm_spec_exporter_scrape_errors_total")
        for reason in SCRAPE_ERROR_REASONS:
            errors.add_metric([reason], float(result.errors.get(reason, 0)))
        yield errors
        resets = _counter("vllm_spec_exporter_counter_resets_total")
        resets.add_metric([], float(result.counter_resets))
        yield resets
        info = InfoMetricFamily("vllm_spec_exporter_target", BY_NAME["vllm_spec_exporter_target_info"].help)
        info.add_metric([], {"schema": result.schema, "version": result.version})
        yield info
        window = _gauge("vllm_spec_exporter_window_seconds")
        window.add_metric([], poller.store.window_seconds)
        yield window
        guard = _gauge("vllm_spec_exporter_min_draft_tokens")
        guard.add_metric([], poller.min_draft_tokens)
        yield guard
        build = InfoMetricFamily("vllm_spec_exporter_build", BY_NAME["vllm_spec_exporter_build_info"].help)
        build.add_metric([], {"version": __version__})
        yield build
