"""Test-only helpers for the Prometheus-family binaries: `require_binary()`, `require_version()` and
`run_tool()`.

The Prometheus, Alertmanager and webhook classes live in the lab (`vllm_spec_lab.monitoring`,
VictoriaMetrics and vmalert in `vllm_spec_lab.victoria`), where the demo uses them too; the paths
are chosen in `vllm_spec_lab.binaries` (Debian testing's 3.x / 0.3x when bootstrap installed them).
"""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

from support.policy import require
from support.report import FALLBACK_NOTES
from vllm_spec_lab.binaries import binary_version, have_binary, testing_fallback_reason

INSTALL_HINT = ("run scripts/bootstrap.sh (Debian 12: prometheus prometheus-alertmanager; "
                "Debian testing: 3.x, 0.3x, victoria-metrics)")


def require_binary(path: str) -> str:
    """Return `path` if executable; otherwise skip the test (fail it in CI), naming what is missing."""
    found = have_binary(path)
    if found:
        return found
    require(f"{path} not found ({INSTALL_HINT})")


def is_version(path: str, prefix: str) -> bool:
    """True when the binary at `path` reports a version starting with `prefix` (`3.`, `0.3`)."""
    version = binary_version(path)
    return bool(version and version.startswith(prefix))


def require_version(path: str, prefix: str) -> str:
    """`require_binary(path)`, and its `--version` must start with `prefix` (`3.`, `0.3`): a test that
    is about Prometheus 3 must not pass on the 2.42 fallback unnoticed.

    When bootstrap fell back to Debian 12's servers (it says why in debian-testing/FALLBACK), a
    change in Debian testing must not block a landing: the test runs against what is there, with a
    warning (support/report.py FALLBACK_NOTES), and the run ends with one loud line naming the
    fallback. Otherwise a wrong version fails the test in CI (skips it elsewhere)."""
    found = require_binary(path)
    if is_version(found, prefix):
        return found
    message = f"{found} is version {binary_version(found)}, this test expects {prefix}x"
    reason = testing_fallback_reason()
    if reason is not None:
        note = f"{message}: ran on it (bootstrap fell back: {reason})"
        FALLBACK_NOTES.append(note)
        warnings.warn(note, stacklevel=2)
        return found
    require(f"{message} ({INSTALL_HINT})")


def run_tool(args: list[str], cwd: Path | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run a CLI tool (promtool, amtool, vmalert-tool) and capture its output as text."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
