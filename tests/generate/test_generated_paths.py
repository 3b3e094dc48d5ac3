"""Output you can see: `generate --list` prints every path the default render writes, and
.gitattributes marks exactly those `linguist-generated` (collapsed in reviews, left out of the
language statistics), so a new generated file cannot slip in unmarked."""

from __future__ import annotations

import pytest

from support.paths import ROOT
from vllm_spec_exporter import cli
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig


def listed(capsys: pytest.CaptureFixture[str], *sets: str) -> list[str]:
    assert cli.main(["generate", "--list", *sets]) == 0
    return capsys.readouterr().out.splitlines()


def marked() -> list[str]:
    """The paths .gitattributes marks linguist-generated, in its order."""
    rows = [line.split() for line in (ROOT / ".gitattributes").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert all(attributes == ["linguist-generated"] for _, *attributes in rows), rows
    return [path for path, *_ in rows]


def test_gitattributes_marks_exactly_the_generated_files(capsys: pytest.CaptureFixture[str]) -> None:
    paths = listed(capsys)
    assert paths == sorted(generate.render_all(MixinConfig()))
    assert marked() == paths
    assert all((ROOT / path).is_file() for path in paths)


def test_list_follows_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    direct = listed(capsys, "--set", "source=vllm")
    assert direct == sorted(generate.render_all(MixinConfig().with_overrides({"source": "vllm"})))
    assert "alerts/prometheus_rules.yaml" in direct and "deploy/kubernetes/base/podmonitor.yaml" not in direct
