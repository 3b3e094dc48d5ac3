"""Security of the exporter process: TLS + basic auth (web config), no open proxy, secrets hidden."""

from __future__ import annotations

import subprocess
import time

import bcrypt
import pytest
import requests

from vllm_spec_exporter import webconfig
from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.fakes.badtarget import BadTarget
from vllm_spec_lab.fakes.vllm import FakeVllm
from vllm_spec_lab.waiting import wait_until


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return d


def web_config(path, users=None, tls=None) -> str:
    import yaml

    data = {}
    if users:
        data["basic_auth_users"] = {u: bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=4)).decode()
                                    for u, p in users.items()}
    if tls:
        data["tls_server_config"] = tls
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_basic_auth_and_tls(tmp_path, tls_files):
    config = web_config(tmp_path / "web.yml", users={"prom": "right-horse"},
                        tls={"cert_file": str(tls_files / "cert.pem"), "key_file": str(tls_files / "key.pem")})
    with FakeVllm() as fake, ExporterProcess(fake.start(), "--web-config-file", config) as exporter:
        https = exporter.url.replace("http://", "https://")
        ca = str(tls_files / "cert.pem")
        assert requests.get(https + "/metrics", verify=ca, timeout=5).status_code == 401
        assert requests.get(https + "/metrics", verify=ca, auth=("prom", "wrong"), timeout=5).status_code == 401
        assert requests.get(https + "/metrics", verify=ca, auth=("eve", "right-horse"), timeout=5).status_code == 401
        ok = requests.get(https + "/metrics", verify=ca, auth=("prom", "right-horse"), timeout=5)
        assert ok.status_code == 200 and "vllm_spec_exporter_target_up" in ok.text
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(exporter.url + "/metrics", timeout=5)  # plain HTTP on a TLS port
        logs = exporter.stop()
    assert "right-horse" not in logs and "https://" in logs


@pytest.mark.parametrize(("content", "message"), [
    ("basic_auth_users:\n  prom: plaintext\n", "bcrypt hash"),
    ("tls_server_config:\n  cert_file: /nope.pem\n  key_file: /nope.pem\n", "cannot load"),
    ("tls_server_config:\n  key_file: k\n", "needs cert_file"),
    ("basic_auth: {}\n", "unknown key"),
])
def test_bad_web_config_is_named(tmp_path, content, message):
    path = tmp_path / "web.yml"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        webconfig.load(path)


def test_no_request_parameter_changes_where_the_exporter_connects():
    with BadTarget() as target, BadTarget() as elsewhere:
        target.set(target.body(b"# TYPE x gauge\n"))
        with ExporterProcess(target.url, interval=0.3, timeout=0.2) as exporter:
            for path in ("/metrics?target=" + elsewhere.url, "/probe?target=" + elsewhere.url,
                         "/metrics?module=x&target=127.0.0.1:" + str(elsewhere.port)):
                requests.get(exporter.url + path, timeout=5)
            time.sleep(1)
        assert elsewhere.requests == []
        # /version (vLLM), /props (llama.cpp's version), /v1/models (the model of unlabelled engines),
        # /server_info?config_format=json (vLLM's speculative config).
        assert target.requests and all(r.startswith((b"GET /metrics ", b"GET /version ", b"GET /props ",
                                                     b"GET /v1/models ", b"GET /server_info?config_format=json "))
                                       for r in target.requests)


def test_credentials_never_reach_logs_metrics_or_health(tmp_path):
    token = "tok-7f3a9c-very-secret"
    password = "pw-2b8e-also-secret"
    secret_file = tmp_path / "pw"
    secret_file.write_text(password + "\n")
    with BadTarget() as target:
        target.set(target.status("401 Unauthorized"))
        env = {"VLLM_SPEC_EXPORTER_BEARER_TOKEN": token}
        with ExporterProcess(target.url, "--log-level", "debug", env=env) as exporter:
            assert wait_until(lambda: len(target.requests) >= 2, 5)
            exposed = requests.get(exporter.url + "/metrics", timeout=5).text
            exposed += requests.get(exporter.url + "/healthz", timeout=5).text
            logs = exporter.stop()
        assert any(token.encode() in r for r in target.requests)  # it is sent to the target...
        for text in (exposed, logs):  # ...and nowhere else
            assert token not in text
        with ExporterProcess(target.url, "--basic-auth-user", "u", "--basic-auth-password-file",
                             str(secret_file), "--log-level", "debug") as exporter:
            assert wait_until(lambda: b"Authorization: Basic" in target.requests[-1], 5)
            exposed = requests.get(exporter.url + "/metrics", timeout=5).text
            logs = exporter.stop()
        assert password not in exposed and password not in logs


def test_sigterm_does_not_wait_for_a_poll_blocked_on_a_hung_target():
    with BadTarget() as target:
        target.set(target.hang())
        exporter = ExporterProcess(target.url, interval=12, timeout=10, window=60).start()
        time.sleep(0.5)  # a poll is in flight, blocked on the hung target for up to 10 s
        started = time.monotonic()
        logs = exporter.stop()
        elapsed = time.monotonic() - started
    assert exporter.proc.returncode == 0
    assert "stopped in" in logs
    # Waiting for the poll would take ~9.5 s more; the bound only separates the two behaviours
    # (the measured shutdown time is printed by bench/bench_load.py).
    assert elapsed < 5, elapsed


def test_basic_auth_edge_cases_answer_401_never_crash(tmp_path):
    long_password = "x" * 80  # bcrypt reads 72 bytes; bcrypt >= 5 raises beyond that
    hashed = bcrypt.hashpw(long_password.encode()[:72], bcrypt.gensalt(rounds=4)).decode()
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n")
    config = webconfig.load(path)

    def header(user: str, password: str, scheme: str = "Basic") -> str:
        import base64

        return f"{scheme} " + base64.b64encode(f"{user}:{password}".encode()).decode()

    assert config.authorized(header("prom", long_password))
    assert config.authorized(header("prom", long_password, scheme="basic"))  # scheme is case-insensitive
    assert not config.authorized(header("prom", "y" * 100))
    assert not config.authorized(header("nobody", ""))
    assert not config.authorized("Basic !!!not-base64")
    assert not config.authorized("Bearer abc")
    path.write_text("basic_auth_users:\n  prom: '$2y$10$broken'\n")
    with pytest.raises(ValueError, match="malformed"):
        webconfig.load(path)


def test_healthz_answers_probes_without_credentials_but_reveals_nothing(tmp_path):
    config = web_config(tmp_path / "web.yml", users={"prom": "pw"})
    with BadTarget() as target, ExporterProcess(target.url, "--web-config-file", config) as exporter:
        target.set(target.status("500 Internal Server Error"))
        time.sleep(1)
        health = requests.get(exporter.url + "/healthz", timeout=5)
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        assert requests.get(exporter.url + "/metrics", timeout=5).status_code == 401
        detailed = requests.get(exporter.url + "/healthz", auth=("prom", "pw"), timeout=5).json()
        assert detailed["target_up"] is False and "HTTP 500" in detailed["last_error"]
