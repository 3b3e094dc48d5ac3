"""One place names raw series: rules/sources.py builds every series selector (`name{matchers}`,
`{__name__=~"..."}`) and is the only module of the generator package that names the sidecar's
served metrics (`MetricName.`). This test reads the package's source (ast) and fails on a
selector written by hand, or a `MetricName` named, anywhere else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import vllm_spec_exporter.mixin as generator

PACKAGE = Path(generator.__file__).parent
ALLOWED = {PACKAGE / "rules" / "sources.py"}
# A name (or an interpolated value) right before `{`, then a label name, `__name__` or an
# interpolated value: `up{job=...}`, `{metric}{{{matchers}}}`; an opening brace joined to a value
# by `+`. `\0` stands for an f-string's interpolated value. Grafana's `{{label}}` legends and
# `${variable}` do not match.
SELECTOR = re.compile(r"[\w:\0]\{[\w\0]|\{__name__")


def _text(node: ast.AST) -> str | None:
    """The literal text of a string constant or an f-string (interpolations as \\0)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "\0" for part in node.values)
    return None


def offences(path: Path) -> list[str]:
    """Every hand-written selector and every MetricName in `path`, as `file:line: what`."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)}
    found: list[str] = []
    where = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE.parent) else path.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "MetricName":
            found.append(f"{where}:{node.lineno}: MetricName")
        elif isinstance(node, ast.ImportFrom) and any(alias.name == "MetricName" for alias in node.names):
            found.append(f"{where}:{node.lineno}: imports MetricName")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = _text(node.left)
            if left is not None and left.endswith("{") and not left.endswith(("{{", "${")):
                found.append(f"{where}:{node.lineno}: a brace joined to a selector by +")
        elif (id(node) not in docstrings and (text := _text(node)) is not None and SELECTOR.search(text)
              and not _prose(text) and not (isinstance(node, ast.Constant) and _inside_joined(tree, node))):
            found.append(f"{where}:{node.lineno}: selector literal {text!r:.60}")
    return found


def _prose(text: str) -> bool:
    """A sentence for a person (a knob's doc, a runbook step) that shows a selector, not PromQL the
    generators evaluate: eight words or more of plain lower-case text."""
    return len(re.findall(r"(?<![\w$.{])[a-z]{3,}(?=[ ,.:;)])", text)) >= 8


def _inside_joined(tree: ast.AST, node: ast.Constant) -> bool:
    return any(isinstance(parent, ast.JoinedStr) and node in parent.values for parent in ast.walk(tree))


def test_only_sources_names_raw_series() -> None:
    found = [offence for path in sorted(PACKAGE.rglob("*.py")) if path not in ALLOWED for offence in offences(path)]
    assert not found, "series selectors or MetricName outside rules/sources.py:\n" + "\n".join(found)


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    # In a folder of its own, never in the package: other tests (on other workers) read the package.
    sample = tmp_path / "_scan_sample.py"
    sample.write_text('from ...names import MetricName\n'
                      'A = f"{MetricName.TARGET_UP}{{{m}}}"\n'
                      'B = "up{job=\\"x\\"}"\n'
                      'C = "{" + m + "}"\n'
                      'D = f\'{{__name__=~"{n}"}}\'\n'
                      'E = "{{instance}}"\n'
                      'F = "${__rate_interval}"\n')
    lines = [offence.split(":")[1] for offence in offences(sample)]
    assert sorted(set(lines)) == ["1", "2", "3", "4", "5"], lines
