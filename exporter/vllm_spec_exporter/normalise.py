"""Turn parsed samples into one version-independent snapshot of a vLLM server.

Decides the schema (V1 counters, V0 gauges, or no spec decoding), validates each sample, and
folds every name variant and extra label (Ray adds replica labels) onto series keyed by
(model_name, engine[, position]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .parse import RawSample

# (model_name, engine); engine is "" on V0, which has no engine label.
SeriesKey = tuple[str, str]
# (canonical family, series, position, replica); position is "" except for accepted_per_pos;
# replica is the text of any extra labels (Ray's per-replica labels), "" for plain vLLM. Each
# replica keeps its own window so a replica leaving or restarting is never read as the others
# resetting; derived values sum the replicas' deltas.
CounterKey = tuple[str, SeriesKey, str, str]
BASE_LABELS = frozenset(("model_name", "engine", "position"))

V1_COUNTERS = ("drafts", "draft_tokens", "accepted_tokens", "accepted_per_pos")
V0_MARKERS = ("v0_acceptance_rate", "v0_efficiency", "v0_emitted_tokens")
COUNTER_FAMILIES = (*V1_COUNTERS, "generation_tokens")
GAUGE_FAMILIES = ("requests_running", "requests_waiting", "kv_cache_usage", *V0_MARKERS[:2])
SUMMED_GAUGES = ("requests_running", "requests_waiting")
MAX_POSITION = 63  # no drafter proposes more; a larger label is garbage, not a 64-token draft

SCHEMA_V1 = "v1"
SCHEMA_V0 = "v0"
SCHEMA_NONE = "none"


@dataclass
class Snapshot:
    schema: str
    counters: dict[CounterKey, float] = field(default_factory=dict)
    created: dict[CounterKey, float] = field(default_factory=dict)
    gauges: dict[tuple[str, SeriesKey], float] = field(default_factory=dict)
    # One message per rejected sample: the rest of the scrape is still used.
    invalid: list[str] = field(default_factory=list)

    @property
    def spec_enabled(self) -> bool:
        return self.schema != SCHEMA_NONE

    def positions(self, series: SeriesKey) -> list[str]:
        """Draft positions exposed for a series, sorted numerically: len() is k."""
        found = {pos for fam, key, pos, _ in self.counters if fam == "accepted_per_pos" and key == series}
        return sorted(found, key=int)

    def series_keys(self) -> list[SeriesKey]:
        keys = {key for _, key, _, _ in self.counters} | {key for _, key in self.gauges}
        return sorted(keys)

    def exported_counters(self) -> dict[tuple[str, SeriesKey, str], float]:
        """Counter values per (family, series, position), replicas summed, for re-exposition."""
        out: dict[tuple[str, SeriesKey, str], float] = {}
        for (family, series, position, _), value in self.counters.items():
            key = (family, series, position)
            out[key] = out.get(key, 0.0) + value
        return out


def detect_schema(samples: list[RawSample]) -> str:
    keys = {s.key for s in samples if not s.created}
    if keys.intersection(V0_MARKERS):
        return SCHEMA_V0
    if keys.intersection(V1_COUNTERS):
        return SCHEMA_V1
    return SCHEMA_NONE


def normalise(samples: list[RawSample]) -> Snapshot:
    snap = Snapshot(schema=detect_schema(samples))
    # Exact duplicates (same family and label text) keep the last value.
    latest: dict[tuple[str, bool, str], RawSample] = {}
    for s in samples:
        latest[(s.key, s.created, s.label_text)] = s
    created: list[tuple[CounterKey, float]] = []
    v0 = snap.schema == SCHEMA_V0
    for s in latest.values():
        key = s.key
        is_counter = key in COUNTER_FAMILIES
        if v0 and is_counter:
            continue  # V0 counters add their running total every 5 s: never usable for rates
        labels = s.labels
        series = (labels.get("model_name", ""), labels.get("engine", ""))
        position = ""
        if key == "accepted_per_pos":
            position = _position(labels.get("position"))
            if position is None:
                snap.invalid.append(f"accepted_per_pos: position label {labels.get('position')!r} "
                                    "is not an integer 0..63")
                continue
        value = s.value
        replica = _replica(labels) if len(labels) > 2 + (key == "accepted_per_pos") else ""
        if s.created:
            created.append(((key, series, position, replica), value))
        elif is_counter:
            if not (0 <= value < math.inf):  # also rejects NaN
                snap.invalid.append(f"{key}{{{s.label_text}}}: counter value {value} is not a "
                                    "finite non-negative number")
                continue
            snap.counters[(key, series, position, replica)] = value
        elif key in GAUGE_FAMILIES:
            if v0 and key in V0_MARKERS and math.isnan(value):
                continue  # V0 sets its ratio gauges to NaN before the first draft: no data, not a fault
            if not math.isfinite(value):
                snap.invalid.append(f"{key}{{{s.label_text}}}: gauge value {value} is not finite")
                continue
            gkey = (key, series)
            if key in SUMMED_GAUGES:
                snap.gauges[gkey] = snap.gauges.get(gkey, 0.0) + value
            else:  # a usage or ratio: the worst replica, never a sum
                snap.gauges[gkey] = max(snap.gauges.get(gkey, value), value)
    for ckey, value in created:
        if ckey in snap.counters:
            snap.created[ckey] = value
    return snap


def _replica(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in BASE_LABELS)


def _position(raw: str | None) -> str | None:
    if raw is None or not raw.isascii() or not raw.isdigit():
        return None
    value = int(raw)
    return str(value) if value <= MAX_POSITION else None
