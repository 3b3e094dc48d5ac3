"""Run a real vLLM (the CPU build) on this machine: venv, tiny local models, server, traffic.

Used by the end-to-end tests, the fixture capture script and the `demo` command. Nothing here is
imported by the exporter itself; the heavy pieces (torch, transformers) live only in the separate
vLLM venv and are reached through subprocesses.
"""

import os
from pathlib import Path

CACHE_ENV_VAR = "VLLM_SPEC_EXPORTER_CACHE"


def default_cache_dir() -> Path:
    """Where the vLLM venv and the tiny models are kept between runs."""
    configured = os.environ.get(CACHE_ENV_VAR)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "vllm-spec-exporter"
