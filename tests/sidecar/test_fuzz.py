"""Property-based fuzzing of the parser and the window (hypothesis).

Properties, whatever the input: parse() returns samples or raises ParseError (never anything else);
no derived ratio leaves [0, 1]; no rate is negative; memory stays bounded by the series cap.
FUZZ_EXAMPLES (default 3,400 per property: 10,200 generated inputs per run) scales the effort.
"""

from __future__ import annotations

import contextlib
import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_spec_exporter.derive import derive
from vllm_spec_exporter.engines import FOREIGN_KEY, NAMES, PREFIXES, VLLM_NAMES, EngineError
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import ParseError, parse
from vllm_spec_exporter.window_store import SeriesLimitError, WindowStore

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "3400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

prefixes = st.sampled_from(["vllm:", "vllm_", "ray_vllm:", "ray_vllm_", "vlm:", "", *PREFIXES])
ENGINE_NAMES = sorted({name for names in NAMES.values() for name in names})
families = st.sampled_from([*VLLM_NAMES, *ENGINE_NAMES, "spec_decode_num_drafts_totally",
                            "num_requests_waiting_by_reason"])
KNOWN_KEYS = {*VLLM_NAMES.values(), *(key for names in NAMES.values() for key in names.values()), FOREIGN_KEY}
suffixes = st.sampled_from(["_total", "_created", "", "_bucket"])
label_values = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
label_names = st.sampled_from(["model_name", "engine", "position", "le", "x", "bad name", ""])
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-5, 10**12).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e309", "abc", "", "0x10"]),
)


@st.composite
def sample_lines(draw) -> str:
    labels = draw(st.lists(st.tuples(label_names, label_values), max_size=4))
    body = ",".join(f'{k}="{v}"' for k, v in labels)
    body = draw(st.sampled_from([body, body + ",", body.replace('"', "", 1), body + "}"]))
    braces = draw(st.sampled_from(["{%s}", "%s", "{%s", "{}"]))
    labelled = braces % body if "%s" in braces else braces
    return f"{draw(prefixes)}{draw(families)}{draw(suffixes)}{labelled} {draw(values)}"


@st.composite
def bodies(draw) -> str:
    lines = draw(st.lists(st.one_of(sample_lines(), st.text(max_size=40), st.just("# TYPE x counter")),
                          max_size=12))
    text = "\n".join(lines)
    return draw(st.sampled_from([text + "\n", text, "\n" + text + "\n"]))


@FUZZ
@given(bodies())
def test_parse_returns_samples_or_a_parse_error(text):
    try:
        samples = parse(text)
    except ParseError as error:
        assert str(error)
        return
    for s in samples:
        assert s.key in KNOWN_KEYS
        assert isinstance(s.value, float)


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_escape_as_other_errors(data):
    with contextlib.suppress(ParseError, EngineError):
        normalise(parse(data.decode("utf-8", errors="replace")))


def _exposition(drafts: float, tokens: float, accepted: float, per_pos: list[float], generation: float) -> str:
    lines = ["# TYPE x counter"]
    series = 'engine="0",model_name="m"'
    lines.append(f"vllm:spec_decode_num_drafts_total{{{series}}} {drafts!r}")
    lines.append(f"vllm:spec_decode_num_draft_tokens_total{{{series}}} {tokens!r}")
    lines.append(f"vllm:spec_decode_num_accepted_tokens_total{{{series}}} {accepted!r}")
    lines.append(f"vllm:generation_tokens_total{{{series}}} {generation!r}")
    for i, v in enumerate(per_pos):
        lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{series},position="{i}"}} {v!r}')
    return "\n".join(lines) + "\n"


counter_values = st.one_of(st.floats(min_value=-10, max_value=1e15),
                           st.sampled_from([math.nan, math.inf, -math.inf]),
                           st.integers(0, 10**6).map(float))


@FUZZ
@given(st.lists(st.tuples(counter_values, counter_values, counter_values,
                          st.lists(counter_values, max_size=6), counter_values,
                          st.floats(min_value=0.01, max_value=30)),
                min_size=1, max_size=8),
       st.floats(min_value=0, max_value=1000))
def test_window_never_yields_out_of_range_ratios_or_negative_rates(polls, min_draft_tokens):
    store = WindowStore(window_seconds=60, max_series=64)
    now = 0.0
    for drafts, tokens, accepted, per_pos, generation, step in polls:
        now += step
        try:
            snap = normalise(parse(_exposition(drafts, tokens, accepted, per_pos, generation)))
            store.observe(now, snap)
        except (ParseError, SeriesLimitError):
            continue
        for name, _, value in derive(store, snap, min_draft_tokens):
            assert not math.isnan(value), name
            if name.endswith("_ratio"):
                assert 0.0 <= value <= 1.0, (name, value)
            if name.endswith(("_per_second", "_seconds", "_draft_tokens")):
                assert value >= 0.0, (name, value)
            if name == "vllm_spec_decode_mean_acceptance_length":
                assert value >= 1.0
        assert len(store) <= 64
