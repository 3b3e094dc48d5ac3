"""Fill the Markdown templates in templates/ (READMEs): prose reviewed as Markdown, not as code.

A template is a Markdown file with `{{ name }}` placeholders (a name in double braces, one space
inside each). Everything else is copied as is, so Grafana's `{{instance}}`, Alertmanager's
`{{ $labels.x }}` and PromQL's braces need no escaping. Filling is strict: a placeholder without a
value, or a value without a placeholder, is an error, so a template and its filler cannot drift.
"""

from __future__ import annotations

import re
from importlib import resources

__all__ = ["fill"]

_PLACEHOLDER = re.compile(r"\{\{ ([a-z][a-z0-9_]*) \}\}")


def fill(template: str, **values: object) -> str:
    """The text of templates/`template` with every `{{ name }}` replaced by `values[name]`."""
    text = resources.files(__package__).joinpath("templates", template).read_text(encoding="utf-8")
    wanted = set(_PLACEHOLDER.findall(text))
    missing, unused = wanted - values.keys(), values.keys() - wanted
    if missing or unused:
        raise KeyError(f"templates/{template}: no value for {sorted(missing)}; no placeholder for {sorted(unused)}")
    return _PLACEHOLDER.sub(lambda match: str(values[match[1]]), text)
