"""`vllm-spec-exporter generate`: write every artifact from one MixinConfig, or --check for drift.

Each artifact module exposes `render(cfg: MixinConfig) -> dict[str, str]`, mapping a path relative
to the output root to the file's exact text; `RENDERERS` lists them in the order they are written.
Files that must exist twice (kustomize cannot read outside its root) are declared as copies and
taken from the first render, never rendered again. Rendering is deterministic, so the committed
files must equal a fresh render (CI runs `generate --check`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from . import alerts, dashboard_files, docs, kubernetes
from .config import MixinConfig, load_config

RENDERERS: tuple[Callable[[MixinConfig], dict[str, str]], ...] = (
    docs.render,
    alerts.render,
    dashboard_files.render,
    kubernetes.render,
)
# {copy: original}: byte-identical copies of files another renderer wrote.
COPIES: dict[str, str] = kubernetes.COPIES


def render_all(cfg: MixinConfig) -> dict[str, str]:
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
    return files


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, default=Path("."),
                        help="root folder to write into (default: current folder, the repo root)")
    parser.add_argument("--config", type=Path, default=None,
                        help="YAML file of MixinConfig overrides (keys as in mixin/config.py)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config key, e.g. --set acceptance_warning_threshold=0.6")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 listing files that differ from a fresh render")


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.sets)
    files = render_all(cfg)
    stale = []
    for rel, text in sorted(files.items()):
        path = args.output / rel
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
