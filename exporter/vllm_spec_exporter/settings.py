"""Runtime settings of `serve`: flags, then environment, then an optional YAML file, then defaults.

Every option exists in all three forms: `--max-bytes`, `VLLM_SPEC_EXPORTER_MAX_BYTES`, `max_bytes:`.
Secrets are only ever read from files or environment variables, never from flags, so they cannot
show up in `ps`, shell history or `--help`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from .advisor import UNKNOWN_METHOD_DRAFT_COST, draft_cost_help

__all__ = [
    "CONNECTION_OPTIONS",
    "DEFAULT_PORT",
    "ENV_PREFIX",
    "SPEC_CONFIG_OPTIONS",
    "Settings",
    "add_arguments",
    "make_fetcher",
    "read_secret",
    "resolve",
    "resolve_connection",
]

ENV_PREFIX = "VLLM_SPEC_EXPORTER_"
DEFAULT_PORT = 9850  # clear of node_exporter (9100), dcgm-exporter (9400), Prometheus (9090-9094)


@dataclass(frozen=True)
class Settings:
    """The resolved settings of `serve` (and the connection options `check` shares).

    Each field is also a flag (`--max-bytes`), an environment variable (`VLLM_SPEC_EXPORTER_MAX_BYTES`)
    and a YAML key (`max_bytes:`), resolved in that order of precedence by `resolve()`, which
    returns only settings that passed `validate()`: the window covers at least two polls, a poll's
    timeout is shorter than the interval, limits are positive. Secrets are never fields: only the
    paths of files holding them (or environment variables read at connection time).
    """

    target: str = "http://127.0.0.1:8000"
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    interval: float = 5.0
    window: float = 60.0
    timeout: float = 0.0  # 0: automatic, min(3 s, 0.8 x --interval)
    min_draft_tokens: float = 100.0
    draft_cost_ratio: float = UNKNOWN_METHOD_DRAFT_COST
    max_bytes: int = 16 * 1024 * 1024
    max_series: int = 10_000
    bearer_token_file: str | None = None
    basic_auth_user: str | None = None
    basic_auth_password_file: str | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    client_cert_file: str | None = None
    client_key_file: str | None = None
    web_config_file: str | None = None
    log_level: str = "info"
    speculative_config: str | None = None
    spec_method: str | None = None
    spec_tokens: str | None = None

    @property
    def poll_timeout(self) -> float:
        return self.timeout if self.timeout > 0 else min(3.0, 0.8 * self.interval)

    def validate(self) -> None:
        for name in ("interval", "window", "timeout", "min_draft_tokens", "draft_cost_ratio"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"--{name.replace('_', '-')} must be a finite number, got {getattr(self, name)}")
        if self.interval <= 0 or self.window <= 0 or self.timeout < 0:
            raise ValueError("--interval and --window must be positive, --timeout >= 0")
        if self.window < 2 * self.interval:
            raise ValueError(f"--window ({self.window:g} s) must cover at least two polls "
                             f"(2 x --interval = {2 * self.interval:g} s)")
        if self.poll_timeout >= self.interval:
            raise ValueError(f"--timeout ({self.poll_timeout:g} s) must be shorter than --interval "
                             f"({self.interval:g} s) so polls never pile up")
        if self.draft_cost_ratio < 0:
            raise ValueError("--draft-cost-ratio must be >= 0")
        if self.min_draft_tokens < 0 or self.max_bytes <= 0 or self.max_series <= 0:
            raise ValueError("--min-draft-tokens must be >= 0; --max-bytes and --max-series > 0")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise ValueError(f"--log-level must be debug, info, warning or error, got {self.log_level!r}")
        if self.basic_auth_password_file and not self.basic_auth_user:
            raise ValueError("--basic-auth-password-file needs --basic-auth-user")
        self.check_files()

    def check_files(self) -> None:
        """Every file option names a readable file: fail at start, naming the flag, not at the
        first poll or TLS handshake."""
        for name in FILE_OPTIONS:
            path = getattr(self, name)
            if path and not (os.path.isfile(path) and os.access(path, os.R_OK)):
                raise ValueError(f"--{name.replace('_', '-')}: cannot read {path}")


FILE_OPTIONS = ("bearer_token_file", "basic_auth_password_file", "ca_file", "client_cert_file", "client_key_file",
                "web_config_file")

HELP = {
    "target": "vLLM server to watch (base URL; /metrics is appended unless a path is given). "
              "Only this URL is ever fetched.",
    "listen": f"host:port to serve /metrics and /healthz on. Use 0.0.0.0:{DEFAULT_PORT} inside a pod.",
    "interval": "seconds between polls of the target",
    "window": "trailing window in seconds for the derived gauges (ratios, rates)",
    "timeout": "seconds allowed for one whole poll of the target (connect + full body); "
               "0 means min(3, 0.8 x interval)",
    "min_draft_tokens": "omit ratios resting on fewer draft tokens than this in the window "
                        "(no alert on three tokens)",
    "draft_cost_ratio": "cost of drafting one token relative to one target step, for the k advisor "
                        f"(about {draft_cost_help()})",
    "max_bytes": "largest /metrics body accepted from the target, in bytes",
    "max_series": "most spec-decode series accepted from the target (bounds memory)",
    "bearer_token_file": "file holding a bearer token for the target (or env VLLM_SPEC_EXPORTER_BEARER_TOKEN)",
    "basic_auth_user": "basic-auth user name for the target",
    "basic_auth_password_file": "file holding the basic-auth password "
                                "(or env VLLM_SPEC_EXPORTER_BASIC_AUTH_PASSWORD)",
    "ca_file": "CA bundle to verify an https target",
    "insecure_skip_verify": "do not verify the target's TLS certificate (testing only)",
    "client_cert_file": "client certificate (PEM) for mutual TLS to the target",
    "client_key_file": "private key (PEM) of the client certificate",
    "web_config_file": "exporter-toolkit style YAML enabling TLS and/or basic auth (bcrypt hashes) "
                       "on this exporter's own endpoint; off by default",
    "log_level": "debug, info, warning or error",
    "speculative_config": "the JSON given to vLLM's --speculative-config, for the config_info series "
                          "(otherwise read from vLLM's /server_info or its command line; docs/speculation-config.md)",
    "spec_method": "vLLM's --spec-method shorthand, when vLLM is started with it",
    "spec_tokens": "vLLM's --spec-tokens shorthand (k), when vLLM is started with it",
}


# The options that say how to reach the target; `check` takes them too.
CONNECTION_OPTIONS = ("bearer_token_file", "basic_auth_user", "basic_auth_password_file", "ca_file",
                      "insecure_skip_verify", "client_cert_file", "client_key_file")
# The options that say how the target speculates (specconfig.from_flags); `check` takes them too.
SPEC_CONFIG_OPTIONS = ("speculative_config", "spec_method", "spec_tokens")


def add_arguments(parser: argparse.ArgumentParser, only: tuple[str, ...] | None = None) -> None:
    if only is None:
        parser.add_argument("--config-file", type=Path, default=None,
                            help="optional YAML file with any of the options below (keys with underscores)")
    for f in fields(Settings):
        if only is not None and f.name not in only:
            continue
        flag = "--" + f.name.replace("_", "-")
        env = ENV_PREFIX + f.name.upper()
        default = f.default
        text = f"{HELP[f.name]} [env {env}; default {default}]"
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_const", const=True, default=None, help=text)
        else:
            parser.add_argument(flag, default=None, help=text, metavar=f.name.upper())


def resolve_connection(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Settings:
    """Only the target, how to reach it and how it speculates (flags > environment > defaults), for
    `check`, whose timing options are its own."""
    environ = dict(os.environ) if environ is None else environ
    values: dict[str, Any] = {"target": args.target}
    for f in fields(Settings):
        if f.name in CONNECTION_OPTIONS + SPEC_CONFIG_OPTIONS:
            raw = getattr(args, f.name, None)
            raw = environ.get(ENV_PREFIX + f.name.upper()) if raw is None else raw
            if raw is not None:
                values[f.name] = _convert(f.name, raw, f.default)
    conf = Settings(**values)
    if conf.basic_auth_password_file and not conf.basic_auth_user:
        raise ValueError("--basic-auth-password-file needs --basic-auth-user")
    conf.check_files()
    return conf


def resolve(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Settings:
    """Merge flags > environment > config file > defaults, converting and validating types."""
    environ = dict(os.environ) if environ is None else environ
    file_values: dict[str, Any] = {}
    if getattr(args, "config_file", None):
        try:
            loaded = yaml.safe_load(Path(args.config_file).read_text()) or {}
        except OSError as error:
            raise ValueError(f"--config-file: cannot read {args.config_file}: {error.strerror}") from None
        except yaml.YAMLError as error:
            raise ValueError(f"--config-file: {args.config_file} is not valid YAML: "
                             f"{str(error).splitlines()[0]}") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"{args.config_file}: expected a mapping of option: value")
        file_values = loaded
    known = {f.name for f in fields(Settings)}
    unknown = set(file_values) - known
    if unknown:
        raise ValueError(f"{args.config_file}: unknown option(s) {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for f in fields(Settings):
        raw = getattr(args, f.name, None)
        if raw is None:
            raw = environ.get(ENV_PREFIX + f.name.upper())
        if raw is None:
            raw = file_values.get(f.name)
        if raw is not None:
            values[f.name] = _convert(f.name, raw, f.default)
    settings = Settings(**values)
    settings.validate()
    return settings


def _convert(name: str, raw: Any, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(raw, dict | list):  # a YAML mapping where vLLM takes JSON (speculative_config:)
            return json.dumps(raw)
        return str(raw)
    except (TypeError, ValueError):
        kind = {"bool": "true/false", "int": "a whole number", "float": "a number"}.get(type(default).__name__, "text")
        raise ValueError(f"--{name.replace('_', '-')}: cannot read {raw!r} as {kind}") from None


def make_fetcher(conf: Settings, timeout: float, max_bytes: int):  # -> fetch.Fetcher
    """The one way to build a fetcher for the target from settings: credentials from files or env."""
    from .fetch import Credentials, Fetcher

    credentials = Credentials(
        bearer_token=read_secret(conf.bearer_token_file, ENV_PREFIX + "BEARER_TOKEN"),
        basic_user=conf.basic_auth_user,
        basic_password=read_secret(conf.basic_auth_password_file, ENV_PREFIX + "BASIC_AUTH_PASSWORD"),
    )
    return Fetcher(conf.target, timeout, max_bytes, credentials, ca_file=conf.ca_file,
                   insecure=conf.insecure_skip_verify, client_cert=conf.client_cert_file,
                   client_key=conf.client_key_file)


def read_secret(path: str | None, env_name: str, environ: dict[str, str] | None = None) -> str | None:
    """A secret from a file (trailing newline stripped) or, failing that, an environment variable."""
    environ = dict(os.environ) if environ is None else environ
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as e:
            raise ValueError(f"cannot read secret file {path}: {e.strerror}") from None
    return environ.get(env_name) or None
