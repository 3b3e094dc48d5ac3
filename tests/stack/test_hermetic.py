"""The main command needs nothing from the system that its own install did not put there.

`bash scripts/run.sh` (bootstrap's demo purpose, then the demo) runs in a private mount namespace
in which /usr/share/prometheus and /etc/prometheus, where Debian's own Prometheus and Alertmanager
packages keep their data files, are empty: what the test purpose installed (Debian 12's
prometheus-alertmanager among it) is out of sight, as on a machine that never ran the tests. The
demo must still run its phases and end with `verdict: AS EXPECTED`, exit 0. vLLM is the
simulated one (lab/vllm_spec_lab/fakes/vllm_cache.py, found where the demo finds the real venv):
what is under test is the install and the monitoring servers, which are the real ones.

Needs root for the mount namespace (CI runs as root): skipped elsewhere, failed in CI.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from support.paths import ROOT
from support.policy import require, require_tool
from support.prom import require_binary
from vllm_spec_lab.binaries import testing_fallback_reason
from vllm_spec_lab.demo import DEFAULT_PHASE_SECONDS
from vllm_spec_lab.fakes.vllm_cache import make_fake_cache
from vllm_spec_lab.monitoring import ALERTMANAGER_BIN, PROMETHEUS_BIN

pytestmark = [pytest.mark.server, pytest.mark.prometheus]
# Where Debian's packages put the files their builds read (lab/vllm_spec_lab/relocate.py).
SYSTEM_DATA_DIRS = ("/usr/share/prometheus", "/etc/prometheus")
# Each directory that exists is covered by an empty tmpfs; then the command runs, and the listing
# proves the cover held.
HIDE_THEN_RUN = """
for dir in "$@"; do
  case "$dir" in --) shift; break ;; esac
  shift
  [ ! -d "$dir" ] || mount -t tmpfs -o size=1m,mode=0755 hidden "$dir" || exit 97
  echo "HIDDEN $dir: [$(ls -A "$dir" 2>/dev/null | tr '\\n' ' ')]"
done
exec "$@"
"""


def hermetic(command: list[str]) -> list[str]:
    """`command` in a private mount namespace with SYSTEM_DATA_DIRS empty."""
    unshare = require_tool("unshare", "util-linux")
    if os.geteuid() != 0:
        require("a private mount namespace needs root (CI runs as root)")
    return [unshare, "--mount", "--propagation", "private", "sh", "-c", HIDE_THEN_RUN, "sh",
            *SYSTEM_DATA_DIRS, "--", *command]


def test_run_sh_demo_with_the_systems_prometheus_files_hidden(tmp_path):
    require_binary(PROMETHEUS_BIN)
    require_binary(ALERTMANAGER_BIN)
    fallback = testing_fallback_reason()
    if fallback:  # then the demo rightly runs Debian 12's servers, whose files are in those folders
        require(f"Debian testing's servers are not installed ({fallback}): nothing to prove hermetic")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cache = make_fake_cache(tmp_path / "cache")
    env = {**os.environ, "VLLM_SPEC_EXPORTER_CACHE": str(cache), "TMPDIR": str(tmp)}
    # The README's main command word for word (its phases at the default length).
    proc = subprocess.Popen(hermetic(["bash", str(ROOT / "scripts" / "run.sh")]), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=4 * DEFAULT_PHASE_SECONDS + 300)
    finally:  # whatever ends the wait: the demo and every server it started go with their group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    shown = stdout[-6000:] + "\n--- stderr ---\n" + stderr[-3000:]
    for directory in SYSTEM_DATA_DIRS:
        if Path(directory).is_dir():
            assert f"HIDDEN {directory}: []" in stdout, shown
    assert proc.returncode == 0, shown
    assert "verdict: AS EXPECTED" in stdout, shown
