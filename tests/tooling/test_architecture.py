"""The layout stays the one docs/architecture.md describes, and every part stays readable: the
layout table names exactly the modules of each package folder of the sidecar and the generators
(a module added, renamed or removed must be described there), no module of the package is over
400 lines, and no class holds over 200 lines of methods (field declarations aside)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from support.paths import ROOT

PACKAGE = ROOT / "exporter" / "vllm_spec_exporter"
MAX_MODULE_LINES = 400
MAX_CLASS_METHOD_LINES = 200


def layout_rows() -> dict[Path, str]:
    """{package folder: its row's text} for the rows of the Layout table whose path is a package."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## Layout"):]
    section = section[:section.index("\n## ", 1)]
    rows: dict[Path, str] = {}
    for path, what in re.findall(r"^\| `([^`]+)` \| (.*) \|$", section, re.M):
        folder = PACKAGE / path if path.startswith("mixin/") else ROOT / path
        if (folder / "__init__.py").is_file():
            rows[folder.resolve()] = what
    return rows


def named_modules(what: str) -> set[str]:
    """The modules a row names: its code spans that are bare module names (`fetch`, `templates.py`)."""
    return {span.removesuffix(".py") for span in re.findall(r"`([^`]+)`", what)
            if re.fullmatch(r"[a-z][a-z0-9_]*(\.py)?", span)}


def test_every_package_folder_has_a_row() -> None:
    folders = {init.parent.resolve() for init in PACKAGE.rglob("__init__.py")}
    assert set(layout_rows()) == folders


@pytest.mark.parametrize("folder", sorted(layout_rows()), ids=lambda folder: str(folder.relative_to(ROOT)))
def test_the_layout_table_names_exactly_the_modules(folder: Path) -> None:
    modules = {path.stem for path in folder.glob("*.py") if path.stem != "__init__"}
    named = named_modules(layout_rows()[folder])
    assert (sorted(modules - named), sorted(named - modules)) == ([], []), "(not described, described but absent)"


def test_no_module_is_over_400_lines() -> None:
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert {path: lines for path, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}


def method_lines(cls: ast.ClassDef) -> int:
    return sum(node.end_lineno - node.lineno + 1 for node in cls.body
               if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))


def test_no_class_holds_over_200_lines_of_methods() -> None:
    large = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and method_lines(node) > MAX_CLASS_METHOD_LINES:
                large[f"{path.relative_to(ROOT)}:{node.name}"] = method_lines(node)
    assert large == {}
