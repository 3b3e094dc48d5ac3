"""The exporter as a real process: serves the schema, survives faults, recovers, shuts down cleanly.

The target here is lab/vllm_spec_lab/fakes/vllm.py (a simulation with vLLM 0.32's real wire format) or a
misbehaving socket server; test_real_vllm.py runs the same process against a real vLLM.
"""

from __future__ import annotations

import time

import requests

from vllm_spec_exporter import schema
from vllm_spec_lab import processes
from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.fakes.badtarget import BadTarget
from vllm_spec_lab.fakes.vllm import FakeVllm
from vllm_spec_lab.waiting import wait_until

SERIES = (("engine", "0"), ("model_name", "tiny-llama"))


def test_serves_every_derived_and_health_metric_and_no_colons():
    # (drafted_per_position: the per-position draft counter some builds export, re-exposed too;
    # latency_histograms: vLLM's latency histograms, re-exposed too)
    with FakeVllm(k=3, drafted_per_position=True, latency_histograms=True) as fake, \
            ExporterProcess(fake.start()) as exporter:
        fake.drive(40, 0.5)
        assert wait_until(lambda: "vllm_spec_decode_acceptance_ratio" in exporter.metrics(), 10)
        m = exporter.metrics()
        assert 0.4 <= m["vllm_spec_decode_acceptance_ratio"][SERIES] <= 0.6
        assert m["vllm_spec_exporter_target_up"][()] == 1
        assert m["vllm_spec_decode_enabled"][()] == 1
        assert m["vllm_spec_decode_num_speculative_tokens"][SERIES] == 3
        served = set(m)
        # Every name but the other engines' own gauges (tests/sidecar/test_engines.py serves those).
        missing = schema.exposed_names() - served - {m.name for m in schema.ENGINE_GAUGES}
        assert not missing, missing
        assert not [name for name in served if ":" in name]
        info = m["vllm_spec_exporter_target_info"]
        assert (("engine_family", "vllm"), ("schema", "v1"), ("version", "")) in info


def test_target_down_omits_vllm_series_and_recovers():
    with FakeVllm() as fake, BadTarget() as bad:
        url = fake.start()
        with ExporterProcess(bad.url) as exporter:
            bad.set(bad.status("503 Service Unavailable"))
            assert wait_until(lambda: exporter.metrics()["vllm_spec_exporter_scrape_errors_total"]
                              [(("reason", "http_status"),)] >= 1, 5)
            m = exporter.metrics()
            assert m["vllm_spec_exporter_target_up"][()] == 0
            assert not any(name.startswith(("vllm_spec_decode_", "vllm_generation")) for name in m)
            # heal: serve the fake's body through the bad target
            bad.set(lambda conn: conn.sendall(_proxy(url)))
            assert wait_until(lambda: exporter.metrics()["vllm_spec_exporter_target_up"][()] == 1, 5)
            assert "vllm_spec_decode_drafts_total" in exporter.metrics()


def _proxy(url: str) -> bytes:
    from vllm_spec_lab.fakes.badtarget import http_response

    return http_response(requests.get(url + "/metrics", timeout=2).content)


def test_spec_decoding_off_reports_disabled_not_error():
    with FakeVllm(spec_enabled=False) as fake, ExporterProcess(fake.start()) as exporter:
        assert wait_until(lambda: exporter.metrics().get("vllm_spec_decode_enabled") == {(): 0.0}, 5)
        m = exporter.metrics()
        assert m["vllm_spec_exporter_target_up"][()] == 1
        assert "vllm_spec_decode_acceptance_ratio" not in m
        assert (("engine_family", "vllm"), ("schema", "none"), ("version", "")) in m[
            "vllm_spec_exporter_target_info"]


def test_restart_is_counted_and_never_negative():
    with FakeVllm() as fake, ExporterProcess(fake.start(), min_draft_tokens=1) as exporter:
        fake.step(500, 0.8)
        time.sleep(1.2)
        fake.restart()
        fake.step(5, 0.8)
        assert wait_until(lambda: exporter.metrics()["vllm_spec_exporter_target_restarts_total"][()] >= 1, 5)
        for name, series in exporter.metrics().items():
            if name.endswith("_per_second"):
                assert all(v >= 0 for v in series.values()), name


def test_healthz_and_landing_page_and_sigterm():
    with FakeVllm() as fake:
        exporter = ExporterProcess(fake.start()).start()
        # start() returns once it listens; "ok" needs a first finished poll ("stalled" until then:
        # CI at load 7 read it in between). A limit, not an expectation.
        health = wait_until(lambda: (h := requests.get(exporter.url + "/healthz", timeout=2).json())["status"] == "ok"
                            and h, 30, what="/healthz status ok")
        assert health["status"] == "ok"
        assert "/metrics" in requests.get(exporter.url + "/", timeout=2).text
        assert requests.get(exporter.url + "/nope", timeout=2).status_code == 404
        exporter.stop()
        # 0, not -9: it ended on SIGTERM, within the stop's grace, before any SIGKILL.
        assert exporter.proc.returncode == 0


def test_bad_flags_give_one_clear_error_line():
    import subprocess

    from vllm_spec_lab.exporter_process import SCRIPT

    cases = [(["--target", "localhost:8000"], "http(s) URL"),
             (["--interval", "1", "--timeout", "2"], "shorter than --interval"),
             (["--window", "1", "--interval", "1", "--timeout", "0.5"], "at least two polls"),
             (["--interval", "soon"], "cannot read 'soon'")]
    for args, message in cases:
        done = subprocess.run([str(SCRIPT), "serve", *args], capture_output=True, text=True, timeout=20)
        assert done.returncode == 2, args
        assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_listens_on_an_ipv6_loopback():
    import socket

    from vllm_spec_lab.exporter_process import SCRIPT

    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    with processes.spawn([str(SCRIPT), "serve", "--listen", f"[::1]:{port}", "--target", "http://127.0.0.1:1"],
                         name="exporter", ready=lambda: _answers(f"http://[::1]:{port}/healthz"), ready_timeout=10):
        pass  # it answered on [::1]: the readiness probe is the check


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False
