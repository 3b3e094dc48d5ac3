"""Every query of the generated dashboards, run against a real Prometheus and a real VictoriaMetrics.

The overview first (one exporter, below); the fleet dashboard at the end of the module, against
five exporters (see `fleet_stack`); both on Prometheus and on VictoriaMetrics + vmalert.

A real Prometheus (3.x from Debian testing; 2.42 when bootstrap fell back) scrapes the real
exporter (`vllm-spec-exporter serve`), which polls
the fake vLLM (a simulation: real prometheus_client exposition with vLLM 0.32's names, scripted
values); Prometheus also scrapes the fake vLLM directly as the `vllm` job for the latency panels,
three times: with the server's own Accept header (Prometheus 2.x asks for OpenMetrics and
prometheus_client escapes `vllm:` to `vllm_`; Prometheus 3 asks with `escaping=allow-utf-8` and
the colon stays), in the classic text format (names keep the colon), and in the shape
prometheus/client_python#1177 writes under underscore escaping (`vllm_` samples); and the whole
overview stack runs twice, with vLLM's names and with Ray Serve's `ray_vllm:` prefix, so every
panel is proven on all four spellings the exporter accepts. A third overview stack replaces
Prometheus with VictoriaMetrics single-node (scraping the same targets) and vmalert (evaluating
the generated recording rules and the test's alert, writing them back), with the timing flags the
docs give (`-rule.evalDelay=0s`, `-search.latencyOffset=0s`, `-search.disableCache`).
The dashboard's variables are substituted the way Grafana does (All = `.+`), every target is run
through the HTTP API, and the values are compared with what the scripted traffic must produce:
acceptance 0.6 with k = 4 gives exact per-position rates, tokens per step, efficiency and shares.
Then traffic stops ("No traffic" must be an empty result, never 0 or NaN) and vLLM goes away
(the health panels must show it).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from prometheus_client import generate_latest

from support.escaping import escape_sample_names
from support.fleet_scope import server_selectors
from support.prom import require_binary
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.dashboards import crowd, dashboard_files, fleet, overview, promql
from vllm_spec_exporter.mixin.rules import recording_rules, rule_files
from vllm_spec_lab.binaries import VICTORIA_METRICS_BIN, VMALERT_BIN
from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.fakes.vllm import FakeVllm, _per_position_counts
from vllm_spec_lab.grafana_query import expand_variables, multi_value, resolve_variables
from vllm_spec_lab.httpd import LoopbackServer
from vllm_spec_lab.monitoring import PROMETHEUS_BIN, Prometheus, PromQueryApi, http_get_json, wait_until
from vllm_spec_lab.ports import free_port
from vllm_spec_lab.victoria import VictoriaRuleStack

pytestmark = [pytest.mark.prometheus, pytest.mark.server]  # starts Prometheus-family servers

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


def serve_classic_text(fake: FakeVllm, escape_prefix: str | None = None):
    """The fake's registry in the classic text format whatever the Accept header: colon names, or
    with `escape_prefix` the #1177 shape (escaped sample names)."""
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")])
        body = generate_latest(fake.registry)
        return [escape_sample_names(body.decode(), escape_prefix).encode() if escape_prefix else body]

    return LoopbackServer.wsgi(app)


def targets_of(model: dict) -> Iterator[tuple[dict, dict]]:
    for panel in dashboard_files.iter_panels(model):
        for target in panel["targets"]:
            yield panel, target


def values(result: list[dict]) -> list[float]:
    return [float(sample["value"][1]) for sample in result]


def stack_config(rate_window: str) -> MixinConfig:
    """The generated bundle for this stack's 1 s scrapes: the dashboards read the source records,
    whose rate window is the rules' (the committed 2m would hide every change for two minutes),
    and at All the fleet records, evaluated every second too (by default at most every rate
    window here, which would leave them a window behind the counters the checks compare with)."""
    return MixinConfig().with_overrides({"scrape_interval": "1s", "evaluation_interval": "1s",
                                         "fleet_evaluation_interval": "1s", "rate_window": rate_window})


def direct_config(rate_window: str) -> MixinConfig:
    """The sidecar-less bundle for the same stack: its records read vLLM's own series (job "vllm")."""
    return stack_config(rate_window).with_overrides({"source": "vllm"})


def recording_rules_file(folder: Path, cfg: MixinConfig) -> Path:
    """The recording rules generated from `cfg` (source records, evidence) for the stack's Prometheus."""
    path = folder / ("direct_rules.yaml" if cfg.direct else "prometheus_rules.yaml")
    path.write_text(rule_files.render(cfg)[rule_files.RULES_FILE])
    return path


def always_firing_rules(folder: Path) -> Path:
    """One always-firing spec-decode alert, so the alert panels have something to show."""
    rules = folder / "always-firing.yaml"
    rules.write_text(
        "groups:\n- name: dashboard-test\n  rules:\n"
        f"  - alert: {ALWAYS_FIRING_ALERT}\n    expr: vector(1)\n    labels: {{severity: info}}\n"
    )
    return rules


@pytest.fixture(scope="module")
def model() -> dict:
    return overview.build(stack_config(RATE_INTERVAL))


# vLLM's own prefix and Ray Serve's: each served twice (below), so every panel is run on all four
# spellings the exporter accepts: vllm:, vllm_, ray_vllm:, ray_vllm_. Then vLLM's names once more
# on VictoriaMetrics + vmalert.
STACKS = (("prometheus", "vllm:"), ("prometheus", "ray_vllm:"), ("victoria-metrics", "vllm:"))


@contextmanager
def query_backend(backend: str, scrape: dict[str, list[str]], rules: list[Path]) -> Iterator[Any]:
    """A Prometheus with `rules`, or VictoriaMetrics with vmalert evaluating them; either way an
    object with the Prometheus query API (`query`, `url`) once every target has been scraped."""
    if backend == "prometheus":
        require_binary(PROMETHEUS_BIN)
        with Prometheus(scrape_targets=scrape, rule_files=rules) as prom:
            wait_until(prom.targets_up, timeout=20)
            yield prom
        return
    require_binary(VICTORIA_METRICS_BIN)
    require_binary(VMALERT_BIN)
    with VictoriaRuleStack(scrape, rules) as victoria:
        wait_until(victoria.targets_up, timeout=20)
        yield victoria


@pytest.fixture(scope="module", params=STACKS, ids=lambda stack: "-".join(stack).rstrip(":"))
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    folder = tmp_path_factory.mktemp("rules")
    rules = always_firing_rules(folder)
    recorded = recording_rules_file(folder, stack_config(RATE_INTERVAL))
    # The sidecar-less bundle's records too (both bundles load side by side: each reads its own job).
    direct = recording_rules_file(folder, direct_config(RATE_INTERVAL))
    backend, prefix = request.param
    fake = FakeVllm(models=MODELS, engines=ENGINES, k=K, latency_histograms=True, step_seconds=STEP_SECONDS,
                    prefix=prefix)
    fake_url = fake.start()
    classic = serve_classic_text(fake)
    classic_instance = classic.address
    escaped = serve_classic_text(fake, escape_prefix=prefix)
    escaped_instance = escaped.address
    exporter = ExporterProcess(fake_url, interval=float(EXPORTER_INTERVAL), timeout=float(EXPORTER_TIMEOUT),
                               window=30, min_draft_tokens=100).start()
    exporter_port = exporter.port
    try:
        fake.drive(DRAFTS_PER_SECOND, ACCEPTANCE)
        negotiated_instance = fake_url.split("//", 1)[1]
        scrape = {"vllm-spec-exporter": [f"127.0.0.1:{exporter_port}"],
                  "vllm": [negotiated_instance, classic_instance, escaped_instance]}
        # The generated recording rules too: the acceptance panel draws the alerts' confidence bounds.
        with query_backend(backend, scrape, [rules, recorded, direct]) as prom:
            wait_until(lambda: prom.query("vllm_spec_exporter_target_up == 1"), timeout=20)
            # A full rate window of polled samples, plus slack for the first scrape.
            time.sleep(RATE_INTERVAL_SECONDS + 4 + lag(prom))
            # The deepest records the overview reads: vmalert writes each layer an evaluation after
            # the one it reads, and VictoriaMetrics indexes a new series a few seconds after its
            # first sample, so on a fresh stack they appear ~20-40 s in (on Prometheus: at once).
            evidence = recording_rules.evidence_names(stack_config(RATE_INTERVAL).windows.fast_long)
            wait_until(lambda: all(prom.query(f'count({name}{{job="vllm-spec-exporter"}}) == {len(MODELS)}',
                                              at=query_time(prom))
                                   for name in (evidence.upper, evidence.lower)), timeout=90)
            yield {"prom": prom, "fake": fake, "exporter_instance": f"127.0.0.1:{exporter_port}", "prefix": prefix,
                   "vllm_instances": {"negotiated": negotiated_instance, "classic": classic_instance,
                                      "escaped": escaped_instance}}
    finally:
        exporter.stop()
        for server in (classic, escaped):
            server.stop()
        fake.stop()


# vmalert writes records back asynchronously (remote write, flushed every 2 s by default) and
# VictoriaMetrics makes them searchable at its own buffer flush (1-2 s more, buffer by buffer), so at
# "now" one record of an evaluation can already be visible while its partner of the same evaluation
# is not, and a ratio of the two would mix evaluations 1 s apart: with this stack's 10 s windows over
# 2 s polls, up to ±20 %. Queries to VictoriaMetrics read this far back, where every record of the
# last evaluation has landed. Measured under load 5 (three CPU burners), per-position acceptance
# read every 0.5 s for 120 s: 4 s back, 241 of 1,872 values off by over 3 % (worst 0.155, our CI
# saw 1.08); 11 s back, 0 of 1,840. (With 15 s evaluations and 2 m windows a real dashboard's newest
# point moves by far less.)
VICTORIA_SETTLE_SECONDS = 11
# A hang bound for a change to show on the backend (seconds when quiet; a CI run's loaded worker
# waited over 20 s): a wait returns as soon as it shows, so only a failure waits this long.
CHANGE_SHOWS_SECONDS = 60
# How long a sweep of every panel is repeated while it finds problems: a slow poll, scrape or
# evaluation passes within it; a wrong query stays wrong at every look.
SWEEP_RETRY_SECONDS = 30


def lag(prom: PromQueryApi) -> float:
    """How far in the past this backend's queries read (so also how much later a change shows)."""
    return VICTORIA_SETTLE_SECONDS if isinstance(prom, VictoriaRuleStack) else 0


def query_time(prom: PromQueryApi) -> float:
    return time.time() - lag(prom)


def run(prom: PromQueryApi, expr: str, overrides: dict[str, str] | None = None,
        rate_interval: str = RATE_INTERVAL) -> list[dict]:
    return prom.query(expand_variables(expr, rate_interval, overrides), at=query_time(prom))


def run_range(prom: PromQueryApi, expr: str, rate_interval: str = RATE_INTERVAL) -> list[dict]:
    now = query_time(prom)
    params = {"query": expand_variables(expr, rate_interval), "start": now - 6, "end": now, "step": 1}
    data = http_get_json(f"{prom.url}/api/v1/query_range?{urlencode(params)}")
    assert data["status"] == "success", data
    return list(data["data"]["result"])


# Expected values per (panel title, legend): (value, relative tolerance). Ratios come from counters
# that move together, so they are tight. Per-second rates depend on how fast the traffic driver
# actually ran (a busy machine slows it), so they are checked against vLLM's own counters scraped
# directly: the exporter's normalised counters must tell the same story.
RATE_TOLERANCE = 0.25
RAW = 'sum(rate({}spec_decode_num_{}_total{{job="vllm", instance="{}"}}[10s]))'
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


# The confidence bounds the alerts decide on must bracket the acceptance the traffic has.
BOUNDS: dict[tuple[str, str], int] = {
    ("Acceptance rate by instance", "{{instance}} {{model_name}} upper bound"): +1,
    ("Acceptance rate by instance", "{{instance}} {{model_name}} lower bound"): -1,
}


# Panels that need a baseline server (the same model without speculation), which this stack has not:
# they must be empty here; tests/stack/test_measured_real_vllm.py shows them with data.
NEEDS_BASELINE = {"Speed-up measured against the baseline"}


def close(actual: float, expected: float, tolerance: float) -> bool:
    return math.isclose(actual, expected, rel_tol=tolerance, abs_tol=1e-9 if tolerance == 0 else tolerance * 0.05)


def test_every_panel_query_returns_sane_data(stack: dict, model: dict) -> None:
    problems = sweep(stack, model)
    deadline = time.monotonic() + SWEEP_RETRY_SECONDS
    while problems and time.monotonic() < deadline:
        time.sleep(3)
        problems = sweep(stack, model)
    assert not problems, "\n".join(problems)


def sweep(stack: dict, model: dict) -> list[str]:
    prom: PromQueryApi = stack["prom"]
    problems: list[str] = []
    checked: set[tuple[str, str]] = set()
    for panel, target in targets_of(model):
        where = f"{panel['title']} / {target.get('legendFormat') or target['refId']}"
        result = run(prom, target["expr"])
        if panel["title"] in NEEDS_BASELINE:
            if result:  # no server here runs without speculation: nothing is measured, never 1
                problems.append(f"{where}: data without a baseline: {values(result)}")
            continue
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
        if key in BOUNDS:
            checked.add(key)
            side = BOUNDS[key]
            if not all(side * (v - ACCEPTANCE) >= -0.01 and abs(v - ACCEPTANCE) < 0.2 for v in numbers):
                problems.append(f"{where}: a {'upper' if side > 0 else 'lower'} bound of {ACCEPTANCE}, got {numbers}")
        if key in RATES_FROM_VLLM:
            checked.add(key)
            truth = values(prom.query(RAW.format(stack["prefix"], RATES_FROM_VLLM[key],
                                                 stack["vllm_instances"]["classic"]), at=query_time(prom)))
            if not (truth and truth[0] > 0 and close(sum(numbers), truth[0], RATE_TOLERANCE)):
                problems.append(f"{where}: {numbers} tok/s, vLLM's own counters say {truth}")
    missing = (set(EXPECTED) | set(RATES_FROM_VLLM) | set(BOUNDS)) - checked
    if missing:
        problems.append(f"expectations for targets the dashboard no longer has: {missing}")
    return problems


@pytest.mark.parametrize("draft_cost", [DRAFT_COST, 0.2])
def test_direct_speedup_matches_the_traffic(stack: dict, draft_cost: float) -> None:
    """The sidecar-less dashboards' "Speed-up (est.)", computed in PromQL from vLLM's own counters
    scraped directly, against the scripted traffic: (1 + accepted per draft) / (1 + cost x draft
    length), which at this static k is the advisor's estimate, for the default cost and another."""
    cfg = direct_config(RATE_INTERVAL).with_overrides({"draft_cost_ratio": draft_cost})
    want = (1 + sum(PER_POSITION)) / (1 + draft_cost * K)
    checked = 0
    for build in (overview.build, fleet.build):
        for panel in dashboard_files.iter_panels(build(cfg)):
            renames = {value: key for t in panel.get("transformations", []) if t["id"] == "organize"
                       for key, value in t["options"].get("renameByName", {}).items()}
            if panel["title"] == "Speed-up (est.)":
                exprs = [panel["targets"][0]["expr"]]
            elif "speed-up (est.)" in renames:  # the fleet tables' column
                exprs = [t["expr"] for t in panel["targets"] if f"Value #{t['refId']}" == renames["speed-up (est.)"]]
            else:
                continue
            for expr in exprs:
                def off(expr: str = expr) -> list[float] | None:
                    got = values(run(stack["prom"], expr))
                    return None if got and all(close(v, want, 0.03) for v in got) else got
                # A limit, not a single read: the estimate divides records of several rules, which
                # vmalert's evaluation can make searchable a moment apart (see the per-position test).
                wait_until(lambda off=off: off() is None, timeout=30 + lag(stack["prom"]),
                           what=f"{panel['title']!r} at {want:.3f}", failure=lambda off=off: f"read {off()}")
                checked += 1
    assert checked == 4  # the overview's and the fleet's stat, the fleet's two tables


def test_per_position_acceptance_matches_the_traffic(stack: dict, model: dict) -> None:
    panel = next(p for p in dashboard_files.iter_panels(model) if p["title"] == "Acceptance by draft position")

    def mismatches() -> list[tuple[str, list[float]]]:
        result = run(stack["prom"], panel["targets"][0]["expr"])
        by_position = {(s["metric"]["model_name"], int(s["metric"]["position"])): float(s["value"][1])
                       for s in result}
        got = {name: [by_position.get((name, position), math.nan) for position in range(K)] for name in MODELS}
        return [(name, values) for name, values in got.items()
                if not all(close(g, e, 0.03) for g, e in zip(values, PER_POSITION, strict=True))]

    # A limit, not a single read: on a busy machine vmalert's records of one evaluation may reach
    # VictoriaMetrics' search later than VICTORIA_SETTLE_SECONDS, so a ratio of two records can, for a
    # moment, divide one evaluation's accepted tokens by another's drafts (seen: every position × 0.81).
    wait_until(lambda: not mismatches(), timeout=30 + lag(stack["prom"]), what="per-position acceptance",
               failure=lambda: f"{mismatches()} (expected {PER_POSITION})")


def test_latency_quantiles_lie_in_the_observed_bucket(stack: dict, model: dict) -> None:
    """Every step is observed at 0.03 s, in vLLM's (0.025, 0.05] bucket: quantiles interpolate in it."""
    panel = next(p for p in dashboard_files.iter_panels(model) if p["title"] == "Inter-token latency")
    for target in panel["targets"]:
        if target["legendFormat"].startswith("p"):
            (value,) = values(run(stack["prom"], target["expr"]))
            assert 0.025 <= value <= 0.05, (target["legendFormat"], value)


def test_vllm_latency_queries_work_on_every_name_spelling(stack: dict, model: dict) -> None:
    prom: PromQueryApi = stack["prom"]
    instances = stack["vllm_instances"]
    # What actually landed in the TSDB: one spelling per endpoint (and per prefix, by the fixture).
    # The negotiated one depends on the server's Accept header and the client library: Prometheus
    # 2.x gets `vllm_` (OpenMetrics, underscore escaping); Prometheus 3 (allow-utf-8) keeps `vllm:`.
    colon, underscore = stack["prefix"], stack["prefix"].replace(":", "_")
    spelled = {"classic": colon, "escaped": underscore}
    def landed() -> list[str]:
        return [p for p in (colon, underscore)
                if prom.query(f'{{__name__="{p}inter_token_latency_seconds_count", '
                              f'instance="{instances["negotiated"]}"}}', at=query_time(prom))]
    # (a scrape that timed out on a loaded machine leaves the series stale for a moment)
    negotiated = wait_until(landed, timeout=CHANGE_SHOWS_SECONDS + lag(prom))
    assert len(negotiated) == 1, negotiated
    print(f"negotiated spelling: {negotiated[0]}")
    for endpoint, spelling in spelled.items():
        name = spelling + "inter_token_latency_seconds_count"
        assert wait_until(lambda name=name, endpoint=endpoint: prom.query(
            f'{{__name__="{name}", instance="{instances[endpoint]}"}}', at=query_time(prom)),
            timeout=CHANGE_SHOWS_SECONDS + lag(prom)), endpoint
    panel = next(p for p in dashboard_files.iter_panels(model) if p["title"] == "Inter-token latency")
    mean = next(t["expr"] for t in panel["targets"] if t["legendFormat"] == "mean")
    for endpoint, instance in instances.items():
        only_this = mean.replace('job="vllm"', f'job="vllm", instance="{instance}"')
        assert only_this != mean
        (value,) = values(run(prom, only_this))
        assert close(value, STEP_SECONDS, 0.01), endpoint


def test_tables_show_labels(stack: dict, model: dict) -> None:
    schema_panel = next(p for p in dashboard_files.iter_panels(model)
                        if p["title"] == "Detected schema and spec decoding")
    (info,) = run(stack["prom"], schema_panel["targets"][0]["expr"])
    assert info["metric"]["schema"] == "v1" and info["metric"]["engine_family"] == "vllm"
    assert info["metric"]["instance"] == stack["exporter_instance"]
    (enabled,) = run(stack["prom"], schema_panel["targets"][1]["expr"])
    assert float(enabled["value"][1]) == 1
    alerts_panel = next(p for p in dashboard_files.iter_panels(model) if p["title"] == "Firing spec-decode alerts")
    (alert,) = run(stack["prom"], alerts_panel["targets"][0]["expr"])
    assert alert["metric"]["alertname"] == ALWAYS_FIRING_ALERT


def test_variables_offer_the_scraped_values(stack: dict, model: dict) -> None:
    """Run each variable's label_values() the way Grafana does (/api/v1/label/<l>/values?match[]=)."""
    prom: PromQueryApi = stack["prom"]
    expected = {"job": ["vllm-spec-exporter"], "engine_family": ["vllm"], "instance": [stack["exporter_instance"]],
                "model_name": sorted(MODELS), "engine": sorted(ENGINES)}
    for variable in model["templating"]["list"]:
        if variable["type"] != "query" or variable["name"].startswith(crowd.CROWD_VARIABLE_PREFIX):
            continue
        inner = variable["query"][len("label_values("):-1]
        selector, label = inner.rsplit(", ", 1)
        params = urlencode({"match[]": expand_variables(selector, RATE_INTERVAL)})
        data = http_get_json(f"{prom.url}/api/v1/label/{label}/values?{params}")
        assert sorted(data["data"]) == expected[variable["name"]], variable["name"]


def test_ranking_variables_hold_the_one_server(stack: dict, model: dict) -> None:
    """Each crowded panel's hidden ranking, refreshed as Grafana does (query_result at the end of
    the last hour): one server is few, so every ranking holds it, regex-escaped for the panels;
    the measured speed-up's holds nothing, as no server here runs without speculation (a server
    that drafted within the rate window is never a baseline, not even between two scrapes)."""
    prom: PromQueryApi = stack["prom"]
    now = time.time()
    variables = resolve_variables(prom.url, model, now - 3600, now)
    assert variables.queries and not [q for q in variables.queries if q.error], variables.queries
    rankings = [name for name in variables.values if name.startswith(crowd.CROWD_VARIABLE_PREFIX)]
    without_baseline = crowd.CROWD_VARIABLE_PREFIX + "measured_speedup"
    assert without_baseline in rankings
    assert rankings and {q.name: q.options for q in variables.queries} == {
        name: () if name == without_baseline else (stack["exporter_instance"],) for name in rankings}
    assert {value for name, value in variables.values.items() if name != without_baseline} == {
        multi_value([stack["exporter_instance"]])}


def test_variable_selection_narrows_every_query(stack: dict, model: dict) -> None:
    prom: PromQueryApi = stack["prom"]
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
    tokens = next(p for p in dashboard_files.iter_panels(model) if p["title"] == "Tokens/s")
    (drafted_one,) = values(run(prom, tokens["targets"][2]["expr"], chosen))
    (drafted_all,) = values(run(prom, tokens["targets"][2]["expr"]))
    assert close(drafted_one, drafted_all / SERIES, RATE_TOLERANCE)


def test_idle_shows_no_traffic_then_lost_target_shows_in_health(stack: dict, model: dict) -> None:
    """Runs last (module order): stops the traffic, restarts vLLM, then stops it."""
    prom: PromQueryApi = stack["prom"]
    fake: FakeVllm = stack["fake"]
    panels = {p["title"]: p for p in dashboard_files.iter_panels(model)}
    fake.idle()
    time.sleep(RATE_INTERVAL_SECONDS + 3)
    idle_panels = ("Acceptance rate", "Efficiency", "k advice", "Acceptance by draft position", "Speed-up (est.)")

    def not_idle_yet() -> dict[str, object]:
        """What does not yet show an idle, healthy server: ratio panels empty ('No traffic'), zero
        tokens/s, no target down."""
        off: dict[str, object] = {title: result for title in idle_panels
                                  if (result := run(prom, panels[title]["targets"][0]["expr"]))}
        for title in ("Tokens/s", "Targets down"):
            if (shown := values(run(prom, panels[title]["targets"][0]["expr"]))) != [0.0]:
                off[title] = shown
        return off
    # A limit: on a busy machine the last scrape and evaluation of the traffic may land late (on
    # vmalert each record layer an evaluation and a remote-write flush after the one it reads), and
    # a poll that times out shows the target down for a scrape.
    wait_until(lambda: not not_idle_yet(), timeout=CHANGE_SHOWS_SECONDS + lag(prom),
               what="idle shown as 'No traffic', 0 tokens/s, no target down", failure=lambda: str(not_idle_yet()))
    annotations = {a["name"]: a["expr"] for a in model["annotations"]["list"]}
    assert run(prom, annotations["vLLM restarts"]) == []
    assert [s["metric"]["alertname"] for s in run(prom, annotations["Spec-decode alerts"])] == [ALWAYS_FIRING_ALERT]

    fake.restart()  # counters start again from 0: the restart marker and the resets panel see it
    wait_until(lambda: run(prom, annotations["vLLM restarts"]), timeout=CHANGE_SHOWS_SECONDS + lag(prom))
    resets = panels["Counter resets (vLLM restarts)"]["targets"][0]["expr"]
    assert sum(values(run(prom, resets))) >= 1

    fake.stop()  # vLLM disappears; the exporter keeps serving and reports it
    down = panels["Targets down"]["targets"][0]["expr"]
    wait_until(lambda: values(run(prom, down)) == [1.0], timeout=CHANGE_SHOWS_SECONDS + lag(prom))
    errors = panels["Scrape errors by reason"]["targets"][0]["expr"]
    wait_until(lambda: any(s["metric"]["reason"] == "connect" and float(s["value"][1]) > 0
                           for s in run(prom, errors)), timeout=CHANGE_SHOWS_SECONDS + lag(prom))


# --- The fleet dashboard: five exporters --------------------------------------------------------
#
# Three fake vLLMs speculate at different acceptance, k and traffic; one runs without speculation;
# one exporter points at a port where nothing listens. One driver thread advances every fake in the
# same tick, so each series' traffic is an exact multiple of the tick: acceptance, tokens per step
# and per-position rates are exact per series; sums across servers are exact up to the servers'
# different poll phases (each exporter polls on its own clock), hence the wider rate interval
# (30 s over 1 s polls) and FLEET_SUM_TOLERANCE for figures that add servers together.

FLEET_RATE_INTERVAL = "30s"
FLEET_RATE_INTERVAL_SECONDS = 30
FLEET_SUM_TOLERANCE = 0.05
FLEET_TICK_SECONDS = 0.1


@dataclass(frozen=True)
class Traffic:
    """Per driver tick, on one (model, engine) series of one server: drafts and acceptance."""

    model: str
    engine: str
    drafts: int
    acceptance: float


# server name -> (k, spec decoding on, traffic per tick). Acceptances are chosen so every count is
# an integer (no rounding), and so that the per-model fleet figure (sum-then-divide) is far from the
# mean of the servers' ratios: the low-acceptance servers carry more traffic.
FLEET: dict[str, tuple[int, bool, tuple[Traffic, ...]]] = {
    "healthy": (4, True, (Traffic("tiny-llama", "0", 1, 0.75), Traffic("tiny-llama", "1", 1, 0.75))),
    "warning": (2, True, (Traffic("tiny-llama", "0", 8, 0.25), Traffic("tiny-qwen", "0", 4, 0.875))),
    "critical": (4, True, (Traffic("tiny-qwen", "0", 6, 1 / 3),)),
    "spec-off": (4, False, (Traffic("tiny-llama", "0", 2, 0.0),)),
}
DOWN = "down"  # an exporter whose vLLM never answers


@dataclass
class Sums:
    drafts: float = 0
    draft_tokens: float = 0
    accepted: float = 0
    speedup_x_drafts: float = 0  # the advisor's speed-up of each series, weighted by its drafts

    def add(self, k: int, traffic: Traffic) -> None:
        per_position = _per_position_counts(traffic.drafts, traffic.acceptance, k)
        self.drafts += traffic.drafts
        self.draft_tokens += traffic.drafts * k
        self.accepted += sum(per_position)
        rates = [n / traffic.drafts for n in per_position]
        self.speedup_x_drafts += traffic.drafts * (1 + sum(rates)) / (1 + DRAFT_COST * k)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.draft_tokens

    @property
    def tokens_per_step(self) -> float:
        return 1 + self.accepted / self.drafts

    @property
    def speedup(self) -> float:
        return self.speedup_x_drafts / self.drafts


def fleet_sums(key) -> dict[tuple, Sums]:
    """Scripted per-tick sums grouped by `key(server, traffic)`, speculating servers only."""
    out: dict[tuple, Sums] = {}
    for server, (k, enabled, traffic) in FLEET.items():
        for item in traffic if enabled else ():
            out.setdefault(key(server, item), Sums()).add(k, item)
    return out


BY_ROW = fleet_sums(lambda server, t: (server, t.model))
BY_SERVER = fleet_sums(lambda server, t: (server,))
BY_MODEL = fleet_sums(lambda server, t: (t.model,))
WHOLE_FLEET = fleet_sums(lambda server, t: ())[()]
WARN = MixinConfig().acceptance_warning_threshold
CRIT = MixinConfig().acceptance_critical_threshold


def band(acceptance: float) -> int:
    return 0 if acceptance >= WARN else 1 if acceptance >= CRIT else 2


def test_fleet_script_discriminates() -> None:
    """The scripted fleet can tell right from wrong: one server per band, no ties in the table
    order, and per-model sums far from the mean of the servers' ratios."""
    assert sorted(band(s.acceptance) for s in BY_SERVER.values()) == [0, 1, 2]
    row_acceptances = [s.acceptance for s in BY_ROW.values()]
    assert len(set(row_acceptances)) == len(row_acceptances)
    for (model,), sums in BY_MODEL.items():
        ratios = [s.acceptance for (_, m), s in BY_ROW.items() if m == model]
        mean = sum(ratios) / len(ratios)
        assert abs(mean - sums.acceptance) > 3 * FLEET_SUM_TOLERANCE * sums.acceptance, model


def _drive_fleet(fakes: dict[str, FakeVllm], stop: threading.Event) -> None:
    while not stop.wait(FLEET_TICK_SECONDS):
        for server, (_, _, traffic) in FLEET.items():
            for item in traffic:
                fakes[server].step(item.drafts, item.acceptance, model=item.model, engine=item.engine)


@pytest.fixture(scope="module", params=("prometheus", "victoria-metrics"))
def fleet_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The five-exporter fleet on Prometheus, and on VictoriaMetrics with vmalert."""
    folder = tmp_path_factory.mktemp("fleet-rules")
    rules = always_firing_rules(folder)
    recorded = recording_rules_file(folder, stack_config(FLEET_RATE_INTERVAL))
    fakes: dict[str, FakeVllm] = {}
    exporters: list[ExporterProcess] = []
    stop = threading.Event()
    try:
        urls = {}
        for server, (k, enabled, traffic) in FLEET.items():
            fakes[server] = FakeVllm(models=sorted({t.model for t in traffic}),
                                     engines=sorted({t.engine for t in traffic}), k=k, spec_enabled=enabled,
                                     latency_histograms=True)
            urls[server] = fakes[server].start()
        urls[DOWN] = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        instances = {}
        for server, url in urls.items():
            exporter = ExporterProcess(url, interval=1, timeout=0.9, window=30, min_draft_tokens=100)
            exporters.append(exporter.start())
            instances[server] = f"127.0.0.1:{exporter.port}"
        threading.Thread(target=_drive_fleet, args=(fakes, stop), daemon=True).start()
        scrape = {"vllm-spec-exporter": list(instances.values()),
                  "vllm": [url.split("//", 1)[1] for server, url in urls.items() if server in fakes]}
        with query_backend(request.param, scrape, [rules, recorded]) as prom:
            wait_until(lambda: len(prom.query("vllm_spec_exporter_target_up == 1")) == len(fakes), timeout=20)
            time.sleep(FLEET_RATE_INTERVAL_SECONDS + 5 + lag(prom))
            yield {"prom": prom, "instances": instances,
                   "vllm_instances": {server: urls[server].split("//", 1)[1] for server in fakes}}
    finally:
        stop.set()
        for exporter in exporters:
            exporter.stop()
        for fake in fakes.values():
            fake.stop()


@pytest.fixture(scope="module")
def fleet_model() -> dict:
    return fleet.build(stack_config(FLEET_RATE_INTERVAL))


def fleet_run(stack: dict, expr: str, overrides: dict[str, str] | None = None) -> list[dict]:
    return run(stack["prom"], expr, overrides, rate_interval=FLEET_RATE_INTERVAL)


def fleet_panel(model: dict, title: str) -> dict:
    return next(p for p in dashboard_files.iter_panels(model) if p["title"] == title)


def by_header(panel: dict) -> dict[str, str]:
    """A merged table's column header -> its query."""
    renames = next(t for t in panel["transformations"] if t["id"] == "organize")["options"]["renameByName"]
    return {renames[f"Value #{t['refId']}"]: t["expr"] for t in panel["targets"]}


def server_of(stack: dict) -> dict[str, str]:
    return {instance: server for server, instance in stack["instances"].items()}


def fleet_sanity(stack: dict, model: dict) -> list[str]:
    """Every target of the fleet dashboard returns data, as an instant and (if it is one) a range
    query; values are finite and >= 0, ratios within [0, 1]."""
    problems = []
    for panel, target in targets_of(model):
        where = f"{panel['title']} / {target.get('legendFormat') or target['refId']}"
        result = fleet_run(stack, target["expr"])
        if not result:
            problems.append(f"{where}: no data\n  {target['expr']}")
            continue
        if target.get("range") and not run_range(stack["prom"], target["expr"], FLEET_RATE_INTERVAL):
            problems.append(f"{where}: no data as a range query")
        if "ALERTS" in target["expr"] or "label_replace" in target["expr"]:
            continue  # label tables, checked below
        numbers = values(result)
        if not all(math.isfinite(v) and v >= 0 for v in numbers):
            problems.append(f"{where}: values must be finite and >= 0, got {numbers}")
        if panel["fieldConfig"]["defaults"]["unit"] == "percentunit" and not all(0 <= v <= 1 for v in numbers):
            problems.append(f"{where}: ratio outside [0, 1]: {numbers}")
    return problems


def fleet_exact(stack: dict, model: dict) -> list[str]:
    """Each panel's values against the script: exact per series, FLEET_SUM_TOLERANCE across servers."""
    problems: list[str] = []
    servers = server_of(stack)

    def expect(where: str, got: float | None, want: float, tolerance: float) -> None:
        if got is None or not close(got, want, tolerance):
            problems.append(f"{where}: expected {want:.4f} (±{tolerance:.0%}), got {got}")

    def one(expr: str) -> float | None:
        result = values(fleet_run(stack, expr))
        return result[0] if len(result) == 1 else None

    # Top row.
    expect("Fleet acceptance rate", one(fleet_panel(model, "Fleet acceptance rate")["targets"][0]["expr"]),
           WHOLE_FLEET.acceptance, FLEET_SUM_TOLERANCE)
    expect("Speed-up (est.)", one(fleet_panel(model, "Speed-up (est.)")["targets"][0]["expr"]),
           WHOLE_FLEET.speedup, FLEET_SUM_TOLERANCE)
    per_band = [sum(band(s.acceptance) == index for s in BY_SERVER.values()) for index in range(3)]
    for title in ("Servers by acceptance", "Servers per acceptance band"):
        for index, target in enumerate(fleet_panel(model, title)["targets"]):
            expect(f"{title} / {target['legendFormat']}", one(target["expr"]), per_band[index], 0)
    expect("Spec decoding off", one(fleet_panel(model, "Spec decoding off")["targets"][0]["expr"]),
           sum(not enabled for _, enabled, _ in FLEET.values()), 0)
    expect("Targets down", one(fleet_panel(model, "Targets down")["targets"][0]["expr"]), 1, 0)
    expect("Firing alerts", one(fleet_panel(model, "Firing alerts")["targets"][0]["expr"]), 1, 0)

    # Servers, worst acceptance first: the order, then every cell.
    table = by_header(fleet_panel(model, "Servers, worst acceptance first"))
    ordered = [(servers[s["metric"]["instance"]], s["metric"]["model_name"])
               for s in fleet_run(stack, table["acceptance"])]
    worst_first = sorted(BY_ROW, key=lambda row: BY_ROW[row].acceptance)
    if ordered != worst_first:
        problems.append(f"server table order: expected {worst_first}, got {ordered}")
    draft_truth = {}
    for server, instance in stack["vllm_instances"].items():
        # Either spelling: Prometheus 2.x negotiates `vllm_`, Prometheus 3 keeps `vllm:`.
        for sample in fleet_run(stack, 'sum by (model_name) (rate({__name__=~"vllm[:_]spec_decode_num_draft_'
                                       f'tokens_total", job="vllm", instance="{instance}"}}[{FLEET_RATE_INTERVAL}]))'):
            draft_truth[(server, sample["metric"]["model_name"])] = float(sample["value"][1])
    k_of = {server: k for server, (k, _, _) in FLEET.items()}
    cells = {"acceptance": lambda row: (BY_ROW[row].acceptance, 0.03),
             "tokens per step": lambda row: (BY_ROW[row].tokens_per_step, 0.03),
             "k": lambda row: (k_of[row[0]], 0),
             "speed-up (est.)": lambda row: (BY_ROW[row].speedup, 0.03),
             # Rates follow the driver's real speed: vLLM's own counters, scraped directly, are the truth.
             "draft tokens/s": lambda row: (draft_truth.get(row, -1), RATE_TOLERANCE)}
    for header, want in cells.items():
        got = {(servers[s["metric"]["instance"]], s["metric"]["model_name"]): float(s["value"][1])
               for s in fleet_run(stack, table[header])}
        if set(got) != set(BY_ROW):
            problems.append(f"server table / {header}: rows {sorted(got)}, expected {sorted(BY_ROW)}")
        for row, value in got.items():
            expect(f"server table / {header} / {row}", value, *want(row))
    up = {servers[s["metric"]["instance"]]: float(s["value"][1]) for s in fleet_run(stack, table["vLLM up"])}
    if up != {**dict.fromkeys(FLEET, 1.0), DOWN: 0.0}:
        problems.append(f"server table / vLLM up: {up}")

    # Acceptance by server (sorted, worst first) and over time.
    bars = [(servers[s["metric"]["instance"]], float(s["value"][1]))
            for s in fleet_run(stack, fleet_panel(model, "Acceptance by server")["targets"][0]["expr"])]
    if [server for server, _ in bars] != sorted((s for (s,) in BY_SERVER), key=lambda s: BY_SERVER[(s,)].acceptance):
        problems.append(f"Acceptance by server: order {bars}")
    for server, value in bars:
        expect(f"Acceptance by server / {server}", value, BY_SERVER[(server,)].acceptance, 0.03)
    for sample in fleet_run(stack, fleet_panel(model, "Acceptance rate by instance")["targets"][0]["expr"]):
        server = servers[sample["metric"]["instance"]]
        expect(f"Acceptance rate by instance / {server}", float(sample["value"][1]),
               BY_SERVER[(server,)].acceptance, 0.03)

    # Fleet-wide per model: sum-then-divide across servers.
    models_table = by_header(fleet_panel(model, "Models across the fleet"))
    servers_per_model = {m: sum(1 for (_, mm) in BY_ROW if mm == m) for (m,) in BY_MODEL}
    model_cells = {"servers": lambda m: (servers_per_model[m], 0),
                   "acceptance": lambda m: (BY_MODEL[(m,)].acceptance, FLEET_SUM_TOLERANCE),
                   "tokens per step": lambda m: (BY_MODEL[(m,)].tokens_per_step, FLEET_SUM_TOLERANCE),
                   "speed-up (est.)": lambda m: (BY_MODEL[(m,)].speedup, FLEET_SUM_TOLERANCE),
                   "draft tokens/s": lambda m: (sum(v for (_, mm), v in draft_truth.items() if mm == m),
                                                RATE_TOLERANCE)}
    for header, want in model_cells.items():
        got = {s["metric"]["model_name"]: float(s["value"][1]) for s in fleet_run(stack, models_table[header])}
        if set(got) != {m for (m,) in BY_MODEL}:
            problems.append(f"models table / {header}: rows {sorted(got)}")
        for model_name, value in got.items():
            expect(f"models table / {header} / {model_name}", value, *want(model_name))
    for sample in fleet_run(stack, fleet_panel(model, "Acceptance rate by model")["targets"][0]["expr"]):
        model_name = sample["metric"]["model_name"]
        expect(f"Acceptance rate by model / {model_name}", float(sample["value"][1]),
               BY_MODEL[(model_name,)].acceptance, FLEET_SUM_TOLERANCE)

    # Time per output token by method: the spec-off server (tiny-llama) is that model's baseline
    # (`none`); every value a time per token, never 0.
    by_method = {(s["metric"]["model_name"], s["metric"]["method"]): float(s["value"][1]) for s in fleet_run(
        stack, fleet_panel(model, "Time per output token by model and method")["targets"][0]["expr"])}
    if ("tiny-llama", "none") not in by_method or not all(0 < v < math.inf for v in by_method.values()):
        problems.append(f"Time per output token by model and method: {by_method}")

    # Servers not speculating, and the firing alerts.
    rows = {(servers[s["metric"]["instance"]], s["metric"][promql.PROBLEM_LABEL])
            for s in fleet_run(stack, fleet_panel(model, "Servers not speculating")["targets"][0]["expr"])}
    if rows != {("spec-off", promql.PROBLEM_SPEC_OFF), (DOWN, promql.PROBLEM_VLLM_UNREADABLE)}:
        problems.append(f"Servers not speculating: {rows}")
    alerts = fleet_run(stack, fleet_panel(model, "Firing spec-decode alerts")["targets"][0]["expr"])
    if [a["metric"]["alertname"] for a in alerts] != [ALWAYS_FIRING_ALERT]:
        problems.append(f"Firing spec-decode alerts: {alerts}")
    return problems


def test_fleet_every_panel_query_returns_sane_data(fleet_stack: dict, fleet_model: dict) -> None:
    problems = fleet_sanity(fleet_stack, fleet_model)
    if problems:  # one more look a poll later: a single slow poll on a loaded machine is not a bug
        time.sleep(3)
        problems = fleet_sanity(fleet_stack, fleet_model)
    assert not problems, "\n".join(problems)


def test_fleet_per_server_sides_match_nothing_at_all(fleet_stack: dict, fleet_model: dict) -> None:
    """At All the panels of both dashboards read fleet records only: their per-server sides must
    select no series on the backend itself (VictoriaMetrics 1.145 treats a literal `!~".*"` like
    `!~".+"`, which every series lacking the label matches: each band branch was computed over the
    whole fleet, and matched)."""
    models = (fleet_model, overview.build(stack_config(FLEET_RATE_INTERVAL)))
    sides = dict(found for model in models for panel in dashboard_files.iter_panels(model)
                 for target in panel["targets"] for found in server_selectors(target["expr"]))
    assert set(sides.values()) == {"instance", "model_name", "engine"}, sides
    selected = {side: found for side in sorted(sides) if (found := fleet_run(fleet_stack, f"count({side})"))}
    assert not selected, selected


def test_fleet_values_match_the_scripted_fleet(fleet_stack: dict, fleet_model: dict) -> None:
    problems = fleet_exact(fleet_stack, fleet_model)
    if problems:
        time.sleep(3)
        problems = fleet_exact(fleet_stack, fleet_model)
    assert not problems, "\n".join(problems)


def test_fleet_every_target_is_checked_exactly(fleet_model: dict) -> None:
    """fleet_exact() reads every panel of the fleet dashboard (so none escapes a value check)."""
    import inspect

    source = inspect.getsource(fleet_exact)
    for panel in dashboard_files.iter_panels(fleet_model):
        assert f'"{panel["title"]}"' in source, panel["title"]
    for title in ("Servers, worst acceptance first", "Models across the fleet"):
        for header in by_header(fleet_panel(fleet_model, title)):
            assert f'"{header}"' in source, (title, header)


def test_fleet_variables_and_selection(fleet_stack: dict, fleet_model: dict) -> None:
    """The instance variable offers every exporter; picking one server narrows the table to it."""
    prom: Prometheus = fleet_stack["prom"]
    variable = next(v for v in fleet_model["templating"]["list"] if v["name"] == "instance")
    selector, label = variable["query"][len("label_values("):-1].rsplit(", ", 1)
    params = urlencode({"match[]": expand_variables(selector, FLEET_RATE_INTERVAL)})
    offered = http_get_json(f"{prom.url}/api/v1/label/{label}/values?{params}")["data"]
    assert sorted(offered) == sorted(fleet_stack["instances"].values())
    warning = fleet_stack["instances"]["warning"].replace(".", "\\\\.")
    table = by_header(fleet_panel(fleet_model, "Servers, worst acceptance first"))
    rows = fleet_run(fleet_stack, table["acceptance"], {"instance": warning})
    assert sorted(s["metric"]["model_name"] for s in rows) == ["tiny-llama", "tiny-qwen"]
    assert {s["metric"]["instance"] for s in rows} == {fleet_stack["instances"]["warning"]}
