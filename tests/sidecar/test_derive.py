"""normalise -> window -> derive: every formula, idle, low volume, resets, k changes, V0, variants.

Inputs are real wire format: prometheus_client renders the same families vLLM 0.32 registers
(lab/vllm_spec_lab/fakes/vllm.py), then the exporter parses that text.
"""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from support.paths import FIXTURES
from vllm_spec_exporter.derive import derive
from vllm_spec_exporter.names import MetricName
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse
from vllm_spec_exporter.poller import Poller
from vllm_spec_exporter.window_store import WindowStore
from vllm_spec_lab.fakes.vllm import FakeVllm

SERIES = ("tiny-llama", "0")


def text_of(fake: FakeVllm) -> str:
    return generate_latest(fake.registry).decode()


def values(samples, name):
    return {labels: value for n, labels, value in samples if n == name}


class Timeline:
    """Feeds successive exposition texts to a WindowStore at chosen times."""

    def __init__(self, window: float = 60.0, min_draft_tokens: float = 0.0) -> None:
        self.store = WindowStore(window)
        self.min = min_draft_tokens
        self.resets = 0

    def poll(self, t: float, text: str):
        snap = normalise(parse(text))
        self.resets += self.store.observe(t, snap)
        return derive(self.store, snap, self.min)


def test_formulas_equal_counter_deltas_exactly():
    fake = FakeVllm(k=4)
    tl = Timeline()
    fake.step(10, 1.0)  # history before the window start must not count
    assert values(tl.poll(0, text_of(fake)), "vllm_spec_decode_acceptance_ratio") == {}
    fake.step(100, 0.6)  # 240 accepted of 400 drafted: positions 100, 100, 40, 0
    out = tl.poll(10, text_of(fake))
    D, T, A, G = 100, 400, 240, 340
    assert values(out, "vllm_spec_decode_acceptance_ratio") == {SERIES: A / T}
    assert values(out, "vllm_spec_decode_mean_acceptance_length") == {SERIES: 1 + A / D}
    assert values(out, "vllm_spec_decode_efficiency_ratio") == {SERIES: (D + A) / (D * 5)}
    assert values(out, "vllm_spec_decode_drafted_efficiency_ratio") == {SERIES: (D + A) / (D + T)}
    assert values(out, "vllm_spec_decode_mean_draft_length") == {SERIES: T / D}
    assert values(out, "vllm_spec_decode_draft_output_ratio") == {SERIES: A / G}
    assert values(out, "vllm_spec_decode_position_acceptance_ratio") == {
        (*SERIES, "0"): 1.0, (*SERIES, "1"): 1.0, (*SERIES, "2"): 0.4, (*SERIES, "3"): 0.0}
    assert values(out, "vllm_spec_decode_draft_tokens_per_second") == {SERIES: T / 10}
    assert values(out, "vllm_spec_decode_accepted_tokens_per_second") == {SERIES: A / 10}
    assert values(out, "vllm_spec_decode_rejected_tokens_per_second") == {SERIES: (T - A) / 10}
    assert values(out, "vllm_spec_decode_drafts_per_second") == {SERIES: D / 10}
    assert values(out, "vllm_generation_tokens_per_second") == {SERIES: G / 10}
    assert values(out, "vllm_spec_decode_num_speculative_tokens") == {SERIES: 4}
    assert values(out, "vllm_spec_decode_window_seconds") == {SERIES: 10}


def test_idle_window_omits_ratios_but_reports_zero_rates():
    fake = FakeVllm()
    tl = Timeline()
    fake.step(50, 0.9)
    tl.poll(0, text_of(fake))
    out = tl.poll(5, text_of(fake))
    assert values(out, "vllm_spec_decode_acceptance_ratio") == {}
    assert values(out, "vllm_spec_decode_mean_acceptance_length") == {}
    assert values(out, "vllm_spec_decode_position_acceptance_ratio") == {}
    assert values(out, "vllm_spec_decode_draft_tokens_per_second") == {SERIES: 0.0}
    assert values(out, "vllm_generation_tokens_per_second") == {SERIES: 0.0}


def test_low_volume_guard_omits_ratios_below_min_draft_tokens():
    fake = FakeVllm(k=4)
    tl = Timeline(min_draft_tokens=100)
    tl.poll(0, text_of(fake))
    fake.step(24, 0.1)  # 96 draft tokens < 100
    out = tl.poll(5, text_of(fake))
    assert values(out, "vllm_spec_decode_acceptance_ratio") == {}
    assert values(out, "vllm_spec_decode_window_draft_tokens") == {SERIES: 96}
    fake.step(1, 0.1)  # now 100 in the window
    out = tl.poll(10, text_of(fake))
    assert SERIES in values(out, "vllm_spec_decode_acceptance_ratio")


def test_window_forgets_samples_older_than_the_window():
    fake = FakeVllm(k=2)
    tl = Timeline(window=20)
    tl.poll(0, text_of(fake))
    fake.step(100, 1.0)  # a great past...
    tl.poll(10, text_of(fake))
    tl.poll(20, text_of(fake))
    fake.step(100, 0.0)  # ...then collapse
    out = tl.poll(30, text_of(fake))  # window now spans t=10..30 only
    assert values(out, "vllm_spec_decode_acceptance_ratio") == {SERIES: 0.0}
    assert values(out, "vllm_spec_decode_window_seconds") == {SERIES: 20}


def test_restart_counts_new_values_from_zero_never_negative():
    fake = FakeVllm(k=2)
    tl = Timeline()
    fake.step(1000, 0.5)
    tl.poll(0, text_of(fake))
    fake.step(100, 0.5)
    tl.poll(5, text_of(fake))
    fake.restart()
    fake.step(40, 1.0)  # after the restart: 40 drafts, 80 draft tokens, all accepted
    out = tl.poll(10, text_of(fake))
    assert tl.resets > 0
    # Window 0..10: 100 drafts at 0.5 before the restart, 40 at 1.0 after.
    assert values(out, "vllm_spec_decode_acceptance_ratio") == {SERIES: (100 + 80) / (200 + 80)}
    for name, _, value in out:
        assert value >= 0, name


def test_changed_created_time_is_a_reset_even_when_values_grew():
    fake = FakeVllm(k=2)
    tl = Timeline()
    fake.step(10, 0.5)
    tl.poll(0, text_of(fake))
    fake.restart()
    fake.step(50, 1.0)  # larger than before the restart, so only _created reveals it
    out = tl.poll(5, text_of(fake))
    assert tl.resets > 0
    assert values(out, "vllm_spec_decode_draft_tokens_per_second") == {SERIES: 100 / 5}


def test_k_change_between_polls_forgets_vanished_positions():
    fake = FakeVllm(k=4)
    tl = Timeline()
    fake.step(10, 0.5)
    tl.poll(0, text_of(fake))
    fake.restart(k=2)
    fake.step(10, 0.5)
    out = tl.poll(5, text_of(fake))
    assert values(out, "vllm_spec_decode_num_speculative_tokens") == {SERIES: 2}
    assert {labels[2] for labels in values(out, "vllm_spec_decode_position_acceptance_ratio")} == {"0", "1"}
    assert len(tl.store) == 2 + 5  # drafts, draft tokens, accepted, generation, engine steps + 2 positions


def test_engines_and_models_are_kept_apart():
    fake = FakeVllm(models=("a", "b"), engines=("0", "1"), k=2)
    tl = Timeline()
    tl.poll(0, text_of(fake))
    fake.step(10, 1.0, model="a", engine="0")
    fake.step(10, 0.0, model="b", engine="1")
    out = values(tl.poll(5, text_of(fake)), "vllm_spec_decode_acceptance_ratio")
    assert out == {("a", "0"): 1.0, ("b", "1"): 0.0}  # the idle ones are omitted


def test_ratio_is_omitted_when_counters_are_inconsistent():
    lines = ("# TYPE x counter\n"
             'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {d}\n'
             'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {t}\n'
             'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {a}\n')
    tl = Timeline()
    tl.poll(0, lines.format(d=0, t=0, a=0))
    out = tl.poll(5, lines.format(d=10, t=40, a=50))  # more accepted than drafted: impossible
    assert values(out, "vllm_spec_decode_acceptance_ratio") == {}
    assert values(out, "vllm_spec_decode_rejected_tokens_per_second") == {}


def test_vllm_0_8_3_without_drafts_counter_gives_acceptance_only():
    lines = ("# TYPE x counter\n"
             'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {t}\n'
             'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {a}\n')
    tl = Timeline()
    tl.poll(0, lines.format(t=0, a=0))
    out = tl.poll(5, lines.format(t=300, a=150))
    assert values(out, "vllm_spec_decode_acceptance_ratio") == {("m", "0"): 0.5}
    assert values(out, "vllm_spec_decode_mean_acceptance_length") == {}


def test_v0_uses_the_gauges_and_never_rates_its_counters():

    text = (FIXTURES / "vllm-0.7.3-v0-reconstructed" / "metrics.prom").read_text()
    tl = Timeline()
    snap = normalise(parse(text))
    assert snap.schema == "v0"
    assert not any(fam in ("drafts", "draft_tokens", "accepted_tokens", "generation_tokens")
                   for fam, _, _, _ in snap.counters)
    out = tl.poll(0, text)
    series = ("meta-llama/Llama-3.1-8B-Instruct", "")
    assert values(out, "vllm_spec_decode_acceptance_ratio") == {series: 0.607}
    assert values(out, "vllm_spec_decode_efficiency_ratio") == {series: 0.51}
    assert values(out, "vllm_spec_decode_draft_tokens_per_second") == {}


def test_spec_decoding_off_is_a_state_not_an_error():
    fake = FakeVllm(spec_enabled=False)
    snap = normalise(parse(text_of(fake)))
    assert snap.schema == "none" and not snap.spec_enabled
    assert Timeline().poll(0, text_of(fake)) == []


def test_invalid_samples_are_rejected_and_named_the_rest_kept():
    text = ("# TYPE x counter\n"
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="x"} 1\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="99"} 1\n'
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} -4\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} NaN\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 7\n')
    snap = normalise(parse(text))
    assert len(snap.invalid) == 4
    assert "position label 'x'" in snap.invalid[0]
    assert list(snap.counters) == [("accepted_tokens", ("m", "0"), "", "")]


def test_ray_replicas_fold_onto_model_and_engine_and_exact_duplicates_do_not_double():
    text = ("# TYPE x counter\n"
            'ray_vllm:spec_decode_num_drafts_total{ReplicaId="a",engine="0",model_name="m"} 10\n'
            'ray_vllm:spec_decode_num_drafts_total{ReplicaId="b",engine="0",model_name="m"} 5\n'
            'ray_vllm:spec_decode_num_drafts_total{ReplicaId="b",engine="0",model_name="m"} 5\n'
            'ray_vllm:kv_cache_usage_perc{ReplicaId="a",engine="0",model_name="m"} 0.2\n'
            'ray_vllm:kv_cache_usage_perc{ReplicaId="b",engine="0",model_name="m"} 0.7\n')
    snap = normalise(parse(text))
    assert snap.exported_counters() == {("drafts", ("m", "0"), ""): 15}
    assert snap.gauges == {("kv_cache_usage", ("m", "0")): 0.7}


def ray_body(replicas: dict[str, tuple[int, int, int]]) -> str:
    """Ray-style exposition: per replica (drafts, draft tokens, accepted)."""
    lines = ["# TYPE x counter"]
    for replica, (d, t, a) in replicas.items():
        labels = f'ReplicaId="{replica}",engine="0",model_name="m"'
        lines += [f"ray_vllm:spec_decode_num_drafts_total{{{labels}}} {d}",
                  f"ray_vllm:spec_decode_num_draft_tokens_total{{{labels}}} {t}",
                  f"ray_vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {a}"]
    return "\n".join(lines) + "\n"


def test_a_ray_replica_leaving_or_joining_is_neither_a_reset_nor_a_spike():
    tl = Timeline()
    tl.poll(0, ray_body({"a": (10_000, 40_000, 30_000), "b": (10_000, 40_000, 30_000)}))
    tl.poll(5, ray_body({"a": (10_100, 40_400, 30_200), "b": (10_100, 40_400, 30_200)}))
    # b leaves (scale down), c joins with a long history of its own (moved from elsewhere)
    out = tl.poll(10, ray_body({"a": (10_200, 40_800, 30_400), "c": (50_000, 200_000, 10_000)}))
    assert tl.resets == 0
    # Only a's growth is a common interval's growth (c has a single sample, b is gone).
    ratio = values(out, "vllm_spec_decode_acceptance_ratio")[("m", "0")]
    assert ratio == pytest.approx(400 / 800)
    assert values(out, "vllm_spec_decode_draft_tokens_per_second")[("m", "0")] < 1000


@pytest.mark.parametrize("acceptance", [0.0, 0.25, 0.5, 1.0])
def test_acceptance_stays_in_unit_interval(acceptance):
    fake = FakeVllm(k=5)
    tl = Timeline()
    tl.poll(0, text_of(fake))
    fake.step(37, acceptance)
    out = tl.poll(3, text_of(fake))
    for name, _, value in out:
        if name.endswith("_ratio"):
            assert 0.0 <= value <= 1.0


def test_series_cap_rejects_the_poll_and_names_it():
    from vllm_spec_exporter.poller import Poller

    class StaticFetcher:  # stands in for Fetcher: hands the poller one real-format body
        url = "http://127.0.0.1:1/metrics"
        timeout = 1.0

        def get_metrics(self) -> str:
            return text_of(FakeVllm(engines=("0", "1", "2"), k=4))

        def get_version(self) -> str:
            return ""

    poller = Poller(StaticFetcher(), interval=1, window=10, min_draft_tokens=0, max_series=8)
    result = poller.poll_once()
    assert not result.target_up and result.errors["series_limit"] == 1
    assert "more than --max-series 8" in result.error_message
    assert len(poller.store) == 0


def test_v0_nan_gauges_before_the_first_draft_are_no_data_not_faults():
    text = ("# TYPE x gauge\n"
            'vllm:spec_decode_draft_acceptance_rate{model_name="m"} NaN\n'
            'vllm:spec_decode_efficiency{model_name="m"} NaN\n')
    snap = normalise(parse(text))
    assert snap.schema == "v0" and snap.invalid == [] and snap.gauges == {}
    assert Timeline().poll(0, text) == []


def test_a_new_cause_while_down_is_logged_at_once_a_repeated_one_once_a_minute(caplog):
    from vllm_spec_exporter.fetch import FetchError
    from vllm_spec_exporter.poller import Poller

    class FailingFetcher:  # stands in for Fetcher: fails with whatever cause the test sets
        url = "http://127.0.0.1:1/metrics"
        timeout = 1.0
        cause = ("timeout", "")

        def get_metrics(self) -> str:
            raise FetchError(*self.cause)

        def get_version(self) -> str:
            return ""

    now = [0.0]
    fetcher = FailingFetcher()
    poller = Poller(fetcher, interval=1, window=10, min_draft_tokens=0, clock=lambda: now[0])
    # (seconds later, reason, message): one poll each
    polls = [(0, "timeout", "no answer within 1 s"), (1, "timeout", "no answer within 1 s"),
             (1, "http_status", "answered HTTP 500"), (1, "http_status", "answered HTTP 500"),
             (1, "http_status", "answered HTTP 404"), (1, "timeout", "no answer within 1 s"),
             (1, "parse", "malformed line 12"), (1, "parse", "malformed line 13"),  # the same cause
             (60, "http_status", "answered HTTP 404")]  # a minute on: named again
    with caplog.at_level("INFO", logger="vllm_spec_exporter"):
        for later, *cause in polls:
            now[0] += later
            fetcher.cause = tuple(cause)
            poller.poll_once()
    lines = [r.getMessage().removeprefix(f"target {fetcher.url} ") for r in caplog.records]
    assert lines == ["is down: no answer within 1 s", "target still down: no answer within 1 s",
                     "target still down: answered HTTP 500", "target still down: answered HTTP 404",
                     "target still down: malformed line 12", "target still down: answered HTTP 404"]


def test_the_rate_limited_log_forgets_expired_keys_past_its_bound(caplog):
    from vllm_spec_exporter.poller import RateLimitedLog

    now = [0.0]
    limited = RateLimitedLog(every=60, clock=lambda: now[0])
    with caplog.at_level("WARNING", logger="vllm_spec_exporter"):
        for i in range(RateLimitedLog.MAX_KEYS):
            limited.warn(f"old {i}", "old %d", i)
        now[0] = 61.0
        limited.warn("new", "new")
        limited.warn("new", "new")  # within its minute: not again
    assert len(limited._last) == 1 and len(caplog.records) == RateLimitedLog.MAX_KEYS + 1


def test_a_slow_answer_is_stamped_when_it_arrived():
    # Generation runs at 10 tokens/s. The first poll starts at 0 and the busy server answers at 9 s
    # (90 tokens); the next starts at 10 and answers at 11 (110). Stamped at the polls' starts the
    # window would read 20 tokens over 10 s, 2 tokens/s; stamped at the answers it reads 10.
    now, delays = [0.0], [9.0, 1.0]

    class SlowFetcher:  # stands in for Fetcher: the server answers `delays[i]` seconds after asked
        url = "http://127.0.0.1:1/metrics"
        timeout = 10.0

        def get_metrics(self) -> str:
            now[0] += delays.pop(0)
            tokens = 10 * now[0]
            return ("# TYPE vllm:generation_tokens counter\n"
                    f'vllm:generation_tokens_total{{model_name="m",engine="0"}} {tokens}\n'
                    "# TYPE vllm:spec_decode_num_drafts counter\n"
                    f'vllm:spec_decode_num_drafts_total{{model_name="m",engine="0"}} {tokens / 4}\n')

        def get_version(self) -> str:
            return ""

    poller = Poller(SlowFetcher(), interval=1, window=60, min_draft_tokens=0, clock=lambda: now[0])
    assert poller.poll_once().target_up
    now[0] = 10.0
    result = poller.poll_once()
    rates = {name: value for name, _, value in result.derived}
    assert rates[MetricName.GENERATION_TOKENS_PER_SECOND] == pytest.approx(10.0)
