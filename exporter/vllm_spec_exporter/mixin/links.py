"""Every URL and percentage the generated artifacts print, each built in one place.

Alerts link to the overview dashboard and to their runbook section; dashboards link to each other,
to the runbooks and back; READMEs print thresholds as percentages. All of them call these
functions, so a link in an alert and the uid of the dashboard it names cannot disagree.
"""

from __future__ import annotations

from .config import MixinConfig

__all__ = [
    "dashboard_url",
    "fleet_uid",
    "overview_uid",
    "percent",
    "runbook_index_url",
    "runbook_pattern",
    "runbook_url",
]


def overview_uid(cfg: MixinConfig) -> str:
    """The overview dashboard, which every alert's dashboard_url opens."""
    return f"{cfg.dashboard_uid_prefix}-overview"


def fleet_uid(cfg: MixinConfig) -> str:
    return f"{cfg.dashboard_uid_prefix}-fleet"


def dashboard_url(cfg: MixinConfig, uid: str = "") -> str:
    """Link to a dashboard, by default the overview: for alert annotations and runbooks (the way
    back) and for the links between the dashboards. Relative (/d/<uid>) without grafana_url."""
    return f"{cfg.grafana_url.rstrip('/')}/d/{uid or overview_uid(cfg)}"


# The repository's runbook page of each bundle: the default runbook_url_pattern points at the
# sidecar's; the sidecar-less bundle's page sits at the same path under direct/.
SIDECAR_RUNBOOKS = "/blob/main/docs/runbooks.md#%s"
DIRECT_RUNBOOKS = "/blob/main/direct/docs/runbooks.md#%s"


def runbook_pattern(cfg: MixinConfig) -> str:
    """runbook_url_pattern, except that the default one means "the repository's page of this
    bundle": with source=vllm it points at direct/docs/runbooks.md. A pattern set by the user is
    used as given (they host the page of the bundle they render)."""
    default = type(cfg)().runbook_url_pattern
    if cfg.direct and cfg.runbook_url_pattern == default:
        return default.replace(SIDECAR_RUNBOOKS, DIRECT_RUNBOOKS)
    return cfg.runbook_url_pattern


def runbook_url(cfg: MixinConfig, alert_name: str) -> str:
    """The runbook section of one alert (its bundle's page; lower-cased name: a GitHub anchor)."""
    return runbook_pattern(cfg) % alert_name.lower()


def runbook_index_url(cfg: MixinConfig) -> str:
    """The runbook page itself: the pattern without the per-alert anchor."""
    return runbook_pattern(cfg).replace("%s", "").rstrip("#")


def percent(ratio: float) -> str:
    """0.455 -> "45.5%", 0.6 -> "60%": a threshold printed as set, never rounded to another."""
    return f"{ratio * 100:g}%"
