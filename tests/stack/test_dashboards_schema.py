"""The generated dashboard JSON against @grafana/schema's dashboard types, by the TypeScript compiler.

tools/grafana-render/src/schema.ts defines `DashboardJson`: @grafana/schema 13.2.3's `Dashboard`
(the v1 dashboard schema, schemaVersion 42) with string enums as their values, plus the few extra
keys Grafana reads or ignores, each named there with its reader. This test writes each dashboard
as a TypeScript literal of that type and runs `tsc --noEmit --strict`: object literals get
excess-property checks, so a misspelt or misplaced key, a wrong type or an unknown enum value
fails. A deliberately broken copy proves the check can fail.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path

import pytest

from support.policy import require
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.dashboards import dashboard_files, fleet, overview
from vllm_spec_lab import grafana_render as gr

pytestmark = pytest.mark.browser


def typescript_file(folder: Path, name: str, model: dict) -> Path:
    path = folder / f"{name}.ts"
    path.write_text("import type { DashboardJson } from './src/schema';\n\n"
                    f"export const dashboard: DashboardJson = {json.dumps(model, indent=1, ensure_ascii=False)};\n")
    return path


def broken(model: dict) -> dict:
    """Three mistakes Grafana would not read: a misspelt gridPos key, an unknown thresholds mode,
    a number where a string belongs."""
    bad = copy.deepcopy(model)
    panel = next(dashboard_files.iter_panels(bad))
    panel["gridPos"]["wdth"] = panel["gridPos"].pop("w")
    panel["fieldConfig"]["defaults"]["thresholds"]["mode"] = "absolut"
    bad["title"] = 42
    return bad


def test_dashboards_match_grafana_schema_types() -> None:
    modules = gr.node_modules()
    if modules is None:
        require("renderer's node_modules missing: run scripts/bootstrap.sh")
    cfg = MixinConfig()
    models = {"overview": overview.build(cfg), "fleet": fleet.build(cfg)}
    # tsc resolves `./src/schema` and @grafana/schema from the renderer's folder: write the files there.
    folder = gr.RENDERER / ".schema-check"
    folder.mkdir(exist_ok=True)
    try:
        (folder / "src").mkdir(exist_ok=True)
        (folder / "src" / "schema.ts").write_text((gr.RENDERER / "src" / "schema.ts").read_text())
        files = [typescript_file(folder, name, model) for name, model in models.items()]
        files.append(typescript_file(folder, "broken", broken(models["overview"])))
        tsc = modules / ".bin" / "tsc"
        result = subprocess.run([str(tsc), "--noEmit", "--strict", "--skipLibCheck", "--moduleResolution", "bundler",
                                 "--module", "esnext", "--target", "es2022", "--typeRoots", str(modules / "@types"),
                                 *map(str, files)], capture_output=True, text=True, timeout=300, cwd=gr.RENDERER)
    finally:
        for path in sorted(folder.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        folder.rmdir()
    errors = [line for line in result.stdout.splitlines() if re.match(r"\S+\.ts\(\d+,\d+\): error", line)]
    by_file: dict[str, list[str]] = {}
    for line in errors:
        by_file.setdefault(Path(line.split("(", 1)[0]).stem, []).append(line)
    assert "overview" not in by_file and "fleet" not in by_file, "\n".join(errors)
    broken_errors = "\n".join(by_file.get("broken", []))
    for mistake in ('"wdth"', '"absolut"', "number"):
        assert mistake in broken_errors, f"the broken copy's {mistake} was not caught:\n{result.stdout[-3000:]}"
    assert result.returncode != 0


def test_renderer_type_checks_against_grafana_packages() -> None:
    """The renderer's glue calls @grafana/ui and @grafana/data as their types say (tsc --strict on
    tools/grafana-render/src): a package upgrade that changes an API fails here, not in a picture."""
    modules = gr.node_modules()
    if modules is None:
        require("renderer's node_modules missing: run scripts/bootstrap.sh")
    result = subprocess.run([str(modules / ".bin" / "tsc"), "-p", str(gr.RENDERER / "tsconfig.json")],
                            capture_output=True, text=True, timeout=300, cwd=gr.RENDERER)
    assert result.returncode == 0, result.stdout[-3000:]
