"""Measured artifacts carry a record of what they were made from (tools/measured.py), and
`tools/measured.py` reports them stale when an input or an output changes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import measured  # tools/measured.py (tools/ is on pytest's pythonpath)
from measured import Measured, stale, write_record
from support.paths import ROOT
from vllm_spec_lab.exporter_process import SCRIPT

TOY = Measured(name="toy table", remake="make toy", record="out/toy.provenance.json", outputs=("out/toy.md",),
               inputs=("rules.yaml", "fixtures"))


def toy_tree(root: Path, monkeypatch) -> None:
    (root / "fixtures" / "a").mkdir(parents=True)
    (root / "fixtures" / "a" / "one.prom").write_text("x 1\n")
    (root / "rules.yaml").write_text("groups: []\n")
    (root / "out").mkdir()
    (root / "out" / "toy.md").write_text("| figure |\n")
    monkeypatch.setattr(measured, "MEASURED", (TOY,))


def test_a_fresh_record_is_not_stale(tmp_path, monkeypatch) -> None:
    toy_tree(tmp_path, monkeypatch)
    write_record(tmp_path, TOY)
    assert stale(tmp_path) == []


def test_a_changed_input_names_the_file_and_the_remake(tmp_path, monkeypatch) -> None:
    toy_tree(tmp_path, monkeypatch)
    write_record(tmp_path, TOY)
    (tmp_path / "fixtures" / "a" / "one.prom").write_text("x 2\n")
    (tmp_path / "fixtures" / "two.prom").write_text("y 1\n")  # a new file in an input folder counts too
    assert stale(tmp_path) == ["toy table: fixtures/a/one.prom, fixtures/two.prom changed since it was made; "
                               "remake with `make toy`"]


def test_an_output_edited_by_hand_is_stale(tmp_path, monkeypatch) -> None:
    toy_tree(tmp_path, monkeypatch)
    write_record(tmp_path, TOY)
    (tmp_path / "out" / "toy.md").write_text("| better figure |\n")
    assert stale(tmp_path) == ["toy table: out/toy.md differ from what was made (edited by hand?); "
                               "remake with `make toy`"]


def test_no_record_is_stale(tmp_path, monkeypatch) -> None:
    toy_tree(tmp_path, monkeypatch)
    assert stale(tmp_path) == ["toy table: no record out/toy.provenance.json; remake with `make toy`"]


def test_the_committed_artifacts_match_their_records() -> None:
    assert stale(ROOT) == []


def test_the_check_fails_on_a_stale_picture_and_generate_check_on_the_dashboard(tmp_path) -> None:
    """In a copy of the checkout whose overview dashboard changed by hand: `generate --check` names
    the stale generated file, `tools/measured.py` the pictures drawn from it."""
    copy = tmp_path / "checkout"
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True, capture_output=True)
    for rel in tracked.stdout.decode().split("\0"):
        if rel and (ROOT / rel).is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / rel, copy / rel)
    dashboard = copy / "dashboards" / "vllm-spec-decode-overview.json"
    dashboard.write_text(dashboard.read_text().replace('"title"', '"title" ', 1))
    done = subprocess.run([str(SCRIPT), "generate", "--check"], cwd=copy, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1, done.stderr
    assert "dashboards/vllm-spec-decode-overview.json" in done.stderr
    check = subprocess.run([sys.executable, str(copy / "tools" / "measured.py")], capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 1, check.stderr
    assert ("dashboard pictures: dashboards/vllm-spec-decode-overview.json changed since it was made; remake "
            "with `.venv/bin/python tools/render_dashboard_previews.py`") in check.stderr
    pristine = subprocess.run([sys.executable, str(ROOT / "tools" / "measured.py")], capture_output=True, text=True,
                              timeout=60)
    assert pristine.returncode == 0, pristine.stderr
