"""The statistics behind the acceptance alerts.

1. The Wilson bound the recording rules compute in PromQL equals an independent computation
   (statistics.NormalDist, the textbook formula over n = drafts / overdispersion), run by promtool.
2. The trial count, checked on real vLLM 0.32 output (tests/fixtures/vllm-0.32.0, captured from a
   real server): from the per-position counters the exact distribution of accepted tokens per
   draft follows (acceptance is a prefix: P(A >= j) = accepted at position j-1 / drafts). Its
   variance shows that counting draft *tokens* as independent trials understates the noise
   several times over, while drafts as trials times the default overdispersion factor covers it.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from pathlib import Path
from statistics import NormalDist

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from support import paths
from support.prom import require_binary, run_tool
from vllm_spec_exporter.durations import seconds as duration_seconds
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import recording_rules, rule_files
from vllm_spec_lab.monitoring import PROMTOOL_BIN

FIXTURES = paths.FIXTURES / "vllm-0.32.0"
LABELS = 'job="vllm-spec-exporter",instance="10.0.0.7:9400",model_name="llama"'


def wilson(p: float, drafts: float, cfg: MixinConfig, sign: int) -> float:
    """Textbook Wilson score bound, written independently of recording_rules.wilson_bound."""
    n = drafts / cfg.acceptance_overdispersion
    z = NormalDist().inv_cdf(cfg.acceptance_confidence)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre + sign * half


# (drafts per 15 s, draft tokens per 15 s, accepted per 15 s): busy, quiet, tiny, perfect, zero
CASES = [(100, 400, 300), (4, 16, 9), (1, 3, 1), (10, 40, 40), (10, 40, 0)]


@pytest.mark.prometheus
@pytest.mark.parametrize("overrides", [{}, {"acceptance_confidence": 0.99, "acceptance_overdispersion": 1.0}])
def test_promql_wilson_bound_matches_independent_computation(overrides: dict, tmp_path: Path) -> None:
    cfg = MixinConfig().with_overrides(overrides)
    for rel, text in generate.render_all(cfg).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    window = cfg.windows.fast_long
    e = recording_rules.evidence_names(window)
    steps = int(duration_seconds(window) // 15)
    tests = []
    for drafts, tokens, accepted in CASES:
        series = [
            {"series": f'vllm_spec_decode_drafts_total{{{LABELS},engine="0"}}', "values": f"0+{drafts}x40"},
            {"series": f'vllm_spec_decode_draft_tokens_total{{{LABELS},engine="0"}}', "values": f"0+{tokens}x40"},
            {"series": f'vllm_spec_decode_accepted_tokens_total{{{LABELS},engine="0"}}', "values": f"0+{accepted}x40"},
        ]
        p, n = accepted / tokens, drafts * steps  # linear counters: increase() is exact
        exp = []
        for record, sign in ((e.upper, 1), (e.lower, -1)):
            exp.append({"expr": f"round({record} * 100000)", "eval_time": "8m",
                        "exp_samples": [{"labels": f'{{{LABELS},confidence="{cfg.confidence_label}"}}',
                                         "value": math.floor(wilson(p, n, cfg, sign) * 100000 + 0.5)}]})
        tests.append({"interval": "15s", "input_series": series, "promql_expr_test": exp})
    path = tmp_path / "wilson_test.yaml"
    path.write_text(yaml.safe_dump({
        "rule_files": [str(tmp_path / rule_files.RULES_FILE)], "evaluation_interval": "15s", "tests": tests}))
    result = run_tool([require_binary(PROMTOOL_BIN), "test", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_drafts_gives_no_bound() -> None:
    # `> 0` on the drafts record: no evidence means no bound series at all, never a 0 % or NaN.
    expr = next(r["expr"] for r in recording_rules.evidence_rules(MixinConfig(), "5m")
                if r["record"] == recording_rules.evidence_names("5m").drafts)
    assert expr.endswith("> 0")


def _counters(path: Path) -> dict[str, dict[str, float]]:
    """engine -> {drafts, tokens, accepted, pos<j>} from one real scrape."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            base = sample.name.removesuffix("_total")
            engine = sample.labels.get("engine", "0")
            if base in names:
                out[engine][names[base]] = sample.value
            elif base == "vllm:spec_decode_num_accepted_tokens_per_pos":
                out[engine][f"pos{sample.labels['position']}"] = sample.value
    return out


def _intervals() -> list[tuple[str, dict[str, float]]]:
    """Counter deltas of every bracketed interval of every real capture with some acceptance."""
    found = []
    for index in sorted(FIXTURES.glob("*/index.json")):
        data = yaml.safe_load(index.read_text())
        for interval in data.get("intervals", []):
            before = _counters(index.parent / interval["from_scrape"])
            after = _counters(index.parent / interval["to_scrape"])
            for engine, values in after.items():
                delta = {key: value - before.get(engine, {}).get(key, 0.0) for key, value in values.items()}
                if delta.get("drafts", 0) > 0 and 0 < delta["accepted"] < delta["tokens"]:
                    found.append((f"{index.parent.name}/{interval['to_scrape']}/engine {engine}", delta))
    return found


def test_real_vllm_drafts_not_tokens_are_the_trials() -> None:
    intervals = _intervals()
    assert len(intervals) >= 2, "expected real captures with partial acceptance"
    cfg = MixinConfig()
    for name, d in intervals:
        k = sum(1 for key in d if key.startswith("pos"))
        at_least = [d[f"pos{j}"] / d["drafts"] for j in range(k)]  # P(A >= j+1)
        assert all(a >= b for a, b in itertools.pairwise(at_least)), f"{name}: not a prefix"
        mean = sum(at_least)
        assert math.isclose(mean * d["drafts"], d["accepted"], rel_tol=1e-9), name
        second = sum((2 * j + 1) * q for j, q in enumerate(at_least))  # E[A^2] = sum (2j-1) P(A >= j)
        variance = second - mean * mean  # accepted tokens per draft, exact from the counters
        p, tokens_per_draft = d["accepted"] / d["tokens"], d["tokens"] / d["drafts"]
        as_tokens = tokens_per_draft * p * (1 - p)  # binomial over draft tokens
        as_drafts = tokens_per_draft ** 2 * p * (1 - p)  # one trial per draft
        # Tokens as trials would understate the noise (and overstate the evidence) clearly …
        assert variance > 2 * as_tokens, (name, variance, as_tokens)
        # … drafts as trials, with the default overdispersion factor, cover it.
        assert variance <= cfg.acceptance_overdispersion * as_drafts, (name, variance, as_drafts)
