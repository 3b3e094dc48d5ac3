"""Poll the target on a fixed interval: fetch -> parse -> normalise -> window -> derive.

Polling (rather than fetching on each Prometheus scrape) is a documented exception to the usual
exporter rule: a fixed trailing window needs samples at a steady cadence whoever scrapes, and
/metrics must never wait on a slow vLLM. Each poll publishes one immutable PollResult; the
collector only formats the latest one.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import derive as derive_mod
from .engines import UNLABELLED_MODEL_FAMILIES
from .fetch import Fetcher, FetchError
from .names import FAMILY_MIXED, FAMILY_UNKNOWN, SCRAPE_ERROR_REASONS, EngineFamily, Family, Schema
from .normalise import EngineError, Snapshot, normalise
from .parse import ParseError, parse
from .specconfig import SpecConfig
from .specconfig_reader import SpecConfigReader
from .window_store import SeriesLimitError, WindowStore

__all__ = ["PollResult", "Poller", "checked_against_positions"]

log = logging.getLogger("vllm_spec_exporter")
UNKNOWN_CONFIG = SpecConfig()
# A target whose polls time out while it accepts connections is busy (a saturated vLLM answers
# /metrics seconds late), not down — for this long after its last answer. Past it, it is down
# whatever its socket says: a wedged process's port still accepts connections.
BUSY_GRACE_SECONDS = 60.0


def checked_against_positions(config: SpecConfig, snap: Snapshot) -> tuple[SpecConfig, str]:
    """`config`, its k checked against the draft positions vLLM exposes (SpecConfig.with_positions),
    with the disagreement if any; unchanged for other engines, whose positions are not their k."""
    if snap.engine_family != EngineFamily.VLLM:
        return config, ""
    return config.with_positions(snap.k_by_series.values())


@dataclass(frozen=True)
class PollResult:
    """What one poll found, published whole: scrapes read it, nobody changes it.

    `snapshot` and `derived` are set only while `target_up` and not `busy`; `busy`: this poll timed
    out while the target accepted connections, within BUSY_GRACE_SECONDS of its last answer (up,
    but no figures this poll); `errors` and `counter_resets` are the running totals at this poll
    (counters, never reset by the exporter).
    """

    target_up: bool
    busy: bool = False
    schema: Schema = Schema.NONE
    version: str = ""
    engine_family: str = ""
    snapshot: Snapshot | None = None  # None while the target is down
    derived: tuple[derive_mod.Sample, ...] = ()
    duration_seconds: float = 0.0
    last_success_unix: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    counter_resets: int = 0
    error_message: str = ""
    spec_config: SpecConfig = UNKNOWN_CONFIG  # the reader's, k checked against the metrics while up


class RateLimitedLog:
    """At most one line per key per `every` seconds of `clock`. Keys may be built from messages, so
    at most `MAX_KEYS` are remembered: past that the expired ones (which would log anyway) go."""

    MAX_KEYS = 256

    def __init__(self, every: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self._last: dict[str, float] = {}

    def warn(self, key: str, message: str, *args: object) -> None:
        now = self.clock()
        if now - self._last.get(key, -1e18) >= self.every:
            if len(self._last) >= self.MAX_KEYS:
                self._last = {k: t for k, t in self._last.items() if now - t < self.every}
            self._last[key] = now
            log.warning(message, *args)


def same_cause(message: str) -> str:
    """A failure message with its counts masked (line numbers, byte and series counts, the port)
    but an HTTP status kept: one key for what repeats, another for a new cause (HTTP 500 → 404)."""
    return re.sub(r"(?<!HTTP )\d+", "N", message)


class Poller:
    """Polls one target every `interval` seconds on its own daemon thread and publishes PollResults.

    Invariants: the poll thread alone fetches, parses, normalises, observes the WindowStore and
    derives, so the store needs no lock; all of a target's series are sampled at the same instant
    (when the target's answer arrived), which keeps numerators and denominators on one interval; each poll
    replaces `result` with a new immutable PollResult in one assignment, so a scrape thread sees
    the previous poll or the next, never half of one; a failed poll always publishes a down
    result (a previous success is never served as current), and `current()` reports down when
    polling has stalled. A poll is bounded by the fetcher's whole-exchange deadline.
    """

    def __init__(self, fetcher: Fetcher, interval: float, window: float, min_draft_tokens: float,
                 max_series: int = 10_000, draft_cost: float = derive_mod.DEFAULT_DRAFT_COST,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time,
                 spec_config: SpecConfigReader | None = None,
                 histograms: frozenset[Family] = frozenset()) -> None:
        self.fetcher = fetcher
        # vLLM's histograms to parse too (engines.SERVED_HISTOGRAMS: the sidecar and check --baseline).
        self.histograms = histograms
        self.spec_config = spec_config
        self.interval = interval
        self.min_draft_tokens = min_draft_tokens
        self.draft_cost = draft_cost
        self.store = WindowStore(window, max_series=max_series)
        self.clock = clock
        self.wall_clock = wall_clock
        self.errors = dict.fromkeys(SCRAPE_ERROR_REASONS, 0)
        self.counter_resets = 0
        self.version = ""
        # Model name for engines whose metrics carry no model_name label (llama.cpp, TGI), from the
        # server's /v1/models: without it a fleet mixing engines could not sum per model.
        self.model_name = ""
        self.last_success = 0.0
        self.answered_at = 0.0  # clock() when the target's last /metrics answer arrived
        self.result = PollResult(target_up=False, errors=dict(self.errors))
        self._last_poll_clock: float | None = None
        self._was_up: bool | None = None
        self._last_schema: str | None = None
        self._k_disagreement = ""
        self._log = RateLimitedLog(clock=clock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- one poll -----------------------------------------------------------------------------
    def poll_once(self) -> PollResult:
        started = self.clock()
        try:
            return self._poll(started)
        finally:
            self._last_poll_clock = self.clock()

    def seconds_since_last_poll(self) -> float | None:
        last = self._last_poll_clock
        return None if last is None else self.clock() - last

    @property
    def stale_after(self) -> float:
        """Seconds without a finished poll after which the last result is no longer served as
        current (a poll is bounded by the fetch deadline, so this only trips on a stuck loop)."""
        return 3 * self.interval + 2 * self.fetcher.timeout + 5

    def current(self) -> PollResult:
        """The latest result, or a 'down' result when polling has stalled."""
        result = self.result
        age = self.seconds_since_last_poll()
        if result.target_up and age is not None and age > self.stale_after:
            return PollResult(target_up=False, schema=result.schema, version=result.version,
                              engine_family=result.engine_family, last_success_unix=result.last_success_unix,
                              errors=result.errors,
                              counter_resets=result.counter_resets,
                              error_message=f"no poll finished for {age:.0f} s (polling stalled)",
                              spec_config=result.spec_config)
        return result

    def _poll(self, started: float) -> PollResult:
        try:
            text = self.fetcher.get_metrics()
            # The server reads its counters as it answers: a poll that waited seconds for a busy
            # server stamped at its start would stretch one interval and shrink the next.
            answered = self.answered_at = self.clock()
            samples = parse(text, histograms=self.histograms)
            snap = normalise(samples, default_model=self.model_name)
            # Asked when the target comes (back) up, like the version: never on every poll.
            if snap.engine_family in UNLABELLED_MODEL_FAMILIES and not self._was_up:
                self.model_name = self.fetcher.get_model_name()
                snap = normalise(samples, default_model=self.model_name)
            resets = self.store.observe(answered, snap)
        except EngineError as error:
            family = FAMILY_MIXED if error.schema == Schema.MIXED else FAMILY_UNKNOWN
            return self._publish_failure(error.reason, str(error), started, error.schema, family)
        except FetchError as error:
            if error.reason == "timeout" and self._busy():
                return self._publish_busy(str(error), started)
            return self._publish_failure(error.reason, str(error), started)
        except (ParseError, SeriesLimitError) as error:
            return self._publish_failure(error.reason, str(error), started)
        except Exception as error:  # a bug must never leave the previous result in place
            log.exception("unexpected error while polling")
            return self._publish_failure("parse", f"unexpected error: {error}", started)
        if resets:
            self.counter_resets += 1
            log.warning("vLLM counters were reset (%d series went backwards or restarted): "
                        "treating it as a server restart", resets)
        if snap.invalid:
            self.errors["invalid_sample"] += 1
            # One line per kind of problem per minute: a distinct defect is never hidden by another.
            self._log.warn("invalid:" + snap.invalid[0].split("{")[0].split(":")[0],
                           "ignored %d invalid sample(s) from the target, e.g. %s", len(snap.invalid),
                           snap.invalid[0])
        if not self._was_up or resets:
            self.version = self.fetcher.get_version() or self.version
            if self.spec_config is not None and self._was_up is not None:
                self.spec_config.target_restarted()  # a new vLLM may run another config
        if snap.schema != self._last_schema:
            why = {False: " (no spec-decode metrics: speculative decoding off)",
                   None: " (a diffusion model: its counters are not speculative decoding)"}
            log.info("target %s exposes engine %s, schema %s%s", self.fetcher.url, snap.engine_family or "?",
                     snap.schema, why.get(snap.spec_enabled, ""))
            self._last_schema = snap.schema
        if self._was_up is False:
            log.info("target %s is reachable again", self.fetcher.url)
        self._was_up = True
        derived = derive_mod.derive(self.store, snap, self.min_draft_tokens, self.draft_cost)
        self.last_success = self.wall_clock()
        self.result = PollResult(
            target_up=True, schema=snap.schema, version=self.version, engine_family=snap.engine_family,
            snapshot=snap,
            derived=tuple(derived), duration_seconds=self.clock() - started,
            last_success_unix=self.last_success, errors=dict(self.errors),
            counter_resets=self.counter_resets, spec_config=self._checked_spec_config(snap),
        )
        return self.result

    def _checked_spec_config(self, snap: Snapshot) -> SpecConfig:
        """The reader's config, its k checked against the draft positions vLLM exposes (vLLM
        only: another engine's positions are not its k)."""
        config, disagreement = checked_against_positions(self._reader_config(), snap)
        if disagreement and disagreement != self._k_disagreement:  # once per change, not per poll
            log.warning("%s", disagreement)
        self._k_disagreement = disagreement
        return config

    def _reader_config(self) -> SpecConfig:
        """What the config reader holds now (unknown without a reader)."""
        return self.spec_config.current if self.spec_config is not None else UNKNOWN_CONFIG

    def _busy(self) -> bool:
        """Up at the last poll that ended, answered within BUSY_GRACE_SECONDS, and accepting
        connections now: a timed-out poll of such a target is a busy server's, not a down one's."""
        return (self._was_up is True and self.wall_clock() - self.last_success <= BUSY_GRACE_SECONDS
                and self.fetcher.accepts_connections())

    def _publish_busy(self, message: str, started: float) -> PollResult:
        """A timed-out poll of a busy target: up, counted as a timeout, no figures this poll."""
        self.errors["timeout"] += 1
        self._log.warn(f"busy:{same_cause(message)}", "target %s answered late (busy, still counted up): %s",
                       self.fetcher.url, message)
        self.result = PollResult(
            target_up=True, busy=True, schema=self.result.schema, version=self.version,
            engine_family=self.result.engine_family, duration_seconds=self.clock() - started,
            last_success_unix=self.last_success, errors=dict(self.errors), counter_resets=self.counter_resets,
            error_message=message, spec_config=self.result.spec_config,
        )
        return self.result

    def _publish_failure(self, reason: str, message: str, started: float, schema: str | None = None,
                         engine_family: str | None = None) -> PollResult:
        self.errors[reason] += 1
        if self._was_up is not False:
            log.error("target %s is down: %s", self.fetcher.url, message)
        else:
            # Keyed by the cause: a new one (HTTP 500, then 404) is named at once, a repeated one
            # (whatever its counts) once a minute.
            self._log.warn(f"down:{reason}:{same_cause(message)}", "target still down: %s", message)
        self._was_up = False
        self.result = PollResult(
            target_up=False, schema=self.result.schema if schema is None else schema, version=self.version,
            engine_family=self.result.engine_family if engine_family is None else engine_family,
            duration_seconds=self.clock() - started, last_success_unix=self.last_success,
            errors=dict(self.errors), counter_resets=self.counter_resets, error_message=message,
            spec_config=self._reader_config(),
        )
        return self.result

    # --- background loop ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_due = self.clock()
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # a bug must not kill the sidecar; say so loudly and keep polling
                log.exception("unexpected error while polling; continuing")
            next_due += self.interval
            now = self.clock()
            if next_due < now:  # a poll overran: skip missed ticks instead of bursting
                next_due = now + self.interval
            self._stop.wait(next_due - now)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout)
        self.fetcher.close()
