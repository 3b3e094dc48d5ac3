"""Every window, hold and evaluation interval of the rules, as a pure function of the config.

Prometheus answers `rate()`/`increase()` only from two samples or more inside the range, and
Prometheus 3 ranges are left-open, `(t - d, t]`: a window of n scrape intervals holds n samples,
never n + 1. So each window is sized from `scrape_interval`:

* windows that must always answer (the dashboards' `rate_window`, the alerts' evidence windows,
  the slow tier's short window, the reset window) hold at least `ALWAYS_SAMPLES` = 4 samples,
  the conventional floor (Grafana's `$__rate_interval` is at least 4 scrape intervals);
* the fast tier's "still bad now?" window holds at least `SHORT_SAMPLES` = 2: it is read through
  `max_over_time` over the hold, so an evaluation without an answer (one missed scrape) is a gap,
  never a reset; the shorter it is, the sooner a collapse pages.

A series that must be there "now" (the acceptance alerts' drafts-present term) is read over
`presence` = `PRESENCE_SAMPLES` scrape intervals with `last_over_time`: one missed scrape (the
sidecar omits vLLM's series for a poll that failed) is bridged, two in a row end it.

The holds (how long the short window must have proven acceptance low) follow from the dip the
alerts must ride out. A short window of length W that sees a dip of length D to 0 % from a healthy
level h has its ratio below threshold T for D + (1 - 2c)·W, where c = 1 - T/h is the share of the
window the dip must fill; so the hold is D + (1 - 2c)·W, rounded up to the evaluation interval. At
the defaults (D 2m, h 0.55, W 1m, 15 s) that is 2m30s for critical (T 0.4) and 3m for warning
(T 0.5). The slow tier's short window is long, so its hold is D + W (c taken as 0).

`AlertWindows` is what every generator reads (recording rules, alerts, runbooks, dashboards, the
source layer); `samples_problem` is the check `MixinConfig.validate` runs on every window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..durations import format_duration, seconds

if TYPE_CHECKING:
    from .config import MixinConfig

__all__ = [
    "ALWAYS_SAMPLES",
    "PRESENCE_SAMPLES",
    "SHORT_SAMPLES",
    "AlertWindows",
    "alert_windows",
    "format_duration",
    "samples_in",
    "samples_problem",
    "seconds",
]

ALWAYS_SAMPLES = 4  # a window that must always answer
SHORT_SAMPLES = 2  # the fewest samples rate()/increase() answer from
PRESENCE_SAMPLES = 2  # a series read as present through one missed scrape, not two


# The defaults the windows grow from (the bundle as measured at a 15 s scrape): below 30 s scrapes
# every window keeps these lengths, so one bundle serves 15 s and 30 s alike.
FAST_SHORT_MIN = 60.0
FAST_LONG_MIN = 300.0
SLOW_SHORT_MIN = 240.0
SLOW_LONG_MIN = 600.0
RATE_WINDOW_MIN = 120.0
SLOW_LONG_PER_SHORT = 2.5  # the slow tier's evidence window stays 2.5x its short window
K_INTERVAL_MIN = 60.0  # the k record's group: at least a minute, or the evaluation interval
FLEET_INTERVAL = 60.0  # the fleet groups (dashboards only): a minute, within the rate window




def samples_in(window: float, scrape_interval: float) -> int:
    """Samples a left-open range `(t - window, t]` holds at a regular scrape interval (at worst)."""
    return int(window // scrape_interval)


def samples_problem(knob: str, window: str, scrape_interval: str, minimum: int) -> str | None:
    """A one-line error when `window` holds fewer than `minimum` samples, else None."""
    held = samples_in(seconds(window), seconds(scrape_interval))
    if held >= minimum:
        return None
    need = format_duration(minimum * seconds(scrape_interval))
    return (f"{knob} ({window}) holds {held} sample{'s' if held != 1 else ''} at scrape_interval "
            f"{scrape_interval} (Prometheus 3 ranges are left-open); it needs at least {minimum}: "
            f"{need} or longer, or a shorter scrape_interval")


def _ceil_to(value: float, step: float) -> float:
    return math.ceil(value / step - 1e-9) * step


def _window(minimum: float, scrape: float, samples: int) -> str:
    """The longer of `minimum` and `samples` scrape intervals, in whole minutes from a minute up."""
    needed = max(minimum, samples * scrape)
    return format_duration(_ceil_to(needed, 60.0) if needed >= 60 else needed)


@dataclass(frozen=True)
class AlertWindows:
    """The resolved windows and holds of one config (explicit knobs win over derived values).

    `evidence` lists every window the evidence records need, each once, in tier order: the
    recording rules emit one set of records per entry, and a source layer can iterate it.
    """

    scrape_interval: str
    evaluation_interval: str
    rate_window: str
    fast_long: str
    fast_short: str
    slow_long: str
    slow_short: str
    presence: str  # a series counts as present if scraped within it (one missed scrape bridged)
    k_interval: str  # the direct k record's group (positions.k_group): k changes only on restart
    fleet_interval: str  # the fleet groups (fleet_records, fleet_counts): only dashboards read them
    warning_hold: str  # SpecDecodeAcceptanceLow: the fast short window held low this long
    critical_hold: str  # SpecDecodeAcceptanceCritical
    slow_hold: str  # both alerts' slow tier

    @property
    def evidence(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.fast_long, self.fast_short, self.slow_long, self.slow_short)))

    def hold(self, critical: bool) -> str:
        return self.critical_hold if critical else self.warning_hold


def dip_hold(dip: float, window: float, threshold: float, healthy: float, evaluation: float) -> str:
    """How long a window of `window` s must stay low so a dip of `dip` s from `healthy` to 0 % never
    alerts at `threshold` (module docstring), rounded up to the evaluation interval."""
    share = min(max(1.0 - threshold / healthy, 0.0), 0.5)
    return format_duration(_ceil_to(dip + (1.0 - 2.0 * share) * window, evaluation))


def alert_windows(cfg: MixinConfig) -> AlertWindows:
    """Resolve every window and hold of `cfg`: a knob set to a duration wins, an empty one derives."""
    scrape = seconds(cfg.scrape_interval)
    evaluation_interval = cfg.evaluation_interval or cfg.scrape_interval
    evaluation = seconds(evaluation_interval)
    fast_short = cfg.acceptance_fast_short_window or _window(FAST_SHORT_MIN, scrape, SHORT_SAMPLES)
    fast_long = cfg.acceptance_fast_long_window or _window(FAST_LONG_MIN, scrape, ALWAYS_SAMPLES)
    slow_short = cfg.acceptance_slow_short_window or _window(SLOW_SHORT_MIN, scrape, ALWAYS_SAMPLES)
    slow_long = cfg.acceptance_slow_long_window or _window(
        max(SLOW_LONG_MIN, SLOW_LONG_PER_SHORT * seconds(slow_short)), scrape, ALWAYS_SAMPLES)
    dip, healthy = seconds(cfg.acceptance_dip_tolerance), cfg.acceptance_healthy_floor
    rate_window = cfg.rate_window or _window(RATE_WINDOW_MIN, scrape, ALWAYS_SAMPLES)

    def hold(explicit: str, threshold: float) -> str:
        return explicit or dip_hold(dip, seconds(fast_short), threshold, healthy, evaluation)

    return AlertWindows(
        scrape_interval=cfg.scrape_interval,
        evaluation_interval=evaluation_interval,
        rate_window=rate_window,
        fast_long=fast_long,
        fast_short=fast_short,
        slow_long=slow_long,
        slow_short=slow_short,
        presence=format_duration(PRESENCE_SAMPLES * scrape),
        k_interval=format_duration(max(K_INTERVAL_MIN, evaluation)),
        fleet_interval=cfg.fleet_evaluation_interval or format_duration(
            max(evaluation, min(FLEET_INTERVAL, seconds(rate_window)))),
        warning_hold=hold(cfg.acceptance_low_for, cfg.acceptance_warning_threshold),
        critical_hold=hold(cfg.acceptance_critical_for, cfg.acceptance_critical_threshold),
        slow_hold=cfg.acceptance_slow_for or format_duration(_ceil_to(dip + seconds(slow_short), evaluation)),
    )
