"""Durations as Prometheus and Go write them (`90s`, `2m30s`, `1h`, `500ms`): the one parser and the
one formatter of the house — the sidecar's `check`, the generators, the lab and the benches use these.

- `seconds(text)` reads one: a sequence of number+unit parts, units y w d h m s ms; a part may
  carry a fraction (Go prints `1.5s`, promtool prints Go's durations). Anything else is a
  ValueError naming the text — never a silent 0.
- `is_prometheus_duration(text)` is the stricter form Prometheus accepts in rule files and
  configuration: whole numbers, units largest first, each at most once.
- `format_duration(seconds)` writes the shortest Prometheus duration of whole seconds, rounding up
  (150 -> `2m30s`, 600 -> `10m`).
"""

from __future__ import annotations

import math
import re

__all__ = ["format_duration", "is_prometheus_duration", "seconds"]

UNIT_SECONDS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|y|w|d|h|m|s)")
_ANY = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|y|w|d|h|m|s))+")
_PROMETHEUS = re.compile(r"(?=.)(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?")
_FORMAT_UNITS = (("h", 3600), ("m", 60), ("s", 1))


def seconds(text: str) -> float:
    """Seconds of a duration like `1h30m`, `90s`, `1.5s`; ValueError naming `text` otherwise."""
    if not isinstance(text, str) or not _ANY.fullmatch(text):
        raise ValueError(f"{text!r} is not a duration (e.g. 30s, 2m, 1h30m)")
    return sum(float(value) * UNIT_SECONDS[unit] for value, unit in _PART.findall(text))


def is_prometheus_duration(text: str) -> bool:
    """Whether Prometheus accepts `text` as a duration in rules and configuration."""
    return bool(_PROMETHEUS.fullmatch(text))


def format_duration(total: float) -> str:
    """Whole seconds (rounded up) as the shortest Prometheus duration: 150 -> `2m30s`."""
    remaining = math.ceil(total)
    if remaining <= 0:
        return "0s"
    parts = []
    for unit, size in _FORMAT_UNITS:
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
