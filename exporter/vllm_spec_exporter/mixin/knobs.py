"""What a knob of MixinConfig is: a dataclass field carrying its section, its documentation, its kind
(duration, window, ratio, count, …) and its constraints, so that validation reads the fields.

Contract: `knob(section, default, doc, kind, *constraints, derived=False)` returns a
`dataclasses.field` whose metadata holds all of it; `field_problems(config)` walks the config's
fields in definition order and returns the first single-field problem as a sentence, or None. A
kind brings the constraints every knob of that kind has (a duration is a Prometheus duration; a
window is one longer than 0s); `derived=True` lets the empty string mean "derived from the scrape
interval" (mixin/windows.py). Rules between knobs (critical <= warning, the windows' samples) stay
in MixinConfig.validate. A new knob states its kind here and needs no edit of `validate`.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from ..durations import is_prometheus_duration, seconds

__all__ = ["Between", "Contains", "Differs", "Kind", "Matches", "NotEmpty", "OneOf", "field_problems", "knob"]


class Kind(StrEnum):
    """What a knob's value is (the knob table and validation read it)."""

    SELECTOR = "selector"  # PromQL label matchers without braces
    CHOICE = "choice"  # one of a few words
    LABEL = "label"  # a Prometheus label name
    LABELS = "labels"  # a list of label names
    LABEL_MAP = "label map"  # label name -> value
    LABEL_VALUE = "label value"  # a Kubernetes label value
    RATIO = "ratio"  # a fraction of 1
    NUMBER = "number"  # a real number
    COUNT = "count"  # an integer
    DURATION = "duration"  # a Prometheus duration: a hold, an interval, a timeout (0s allowed unless positive)
    WINDOW = "window"  # a range selector `[d]`: a Prometheus duration longer than 0s
    TEXT = "text"  # free text: a name, a path, a URL
    TAGS = "tags"  # a list of words


class Constraint(Protocol):
    def problem(self, name: str, value: Any) -> str | None:
        """A sentence naming the knob and what is wrong with `value`, or None when it holds."""


@dataclass(frozen=True)
class Duration:
    """A Prometheus duration (units largest first, no fractions), longer than 0s when `positive`."""

    positive: bool = False
    range_selector: bool = False

    def problem(self, name: str, value: Any) -> str | None:
        if not value or not is_prometheus_duration(value):
            return f"{name} must be a Prometheus duration like 90s, 2m or 1h30m, got {value!r}"
        if self.positive and seconds(value) <= 0:
            kind = "a range selector" if self.range_selector else "a duration"
            return f"{name} must be longer than 0s ({kind}), got {value!r}"
        return None


@dataclass(frozen=True)
class Between:
    """A number within bounds; None leaves a side open. `note` follows the bound in the message."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    note: str = ""

    def problem(self, name: str, value: Any) -> str | None:
        low_ok = self.low is None or (value > self.low if self.low_open else value >= self.low)
        high_ok = self.high is None or (value < self.high if self.high_open else value <= self.high)
        if low_ok and high_ok:
            return None
        if self.high is None:
            bound = f"{'>' if self.low_open else '>='} {self.low:g}"
        elif self.low is None:
            bound = f"{'<' if self.high_open else '<='} {self.high:g}"
        else:
            bound = (f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                     f"{')' if self.high_open else ']'}")
        return f"{name} must be {bound}{self.note}, got {value}"


@dataclass(frozen=True)
class NotEmpty:
    def problem(self, name: str, value: Any) -> str | None:
        return None if value else f"{name} must not be empty"


@dataclass(frozen=True)
class OneOf:
    choices: Sequence[str]

    def problem(self, name: str, value: Any) -> str | None:
        return None if value in self.choices else f"{name} must be one of {', '.join(self.choices)}, got {value!r}"


@dataclass(frozen=True)
class Contains:
    """A text holding `part`; `why` says what the part stands for."""

    part: str
    why: str

    def problem(self, name: str, value: Any) -> str | None:
        return None if self.part in value else f"{name} must contain {self.part} ({self.why})"


@dataclass(frozen=True)
class Differs:
    """Anything but `value`; `problem_text` is the whole sentence after the knob's name."""

    value: Any
    problem_text: str

    def problem(self, name: str, value: Any) -> str | None:
        return f"{name} {self.problem_text}" if value == self.value else None


@dataclass(frozen=True)
class Matches:
    """Empty, or a full match of `pattern`; `what` names the form in the message."""

    pattern: re.Pattern[str]
    what: str

    def problem(self, name: str, value: Any) -> str | None:
        if not value or self.pattern.fullmatch(value):
            return None
        return f"{name} must be {self.what}, got {value!r}"


# What every knob of a kind must hold, before its own constraints.
_KIND_CONSTRAINTS: dict[Kind, tuple[Constraint, ...]] = {
    Kind.DURATION: (Duration(),),
    Kind.WINDOW: (Duration(positive=True, range_selector=True),),
}


def knob(section: str, default: Any, doc: str, kind: Kind, *constraints: Constraint, derived: bool = False) -> Any:
    """A config field with its documentation (what it is and when to change it, node-mixin style),
    its kind and its constraints. `derived`: empty means "derived from the scrape interval".

    The doc travels with the field (dataclass metadata), so alerts/README.md's knob table is read
    from the fields themselves. Mutable defaults (dicts) are copied for every instance.
    """
    metadata = {"section": section, "doc": doc, "kind": kind, "derived": derived,
                "constraints": _KIND_CONSTRAINTS.get(kind, ()) + constraints}
    if isinstance(default, dict):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def field_problems(config: Any) -> str | None:
    """The first constraint a field of `config` breaks, in definition order, or None."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if value == "" and f.metadata.get("derived"):
            continue  # derived from scrape_interval (windows.py)
        for constraint in f.metadata.get("constraints", ()):
            if (problem := constraint.problem(f.name, value)) is not None:
                return problem
    return None
