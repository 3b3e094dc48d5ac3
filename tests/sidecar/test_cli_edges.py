"""Every bad flag value of every command: one line on stderr naming the flag, exit 2, no traceback.

All invocations run concurrently as real processes of the console script (none may get as far as
serving: each is bounded by a timeout, which would fail the case).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from vllm_spec_lab.exporter_process import SCRIPT
from vllm_spec_lab.ports import free_port

LAB_SCRIPT = SCRIPT.with_name("vllm-spec-lab")
LAB = "vllm-spec-lab"  # a case starting with it runs the lab's console script instead of the exporter's

MISSING = "/nonexistent/file"
BAD = [
    # serve: every option, through the flag
    ("serve", "--listen", "127.0.0.1:99999"), ("serve", "--listen", "no-port"), ("serve", "--listen", "host:-1"),
    ("serve", "--listen", "no.such.host.invalid:9850"),
    ("serve", "--target", "ftp://x"), ("serve", "--target", ""), ("serve", "--target", "http://u:p@h:1"),
    ("serve", "--interval", "abc"), ("serve", "--interval", "0"), ("serve", "--interval", "nan"),
    ("serve", "--interval", "inf"), ("serve", "--window", "-5"), ("serve", "--window", "nan"),
    ("serve", "--timeout", "-1"), ("serve", "--timeout", "nan"), ("serve", "--timeout", "9"),
    ("serve", "--min-draft-tokens", "-1"), ("serve", "--min-draft-tokens", "nan"),
    ("serve", "--draft-cost-ratio", "-0.1"), ("serve", "--draft-cost-ratio", "nan"),
    ("serve", "--max-bytes", "0"), ("serve", "--max-bytes", "1.5"), ("serve", "--max-series", "x"),
    ("serve", "--bearer-token-file", MISSING), ("serve", "--basic-auth-password-file", MISSING),
    ("serve", "--ca-file", MISSING), ("serve", "--client-cert-file", MISSING),
    ("serve", "--web-config-file", MISSING), ("serve", "--log-level", "loud"), ("serve", "--config-file", MISSING),
    ("serve", "--no-such-flag", "1"),
    # check
    ("check", "--duration", "soon"), ("check", "--threshold", "1.5"), ("check", "--threshold", "nan"),
    ("check", "--min-draft-tokens", "-3"), ("check", "--timeout", "0"), ("check", "--timeout", "abc"),
    ("check", "--draft-cost-ratio", "-1"), ("check", "--method", "magic"), ("check", "--color", "pink"),
    ("check", "--target", "http://h:1/metrics?x=1"),
    # demo, through the exporter's plugin command and as the lab's own
    ("demo", "--phase-seconds", "5"), ("demo", "--phase-seconds", "nan"), ("demo", "--refresh", "0"),
    ("demo", "--refresh", "abc"), ("demo", "--target", "not a url"),
    (LAB, "demo", "--phase-seconds", "5"), (LAB, "demo", "--refresh", "abc"), (LAB, "demo", "--target", "not a url"),
    (LAB, "demo", "--no-such-flag"), (LAB, "nonsense-command"),
    # generate
    ("generate", "--set", "no_such_key=1"), ("generate", "--config", MISSING),
    ("nonsense-command",),
]


def extra(case: tuple[str, ...], cwd) -> list[str]:
    """Keep each case to the one bad value: a free port for serve (should it wrongly start), a
    scratch output folder for generate (the test runs outside a checkout)."""
    if case[0] == "serve" and case[1] != "--listen":
        return ["--listen", "127.0.0.1:0"]
    if case[0] == "generate":
        return ["--output", str(cwd / "out")]
    return []


def command(case: tuple[str, ...]) -> list[str]:
    return [str(LAB_SCRIPT), *case[1:]] if case[0] == LAB else [str(SCRIPT), *case]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("cwd")
    env = {**os.environ, "VLLM_SPEC_EXPORTER_CACHE": str(cwd / "cache")}
    procs = [(case, subprocess.Popen(command(case) + extra(case, cwd), cwd=cwd, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True))
             for case in BAD]
    results = {}
    for case, proc in procs:
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err = "TIMEOUT (it started instead of refusing)\n" + err
        results[case] = (proc.returncode, out, err)
    return results


@pytest.mark.parametrize("case", BAD, ids=" ".join)
def test_bad_value_gets_one_line_and_exit_2(outcomes, case):
    code, out, err = outcomes[case]
    assert code == 2, (code, out, err)
    assert "Traceback" not in err + out, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    args = case[1:] if case[0] == LAB else case
    if len(args) > 1:
        flag = args[1]
        assert flag in lines[0] or flag.lstrip("-").replace("-", "_") in lines[0] or "argument" in lines[0], lines[0]


def test_generate_refuses_to_write_outside_a_checkout(tmp_path):
    done = subprocess.run([str(SCRIPT), "generate"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--output" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []
    written = subprocess.run([str(SCRIPT), "generate", "--output", str(tmp_path / "out")], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "out" / "alerts" / "prometheus_alerts.yaml").is_file()


def test_check_help_shows_defaults_and_colour_choices():
    done = subprocess.run([str(SCRIPT), "check", "--help"], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "COLUMNS": "200"})
    text = " ".join(done.stdout.split())
    for expected in ("default http://127.0.0.1:8000", "default 30s", "default 0.5", "default 100", "default 3",
                     "auto (when stdout is a terminal), always or never"):
        assert expected in text, expected


def test_check_says_target_down_once(tmp_path):
    port = free_port()
    done = subprocess.run([str(SCRIPT), "check", "--target", f"http://127.0.0.1:{port}", "--duration", "2s"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert (done.stdout + done.stderr).count("Connection refused") == 1, done.stdout + done.stderr
