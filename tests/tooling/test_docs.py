"""The documentation stays a product's: a short README, links that resolve, no work history, and a
wheel that holds the product only (no path of the repository's tests, benches or tools)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from support.paths import ROOT

README = ROOT / "README.md"
README_MAX_LINES = 350
# A Markdown link or image whose target is relative: ](path) or ](path#anchor).
RELATIVE_LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s]+?)(?:#[^)\s]*)?\)")
# The project's own work history: sessions, helpers, "issue N" (other projects' issues are written
# owner/repo#N or project#N, which this does not match).
HISTORY = re.compile(r"(?i)\bsessions? [0-9]+|\bhelper sessions?\b|(?<![\w/#-])issues? [0-9]+\b")
# What only exists in a checkout: the wheel must not point at it.
# (A bundle's own unit tests, alerts/tests/ and direct/alerts/tests/, ship with its rules: product.)
CHECKOUT_ONLY = re.compile(r"(?<![\w.-])(?<!alerts/)(bench|tests|tools)/|\.venv\b")
# A web address is the product's to give (the repository's pages), not a path into a checkout.
URL = re.compile(r"https?://\S+")


def tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", *patterns], check=True,
                            capture_output=True).stdout.decode().split("\0")
    return [ROOT / rel for rel in listed if rel and "node_modules" not in rel and (ROOT / rel).is_file()]


def test_the_readme_is_a_short_guide() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; keep it a guide (≤ {README_MAX_LINES})"


def test_the_readme_states_the_two_commands() -> None:
    text = README.read_text()
    assert "bash scripts/run.sh" in text and "bash scripts/test.sh" in text
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_an_alert_expression_is_one_hop_from_the_readme() -> None:
    """The README links the module that writes every alert's expression, and the one that writes
    every record, and both exist."""
    links = set(RELATIVE_LINK.findall(README.read_text()))
    for module in ("exporter/vllm_spec_exporter/mixin/rules/alert_rules.py",
                   "exporter/vllm_spec_exporter/mixin/rules/recording_rules.py"):
        assert module in links, module
        assert (ROOT / module).is_file(), module
    assert "ALERTS" in (ROOT / "exporter/vllm_spec_exporter/mixin/rules/alert_rules.py").read_text()


# Templates link from where their output lands (alerts/, dashboards/, ...): the output is checked.
DOCS = [doc for doc in tracked("*.md") if "templates" not in doc.parts]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)  # links inside code blocks are examples
    broken = [target for target in RELATIVE_LINK.findall(text) if not (doc.parent / target).exists()]
    assert not broken, f"{doc.relative_to(ROOT)}: links to missing files {broken}"


def test_no_text_names_the_projects_work_history() -> None:
    found = []
    for path in tracked("*.md", "*.py", "*.sh", "*.yaml", "*.yml", "*.toml", "*.json", "*.mjs", "*.ts", "*.tsx",
                        ".ci/run"):
        if path.suffix == ".json" and "package-lock" in path.name:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if HISTORY.search(line) and path != Path(__file__):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "work history belongs in git, not in the project's text:\n" + "\n".join(found)


def test_the_package_never_points_into_the_checkout() -> None:
    """Every file of the wheel (modules, templates) speaks of the product: no path of the
    repository's tests, benches, tools or virtualenv (a link to the project's web pages is fine)."""
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
             for path in sorted((ROOT / "exporter" / "vllm_spec_exporter").rglob("*"))
             if path.is_file() and "__pycache__" not in path.parts
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if CHECKOUT_ONLY.search(URL.sub("", line))]
    assert not found, "\n".join(found)


def test_the_checks_catch_what_they_look_for() -> None:
    """The patterns above can fail: each matches what it must and spares what it must."""
    # The samples are built, so that `grep -ri "session [0-9]"` over the tree finds nothing here either.
    number = 34
    assert HISTORY.search(f"measured in session {number}") and HISTORY.search(f"since issue {number} (below)")
    assert not HISTORY.search("prometheus/client_python#1177") and not HISTORY.search("vllm#15415")
    assert CHECKOUT_ONLY.search("see tests/test_x.py") and CHECKOUT_ONLY.search(".venv/bin/python bench/x.py")
    assert not CHECKOUT_ONLY.search(URL.sub("", "see https://github.com/o/r/blob/main/bench/x.md"))
    assert not CHECKOUT_ONLY.search("promtool test rules direct/alerts/tests/*.yaml")
    assert RELATIVE_LINK.findall("[a](docs/x.md#y) [b](https://x) [c](#z)") == ["docs/x.md"]
