"""Run the real exporter as a process and read its /metrics: the one way the lab (the demo's
LocalStack), the tests, the tools and the benches launch the exporter. It runs the console script
under `processes.spawn`, so it never outlives whoever started it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import requests

from vllm_spec_lab import processes
from vllm_spec_lab.ports import free_port

SCRIPT = Path(sys.executable).with_name("vllm-spec-exporter")

# The exporter serves /metrics from memory whatever its poll is doing: a read slower than a scrape
# timeout (Prometheus' default, 10 s) is a fault to see, not to wait out (LOCAL_API_TIMEOUT_SECONDS
# is for Prometheus' and Alertmanager's query APIs).
EXPORTER_READ_TIMEOUT_SECONDS = 10.0


class ExporterProcess:
    """One `vllm-spec-exporter serve` of the venv running the caller, on a free loopback port,
    polling `target`; `start()` returns once it answers /healthz, `stop()` ends it and returns its
    log. Usable as a context manager."""

    def __init__(self, target: str, *args: str, interval: float = 0.5, window: float = 10,
                 timeout: float = 0.4, min_draft_tokens: float = 0, env: dict[str, str] | None = None,
                 log: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [str(SCRIPT), "serve", "--target", target, "--listen", f"127.0.0.1:{self.port}",
                    "--interval", str(interval), "--window", str(window), "--timeout", str(timeout),
                    "--min-draft-tokens", str(min_draft_tokens), *args]
        self.env = {**os.environ, **(env or {})}
        self.log = log  # None: a file in the child's own temporary folder
        self.proc: processes.ChildProcess | None = None  # kept after stop(): its exit code

    def start(self, wait: float = 60) -> ExporterProcess:
        # The limit only bounds a hang (an exit is seen at once): while the suite starts a real
        # vLLM on the CPU beside it, a bare start-up to listening took over 15 s on 2 cores.
        # The log is a file, not a pipe: readable at any time, and a chatty exporter can never
        # block on a full pipe buffer. It lives in the child's own temporary folder (processes) unless
        # the caller keeps it (the demo's log folder).
        self.proc = processes.spawn(self.cmd, name="exporter", env=self.env, log=self.log, ready=self._listening,
                                    ready_timeout=wait, interval=0.1)
        return self

    def _listening(self) -> bool:
        """Any answer on /healthz, over HTTP or HTTPS (a --web-config-file with TLS): it listens."""
        for url in (self.url, self.url.replace("http://", "https://")):
            try:
                requests.get(url + "/healthz", timeout=1, verify=False)
                return True
            except requests.RequestException:
                pass
        return False

    def metrics(self) -> dict[str, dict[tuple, float]]:
        """{sample name: {sorted label items: value}}"""
        return exporter_snapshot(self.url)

    def logs(self) -> str:
        return self.proc.log_text() if self.proc is not None else ""

    def stop(self) -> str:
        """SIGTERM to its group, SIGKILL after 10 s; returns the process output (logs)."""
        if self.proc is None:
            return ""
        self.proc.stop()
        return self.logs()

    def __enter__(self) -> ExporterProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def exporter_snapshot(exporter_url: str) -> dict[str, dict[tuple, float]]:
    """The exporter's own /metrics as {name: {sorted label items: value}}."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(exporter_url + "/metrics", timeout=EXPORTER_READ_TIMEOUT_SECONDS).text
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out
