"""Test-only: the parts of a fleet-dashboard query that answer for selected servers only.

The fleet panels read fleet records at "All" and the servers' own source records (per position
their counters) once servers, models or engines are selected (`promql.Queries`); the per-server
side's selectors carry a matcher `<label>!~"$variable"` or `<label>!~"($variable)"` that matches
nothing at All.
"""

from __future__ import annotations

import re

# What lies between a selector's braces: anything but a brace, or a `${variable}` (a `}` inside a
# quoted value of the configured selectors would end it early: none of the tested configs has one).
SELECTOR_BODY = r"(?:\$\{\w+\}|[^{}])*"
# A selector holding `<label>!~"$var"` or `<label>!~"($var)"`, with its metric name before the
# braces or (a direct raw read, promql.Queries.counter_rate) as `__name__` inside them.
_SERVER_SIDE = re.compile(rf'(?<![\w:])[\w:]*\{{{SELECTOR_BODY}?\w+!~"(?:\(\$(\w+)\)|\$(\w+))"{SELECTOR_BODY}\}}')


def server_selectors(expr: str) -> list[tuple[str, str]]:
    """The per-server side's selectors of `expr`, each with its variable: the selector matches
    nothing unless that variable is selected."""
    return [(m.group(0), m.group(1) or m.group(2)) for m in _SERVER_SIDE.finditer(expr)]
