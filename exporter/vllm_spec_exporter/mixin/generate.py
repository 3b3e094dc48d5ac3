"""`vllm-spec-exporter generate`: write every artifact from one MixinConfig, or --check for drift.

Each artifact module exposes `render(cfg: MixinConfig) -> dict[str, str]`, mapping a path relative
to the output root to the file's exact text; `RENDERERS` lists them in the order they are written.
Files that must exist twice (kustomize cannot read outside its root) are declared as copies and
taken from the first render, never rendered again. Rendering is deterministic, so the committed
files must equal a fresh render (CI runs `generate --check`).

The default (sidecar) render also writes the ready-to-use files of the sidecar-less bundle under
`direct/` (`DIRECT_ROOT`, same layout): the rules, alerts, PrometheusRule, dashboards, their
ConfigMap, the runbook page their alerts link and the jsonnet mixin, rendered with source=vllm, so
they are committed and checked like the rest.
`generate --set source=vllm --output DIR` renders the whole sidecar-less bundle into DIR instead:
the DIRECT_FILES and the Alertmanager routing, nothing that deploys or documents the sidecar.
`generate --list` prints the paths a render writes; .gitattributes marks the default render's
`linguist-generated` (a test of the suite keeps the two equal).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from . import docs
from .config import SOURCE_VLLM, MixinConfig, load_config
from .dashboards import dashboard_files
from .deploy import compose, gmp, guide, jsonnet, kubernetes
from .rules import alertmanager, rule_files, runbooks

RENDERERS: tuple[Callable[[MixinConfig], dict[str, str]], ...] = (
    docs.render,
    rule_files.render,
    alertmanager.render,
    runbooks.render,
    dashboard_files.render,
    kubernetes.render,
    compose.render,
    jsonnet.render,
    gmp.render,
    guide.render,
)
# {copy: original}: byte-identical copies of files another renderer wrote.
COPIES: dict[str, str] = kubernetes.COPIES
# The sidecar-less bundle's ready-to-use files, committed under DIRECT_ROOT with the same layout.
DIRECT_ROOT = "direct/"
DIRECT_FILES = (rule_files.RULES_FILE, rule_files.ALERTS_FILE, rule_files.PROMETHEUS_RULE_FILE,
                dashboard_files.OVERVIEW_PATH, dashboard_files.FLEET_PATH, dashboard_files.CONFIGMAP_PATH,
                runbooks.RUNBOOKS_FILE, *jsonnet.FILES)


def render_all(cfg: MixinConfig) -> dict[str, str]:
    if cfg.direct:
        # Without the sidecar there is nothing to deploy next to vLLM: no exporter manifests,
        # PodMonitor, compose file or exporter docs; only what a Prometheus scraping vLLM loads,
        # and the runbooks its alerts link.
        return {**alertmanager.render(cfg),
                **{path: text for render in (rule_files.render, dashboard_files.render, runbooks.render, jsonnet.render)
                   for path, text in render(cfg).items() if path in DIRECT_FILES}}
    files: dict[str, str] = {}
    for render in RENDERERS:
        for path, text in render(cfg).items():
            if path in files:
                raise RuntimeError(f"two renderers write {path}")
            files[path] = text
    for copy, original in COPIES.items():
        if copy in files:
            raise RuntimeError(f"{copy} is both rendered and copied")
        files[copy] = files[original]
    direct = render_all(cfg.with_overrides({"source": SOURCE_VLLM}))
    return files | {DIRECT_ROOT + path: direct[path] for path in DIRECT_FILES}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, default=None,
                        help="root folder to write into (default: the root of the vllm-spec-exporter "
                             "checkout around the current folder; outside one, --output is required)")
    parser.add_argument("--config", type=Path, default=None,
                        help="YAML file of MixinConfig overrides (keys as in mixin/config.py)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config key, e.g. --set acceptance_warning_threshold=0.6")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 listing files that differ from a fresh render")
    parser.add_argument("--list", action="store_true",
                        help="write nothing; print the path of every file this render generates, one a line "
                             "(.gitattributes marks the default render's as linguist-generated)")


def checkout_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` holding this project's pyproject.toml."""
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and (folder / "exporter" / "vllm_spec_exporter").is_dir() \
                and 'name = "vllm-spec-exporter"' in pyproject.read_text(errors="replace"):
            return folder
    return None


def run(args: argparse.Namespace) -> int:
    if args.config is not None and not args.config.is_file():
        raise ValueError(f"--config: cannot read {args.config}")
    try:
        cfg = load_config(args.config, args.sets)
    except yaml.YAMLError as error:
        raise ValueError(f"--config: {args.config} is not valid YAML: {str(error).splitlines()[0]}") from None
    if args.list:
        print(*sorted(render_all(cfg)), sep="\n")
        return 0
    output = args.output
    if output is None:
        # Without --output the artifacts belong in this project's checkout, never in whatever folder
        # the command happens to run from.
        output = checkout_root(Path.cwd().resolve())
        if output is None:
            raise ValueError("not inside a checkout of vllm-spec-exporter; pass --output DIR to write "
                             "alerts/, dashboards/, deploy/ and docs/ there")
    files = render_all(cfg)
    stale = []
    for rel, text in sorted(files.items()):
        path = output / rel
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {rel}")
    if stale:
        print("stale generated files (run `vllm-spec-exporter generate`):", *stale, sep="\n  ",
              file=sys.stderr)
        return 1
    if args.check:
        print(f"{len(files)} generated files are up to date")
    return 0
