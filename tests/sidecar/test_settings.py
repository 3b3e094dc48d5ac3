"""settings.py: flags > environment > YAML file > defaults; bad values are named; secrets hidden."""

from __future__ import annotations

import argparse
import subprocess

import pytest

from vllm_spec_exporter import settings
from vllm_spec_lab.exporter_process import SCRIPT


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_are_a_loopback_sidecar():
    conf = settings.resolve(parse([]), environ={})
    assert conf.listen == "127.0.0.1:9850" and conf.target == "http://127.0.0.1:8000"
    assert conf.poll_timeout < conf.interval and conf.window >= 2 * conf.interval


def test_precedence_flag_over_env_over_file(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("window: 120\ninterval: 10\nmin_draft_tokens: 5\ninsecure_skip_verify: true\n")
    env = {"VLLM_SPEC_EXPORTER_WINDOW": "90", "VLLM_SPEC_EXPORTER_TIMEOUT": "2"}
    conf = settings.resolve(parse(["--config-file", str(config), "--window", "300"]), environ=env)
    assert conf.window == 300  # flag
    assert conf.timeout == 2  # env
    assert conf.interval == 10 and conf.min_draft_tokens == 5 and conf.insecure_skip_verify  # file


@pytest.mark.parametrize(("content", "message"), [
    ("windw: 3\n", "unknown option"),
    ("- a\n", "expected a mapping"),
    ("interval: soon\n", "cannot read 'soon'"),
])
def test_bad_config_file_is_named(tmp_path, content, message):
    config = tmp_path / "c.yaml"
    config.write_text(content)
    with pytest.raises(ValueError, match=message):
        settings.resolve(parse(["--config-file", str(config)]), environ={})


def test_secret_from_file_or_env(tmp_path):
    secret = tmp_path / "token"
    secret.write_text("abc\n")
    assert settings.read_secret(str(secret), "X", environ={}) == "abc"
    assert settings.read_secret(None, "X", environ={"X": "fromenv"}) == "fromenv"
    assert settings.read_secret(None, "X", environ={}) is None
    with pytest.raises(ValueError, match="cannot read secret file"):
        settings.read_secret(str(tmp_path / "missing"), "X", environ={})


def test_help_explains_every_option_and_never_shows_secret_values():
    env = {"VLLM_SPEC_EXPORTER_BEARER_TOKEN": "top-secret-123", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([str(SCRIPT), "serve", "--help"], capture_output=True, text=True, env=env,
                         timeout=30).stdout
    for field in settings.HELP:
        assert "--" + field.replace("_", "-") in out
    assert "top-secret-123" not in out
