"""Turn parsed samples into one version- and engine-independent snapshot of a server.

Decides the engine family and schema (engines.detect: vLLM V1 counters, V0 gauges, llama.cpp,
TensorRT-LLM, SGLang, TGI, or no spec decoding), validates each sample, and folds every name
variant and extra label (Ray adds replica labels) onto series keyed by (model_name, engine[,
position]). Engines without a `model_name` label get `default_model` (the poller reads it from the
server's /v1/models), so a fleet mixing engines sums per model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from . import engines
from .engines import COUNTER_SCHEMAS, ENGINE_GAUGE_KEYS, ENGINE_LABEL, SPEC_KEYS, EngineError
from .names import CounterKey, EngineFamily, Family, HistogramKey, Schema, SeriesKey
from .parse import RawSample

__all__ = ["EngineError", "Snapshot", "detect_engine", "normalise"]

# Engine-index labels of every family (SGLang's dp_rank) are part of the series, not a replica.
BASE_LABELS = frozenset(("model_name", "engine", "position", *ENGINE_LABEL.values()))

V1_COUNTERS = (Family.DRAFTS, Family.DRAFT_TOKENS, Family.ACCEPTED_TOKENS, Family.ACCEPTED_PER_POS,
               Family.DRAFTED_PER_POS)
# The counters with a `position` label (their series keys carry it).
PER_POSITION = frozenset((Family.ACCEPTED_PER_POS, Family.DRAFTED_PER_POS))
V0_MARKERS = (Family.V0_ACCEPTANCE_RATE, Family.V0_EFFICIENCY, Family.V0_EMITTED_TOKENS)
COUNTER_FAMILIES = (*V1_COUNTERS, Family.GENERATION_TOKENS, Family.ENGINE_STEPS)
GAUGE_FAMILIES = (Family.REQUESTS_RUNNING, Family.REQUESTS_WAITING, Family.KV_CACHE_USAGE,
                  Family.V0_ACCEPTANCE_RATE, Family.V0_EFFICIENCY, *ENGINE_GAUGE_KEYS)
SUMMED_GAUGES = frozenset((Family.REQUESTS_RUNNING, Family.REQUESTS_WAITING))
# Usages and overheads across replicas (SGLang's tp/pp ranks): the worst one, never a mean.
HIGHER_IS_WORSE = frozenset((Family.KV_CACHE_USAGE, Family.ENGINE_DRAFT_OVERHEAD, *V0_MARKERS))
MAX_POSITION = 63  # no drafter proposes more; a larger label is garbage, not a 64-token draft
_COUNTERS, _GAUGES = frozenset(COUNTER_FAMILIES), frozenset(GAUGE_FAMILIES)
# The same series come back every poll: their keys are built once (position checked, replica
# labels joined) and looked up by default model, then (family, engine family, label text) after
# that. Bounded like parse's cache: a model's table is emptied past _KEYS_MAX keys, all of them past
# _KEYS_MODELS_MAX default models.
_KEYS: dict[str, dict[tuple[Family, str, str], CounterKey]] = {}
_KEYS_MAX = 16_384
_KEYS_MODELS_MAX = 64
# The same for histogram samples: (default model, family, part, label text) -> key (a bucket
# without a numeric `le` has none: it is described every poll). Emptied past _KEYS_MAX entries.
_HISTOGRAM_KEYS: dict[tuple[str, Family, str, str], HistogramKey] = {}
# engines.detect()'s result per set of (engine family, key) pairs seen in a poll.
_DETECTIONS: dict[frozenset[tuple[str, Family]], engines.Detection] = {}
_DETECTIONS_MAX = 256


@dataclass
class Snapshot:
    """One poll of a target, independent of the engine, vLLM's version and name spelling.

    Invariants: `counters` holds only finite, non-negative values of counter families (never
    on V0, whose counters are unusable); `created` has a key only where `counters` has it; gauges
    are finite, per (family, series), running/waiting summed over replicas, usages the worst
    replica and an engine's own acceptance gauges the lowest replica; a rejected sample is left out
    and described in `invalid`, never replaced by 0. Built once by `normalise` and not changed
    afterwards: the poll result shares it with scrapes.
    """

    schema: Schema
    engine_family: str = ""  # names.EngineFamily value; "" when nothing names one
    counters: dict[CounterKey, float] = field(default_factory=dict)
    created: dict[CounterKey, float] = field(default_factory=dict)
    gauges: dict[tuple[Family, SeriesKey], float] = field(default_factory=dict)
    # One message per rejected sample: the rest of the scrape is still used.
    invalid: list[str] = field(default_factory=list)
    # vLLM's histograms the parser was asked for (engines.VLLM_HISTOGRAM_NAMES): finite,
    # non-negative, buckets with a numeric `le`, replicas summed; never windowed. The sidecar serves
    # them as they are (collector), `check --baseline` reads deltas between two snapshots.
    histograms: dict[HistogramKey, float] = field(default_factory=dict)

    @property
    def spec_enabled(self) -> bool | None:
        """True/False, or None where the question does not apply (a diffusion model)."""
        if self.schema == Schema.DIFFUSION:
            return None
        return self.schema != Schema.NONE

    @property
    def windowed(self) -> bool:
        """Counters of this schema feed the window, derive and the re-exported counters."""
        return self.schema in COUNTER_SCHEMAS

    def positions(self, series: SeriesKey) -> list[str]:
        """Draft positions exposed for a series, sorted numerically: len() is k."""
        per_position = Family.ACCEPTED_PER_POS  # once: an enum attribute costs ~0.5 µs on 3.11
        found = {key.position for key in self.counters if key.family == per_position and key.series == series}
        return sorted(found, key=int)

    @cached_property
    def k_by_series(self) -> dict[SeriesKey, int]:
        """len(positions(series)) of every series at once, in one pass over the counters; computed
        once a snapshot (derive and the config's k check both read it every poll), which is safe
        because a snapshot is not changed after normalise built it."""
        per_position = Family.ACCEPTED_PER_POS
        found = {(key.series, key.position) for key in self.counters if key.family == per_position}
        out: dict[SeriesKey, int] = {}
        for series, _ in found:
            out[series] = out.get(series, 0) + 1
        return out

    def series_keys(self) -> list[SeriesKey]:
        keys = {key.series for key in self.counters} | {series for _, series in self.gauges}
        return sorted(keys)

    def exported_counters(self) -> dict[tuple[Family, SeriesKey, str], float]:
        """Counter values per (family, series, position), replicas summed, for re-exposition."""
        out: dict[tuple[Family, SeriesKey, str], float] = {}
        for key, value in self.counters.items():
            exported = (key.family, key.series, key.position)
            out[exported] = out.get(exported, 0.0) + value
        return out


def detect_engine(samples: list[RawSample]) -> engines.Detection:
    """The engine family and schema of one exposition; EngineError for mixed or unknown engines."""
    # The distinct (engine family, key) pairs first, in one C-level pass: a poll holds hundreds of
    # samples but a handful of pairs, and the same pairs come back every poll (cached, bounded).
    pairs = frozenset({(s.engine_family, s.key) for s in samples if not s.created})
    found = _DETECTIONS.get(pairs)
    if found is None:
        found = _detect_pairs(pairs, samples)  # raises EngineError: never cached
        if len(_DETECTIONS) >= _DETECTIONS_MAX:
            _DETECTIONS.clear()
        _DETECTIONS[pairs] = found
    return found


def _detect_pairs(pairs: frozenset[tuple[str, Family]], samples: list[RawSample]) -> engines.Detection:
    spec: dict[str, set[str]] = {}
    context: set[str] = set()
    foreign_key = Family.FOREIGN_SPEC
    for engine_family, key in pairs:
        if key == foreign_key:
            continue
        if key in SPEC_KEYS:
            spec.setdefault(engine_family, set()).add(key)
        else:
            context.add(engine_family)
    foreign = []
    if any(key == foreign_key for _, key in pairs):
        foreign = [s.label_text for s in samples if s.key == foreign_key]
    return engines.detect(spec, context, foreign)


def normalise(samples: list[RawSample], default_model: str = "") -> Snapshot:
    """Raises EngineError when the exposition mixes engines or names an unknown one."""
    found = detect_engine(samples)
    snap = Snapshot(schema=found.schema, engine_family=found.family)
    # Exact duplicates (same family and label text) keep the last value.
    latest = {(s.key, s.created, s.part, s.label_text): s for s in samples}
    created: list[tuple[CounterKey, float]] = []
    v0 = snap.schema == Schema.V0
    foreign_key = Family.FOREIGN_SPEC
    # The key cache of this default model: the per-sample lookup key stays a 3-tuple.
    keys = _KEYS.get(default_model)
    if keys is None or len(keys) >= _KEYS_MAX:
        if len(_KEYS) >= _KEYS_MODELS_MAX:
            _KEYS.clear()
        keys = _KEYS[default_model] = {}
    histograms = snap.histograms
    for s in latest.values():
        key = s.key
        is_counter = key in _COUNTERS
        if v0 and is_counter:
            continue  # V0 counters add their running total every 5 s: never usable for rates
        if key == foreign_key:
            continue
        if s.part:
            if not s.created:
                hkey = _HISTOGRAM_KEYS.get((default_model, key, s.part, s.label_text))
                if hkey is None:
                    hkey = _histogram_key(s, default_model)
                value = s.value
                if hkey is not None and 0 <= value < math.inf:
                    histograms[hkey] = histograms.get(hkey, 0.0) + value
                else:
                    _describe_histogram(snap, s)
            continue
        cache_key = (key, s.engine_family, s.label_text)
        counter_key = keys.get(cache_key)
        if counter_key is None:
            counter_key = _counter_key(key, s.labels, s.engine_family, default_model)
            if counter_key is None:
                snap.invalid.append(f"{key}: position label {s.labels.get('position')!r} "
                                    "is not an integer 0..63")
                continue
            keys[cache_key] = counter_key
        value = s.value
        if s.created:
            created.append((counter_key, value))
        elif is_counter:
            if not (0 <= value < math.inf):  # also rejects NaN
                snap.invalid.append(f"{key}{{{s.label_text}}}: counter value {value} is not a "
                                    "finite non-negative number")
                continue
            snap.counters[counter_key] = value
        elif key in _GAUGES:
            if v0 and key in V0_MARKERS and math.isnan(value):
                continue  # V0 sets its ratio gauges to NaN before the first draft: no data, not a fault
            if not math.isfinite(value):
                snap.invalid.append(f"{key}{{{s.label_text}}}: gauge value {value} is not finite")
                continue
            gkey = (key, counter_key.series)
            if key in SUMMED_GAUGES:
                snap.gauges[gkey] = snap.gauges.get(gkey, 0.0) + value
            elif key in HIGHER_IS_WORSE:  # a usage, overhead or V0 ratio: the worst replica
                snap.gauges[gkey] = max(snap.gauges.get(gkey, value), value)
            else:  # an acceptance: the worst replica is the lowest
                snap.gauges[gkey] = min(snap.gauges.get(gkey, value), value)
    for ckey, value in created:
        if ckey in snap.counters:
            snap.created[ckey] = value
    if snap.schema == Schema.LLAMACPP and not _llamacpp_drafted(snap):
        # llama.cpp exports its spec counters as 0 when speculation is off: indistinguishable from
        # "on but never drafted", so reported as no spec decoding until the first draft.
        snap.schema = Schema.NONE
    return snap


def _counter_key(family: Family, labels: dict[str, str], engine_family: str,
                 default_model: str) -> CounterKey | None:
    """The key of one series, or None when its position label is not a draft position.

    Engines without a model_name label get `default_model`; the engine index is the family's own
    label (ENGINE_LABEL: SGLang's dp_rank), "engine" for vLLM.
    """
    position = ""
    per_position = family in PER_POSITION
    if per_position:
        position = _position(labels.get("position"))
        if position is None:
            return None
    if engine_family == EngineFamily.VLLM:  # vLLM: only Ray's replica labels go beyond these
        replica = _replica(labels) if len(labels) > 2 + per_position else ""
    else:
        replica = _replica(labels)
    series = SeriesKey(labels.get("model_name", default_model),
                       labels.get(ENGINE_LABEL.get(engine_family, "engine"), ""))
    return CounterKey(family, series, position, replica)


def _histogram_key(s: RawSample, default_model: str) -> HistogramKey | None:
    """The key of one `_bucket`, `_sum` or `_count` sample (replicas share it), cached; None for a
    bucket without a numeric `le`."""
    le = s.labels.get("le", "") if s.part == "bucket" else ""
    if s.part == "bucket" and not _is_bound(le):
        return None
    hkey = HistogramKey(s.key, SeriesKey(s.labels.get("model_name", default_model), s.labels.get("engine", "")),
                        s.part, le)
    if len(_HISTOGRAM_KEYS) >= _KEYS_MAX:
        _HISTOGRAM_KEYS.clear()
    _HISTOGRAM_KEYS[(default_model, s.key, s.part, s.label_text)] = hkey
    return hkey


def _describe_histogram(snap: Snapshot, s: RawSample) -> None:
    """Why a histogram sample was rejected: its value, or its bucket's `le`."""
    if not (0 <= s.value < math.inf):
        snap.invalid.append(f"{s.key}_{s.part}{{{s.label_text}}}: value {s.value} is not a finite "
                            "non-negative number")
    else:
        snap.invalid.append(f"{s.key}_bucket{{{s.label_text}}}: le {s.labels.get('le')!r} is not a number")


def _is_bound(le: str) -> bool:
    try:
        return not math.isnan(float(le))
    except ValueError:
        return False


def _llamacpp_drafted(snap: Snapshot) -> bool:
    return any(key.family == Family.ACCEPTED_PER_POS or (key.family in V1_COUNTERS and value > 0)
               for key, value in snap.counters.items())


def _replica(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in BASE_LABELS)


def _position(raw: str | None) -> str | None:
    if raw is None or not raw.isascii() or not raw.isdigit():
        return None
    value = int(raw)
    return str(value) if value <= MAX_POSITION else None
