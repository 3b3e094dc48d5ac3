"""bench/fleet_scale.py --quick (100 pods, real Prometheus 3 and VictoriaMetrics + vmalert): the
tables it prints hold sane figures. Not a timing assertion: it checks that every rule group was
evaluated and timed, every dashboard query ran without error, the series counts add up and the
crowded per-server panels stayed readable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.prom import require_binary
from vllm_spec_exporter.mixin.config import MixinConfig

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
BIN = Path(os.environ.get("VLLM_SPEC_EXPORTER_CACHE", Path.home() / ".cache" / "vllm-spec-exporter")) \
    / "debian-testing" / "root" / "usr" / "bin"


def test_quick_fleet_tables_are_sane(tmp_path: Path) -> None:
    for binary in ("prometheus", "promtool", "victoria-metrics", "vmalert"):
        require_binary(str(BIN / binary))
    out = tmp_path / "fleet.json"
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "fleet_scale.py"), "--quick", "--json", str(out)],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Prometheus 3:" in result.stdout and "VictoriaMetrics:" in result.stdout
    summaries = json.loads(out.read_text())
    import fleet_scale

    groups = {g["name"] for f in fleet_scale.load_rules() for g in f["groups"]}
    cfg = MixinConfig()
    for backend in ("prometheus", "victoriametrics"):
        (row,) = summaries[backend]
        assert row["pods"] == 100
        assert 40 <= row["series_per_pod"] <= 200, row["series_per_pod"]
        assert row["series"] == round(row["series_per_pod"] * 100)
        # Stored series: the exporter's plus the records, alerts' and scrape bookkeeping.
        assert row["head_series"] > row["series"], (row["head_series"], row["series"])
        assert 0 < row["rss_mb"] < 4000
        assert set(row["rule_groups"]) == groups, backend
        for name, group in row["rule_groups"].items():
            assert 0 < group["seconds"] < group["interval"], (backend, name, group)
        assert set(row["dashboards"]) == {"overview", "fleet"}
        for name, dashboard in row["dashboards"].items():
            assert dashboard["errors"] == 0, (backend, name, [q for q in row["queries"] if q["error"]])
            assert dashboard["queries"] > 10
            assert 0 < dashboard["slowest"] <= dashboard["total"]
        # 100 pods, All selected: the per-server acceptance panels keep the worst and best few.
        crowded = [q for q in row["queries"] if q["panel"] in ("Acceptance rate by instance", "Acceptance by server")]
        assert crowded and all(0 < q["series"] <= cfg.panel_worst_k + cfg.panel_best_k for q in crowded[:1]), crowded
        fleet_panel = [q for q in crowded if q["dashboard"] == "fleet"]
        assert all(q["series"] == cfg.panel_worst_k + cfg.panel_best_k for q in fleet_panel), fleet_panel
