"""Which server binaries the demo and the tests run, and which versions they are.

Two generations are installed side by side (scripts/bootstrap.sh):

- Debian testing's Prometheus 3.x, promtool 3.x, Alertmanager 0.3x (+ amtool) and VictoriaMetrics
  (`victoria-metrics`, `vmalert`, `vmalert-tool`), unpacked into
  ``$VLLM_SPEC_EXPORTER_CACHE/debian-testing/root/usr/bin`` with their package versions in
  ``debian-testing/versions.txt``. These are the real servers of the demo and the tests.
- Debian 12's Prometheus 2.42, promtool and Alertmanager 0.25 (as ``prometheus-alertmanager``) in
  /usr/bin: the oldest versions we support (promtool rule tests run on both), and the fallback when
  testing could not be installed (bootstrap says so loudly).

Each ``*_BIN`` constant is the path chosen once at import: the testing binary when it is there,
else Debian 12's. VictoriaMetrics has no Debian 12 package, so its paths point into the cache
whether or not they exist (tests call ``require_binary`` on them).

Prometheus, Alertmanager and amtool from testing are the relocated copies bootstrap makes in
``debian-testing/relocated`` (`relocate`): they read their data files (Alertmanager's default
templates, the web assets) relative to their working directory. `monitoring.ServerProcess` starts
every server in `working_dir(binary)`, the unpacked root, so each finds its own package's files and
never the host's /usr/share/prometheus or /etc/prometheus; amtool and promtool read none of them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from . import default_cache_dir
from .relocate import BINARIES as RELOCATED_BINARIES

TESTING_ROOT = default_cache_dir() / "debian-testing"
TESTING_UNPACKED = TESTING_ROOT / "root"
TESTING_BIN_DIR = TESTING_UNPACKED / "usr" / "bin"
TESTING_RELOCATED_DIR = TESTING_ROOT / "relocated"
TESTING_VERSIONS_FILE = TESTING_ROOT / "versions.txt"
# Written by bootstrap when it could not install testing's servers (its reason, one line).
TESTING_FALLBACK_FILE = TESTING_ROOT / "FALLBACK"
DEBIAN12_BIN_DIR = Path("/usr/bin")


def _newest(testing_name: str, debian12_name: str | None = None) -> str:
    """The testing binary when installed (its relocated copy for those `relocate` handles), else
    Debian 12's (or the testing path when 12 has none)."""
    relocated = testing_name in RELOCATED_BINARIES
    testing = (TESTING_RELOCATED_DIR if relocated else TESTING_BIN_DIR) / testing_name
    if os.access(testing, os.X_OK) or debian12_name is None:
        return str(testing)
    return str(DEBIAN12_BIN_DIR / debian12_name)


PROMETHEUS_BIN = _newest("prometheus", "prometheus")
PROMTOOL_BIN = _newest("promtool", "promtool")
# Debian 12's Alertmanager 0.25 is named prometheus-alertmanager; testing's package keeps that name.
ALERTMANAGER_BIN = _newest("prometheus-alertmanager", "prometheus-alertmanager")
AMTOOL_BIN = _newest("amtool", "amtool")
# The oldest supported promtool (Debian 12's 2.42): rule tests run on it as well as on PROMTOOL_BIN.
PROMTOOL_OLDEST_BIN = str(DEBIAN12_BIN_DIR / "promtool")
# The oldest supported amtool (Debian 12's Alertmanager 0.25): the config is checked on both.
AMTOOL_OLDEST_BIN = str(DEBIAN12_BIN_DIR / "amtool")
VICTORIA_METRICS_BIN = _newest("victoria-metrics")
VMALERT_BIN = _newest("vmalert")
VMALERT_TOOL_BIN = _newest("vmalert-tool")


def working_dir(binary: str) -> Path | None:
    """The directory `binary` must run in to find its data files: the unpacked root for a relocated
    testing build, None (any) for everything else."""
    return TESTING_UNPACKED if Path(binary).parent == TESTING_RELOCATED_DIR else None


# `prometheus, version 3.5.3+ds1 (branch: ...)`, `alertmanager, version 0.33.1 (...)`
_VERSION_LINE = re.compile(r"version (\d+\.\d+\.\d+)")


def have_binary(path: str) -> str | None:
    """`path` (or the same name on PATH) if it is an executable, else None."""
    return path if os.access(path, os.X_OK) else shutil.which(Path(path).name)


def binary_version(path: str) -> str | None:
    """The upstream version a Prometheus-family binary prints (`3.5.3`), or None if it cannot run."""
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20, check=False)
    except OSError:
        return None
    match = _VERSION_LINE.search(result.stdout + result.stderr)
    return match.group(1) if match else None


def testing_package_versions() -> dict[str, str]:
    """Debian testing package → upstream version (`victoria-metrics` → `1.145.0`), from the file
    bootstrap writes; empty when testing is not installed. Needed because the Debian builds of
    VictoriaMetrics and vmalert print an empty version."""
    if not TESTING_VERSIONS_FILE.exists():
        return {}
    versions = {}
    for line in TESTING_VERSIONS_FILE.read_text().splitlines():
        package, _, debian_version = line.partition(" ")
        if debian_version:
            # 1.145.0+ds1-2 → 1.145.0: drop the Debian revision and the repack suffix.
            versions[package] = re.split(r"[+~-]", debian_version, maxsplit=1)[0]
    return versions


def testing_fallback_reason() -> str | None:
    """Why bootstrap fell back to Debian 12's servers (the one-line reason it wrote into
    ``debian-testing/FALLBACK``), or None when it did not."""
    try:
        return TESTING_FALLBACK_FILE.read_text().strip() or "unknown reason"
    except FileNotFoundError:
        return None
