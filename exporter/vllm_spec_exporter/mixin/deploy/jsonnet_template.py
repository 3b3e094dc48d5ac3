"""Where the `_config` fields flow: the artifacts as templates over the jsonnet mixin's values.

`parameterise(build, cfg)` renders the artifacts twice, plainly and with the probe values of
jsonnet_config (knobs set to values unlike anything else), and walks both trees together. A string
holding a probe form becomes a `Template` (literal text and value names, alternating), a number
equal to a probed threshold a `ValueRef`; everything else must be equal in both renders. Then each
template is filled with the plain config's forms and must give the plain render back exactly.

So the jsonnet mixin cannot drift from the YAML and JSON files: a knob reaching an artifact in a
form jsonnet_config does not know (a new wording, an arithmetic on a threshold, a change of
structure) is a ValueError naming the path, at generate time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import MixinConfig
from .jsonnet_config import FORMS, NUMBER_FORMS, Form, probe

__all__ = ["Parameterised", "Template", "ValueRef", "parameterise"]


@dataclass(frozen=True)
class Template:
    """A string of the artifacts with values in it: `parts[0]`, value `parts[1]`, `parts[2]`, ..."""

    parts: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return self.parts[1::2]

    def fill(self, values: dict[str, str]) -> str:
        return "".join(part if index % 2 == 0 else values[part] for index, part in enumerate(self.parts))


@dataclass(frozen=True)
class ValueRef:
    """A JSON number of the artifacts that is a threshold: the value named `name`."""

    name: str


@dataclass(frozen=True)
class Parameterised:
    """The artifacts as templates, and the forms their templates use."""

    tree: Any
    forms: tuple[Form, ...]  # only those some template uses
    numbers: tuple[str, ...]  # names of the ValueRefs used

    @property
    def names(self) -> set[str]:
        return {form.var for form in self.forms} | set(self.numbers)


def parameterise(build: Callable[[MixinConfig], Any], cfg: MixinConfig) -> Parameterised:
    plain = build(cfg)
    probed_cfg = probe(cfg, json.dumps(plain, ensure_ascii=False))
    probed = build(probed_cfg)
    # A form the probe left alone does not depend on its fields under `cfg` (the exporter's selector
    # without the sidecar): it cannot be located, and needs no locating.
    forms = [form for form in FORMS if form.applies(cfg) and form.text(probed_cfg) != form.text(cfg)]
    probe_text = {form.text(probed_cfg): form for form in forms}
    plain_text = {form.var: form.text(cfg) for form in forms}
    # Longest first: at each position the whole form wins over a form inside it (a selector's label).
    pattern = re.compile("|".join(re.escape(text) for text in sorted(probe_text, key=len, reverse=True)))
    numbers = {getattr(probed_cfg, n.knob): n for n in NUMBER_FORMS}
    used: set[str] = set()

    def walk(a: Any, b: Any, path: str) -> Any:
        if isinstance(a, dict) and isinstance(b, dict) and list(a) == list(b):
            return {key: walk(a[key], b[key], f"{path}/{key}") for key in a}
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            return [walk(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True))]
        if isinstance(b, str) and isinstance(a, str) and pattern.search(b):
            pieces = pattern.split(b)
            names = [probe_text[match].var for match in pattern.findall(b)]
            parts = tuple(part for pair in zip(pieces, [*names, ""], strict=True) for part in pair)[:-1]
            template = Template(parts)
            if template.fill(plain_text) != a:
                raise _unexplained(path, a, b)
            used.update(template.names)
            return template if template.names else a
        if isinstance(b, float) and b in numbers and a == getattr(cfg, numbers[b].knob):
            used.add(numbers[b].var)
            return ValueRef(numbers[b].var)
        if type(a) is not type(b) or a != b:
            raise _unexplained(path, a, b)
        return a

    tree = walk(plain, probed, "")
    return Parameterised(tree, tuple(form for form in forms if form.var in used),
                         tuple(n.var for n in NUMBER_FORMS if n.var in used))


def _unexplained(path: str, plain: Any, probed: Any) -> ValueError:
    return ValueError(f"jsonnet mixin: a _config knob reaches {path or '/'} in a form jsonnet_config does not "
                      f"know (plain {_short(plain)}, probed {_short(probed)}); add the form or render that "
                      "knob with generate --set only")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
