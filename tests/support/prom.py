"""Prometheus / Alertmanager / webhook helpers for tests (the classes live in the package's lab, where
the demo uses them too), plus the test-only pieces: `require_binary()` and `run_tool()`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from vllm_spec_exporter.lab.monitoring import (  # noqa: F401 (re-exported for the tests)
    ALERTMANAGER_BIN,
    AMTOOL_BIN,
    PROMETHEUS_BIN,
    PROMTOOL_BIN,
    Alertmanager,
    Prometheus,
    WebhookReceiver,
    free_port,
    have_binary,
    http_get_json,
    is_ready,
    wait_until,
)


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
