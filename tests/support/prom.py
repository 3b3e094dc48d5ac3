"""Test-only helpers for the Prometheus tool binaries: `require_binary()` and `run_tool()`.

The Prometheus, Alertmanager and webhook classes live in the lab (`vllm_spec_lab.monitoring`),
where the demo uses them too; tests import them from there.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from vllm_spec_lab.monitoring import have_binary


def require_binary(path: str) -> str:
    """Return `path` if executable; otherwise skip the test, or fail it when running in CI (env `CI`
    set): CI must never go green by skipping the real checks."""
    import pytest

    found = have_binary(path)
    if found:
        return found
    message = f"{path} not found (Debian: apt-get install prometheus prometheus-alertmanager)"
    if os.environ.get("CI"):
        pytest.fail(message + " — required in CI", pytrace=False)
    pytest.skip(message)


def run_tool(args: list[str], cwd: Path | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run a CLI tool (promtool, amtool) and capture its output as text."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
