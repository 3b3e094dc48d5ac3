"""Every query of the generated dashboard, run against a real Prometheus.

A real Prometheus (Debian 2.42) scrapes the real exporter (`vllm-spec-exporter serve`), which polls
the fake vLLM (a simulation: real prometheus_client exposition with vLLM 0.32's names, scripted
values); Prometheus also scrapes the fake vLLM directly as the `vllm` job for the latency panels,
twice: as Prometheus 2.x does (OpenMetrics, so prometheus_client escapes `vllm:` to `vllm_`) and
in the classic text format (names keep the colon, as Prometheus 3 stores them), so the
dashboard's vLLM queries are proven on both spellings.
The dashboard's variables are substituted the way Grafana does (All = `.+`), every target is run
through the HTTP API, and the values are compared with what the scripted traffic must produce:
acceptance 0.6 with k = 4 gives exact per-position rates, tokens per step, efficiency and shares.
Then traffic stops ("No traffic" must be an empty result, never 0 or NaN) and vLLM goes away
(the health panels must show it).
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from prometheus_client import generate_latest

from support.fakevllm import FakeVllm
from support.prom import PROMETHEUS_BIN, Prometheus, free_port, http_get_json, require_binary, wait_until
from vllm_spec_exporter.mixin import dashboards
from vllm_spec_exporter.mixin.config import MixinConfig

pytestmark = pytest.mark.prometheus

# Grafana sets $__rate_interval = max(4 × scrape interval, step + scrape interval). The exporter
# polls every 2 s here (a generous timeout keeps polls succeeding on a busy 2-core machine), so a
# 10 s window holds several polls, as 4 × a matching scrape interval would in production.
RATE_INTERVAL = "10s"
RATE_INTERVAL_SECONDS = 10
EXPORTER_INTERVAL = "2"
EXPORTER_TIMEOUT = "1.9"
MODELS = ("tiny-llama", "tiny-qwen")
ENGINES = ("0", "1")
K = 4
DRAFTS_PER_SECOND = 50  # per (model, engine) series; 5 per 0.1 s tick
ACCEPTANCE = 0.6  # 5 drafts x 4 tokens x 0.6 = 12 accepted per tick: no rounding

# What that traffic means (see FakeVllm.step: prefix acceptance fills position 0 first).
ACCEPTED_PER_DRAFT = ACCEPTANCE * K  # 2.4
PER_POSITION = (1.0, 1.0, 0.4, 0.0)
TOKENS_PER_STEP = 1 + ACCEPTED_PER_DRAFT  # 3.4
EFFICIENCY = TOKENS_PER_STEP / (K + 1)  # 0.68
DRAFT_SHARE = ACCEPTED_PER_DRAFT / TOKENS_PER_STEP  # generated = drafts + accepted
SERIES = len(MODELS) * len(ENGINES)
# The exporter's k advisor with its default --draft-cost-ratio: speed-up(k') =
# (1 + sum of the first k' position rates) / (1 + cost * k'), recommended k = argmax.
DRAFT_COST = 0.05


def advisor_speedup(k: int) -> float:
    return (1 + sum(PER_POSITION[:k])) / (1 + DRAFT_COST * k)


RECOMMENDED_K = max(range(K + 1), key=lambda k: (round(advisor_speedup(k), 9), -k))
STEP_SECONDS = 0.03
ALWAYS_FIRING_ALERT = "SpecDecodeDashboardTestAlwaysFiring"


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def serve_classic_text(fake: FakeVllm):
    """The fake's registry in the classic text format whatever the Accept header: colon names."""
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")])
        return [generate_latest(fake.registry)]

    server = make_server("127.0.0.1", 0, app, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def targets_of(model: dict) -> Iterator[tuple[dict, dict]]:
    for panel in dashboards.iter_panels(model):
        for target in panel["targets"]:
            yield panel, target


def values(result: list[dict]) -> list[float]:
    return [float(sample["value"][1]) for sample in result]


@pytest.fixture(scope="module")
def model() -> dict:
    return dashboards.build_main_dashboard(MixinConfig())


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    require_binary(PROMETHEUS_BIN)
    rules = tmp_path_factory.mktemp("rules") / "always-firing.yaml"
    # One always-firing spec-decode alert, so the alert panels have something to show.
    rules.write_text(
        "groups:\n- name: dashboard-test\n  rules:\n"
        f"  - alert: {ALWAYS_FIRING_ALERT}\n    expr: vector(1)\n    labels: {{severity: info}}\n"
    )
    fake = FakeVllm(models=MODELS, engines=ENGINES, k=K, latency_histograms=True, step_seconds=STEP_SECONDS)
    fake_url = fake.start()
    classic = serve_classic_text(fake)
    classic_instance = f"127.0.0.1:{classic.server_port}"
    exporter_port = free_port()
    exporter_bin = Path(sys.executable).with_name("vllm-spec-exporter")
    exporter = subprocess.Popen(
        [str(exporter_bin), "serve", "--target", fake_url, "--listen", f"127.0.0.1:{exporter_port}",
         "--interval", EXPORTER_INTERVAL, "--timeout", EXPORTER_TIMEOUT, "--window", "30"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        fake.drive(DRAFTS_PER_SECOND, ACCEPTANCE)
        negotiated_instance = fake_url.split("//", 1)[1]
        scrape = {"vllm-spec-exporter": [f"127.0.0.1:{exporter_port}"], "vllm": [negotiated_instance, classic_instance]}
        with Prometheus(scrape_targets=scrape, rule_files=[rules]) as prom:
            wait_until(prom.targets_up, timeout=20)
            wait_until(lambda: prom.query("vllm_spec_exporter_target_up == 1"), timeout=20)
            # A full rate window of polled samples, plus slack for the first scrape.
            time.sleep(RATE_INTERVAL_SECONDS + 4)
            yield {"prom": prom, "fake": fake, "exporter_instance": f"127.0.0.1:{exporter_port}",
                   "vllm_instances": {"negotiated": negotiated_instance, "classic": classic_instance}}
    finally:
        exporter.terminate()
        try:
            exporter.wait(timeout=10)
        except subprocess.TimeoutExpired:
            exporter.kill()
            exporter.wait(timeout=10)
        classic.shutdown()
        classic.server_close()
        fake.stop()


def run(prom: Prometheus, expr: str, overrides: dict[str, str] | None = None) -> list[dict]:
    return prom.query(dashboards.expand_variables(expr, RATE_INTERVAL, overrides))


def run_range(prom: Prometheus, expr: str) -> list[dict]:
    now = time.time()
    params = {"query": dashboards.expand_variables(expr, RATE_INTERVAL), "start": now - 6, "end": now, "step": 1}
    data = http_get_json(f"{prom.url}/api/v1/query_range?{urlencode(params)}")
    assert data["status"] == "success", data
    return list(data["data"]["result"])


# Expected values per (panel title, legend): (value, relative tolerance). Ratios come from counters
# that move together, so they are tight. Per-second rates depend on how fast the traffic driver
# actually ran (a busy machine slows it), so they are checked against vLLM's own counters scraped
# directly: the exporter's normalised counters must tell the same story.
RATE_TOLERANCE = 0.25
RAW = 'sum(rate(vllm_spec_decode_num_{}_total{{job="vllm", instance="{}"}}[10s]))'
RATES_FROM_VLLM: dict[tuple[str, str], str] = {
    ("Tokens/s", "accepted"): "accepted_tokens",
    ("Tokens/s", "drafted"): "draft_tokens",
    ("Draft tokens: proposed, accepted, rejected", "proposed"): "draft_tokens",
    ("Draft tokens: proposed, accepted, rejected", "accepted"): "accepted_tokens",
}
EXPECTED: dict[tuple[str, str], tuple[float, float]] = {
    ("Acceptance rate", "acceptance"): (ACCEPTANCE, 0.03),
    ("Tokens per step vs k+1", "tokens/step"): (TOKENS_PER_STEP, 0.03),
    ("Tokens per step vs k+1", "k+1"): (K + 1, 0),
    ("Efficiency", "efficiency"): (EFFICIENCY, 0.03),
    ("Speed-up (est.)", "speed-up"): (advisor_speedup(K), 0.03),
    ("Advisor: recommended k", "{{model_name}} k*"): (RECOMMENDED_K, 0),
    ("Advisor: recommended k", "{{model_name}} speed-up at k*"): (advisor_speedup(RECOMMENDED_K), 0.03),
    ("Targets down", "down"): (0, 0),
    ("Firing alerts", "firing"): (1, 0),
    ("Acceptance rate by model", "{{model_name}}"): (ACCEPTANCE, 0.03),
    ("Acceptance rate by instance", "{{instance}}"): (ACCEPTANCE, 0.03),
    ("Acceptance rate by engine", "{{instance}} engine {{engine}}"): (ACCEPTANCE, 0.03),
    ("Tokens per step vs k+1 by model", "{{model_name}} tokens/step"): (TOKENS_PER_STEP, 0.03),
    ("Tokens per step vs k+1 by model", "{{model_name}} k+1"): (K + 1, 0),
    ("Efficiency by model", "{{model_name}} of k+1"): (EFFICIENCY, 0.03),
    ("Efficiency by model", "{{model_name}} of drafted"): ((1 + ACCEPTED_PER_DRAFT) / (1 + K), 0.03),
    ("Draft length vs k by model", "{{model_name}} draft length"): (K, 0.01),
    ("Draft length vs k by model", "{{model_name}} k"): (K, 0),
    ("Positions that pay vs k", "{{model_name}} paying"): (sum(p >= 0.5 for p in PER_POSITION), 0),
    ("Positions that pay vs k", "{{model_name}} k"): (K, 0),
    ("k advice", "{{model_name}}"): (PER_POSITION[-1], 0),
    ("Share of output from drafts by model", "{{model_name}}"): (DRAFT_SHARE, 0.03),
    ("Requests running and waiting", "{{instance}} running"): (SERIES, 0),
    ("Requests running and waiting", "{{instance}} waiting"): (0, 0),
    ("Inter-token latency", "mean"): (STEP_SECONDS, 0.01),
    ("Time per output token vs tokens per step", "mean"): (STEP_SECONDS / TOKENS_PER_STEP, 0.03),
    ("Time per output token vs tokens per step", "tokens per step"): (TOKENS_PER_STEP, 0.03),
    ("Target and exporter up", "{{instance}} vLLM readable"): (1, 0),
    ("Target and exporter up", "{{instance}} exporter scraped"): (1, 0),
    ("Counter resets (vLLM restarts)", "{{instance}}"): (0, 0),
}


def close(actual: float, expected: float, tolerance: float) -> bool:
    return math.isclose(actual, expected, rel_tol=tolerance, abs_tol=1e-9 if tolerance == 0 else tolerance * 0.05)


def test_every_panel_query_returns_sane_data(stack: dict, model: dict) -> None:
    problems = sweep(stack, model)
    if problems:  # one more look a poll later: a single slow poll on a loaded machine is not a bug
        time.sleep(3)
        problems = sweep(stack, model)
    assert not problems, "\n".join(problems)


def sweep(stack: dict, model: dict) -> list[str]:
    prom: Prometheus = stack["prom"]
    problems: list[str] = []
    checked: set[tuple[str, str]] = set()
    for panel, target in targets_of(model):
        where = f"{panel['title']} / {target.get('legendFormat') or target['refId']}"
        result = run(prom, target["expr"])
        if not result:
            problems.append(f"{where}: no data\n  {target['expr']}")
            continue
        if target.get("range") and not run_range(prom, target["expr"]):
            problems.append(f"{where}: no data as a range query")
        if target.get("format") == "table":
            continue  # label tables; checked in test_tables_show_labels
        numbers = values(result)
        if not all(math.isfinite(v) and v >= 0 for v in numbers):
            problems.append(f"{where}: values must be finite and >= 0, got {numbers}")
        if panel["fieldConfig"]["defaults"]["unit"] == "percentunit" and not all(0 <= v <= 1 for v in numbers):
            problems.append(f"{where}: ratio outside [0, 1]: {numbers}")
        key = (panel["title"], target.get("legendFormat", ""))
        if key in EXPECTED:
            checked.add(key)
            expected, tolerance = EXPECTED[key]
            if not all(close(v, expected, tolerance) for v in numbers):
                problems.append(f"{where}: expected {expected} (±{tolerance:.0%}), got {numbers}")
        if key in RATES_FROM_VLLM:
            checked.add(key)
            truth = values(prom.query(RAW.format(RATES_FROM_VLLM[key], stack["vllm_instances"]["negotiated"])))
            if not (truth and truth[0] > 0 and close(sum(numbers), truth[0], RATE_TOLERANCE)):
                problems.append(f"{where}: {numbers} tok/s, vLLM's own counters say {truth}")
    missing = (set(EXPECTED) | set(RATES_FROM_VLLM)) - checked
    if missing:
        problems.append(f"expectations for targets the dashboard no longer has: {missing}")
    return problems


def test_per_position_acceptance_matches_the_traffic(stack: dict, model: dict) -> None:
    panel = next(p for p in dashboards.iter_panels(model) if p["title"] == "Acceptance by draft position")
    result = run(stack["prom"], panel["targets"][0]["expr"])
    by_position: dict[tuple[str, int], float] = {
        (s["metric"]["model_name"], int(s["metric"]["position"])): float(s["value"][1]) for s in result
    }
    for model_name in MODELS:
        got = [by_position[(model_name, position)] for position in range(K)]
        assert all(close(g, e, 0.03) for g, e in zip(got, PER_POSITION, strict=True)), (model_name, got)


def test_latency_quantiles_lie_in_the_observed_bucket(stack: dict, model: dict) -> None:
    """Every step is observed at 0.03 s, in vLLM's (0.025, 0.05] bucket: quantiles interpolate in it."""
    panel = next(p for p in dashboards.iter_panels(model) if p["title"] == "Inter-token latency")
    for target in panel["targets"]:
        if target["legendFormat"].startswith("p"):
            (value,) = values(run(stack["prom"], target["expr"]))
            assert 0.025 <= value <= 0.05, (target["legendFormat"], value)


def test_vllm_latency_queries_work_on_both_name_spellings(stack: dict, model: dict) -> None:
    prom: Prometheus = stack["prom"]
    instances = stack["vllm_instances"]
    # What actually landed in the TSDB: one spelling per endpoint.
    spelled = {
        "negotiated": "vllm_inter_token_latency_seconds_count",
        "classic": "vllm:inter_token_latency_seconds_count",
    }
    for endpoint, name in spelled.items():
        assert prom.query(f'{{__name__="{name}", instance="{instances[endpoint]}"}}'), endpoint
    panel = next(p for p in dashboards.iter_panels(model) if p["title"] == "Inter-token latency")
    mean = next(t["expr"] for t in panel["targets"] if t["legendFormat"] == "mean")
    for endpoint, instance in instances.items():
        only_this = mean.replace('job="vllm"', f'job="vllm", instance="{instance}"')
        assert only_this != mean
        (value,) = values(run(prom, only_this))
        assert close(value, STEP_SECONDS, 0.01), endpoint


def test_tables_show_labels(stack: dict, model: dict) -> None:
    schema_panel = next(p for p in dashboards.iter_panels(model) if p["title"] == "Detected schema and spec decoding")
    (info,) = run(stack["prom"], schema_panel["targets"][0]["expr"])
    assert info["metric"]["schema"] == "v1"
    assert info["metric"]["instance"] == stack["exporter_instance"]
    (enabled,) = run(stack["prom"], schema_panel["targets"][1]["expr"])
    assert float(enabled["value"][1]) == 1
    alerts_panel = next(p for p in dashboards.iter_panels(model) if p["title"] == "Firing spec-decode alerts")
    (alert,) = run(stack["prom"], alerts_panel["targets"][0]["expr"])
    assert alert["metric"]["alertname"] == ALWAYS_FIRING_ALERT


def test_variables_offer_the_scraped_values(stack: dict, model: dict) -> None:
    """Run each variable's label_values() the way Grafana does (/api/v1/label/<l>/values?match[]=)."""
    prom: Prometheus = stack["prom"]
    expected = {"job": ["vllm-spec-exporter"], "instance": [stack["exporter_instance"]],
                "model_name": sorted(MODELS), "engine": sorted(ENGINES)}
    for variable in model["templating"]["list"]:
        if variable["type"] != "query":
            continue
        inner = variable["query"][len("label_values("):-1]
        selector, label = inner.rsplit(", ", 1)
        params = urlencode({"match[]": dashboards.expand_variables(selector, RATE_INTERVAL)})
        data = http_get_json(f"{prom.url}/api/v1/label/{label}/values?{params}")
        assert sorted(data["data"]) == expected[variable["name"]], variable["name"]


def test_variable_selection_narrows_every_query(stack: dict, model: dict) -> None:
    prom: Prometheus = stack["prom"]
    chosen = {"model_name": "tiny-qwen", "engine": "1"}
    seen_model_label = False
    for panel, target in targets_of(model):
        if "ALERTS" in target["expr"]:
            continue  # fleet-wide on purpose
        for sample in run(prom, target["expr"], chosen):
            for label, value in chosen.items():
                if label in sample["metric"]:
                    seen_model_label = True
                    assert sample["metric"][label] == value, (panel["title"], sample["metric"])
    assert seen_model_label
    # And the selection changes the numbers: one series of four, carrying a quarter of the traffic.
    tokens = next(p for p in dashboards.iter_panels(model) if p["title"] == "Tokens/s")
    (drafted_one,) = values(run(prom, tokens["targets"][2]["expr"], chosen))
    (drafted_all,) = values(run(prom, tokens["targets"][2]["expr"]))
    assert close(drafted_one, drafted_all / SERIES, RATE_TOLERANCE)


def test_idle_shows_no_traffic_then_lost_target_shows_in_health(stack: dict, model: dict) -> None:
    """Runs last (module order): stops the traffic, restarts vLLM, then stops it."""
    prom: Prometheus = stack["prom"]
    fake: FakeVllm = stack["fake"]
    panels = {p["title"]: p for p in dashboards.iter_panels(model)}
    fake.idle()
    time.sleep(RATE_INTERVAL_SECONDS + 3)
    for title in ("Acceptance rate", "Efficiency", "k advice", "Acceptance by draft position", "Speed-up (est.)"):
        result = run(prom, panels[title]["targets"][0]["expr"])
        assert result == [], f"{title} must be empty when idle (shown as 'No traffic'), got {result}"
    assert values(run(prom, panels["Tokens/s"]["targets"][0]["expr"])) == [0.0]
    assert values(run(prom, panels["Targets down"]["targets"][0]["expr"])) == [0.0]
    annotations = {a["name"]: a["expr"] for a in model["annotations"]["list"]}
    assert run(prom, annotations["vLLM restarts"]) == []
    assert [s["metric"]["alertname"] for s in run(prom, annotations["Spec-decode alerts"])] == [ALWAYS_FIRING_ALERT]

    fake.restart()  # counters start again from 0: the restart marker and the resets panel see it
    wait_until(lambda: run(prom, annotations["vLLM restarts"]), timeout=15)
    resets = panels["Counter resets (vLLM restarts)"]["targets"][0]["expr"]
    assert sum(values(run(prom, resets))) >= 1

    fake.stop()  # vLLM disappears; the exporter keeps serving and reports it
    down = panels["Targets down"]["targets"][0]["expr"]
    wait_until(lambda: values(run(prom, down)) == [1.0], timeout=15)
    errors = panels["Scrape errors by reason"]["targets"][0]["expr"]
    wait_until(lambda: any(s["metric"]["reason"] == "connect" and float(s["value"][1]) > 0
                           for s in run(prom, errors)), timeout=15)
