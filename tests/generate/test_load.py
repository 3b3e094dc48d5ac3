"""Paying at the current load: the speed-up estimated at the running batch, in Python
(advisor.speedup_at_load) and in PromQL (rules/load.py, run by promtool on both bundles), and
SpecDecodeNotPaying firing only when the estimate stays below 1 at a batch that makes it so."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from test_sources_promtool import run_scenario

from vllm_spec_exporter import advisor
from vllm_spec_exporter.check import paying_at
from vllm_spec_exporter.derive import SeriesFigures
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import alert_rules, load, recording_rules, sources
from vllm_spec_exporter.names import MetricName

N = advisor.DEFAULT_COMPUTE_BOUND_TOKENS


def test_at_a_small_batch_it_is_the_speedup_bound() -> None:
    """Below the compute-bound point verification is free: only acceptance and drafting cost count."""
    for batch in (0, 1, 8, N / 5 - 1):
        # Every step drafted: the request-steps are the drafts (400 generated - 300 accepted).
        assert math.isclose(advisor.speedup_at_load(400, 400, 300, batch, 0.05),
                            advisor.speedup_bound(100, 400, 300, 0.05))


def test_a_large_batch_makes_the_same_acceptance_stop_paying() -> None:
    """k = 4 drafts at 25 % acceptance: 2 tokens a step. It pays at 8 requests, not at 128: each
    step then verifies 640 tokens instead of 128, 2.5x the work for 2x the tokens."""
    small = advisor.speedup_at_load(200, 400, 100, 8, 0.0)
    large = advisor.speedup_at_load(200, 400, 100, 128, 0.0)
    assert small == pytest.approx(2.0) and large == pytest.approx(2.0 / (640 / 256))
    assert large < 1 < small
    # Monotone in the batch once compute-bound, and it never rises again.
    values = [advisor.speedup_at_load(200, 400, 100, batch, 0.0) for batch in range(1, 400, 7)]
    assert all(a >= b for a, b in itertools.pairwise(values))


def test_request_steps_that_draft_nothing_are_charged_as_plain_ones() -> None:
    """Half the requests' n-gram lookups missing in every step (no draft, one token each) are not
    charged as if every request had verified drafts: 100 drafting request-steps as above plus 100
    plain ones give 300 tokens in 200 request-steps, 2 draft tokens verified a request-step. At
    128 requests a step verifies 384 tokens (1.5x a plain step) for 1.5 tokens a request: break-even,
    where charging every request-step the drafting ones' 4 tokens would say 0.8x."""
    paused = advisor.speedup_at_load(300, 400, 100, 128, 0.0)
    assert paused == pytest.approx(1.0)
    assert paused > advisor.speedup_at_load(200, 400, 100, 128, 0.0)


def test_no_drafts_is_no_estimate_and_bad_input_is_named() -> None:
    assert advisor.speedup_at_load(0, 0, 0, 4, 0.0) is None
    assert advisor.speedup_at_load(50, 0, 0, 4, 0.0) is None  # plain decoding only: no estimate, never 1
    with pytest.raises(ValueError, match="compute-bound tokens"):
        advisor.speedup_at_load(3, 4, 2, 4, 0.0, compute_bound_tokens=0)
    with pytest.raises(ValueError, match="batch"):
        advisor.speedup_at_load(3, 4, 2, -1, 0.0)


def test_check_estimates_at_the_mean_sampled_batch() -> None:
    total = SeriesFigures(seconds=30, drafts=100, draft_tokens=400, accepted=100, generation=200,
                          accepted_by_position={}, k=4)
    paying = paying_at(total, [100, 156], 0.0, N, min_draft_tokens=100)
    assert paying is not None and paying.batch == 128
    assert paying.speedup == pytest.approx(advisor.speedup_at_load(200, 400, 100, 128, 0.0))
    assert paying_at(total, [], 0.0, N, 100) is None  # no running-requests gauge: no estimate, never 1
    assert paying_at(total, [8], 0.0, N, min_draft_tokens=1000) is None  # too few drafts to say


def _scenario(cfg: MixinConfig, batch: int, accepted_per_s: int) -> tuple[list[dict], str]:
    """One server at a steady 25 drafts/s of k = 4 and as many request-steps without a draft, at `batch`
    running requests, for 30 minutes: request-steps (generated - accepted) are twice the drafts, so a
    formula that divided by the drafts instead would give other numbers."""
    if cfg.direct:
        labels = 'job="vllm", instance="a:8000", model_name="m", engine="0"'
        name = {counter: f"vllm:{counter.vllm}" for counter in sources.COUNTERS}
        running = f"vllm:{sources.VLLM_GAUGES[MetricName.REQUESTS_RUNNING]}"
    else:
        labels = 'job="vllm-spec-exporter", instance="a:9850", model_name="m", engine="0"'
        name = {counter: str(counter.exporter) for counter in sources.COUNTERS}
        running = str(MetricName.REQUESTS_RUNNING)
    per_step = 15  # s
    steps = 120
    rates = {sources.DRAFTS: 25, sources.DRAFT_TOKENS: 100, sources.ACCEPTED: accepted_per_s,
             sources.GENERATED: 50 + accepted_per_s}
    series = [{"series": f"{name[c]}{{{labels}}}", "values": f"0+{rate * per_step}x{steps}"}
              for c, rate in rates.items()]
    series.append({"series": f"{running}{{{labels}}}", "values": f"{batch}x{steps}"})
    return series, labels


@pytest.mark.parametrize("source", ["exporter", "vllm"])
@pytest.mark.parametrize("batch, accepted, pays", [(8, 25, True), (128, 25, False), (128, 75, True)])
def test_the_record_equals_python_and_the_alert_fires_only_where_it_does_not_pay(
        source: str, batch: int, accepted: int, pays: bool, promtool: str, tmp_path: Path) -> None:
    cfg = MixinConfig(source=source)
    series, labels = _scenario(cfg, batch, accepted)
    expected = advisor.speedup_at_load(50 + accepted, 100, accepted, batch, cfg.draft_cost_ratio,
                                       cfg.compute_bound_tokens)
    assert expected is not None and (expected >= 1) == pays
    names = load.load_names(cfg)
    alert = alert_rules.not_paying(cfg)
    tests = [{"expr": f"round({names.speedup}, 0.0001)", "eval_time": "20m",
              "exp_samples": [{"labels": f"{{{labels}}}", "value": round(expected, 4)}]},
             {"expr": f"round({names.batch}, 0.0001)", "eval_time": "20m",
              "exp_samples": [{"labels": f"{{{labels}}}", "value": batch}]},
             {"expr": f'ALERTS{{alertname="{alert_rules.NOT_PAYING}", alertstate="firing"}}', "eval_time": "20m",
              "exp_samples": [] if pays else [{"labels": (
                  f'{{__name__="ALERTS", alertname="{alert_rules.NOT_PAYING}", alertstate="firing", '
                  f'severity="warning", {labels}}}'), "value": 1}]},
             # Not before it lasted not_paying_for: 15 minutes from the first full rate window.
             {"expr": f'ALERTS{{alertname="{alert_rules.NOT_PAYING}", alertstate="firing"}}', "eval_time": "10m",
              "exp_samples": []}]
    groups = [{"name": "source", "rules": sources.source_rules(cfg)}, load.load_group(cfg),
              {"name": "alerts", "rules": [alert]}]
    run_scenario(promtool, tmp_path, groups, series, tests)


def test_the_committed_bundles_carry_the_load_group_and_the_alert() -> None:
    for cfg in (MixinConfig(), MixinConfig(source="vllm")):
        assert load.load_group(cfg) in recording_rules.recording_groups(cfg)
        assert alert_rules.NOT_PAYING in {a["alert"] for a in alert_rules.all_alerts(cfg)}


def test_direct_batch_survives_a_spelling_switch_and_llamacpp_has_an_estimate(promtool: str, tmp_path: Path) -> None:
    """Without the sidecar: vLLM's running-requests gauge switching from `vllm:` to `vllm_` inside the
    rate window stays one batch series (not an evaluation error), and llama-server's unlabelled gauge
    matches its unlabelled counters one to one."""
    cfg = MixinConfig(source="vllm")
    vllm = 'job="vllm", instance="a:8000", model_name="m", engine="0"'
    llamacpp = 'job="vllm", instance="b:8080"'
    running = sources.VLLM_GAUGES[MetricName.REQUESTS_RUNNING]
    series = [{"series": f'{{__name__="vllm:{running}", {vllm}}}', "values": "8x20 stale"},
              {"series": f'{{__name__="vllm_{running}", {vllm}}}', "values": "_x20 8x40"},
              {"series": f'{{__name__="{sources.LLAMACPP_GAUGES[MetricName.REQUESTS_RUNNING]}", {llamacpp}}}',
               "values": "8x60"}]
    rates = {sources.DRAFTS: 25, sources.DRAFT_TOKENS: 100, sources.ACCEPTED: 25, sources.GENERATED: 75}
    for counter, rate in rates.items():
        series += [{"series": f'{{__name__="vllm:{counter.vllm}", {vllm}}}', "values": f"0+{rate * 15}x60"},
                   {"series": f'{{__name__="{counter.llamacpp}", {llamacpp}}}', "values": f"0+{rate * 15}x60"}]
    expected = advisor.speedup_at_load(75, 100, 25, 8, cfg.draft_cost_ratio, cfg.compute_bound_tokens)
    assert expected is not None
    names = load.load_names(cfg)
    # At 6m the window holds both spellings of vLLM's gauge (the switch at 5m15s).
    tests = [{"expr": f"round({name}, 0.0001)", "eval_time": "6m",
              "exp_samples": [{"labels": f"{{{labels}}}", "value": value} for labels in (vllm, llamacpp)]}
             for name, value in ((names.batch, 8), (names.speedup, round(expected, 4)))]
    run_scenario(promtool, tmp_path, [{"name": "source", "rules": sources.source_rules(cfg)}, load.load_group(cfg)],
                 series, tests)
