"""docs/deploy.md: which generated files each monitoring stack reads, filled from the config.

templates/deploy.md holds the prose; the jsonnet mixin's `_config` table comes from
jsonnet_config.FIELDS (the fields this config's mixin lists, with their defaults), and the GMP
object names from gmp.py, so the guide cannot name a field or a job the files do not have.
"""

from __future__ import annotations

from ..config import MixinConfig
from ..dashboards import dashboard_files
from ..templates import fill
from . import gmp, jsonnet
from .jsonnet_config import FIELDS, jsonnet_literal
from .jsonnet_template import parameterise

__all__ = ["GUIDE_FILE", "render"]

GUIDE_FILE = "docs/deploy.md"


def field_rows(cfg: MixinConfig) -> list[str]:
    listed = set(jsonnet.config_fields(cfg, parameterise(jsonnet.mixin_contents, cfg)))
    return [f"| `{field.name}` | `{jsonnet_literal(field.default(cfg))}` | "
            f"{f'`{field.knob}`' if field.knob else '—'} | {field.doc.replace('|', '&#124;')} |"
            for field in FIELDS if field.name in listed]


def render(cfg: MixinConfig) -> dict[str, str]:
    return {GUIDE_FILE: fill("deploy.md", {
        "overview_file": dashboard_files.file_name(dashboard_files.OVERVIEW_PATH),
        "fleet_file": dashboard_files.file_name(dashboard_files.FLEET_PATH),
        "field_rows": "\n".join(field_rows(cfg)),
        "scrape_field": jsonnet.SCRAPE_INTERVAL_FIELD,
        "exporter_job": gmp.job_name(cfg.exporter_selector, gmp.NAME),
        "vllm_job": gmp.job_name(cfg.vllm_selector, "vllm"),
        "fleet_level": "_".join((*cfg.fleet_labels, "model")),
    })}
