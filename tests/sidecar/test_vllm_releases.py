"""vLLM releases after the captured 0.32.0: the bundle reads 0.33.0 and 0.34.0 as it reads 0.32.0.

No CPU build of 0.33 or 0.34 is served here (docs/vllm-versions.md), so their fixtures are
RECONSTRUCTED: written by each release's own stat loggers and /metrics router from its PyPI wheel
(tests/fixtures/reconstruct_vllm.py; commit in each index.json). The oracle test
(tests/sidecar/test_fixtures_oracle.py) runs on them as on the real 0.32 captures. Here: what they write is
what the bundle reads from 0.32 (names, types, HELP, labels, order); a 0.34 server is detected
as schema v1 with its /version; its /metrics ignores the Accept header like 0.32's; Model Runner
V2's dynamic k (drafts of the scheduler's width, none counted at k = 0) derives as documented; and
the sidecar-less records compute from 0.34's series what the sidecar computes (promtool, both
versions). The real 0.26.0 captured on an NVIDIA H100 (tests/fixtures/vllm-0.26.0-gpu/) writes
the same families as the CPU 0.32.0.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from support.paths import FIXTURES
from support.prom import run_tool
from vllm_spec_exporter.collector import SpecDecodeCollector
from vllm_spec_exporter.derive import derive, figures
from vllm_spec_exporter.engines import VLLM_HISTOGRAMS, VLLM_NAMES, VLLM_PREFIXES
from vllm_spec_exporter.fetch import Fetcher
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import fleet_records, positions, recording_rules
from vllm_spec_exporter.names import MetricName, Schema, SeriesKey
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse
from vllm_spec_exporter.poller import Poller
from vllm_spec_exporter.window_store import WindowStore
from vllm_spec_lab.httpd import LoopbackServer

CAPTURED = FIXTURES / "vllm-0.32.0"
RECONSTRUCTED = {"0.33.0": FIXTURES / "reconstructed" / "vllm-0.33.0-4ba787e",
                 "0.34.0": FIXTURES / "reconstructed" / "vllm-0.34.0-62d4bc3"}
V034 = RECONSTRUCTED["0.34.0"]
GPU_026 = FIXTURES / "vllm-0.26.0-gpu"  # real, captured on an H100 by bench/gpu/run.py


def index(scenario_dir: Path) -> dict:
    return json.loads((scenario_dir / "index.json").read_text())


def body(scenario_dir: Path, file: str) -> str:
    return (scenario_dir / file).read_text()


def classic_scrapes(scenario_dir: Path) -> list[dict]:
    return [s for s in index(scenario_dir)["scrapes"] if s["accept"].startswith("text/plain")]


def read_families(text: str) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(name, type, HELP, label names) of every vLLM family the bundle reads, in exposition order."""
    read = {VLLM_PREFIXES[0] + name for name in (*VLLM_NAMES, *VLLM_HISTOGRAMS)}
    return [(f.name, f.type, f.documentation, tuple(sorted({label for s in f.samples for label in s.labels})))
            for f in text_string_to_metric_families(text) if f.name in read]


@pytest.mark.parametrize("release", list(RECONSTRUCTED))
@pytest.mark.parametrize("scenario", ["ngram", "spec_off"])
def test_every_family_the_bundle_reads_is_written_as_by_the_captured_032(release: str, scenario: str) -> None:
    captured = read_families(body(CAPTURED / scenario, "scrape-001.prom"))
    reconstructed = read_families(body(RECONSTRUCTED[release] / scenario, "scrape-001.prom"))
    assert len(captured) >= (9 if scenario == "ngram" else 5)
    assert reconstructed == captured


@pytest.mark.parametrize("scenario", ["ngram", "draft_model", "spec_off"])
def test_every_family_the_bundle_reads_is_written_by_the_gpu_026_as_by_the_captured_032(scenario: str) -> None:
    """The real 0.26.0 captured on an H100 writes what the CPU 0.32.0 writes: older release, other device."""
    captured = read_families(body(CAPTURED / scenario, "scrape-001.prom"))
    gpu = read_families(body(GPU_026 / scenario, "scrape-001.prom"))
    assert len(captured) >= (9 if scenario != "spec_off" else 5)
    assert gpu == captured


def test_the_034_metrics_handler_ignores_the_accept_header_like_032s() -> None:
    """An OpenMetrics Accept header gets the classic text with colon names, as on the real 0.32."""
    d = V034 / "ngram"
    scrapes = {s["file"]: s for s in index(d)["scrapes"]}
    negotiated = scrapes["scrape-openmetrics.prom"]
    assert negotiated["accept"].startswith("application/openmetrics-text")
    captured = {s["file"]: s for s in index(CAPTURED / "ngram")["scrapes"]}
    assert negotiated["content_type"] == captured["scrape-openmetrics.prom"]["content_type"] == (
        "text/plain; version=1.0.0; charset=utf-8")
    text = body(d, "scrape-openmetrics.prom")
    assert "# EOF" not in text and "vllm:spec_decode_num_drafts_total{" in text
    last_classic = classic_scrapes(d)[-1]["file"]
    assert normalise(parse(text)).counters == normalise(parse(body(d, last_classic))).counters


class ReleaseServer:
    """/metrics answers the fixture's scrapes in turn; /version as vLLM's `show_version` writes it."""

    def __init__(self, scenario_dir: Path, files: list[str], version: str) -> None:
        self.bodies = [body(scenario_dir, f).encode() for f in files]
        self.version = json.dumps({"version": version}).encode()

    def __call__(self, environ: dict, start_response) -> list[bytes]:
        if environ["PATH_INFO"] == "/version":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [self.version]
        if environ["PATH_INFO"] == "/metrics":
            start_response("200 OK", [("Content-Type", "text/plain; version=1.0.0; charset=utf-8")])
            return [self.bodies.pop(0) if len(self.bodies) > 1 else self.bodies[0]]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]


def test_a_034_server_is_read_as_v1_with_its_version_and_exact_deltas() -> None:
    d = V034 / "ngram"
    interval = next(i for i in index(d)["intervals"] if i["phase"] == "after-high-1")
    files = [interval["from_scrape"], interval["to_scrape"]]
    times = {s["file"]: s["monotonic_time"] for s in index(d)["scrapes"]}
    clock = [times[files[0]]]
    with LoopbackServer.wsgi(ReleaseServer(d, files, "0.34.0")) as server:
        poller = Poller(Fetcher(server.url, timeout=5, max_bytes=1 << 22), interval=1, window=3600,
                        min_draft_tokens=0, clock=lambda: clock[0])
        for file in files:
            clock[0] = times[file]
            poller.poll_once()
        registry = CollectorRegistry()
        registry.register(SpecDecodeCollector(poller))
        served: dict[str, list] = {}
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            for sample in family.samples:
                served.setdefault(sample.name, []).append((sample.labels, sample.value))
    assert served[MetricName.TARGET_INFO] == [({"engine_family": "vllm", "schema": "v1", "version": "0.34.0"}, 1.0)]
    deltas = {}
    for family in ("accepted_tokens", "draft_tokens", "drafts"):
        before, after = (sum(s.value for f in text_string_to_metric_families(body(d, file))
                             if f.name == f"vllm:spec_decode_num_{family}" for s in f.samples
                             if s.name.endswith("_total")) for file in files)
        deltas[family] = after - before
    assert deltas["draft_tokens"] > 0
    series = {"model_name": "tiny-llama", "engine": "0"}
    assert served[MetricName.ACCEPTANCE_RATIO] == [(series, deltas["accepted_tokens"] / deltas["draft_tokens"])]
    assert served[MetricName.MEAN_ACCEPTANCE_LENGTH] == [(series, 1 + deltas["accepted_tokens"] / deltas["drafts"])]
    assert len(served[MetricName.POSITION_ACCEPTANCE_RATIO]) == 4
    assert served[MetricName.SPEC_DECODE_ENABLED] == [({}, 1.0)]


def window(scenario_dir: Path, phase: str):
    """derive's output and figures over one interval of the fixture (parse -> normalise -> window)."""
    interval = next(i for i in index(scenario_dir)["intervals"] if i["phase"] == phase)
    times = {s["file"]: s["monotonic_time"] for s in index(scenario_dir)["scrapes"]}
    store = WindowStore(window_seconds=3600)
    out, snap = [], None
    for file in (interval["from_scrape"], interval["to_scrape"]):
        snap = normalise(parse(body(scenario_dir, file)))
        store.observe(times[file], snap)
        out = derive(store, snap, min_draft_tokens=0)
    assert snap is not None and snap.schema == Schema.V1
    series = SeriesKey("tiny-llama", "0")
    return {(name, labels): value for name, labels, value in out}, figures(store, snap, series), series


def test_034_dynamic_k_zero_counts_nothing_and_no_ratio_is_invented() -> None:
    """k = 0 (batch of 8): output flows, no draft is counted; acceptance is omitted, not 0."""
    got, fig, series = window(V034 / "dynamic_k", "after-batch-8")
    assert fig.drafts == 0 and fig.draft_tokens == 0 and fig.generation > 0
    assert (MetricName.ACCEPTANCE_RATIO, series) not in got
    assert (MetricName.MEAN_ACCEPTANCE_LENGTH, series) not in got
    assert got[(MetricName.GENERATION_TOKENS_PER_SECOND, series)] == fig.generation / fig.seconds


def test_034_dynamic_k_drafts_have_the_schedulers_width() -> None:
    """k = 2 while two requests run (k = 4 positions): the drafts are the scheduler's width, so the
    mean draft length shows the smaller k (the one draft of 4 is the last request, alone at the end)."""
    got, fig, series = window(V034 / "dynamic_k", "after-batch-2")
    assert fig.drafts and fig.k == 4
    assert got[(MetricName.MEAN_DRAFT_LENGTH, series)] == fig.draft_tokens / fig.drafts
    assert 2.0 <= fig.draft_tokens / fig.drafts < 2.1
    rates = {labels[2]: value for (name, labels), value in got.items() if name == MetricName.POSITION_ACCEPTANCE_RATIO}
    assert sorted(rates) == ["0", "1", "2", "3"]
    assert rates["2"] < 0.01 and rates["3"] < 0.01 and rates["1"] > 0.5


# ---- the sidecar-less records on 0.34's series (promtool) ------------------------------------------------
CFG = MixinConfig().with_overrides({"source": "vllm", "scrape_interval": "15s", "rate_window": "90s"})
SCENARIOS = ("ngram", "dynamic_k", "multi_engine")
COUNTER_OFFSET = 1e9  # a long-running server's counters: rate() never extrapolates to a zero point
GROUPS = (recording_rules.SOURCE_GROUP, positions.K_GROUP, fleet_records.FLEET_GROUP, recording_rules.RECORDING_GROUP)


def nearest(value: float, step: float = 1e-6) -> float:
    """PromQL's round(value, step), operation for operation (Prometheus multiplies by the inverse)."""
    inverse = 1.0 / step
    return math.floor(value * inverse + 0.5) / inverse


def promtool_case() -> tuple[list[dict], list[dict], int]:
    """Every 0.34 scenario's scrapes as Prometheus stores them when it scrapes vLLM (one a minute,
    counters offset), and what derive.py computes between each two, engines summed per server."""
    series: dict[str, list[str]] = {}
    tests: list[dict] = []
    checked = 0
    for scenario in SCENARIOS:
        d = V034 / scenario
        files = [s["file"] for s in classic_scrapes(d)]
        for i, file in enumerate(files):
            for family in text_string_to_metric_families(body(d, file)):
                if not family.name.startswith(("vllm:spec_decode_num_", "vllm:generation_tokens")):
                    continue
                for s in family.samples:
                    if s.name.endswith("_total"):
                        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                        key = f'{{__name__="{s.name}",{labels},instance="{scenario}",job="vllm"}}'
                        series.setdefault(key, ["_"] * len(files))[i] = repr(s.value + COUNTER_OFFSET)
        for i in range(1, len(files)):
            store = WindowStore(window_seconds=3600)
            snap = None
            for t, file in ((0.0, files[i - 1]), (60.0, files[i])):
                snap = normalise(parse(body(d, file)))
                store.observe(t, snap)
            assert snap is not None
            sums: dict[str, float] = {}
            for key in snap.series_keys():
                fig = figures(store, snap, key)
                assert fig is not None
                for name, value in (("A", fig.accepted), ("T", fig.draft_tokens), ("D", fig.drafts),
                                    *((f"P{p}", v) for p, v in fig.accepted_by_position.items())):
                    sums[name] = sums.get(name, 0.0) + (value or 0.0)
            at = f"{i}m"
            label = f'{{instance="{scenario}"}}'
            if sums["T"]:
                checked += 1
                expected = {"acceptance_ratio": sums["A"] / sums["T"], "acceptance_length": 1 + sums["A"] / sums["D"]}
                names = recording_rules.record_names(CFG)
                for field, value in expected.items():
                    record = f'{getattr(names, field)}{{instance="{scenario}"}}'
                    tests.append({"expr": f"round(sum by (instance) ({record}), 1e-6)", "eval_time": at,
                                  "exp_samples": [{"labels": label, "value": nearest(value)}]})
                position = recording_rules.position_acceptance(CFG, f'instance="{scenario}"')
                tests.append({"expr": f"round(sum by (instance, position) ({position}), 1e-6)", "eval_time": at,
                              "exp_samples": [{"labels": f'{{instance="{scenario}", position="{p}"}}',
                                               "value": nearest(sums[f"P{p}"] / sums["D"])} for p in range(4)]})
            else:  # no drafts: the records hold nothing, no invented 0
                tests.append({"expr": f'{recording_rules.record_names(CFG).acceptance_ratio}{{instance="{scenario}"}}',
                              "eval_time": at, "exp_samples": []})
    return [{"series": k, "values": " ".join(v)} for k, v in series.items()], tests, checked


def test_the_sidecar_less_records_compute_what_derive_computes_on_034(promtool: str, tmp_path: Path) -> None:
    groups = [g for g in recording_rules.recording_groups(CFG) if g["name"] in GROUPS]
    assert [g["name"] for g in groups] == list(GROUPS)
    series, tests, checked = promtool_case()
    assert checked >= 7  # windows with drafts, over the three scenarios
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, width=1_000_000))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "15s", "group_eval_order": list(GROUPS),
         "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]},
        sort_keys=False, width=1_000_000))
    result = run_tool([promtool, "test", "rules", "test.yaml"], cwd=tmp_path, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
