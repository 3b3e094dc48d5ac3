"""Run the real exporter as a process (the console script) and read its /metrics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from vllm_spec_lab.pipeline import exporter_snapshot
from vllm_spec_lab.server import free_port

SCRIPT = Path(sys.executable).with_name("vllm-spec-exporter")


class ExporterProcess:
    def __init__(self, target: str, *args: str, interval: float = 0.5, window: float = 10,
                 timeout: float = 0.4, min_draft_tokens: float = 0, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [str(SCRIPT), "serve", "--target", target, "--listen", f"127.0.0.1:{self.port}",
                    "--interval", str(interval), "--window", str(window), "--timeout", str(timeout),
                    "--min-draft-tokens", str(min_draft_tokens), *args]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        # Logs go to a file, not a pipe: readable at any time, and a chatty exporter can never block
        # on a full pipe buffer.
        self.log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 (lives as long as the process)
            prefix="vllm-spec-exporter-", suffix=".log", delete=False)

    def start(self, wait: float = 15) -> ExporterProcess:
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self.log_file, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            self._wait_listening(wait)
        except BaseException:
            self.stop()  # never leak the process when start-up fails (__exit__ will not run)
            raise
        return self

    def _wait_listening(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exporter exited {self.proc.returncode}: {self.logs()}")
            for url in (self.url, self.url.replace("http://", "https://")):
                try:
                    requests.get(url + "/healthz", timeout=1, verify=False)  # any answer: it listens
                    return
                except requests.RequestException:
                    pass
            time.sleep(0.1)
        raise RuntimeError("exporter did not start listening")

    def metrics(self) -> dict[str, dict[tuple, float]]:
        """{sample name: {sorted label items: value}}"""
        return exporter_snapshot(self.url)

    def logs(self) -> str:
        return Path(self.log_file.name).read_text(errors="replace")

    def stop(self) -> str:
        """SIGTERM, wait; returns the process output (logs)."""
        if self.proc is None:
            return ""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.logs()

    def __enter__(self) -> ExporterProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
