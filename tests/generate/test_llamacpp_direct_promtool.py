"""The sidecar-less bundle on llama.cpp: its `llamacpp:` counters feed the same records and pages.

The input is the real capture in tests/fixtures/llamacpp-b11434/ (llama-server b11434, n-gram
speculation; and the same server with speculation off). Its counters move when a request ends, so
the scenario replays each capture's first measured interval (scrape 0 → 1: greedy requests)
REPLAYS_PER_MINUTE times a minute, as a server under steady traffic of that kind (the capture ran
one request at a time: 36 drafts in all, too few for a confident verdict in any window), under
job "llama" (so vllm_selector is set to match it, as a user scraping llama-server would).

The values expected are computed from the capture here, not from the rules: acceptance =
Δaccepted / Δdraft tokens, acceptance length = 1 + Δaccepted / Δdrafts, per-position acceptance =
Δaccepted at the position / Δdrafts; the scenario divides the source layer's rate records, which
every record, alert and panel downstream reads (their ratios are the sidecar suites' subject).
All counters share their sample times and stay well above their first increase, so rate()'s
extrapolation scales them alike and these ratios are exact (to the last bit: compared after
round(…, 1e-9)). The direct overview's main panels, with every variable at All as Grafana sends
them, must show the llama.cpp server (its series have no `model_name`). The run renders the direct
bundle with that selector into a scratch folder and
runs promtool 3 and 2.42 on it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from support import paths
from support.prom import run_tool
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.dashboards import dashboard_files, overview
from vllm_spec_exporter.mixin.rules import alert_rules, positions, recording_rules, rule_files, sources
from vllm_spec_lab.grafana_query import expand_variables

pytestmark = pytest.mark.prometheus

FIXTURES = paths.FIXTURES / "llamacpp-b11434"
SAMPLE = re.compile(r"^(llamacpp:[a-z_]+)(\{[^}]*\})? (\S+)$")
JOB, SPEC, OFF = "llama", "127.0.0.1:8080", "127.0.0.1:8081"
SHOWN_PANELS = ("Acceptance rate", "Tokens per step vs k+1", "Efficiency", "Tokens/s", "Acceptance rate by model",
                "Acceptance rate by instance", "Acceptance by draft position", "Share of output from drafts by model")
MINUTES = 40
REPLAYS_PER_MINUTE = 10


def scrape(scenario: str, index: int) -> dict[tuple[str, str], float]:
    """{(name, labels): value} of one captured scrape."""
    samples = {}
    for line in (FIXTURES / scenario / f"scrape-{index:03d}.prom").read_text().splitlines():
        match = SAMPLE.match(line)
        if match:
            samples[(match[1], match[2] or "")] = float(match[3])
    return samples


def first_interval(scenario: str) -> dict[tuple[str, str], float]:
    """Each counter's increase from scrape 0 to scrape 1 (series absent at 0 count from 0)."""
    before, after = scrape(scenario, 0), scrape(scenario, 1)
    return {key: after[key] - before.get(key, 0.0) for key in after if key[0].endswith("_total")}


def per_minute(deltas: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    return {key: delta * REPLAYS_PER_MINUTE for key, delta in deltas.items()}


def input_series(instance: str, deltas: dict[tuple[str, str], float]) -> list[dict[str, str]]:
    series = []
    for (name, labels), delta in sorted(deltas.items()):
        inner = labels.strip("{}")
        matchers = ",".join(m for m in (f'job="{JOB}"', f'instance="{instance}"', inner) if m)
        # Starts at one interval's worth (a server that ran before), grows by it every minute.
        series.append({"series": f"{name}{{{matchers}}}", "values": f"{delta:g}+{delta:g}x{MINUTES}"})
    series.append({"series": f'up{{job="{JOB}",instance="{instance}"}}', "values": f"1x{MINUTES}"})
    return series


def rounded(value: float) -> float:
    """PromQL's round(value, 1e-9): ratios computed in another order differ in the last bit."""
    inverse = 1 / 1e-9  # as Prometheus computes it
    return math.floor(value * inverse + 0.5) / inverse


def test_the_capture_drafted_and_the_spec_off_one_did_not() -> None:
    spec, off = first_interval("ngram"), first_interval("spec_off")
    assert spec[("llamacpp:spec_decode_num_drafts_total", "")] > 0
    assert any(name.endswith("_per_pos_total") for name, _ in spec)
    assert off[("llamacpp:spec_decode_num_drafts_total", "")] == 0
    assert off[("llamacpp:tokens_predicted_total", "")] > 0
    assert not any(name.endswith("_per_pos_total") for name, _ in off)


def test_direct_bundle_pages_on_llamacpp(promtool: str, tmp_path: Path) -> None:
    cfg = MixinConfig().with_overrides({"source": "vllm", "vllm_selector": f'job="{JOB}"'})
    files = generate.render_all(cfg)
    for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(files[rel])
    spec, off = first_interval("ngram"), first_interval("spec_off")
    drafts = spec[("llamacpp:spec_decode_num_drafts_total", "")]
    draft_tokens = spec[("llamacpp:spec_decode_num_draft_tokens_total", "")]
    accepted = spec[("llamacpp:spec_decode_num_accepted_tokens_total", "")]
    acceptance = accepted / draft_tokens
    assert acceptance < cfg.acceptance_critical_threshold  # the capture's greedy phase: a collapse
    per_position = {re.search(r'position="(\d+)"', labels)[1]: value / drafts
                    for (name, labels), value in spec.items() if name.endswith("_per_pos_total")}
    at = f"{MINUTES - 5}m"
    target, on_spec = f'job="{JOB}", instance="{SPEC}"', f'instance="{SPEC}"'

    def rate(counter: sources.SourceCounter) -> str:
        # The source layer's record (every ratio downstream divides two of these).
        return f"{sources.rate_record(cfg, counter)}{{{target}}}"

    checks = [
        {"expr": f"round({rate(sources.ACCEPTED)} / {rate(sources.DRAFT_TOKENS)}, 1e-9)",
         "eval_time": at, "exp_samples": [{"labels": f"{{{target}}}", "value": rounded(acceptance)}]},
        {"expr": f"round(1 + {rate(sources.ACCEPTED)} / {rate(sources.DRAFTS)}, 1e-9)",
         "eval_time": at, "exp_samples": [{"labels": f"{{{target}}}", "value": rounded(1 + accepted / drafts)}]},
        # Per position no record: the runbook's query of the scraped counters.
        {"expr": f"round({recording_rules.position_acceptance(cfg, on_spec)}, 1e-9)",
         "eval_time": at,
         "exp_samples": [{"labels": f'{{{target}, position="{p}"}}', "value": rounded(v)}
                         for p, v in sorted(per_position.items())]},
        # k: the positions it serves; speculation off, llama.cpp serves its spec counters at 0 and
        # no per-position series, so it has no k (absent, never 0).
        {"expr": f'{positions.k_record(cfg)}{{instance="{SPEC}"}}', "eval_time": at,
         "exp_samples": [{"labels": f"{positions.k_record(cfg)}{{{target}}}", "value": len(per_position)}]},
        {"expr": f'{positions.k_record(cfg)}{{instance="{OFF}"}}', "eval_time": at, "exp_samples": []},
        {"expr": f'{sources.rate_record(cfg, sources.GENERATED)}{{instance="{OFF}"}}', "eval_time": at,
         "exp_samples": [{"labels": f'{sources.rate_record(cfg, sources.GENERATED)}{{job="{JOB}", instance="{OFF}"}}',
                          "value": per_minute(off)[("llamacpp:tokens_predicted_total", "")] / 60}]},
    ]
    # The direct overview shows it: its panels at All (llama.cpp's series have no model_name, so an
    # All of `.+` on that label would show "No traffic" on every panel).
    panels = {p["title"]: p for p in dashboard_files.iter_panels(overview.build(cfg))}
    for title in SHOWN_PANELS:
        expr = expand_variables(panels[title]["targets"][0]["expr"], "5m", {"instance": SPEC})
        checks.append({"expr": f"count({expr}) > bool 0", "eval_time": at,
                       "exp_samples": [{"labels": "{}", "value": 1}]})
    # Both acceptance alerts fire on the llama.cpp server (annotations are the sidecar scenarios'
    # concern). The one without speculation generates with its spec counters at 0: metrics missing,
    # as the sidecar reports it (schema `none`), not "drafts stopped" and not silence.
    def page(alert: str, severity: str, instance: str = SPEC, confidence: bool = True) -> dict:
        bound = f'confidence="{cfg.confidence_label}", ' if confidence else ""
        return {"labels": f'ALERTS{{alertname="{alert}", alertstate="firing", {bound}'
                          f'instance="{instance}", job="{JOB}", severity="{severity}"}}', "value": 1}
    checks.append({"expr": 'ALERTS{alertstate="firing"}', "eval_time": at, "exp_samples": [
        page(alert_rules.ACCEPTANCE_CRITICAL, cfg.critical_severity),
        page(alert_rules.ACCEPTANCE_LOW, cfg.warning_severity),
        page(alert_rules.METRICS_MISSING, cfg.warning_severity, OFF, confidence=False)]})
    scenario = {
        "rule_files": [rule_files.RULES_FILE, rule_files.ALERTS_FILE],
        "evaluation_interval": "1m",
        "group_eval_order": [g["name"] for g in (*recording_rules.recording_groups(cfg),
                                                 *alert_rules.alert_groups(cfg))],
        "tests": [{
            "name": "llama.cpp n-gram at the captured acceptance, and with speculation off",
            "interval": "1m",
            "input_series": input_series(SPEC, per_minute(spec)) + input_series(OFF, per_minute(off)),
            "promql_expr_test": checks,
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": alert_rules.ACCEPTANCE_CRITICAL},
                {"eval_time": "1m", "alertname": alert_rules.ACCEPTANCE_LOW},
                {"eval_time": at, "alertname": alert_rules.VLLM_ABSENT},
                {"eval_time": at, "alertname": alert_rules.VLLM_UNREACHABLE},
            ],
        }],
    }
    path = tmp_path / "llamacpp_test.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False, width=1_000_000))
    result = run_tool([promtool, "test", "rules", path.name], cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
