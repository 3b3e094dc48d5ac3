"""One generated bundle as the bench measures it: its rule files, its dashboards and the scrape
job its series carry; and its recording rules expanded into raw PromQL (the baseline every
record-reading panel is timed against, and the input of the record backfill tools).

`expand_records(expr, lookup)` is the one place a record reference becomes its raw expression;
it keeps a reference whose matchers the record's expression does not apply (a selected instance
is not the same query as All)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vllm_spec_exporter import durations
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.generate import render_all

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Bundle:
    """One generated bundle: `exporter` (the committed alerts/ and dashboards/, reading the
    sidecar's series) or `direct` (direct/, reading vLLM's own series; no sidecar). Its rule files,
    its dashboards {short name: model} and the scrape job and port its series carry."""

    source: str
    root: Path
    job: str
    port: int
    dashboards: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def load(cls, source: str, cfg: MixinConfig | None = None, root: Path = ROOT) -> Bundle:
        """The bundle under `root`: the committed one (the checkout, the default config), or one
        `render` wrote there from `cfg` (the bench's --set)."""
        cfg = cfg or MixinConfig()
        if source == "exporter":
            bundle = cls(source, root, _job(cfg.exporter_selector), 9850)
        elif source == "direct":
            bundle = cls(source, root / "direct", _job(cfg.vllm_selector), 8000)
        else:
            raise SystemExit(f"--source: unknown bundle {source!r} (exporter or direct)")
        bundle.dashboards = {p.stem.removeprefix("vllm-spec-decode-"): json.loads(p.read_text())
                             for p in bundle.dashboard_files}
        return bundle

    @property
    def rule_files(self) -> tuple[Path, Path]:
        return self.root / "alerts" / "prometheus_rules.yaml", self.root / "alerts" / "prometheus_alerts.yaml"

    @property
    def dashboard_files(self) -> list[Path]:
        return sorted((self.root / "dashboards").glob("*.json"))

    def add_dashboards_before(self, rev: str) -> None:
        """Measure REV's committed dashboards too, as "<name>@REV" (before/after a dashboard change,
        in the same run); a bundle REV did not have is skipped."""
        for path in self.dashboard_files:
            relative = path.relative_to(ROOT).as_posix()
            shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{relative}"], capture_output=True,
                                   text=True)
            if shown.returncode == 0:
                self.dashboards[f"{path.stem.removeprefix('vllm-spec-decode-')}@{rev}"] = json.loads(shown.stdout)

    def rule_files_at(self, rev: str, folder: Path) -> tuple[Path, ...]:
        """REV's committed rule files of this bundle, written into `folder` (--rules-before)."""
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for path in self.rule_files:
            relative = path.relative_to(ROOT).as_posix()
            shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{relative}"], capture_output=True,
                                   text=True)
            if shown.returncode != 0:
                raise SystemExit(f"--rules-before: {rev} has no {relative}: {shown.stderr.strip()}")
            written.append(folder / path.name)
            written[-1].write_text(shown.stdout)
        return tuple(written)

    def rules(self) -> list[dict[str, Any]]:
        return [yaml.safe_load(p.read_text()) for p in self.rule_files]

    def group_intervals(self, default: float) -> dict[str, float]:
        return rule_group_intervals(self.rule_files, default)


def render(cfg: MixinConfig, folder: Path) -> Path:
    """Every artifact `generate` renders from `cfg`, written under `folder` (both bundles: the
    sidecar's at the top, the direct one under direct/); returns `folder`."""
    for relative, text in render_all(cfg).items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return folder


def rule_group_intervals(files: tuple[Path, ...], default: float) -> dict[str, float]:
    """Each rule group's evaluation interval, seconds (the group's own, else the global)."""
    return {g["name"]: durations.seconds(g["interval"]) if "interval" in g else default
            for path in files for g in yaml.safe_load(path.read_text())["groups"]}


def _job(selector: str) -> str:
    """The job a MixinConfig selector names (`job="vllm"` -> vllm)."""
    match = re.search(r'\bjob="([^"]+)"', selector)
    if match is None:
        raise SystemExit(f"the bench needs a job=\"...\" matcher in the selector, got {selector!r}")
    return match.group(1)


# --- Records expanded into raw PromQL ------------------------------------------------------------


def record_exprs(bundle: Bundle) -> dict[str, str]:
    """Every recording rule's expression with the records it reads expanded, recursively. A record
    of several rules told apart by a static label (the acceptance bands) is keyed per rule,
    `name{label="value"}`."""
    rules = [r for f in bundle.rules() for g in f["groups"] for r in g["rules"] if "record" in r]
    raw = {_key(r, rules): r["expr"] for r in rules}
    expanded: dict[str, str] = {}

    def expand(name: str) -> str:
        if name not in expanded:
            expanded[name] = expand_records(raw[name], expand)
        return expanded[name]

    for name in raw:
        expand(name)
    return expanded


def _key(rule: dict[str, Any], rules: list[dict[str, Any]]) -> str:
    if sum(r["record"] == rule["record"] for r in rules) == 1:
        return rule["record"]
    if not rule.get("labels"):  # its labels come from its expression (TPOT by method's drafting side)
        return f'{rule["record"]}{{}}'
    (label, value), = rule["labels"].items()  # one static label tells the rules of one name apart
    return f'{rule["record"]}{{{label}="{value}"}}'


_RECORD_REF = re.compile(r"(?<![\w:])([a-zA-Z_][\w]*:[\w:]+)(\{[^}]*\})?(\[[^\]:]+\])?")
_ALL_MATCHER = re.compile(r'^\s*[a-zA-Z_]\w*\s*=~\s*"(\.\+|\.\*|\(\.\+\)|\(\.\*\))"\s*$')


def expand_records(expr: str, lookup: Callable[[str], str]) -> str:
    """`expr` with each record reference replaced by its raw expression. A reference with
    matchers is expanded only when every matcher is a Grafana "All" (`=~".+"`), one the record's
    expression applies itself, or the static label that picks one rule of a record of several;
    else it is kept. A reference under a range (`record[1h]`) becomes a subquery (`(raw)[1h:]`):
    PromQL allows ranges only on selectors."""
    def replace(match: re.Match) -> str:
        name, matchers, window = match.group(1), match.group(2), match.group(3)
        listed = [m.strip() for m in matchers[1:-1].split(",") if m.strip()] if matchers else []
        body = None
        for candidate in (name, *(f"{name}{{{m}}}" for m in listed)):
            try:
                body = lookup(candidate)
            except KeyError:
                continue
            if candidate != name:
                listed.remove(candidate[len(name) + 1:-1])
            break
        if body is None:
            return match.group(0)
        # Matchers the record's own expression already applies (the exporter's job) are kept by it.
        if any(not _ALL_MATCHER.match(m) and m not in body for m in listed):
            return match.group(0)
        return f"({body}){window[:-1]}:]" if window else f"({body})"
    return _RECORD_REF.sub(replace, expr)


def expanded_rules_file(path: Path, bundle: Bundle) -> Path:
    """The recording rules alone, each with its expression in raw PromQL, in their groups at the
    groups' own intervals (for backfill tools: the direct k group's history once a minute)."""
    exprs = record_exprs(bundle)

    def expanded(rule: dict[str, Any]) -> dict[str, Any]:
        labels = {"labels": rule["labels"]} if rule.get("labels") else {}
        return {"record": rule["record"], "expr": expand_records(rule["expr"], exprs.__getitem__), **labels}
    groups = [{"name": g["name"], **({"interval": g["interval"]} if "interval" in g else {}),
               "rules": [expanded(r) for r in g["rules"] if "record" in r]}
              for f in bundle.rules() for g in f["groups"]]
    path.write_text(yaml.safe_dump({"groups": [g for g in groups if g["rules"]]}, sort_keys=False))
    return path
