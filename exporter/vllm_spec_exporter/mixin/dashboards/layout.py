"""Place panels on Grafana's 24-column grid where they are added: `layout.add(panel, width, height)`.

Each panel's size is stated where the dashboard places it, and nothing else is needed: a panel
goes to the highest free spot below the current row header (leftmost on ties), the way Grafana
floats panels up, so a half-height panel stacks under its half-height neighbour and no comment
has to promise that widths add up to 24. `row(title)` starts a full-width row below everything
placed so far.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import dashboard as dashboard_models

__all__ = ["GRID_COLUMNS", "Layout"]

GRID_COLUMNS = 24


class Layout:
    """Rows and panels in reading order, each with its grid position set as it is added."""

    def __init__(self) -> None:
        self.items: list[cogbuilder.Builder] = []  # rows (dashboard.Row) and panels, in order
        self._skyline = [0] * GRID_COLUMNS  # first free y per column

    def row(self, title: str) -> None:
        top = max(self._skyline)
        self.items.append(dashboard.Row(title).grid_pos(dashboard_models.GridPos(h=1, w=GRID_COLUMNS, x=0, y=top)))
        self._skyline = [top + 1] * GRID_COLUMNS

    def add(self, panel: cogbuilder.Builder, width: int, height: int) -> None:
        if not 0 < width <= GRID_COLUMNS or height <= 0:
            raise ValueError(f"a panel is 1..{GRID_COLUMNS} columns wide and at least 1 high, got {width}x{height}")
        y, x = min((max(self._skyline[x:x + width]), x) for x in range(GRID_COLUMNS - width + 1))
        self.items.append(panel.grid_pos(dashboard_models.GridPos(h=height, w=width, x=x, y=y)))
        self._skyline[x:x + width] = [y + height] * width
