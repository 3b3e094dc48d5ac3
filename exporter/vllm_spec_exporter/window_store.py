"""Per-series ring buffers of counter samples over a fixed trailing window, reset-aware.

Every series of a target is sampled at the same poll instants, so deltas of a numerator and a
denominator taken between the same two instants give an exact ratio. A counter that goes down, or
whose `_created` time changes, was reset (vLLM restarted): like Prometheus' rate(), the new value
counts as growth from zero, so a restart never yields a negative or spiked rate.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .names import CounterKey, SeriesKey
from .normalise import Snapshot

__all__ = ["SeriesLimitError", "WindowStore"]


@dataclass
class _Series:
    samples: deque[tuple[float, float]]  # (poll time, reset-adjusted value)
    last_raw: float
    last_created: float | None
    offset: float = 0.0  # sum of values lost to resets


class SeriesLimitError(RuntimeError):
    """The target exposes more series than --max-series allows."""

    reason = "series_limit"  # names.SCRAPE_ERROR_REASONS


@dataclass
class WindowStore:
    """The trailing window of every counter series of one target.

    Invariants: every series is appended to at the same poll instants (one `observe` per poll,
    with the time that poll's answer arrived), so any two series share their sample times and a ratio of two
    deltas covers exactly the same interval; values are reset-adjusted, so they never decrease;
    no sample older than `window_seconds` before the latest poll is kept, nor more than
    `max_samples_per_series`; a series absent from a poll is forgotten. Owned by the poller's
    thread: `observe` and the readers (span, delta, series_keys) run there, never during a scrape.
    """

    window_seconds: float
    max_series: int = 10_000
    max_samples_per_series: int = 4_096  # hard cap whatever the poll interval
    _series: dict[CounterKey, _Series] = field(default_factory=dict)
    latest_poll: float | None = None

    def observe(self, now: float, snap: Snapshot) -> int:
        """Record one poll. Returns the number of series that were reset since the last poll."""
        if len(snap.counters) > self.max_series:
            raise SeriesLimitError(
                f"target exposes {len(snap.counters)} spec-decode series, more than --max-series "
                f"{self.max_series}"
            )
        resets = 0
        horizon = now - self.window_seconds
        for key, raw in snap.counters.items():
            created = snap.created.get(key)
            series = self._series.get(key)
            if series is None:
                series = _Series(deque(maxlen=self.max_samples_per_series), raw, created)
                self._series[key] = series
            elif raw < series.last_raw or (
                created is not None and series.last_created is not None and created != series.last_created
            ):
                series.offset += series.last_raw
                resets += 1
            series.last_raw, series.last_created = raw, created
            series.samples.append((now, series.offset + raw))
            while series.samples[0][0] < horizon:
                series.samples.popleft()
        # A series missing from this poll is gone (k shrank, model unloaded, metrics vanished):
        # forget it rather than serve stale history.
        for key in [k for k in self._series if k not in snap.counters]:
            del self._series[key]
        self.latest_poll = now
        return resets

    def __len__(self) -> int:
        return len(self._series)

    def span(self, keys: list[CounterKey]) -> tuple[float, float] | None:
        """The common interval (start, end) covered by every series in `keys`, or None."""
        starts, ends = [], []
        for key in keys:
            series = self._series.get(key)
            # A series seen only once (it just appeared: a new replica, a new position) has no
            # delta yet; it joins the common interval from its second poll on.
            if series is None or len(series.samples) < 2:
                continue
            starts.append(series.samples[0][0])
            ends.append(series.samples[-1][0])
        if not starts:
            return None
        start, end = max(starts), min(ends)
        return (start, end) if end > start else None

    def delta(self, key: CounterKey, start: float, end: float) -> float | None:
        """Reset-adjusted increase of one series between two poll instants it was sampled at."""
        series = self._series.get(key)
        if series is None:
            return None
        samples = series.samples
        # Usually the common interval is this series' own first and last poll: no scan needed.
        if samples[0][0] == start and samples[-1][0] == end:
            return samples[-1][1] - samples[0][1]
        first = last = None
        for t, value in samples:
            if t == start:
                first = value
            if t == end:
                last = value
        if first is None or last is None:
            return None
        return last - first

    def series_keys(self, series: SeriesKey) -> list[CounterKey]:
        """Every counter (family, position, replica) tracked for one (model_name, engine)."""
        return [key for key in self._series if key.series == series]

    def keys_by_series(self) -> dict[SeriesKey, list[CounterKey]]:
        """series_keys() of every series at once: one pass, where a call per series is quadratic
        in the number of engines and models."""
        out: dict[SeriesKey, list[CounterKey]] = {}
        for key in self._series:
            out.setdefault(key.series, []).append(key)
        return out
