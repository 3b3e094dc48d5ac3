"""`vllm-spec-lab versions` and the version sources behind it (lab/vllm_spec_lab/versions.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import ROOT
from vllm_spec_lab import binaries, versions


def test_package_versions_drop_debian_suffixes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listed = tmp_path / "versions.txt"
    listed.write_text("prometheus 3.5.3+ds1-6\nprometheus-alertmanager 0.33.1-5\nvictoria-metrics 1.145.0+ds1-2\n")
    monkeypatch.setattr(binaries, "TESTING_VERSIONS_FILE", listed)
    assert binaries.testing_package_versions() == {
        "prometheus": "3.5.3", "prometheus-alertmanager": "0.33.1", "victoria-metrics": "1.145.0"}


def test_no_versions_file_means_no_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binaries, "TESTING_VERSIONS_FILE", tmp_path / "absent.txt")
    assert binaries.testing_package_versions() == {}


def test_a_missing_binary_is_named_not_installed(tmp_path: Path) -> None:
    server = versions._prometheus_family("prometheus", str(tmp_path / "no-such-prometheus"))
    assert server.version == versions.MISSING and server.line().startswith("prometheus not installed")


def test_console_script_prints_one_line_per_server() -> None:
    script = Path(sys.executable).with_name("vllm-spec-lab")
    result = subprocess.run([str(script), "versions"], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines()]
    assert names == [server.name for server in versions.server_versions()]
    assert {"prometheus", "alertmanager", "victoria-metrics", "vmalert", "vllm", "llama-server"} <= set(names)


def test_the_compatibility_doc_sample_is_what_the_command_prints() -> None:
    """docs/compatibility.md's `vllm-spec-lab versions` sample names the same servers, in the same
    order and line format, as the command (versions and paths are this machine's)."""
    doc = (ROOT / "docs" / "compatibility.md").read_text()
    sample = doc.split("$ vllm-spec-lab versions\n", 1)[1].split("```", 1)[0].splitlines()
    printed = [server.line() for server in versions.server_versions()]
    assert [line.split(" ", 1)[0] for line in sample] == [line.split(" ", 1)[0] for line in printed]
    assert all(re.fullmatch(r"\S+ \S.*  \(/\S+\)", line) for line in sample), sample
