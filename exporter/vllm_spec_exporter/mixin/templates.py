"""Fill the Markdown templates in templates/ (READMEs, runbooks): prose reviewed as Markdown.

A template is a Markdown file with `{{ name }}` placeholders (a name in double braces, one space
inside each). Everything else is copied as is, so Grafana's `{{instance}}`, Alertmanager's
`{{ $labels.x }}` and PromQL's braces need no escaping. A placeholder without a value is an error;
a filler may offer more values than one template uses (runbooks share one set).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources

__all__ = ["fill", "placeholders"]

_PLACEHOLDER = re.compile(r"\{\{ ([a-z][a-z0-9_]*) \}\}")


def _text(template: str) -> str:
    return resources.files(__package__).joinpath("templates", template).read_text(encoding="utf-8")


def placeholders(template: str) -> set[str]:
    """The names templates/`template` asks for."""
    return set(_PLACEHOLDER.findall(_text(template)))


def fill(template: str, values: Mapping[str, object]) -> str:
    """The text of templates/`template` with every `{{ name }}` replaced by `values[name]`."""
    text = _text(template)
    missing = set(_PLACEHOLDER.findall(text)) - values.keys()
    if missing:
        raise KeyError(f"templates/{template}: no value for {sorted(missing)}")
    return _PLACEHOLDER.sub(lambda match: str(values[match[1]]), text)
