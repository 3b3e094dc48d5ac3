"""Parse a Prometheus text exposition, keeping only the vLLM families the exporter needs.

A vLLM /metrics body is ~52 KB per engine, almost all of it histograms we never read. Instead of
building every family (prometheus_client's parser), a regex finds just the candidate lines of the
families we want, and only those are parsed strictly. A malformed candidate line rejects the whole
body: a derived ratio from half a scrape would be a lie.

Name variants accepted for every family: `vllm:` (vLLM), `vllm_` (OpenMetrics underscore escaping,
client_python#1177), `ray_vllm:` and `ray_vllm_` (Ray Serve's stat logger).
"""

from __future__ import annotations

import re
from typing import NamedTuple

# vLLM family name (without prefix and without _total) -> canonical key used downstream.
FAMILIES: dict[str, str] = {
    "spec_decode_num_drafts": "drafts",
    "spec_decode_num_draft_tokens": "draft_tokens",
    "spec_decode_num_accepted_tokens": "accepted_tokens",
    "spec_decode_num_accepted_tokens_per_pos": "accepted_per_pos",
    "generation_tokens": "generation_tokens",
    # V0 engine (<= 0.9): lifetime gauges plus counters that must not be rate()d (sum-of-sums bug).
    "spec_decode_draft_acceptance_rate": "v0_acceptance_rate",
    "spec_decode_efficiency": "v0_efficiency",
    "spec_decode_num_emitted_tokens": "v0_emitted_tokens",
    # Context gauges.
    "num_requests_running": "requests_running",
    "num_requests_waiting": "requests_waiting",
    "kv_cache_usage_perc": "kv_cache_usage",
    "gpu_cache_usage_perc": "kv_cache_usage",  # renamed in 0.9.2, removed in 0.12.0
}

# Longest names first so an alternative never stops at a shorter family that prefixes it.
_ALTERNATION = "|".join(sorted(FAMILIES, key=len, reverse=True))
_PREFIX = r"(?:ray_)?vllm[:_]"
_SUFFIX = r"(?:_total|_created)?"
# Locates candidate lines cheaply: newline, prefix, a wanted family, then the character that ends
# the name. Anchoring on "\n" instead of re.MULTILINE "^" is ~5x faster in CPython.
_CANDIDATE = re.compile(rf"\n{_PREFIX}(?:{_ALTERNATION}){_SUFFIX}[{{ \t][^\n]*")
# Parses one candidate line strictly: name, optional labels, value, optional timestamp/exemplar.
_SAMPLE = re.compile(
    rf"{_PREFIX}(?P<family>{_ALTERNATION})(?P<suffix>_total|_created)?"
    r'(?:\{(?P<labels>(?:[^"}]|"(?:[^"\\\n]|\\.)*")*)\})?'
    r"[ \t]+(?P<value>[^ \t#]+)(?:[ \t]+-?[0-9.eE+-]+)?[ \t]*(?:#[^\n]*)?\r?"
)
_LABEL_PAIR = r'[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"[ \t]*'
_LABELS_VALID = re.compile(rf"(?:{_LABEL_PAIR},)*(?:{_LABEL_PAIR})?")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"')
# Label bodies repeat across families and scrapes ("engine=...,model_name=..."); parsing each once
# keeps a poll cheap. Bounded: cleared when it grows past this many distinct bodies.
_LABEL_CACHE: dict[str, dict[str, str]] = {}
_LABEL_CACHE_MAX = 4096
_UNESCAPE = re.compile(r"\\(.)")
_UNESCAPES = {"n": "\n", "\\": "\\", '"': '"'}
_EXPOSITION_MARKERS = ("# TYPE ", "# HELP ")


class ParseError(ValueError):
    """The body is not a usable Prometheus text exposition; the message names the problem."""


class RawSample(NamedTuple):
    """One wanted sample. `labels` may be shared between samples (cached): never mutate it."""

    key: str  # canonical family key, see FAMILIES
    created: bool  # a `_created` sample (start time of the counter), not a value
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[RawSample]:
    """Return the wanted samples of `text`, or raise ParseError naming what is wrong."""
    if text and not text.endswith("\n"):
        raise ParseError("response is truncated (no newline after the last line)")
    head = text[:200].lstrip().lower()
    if head.startswith(("<!doctype", "<html", "<?xml", "{")):
        raise ParseError("response is not a Prometheus text exposition (looks like HTML/XML/JSON)")
    samples: list[RawSample] = []
    scan = text if text.startswith("\n") else "\n" + text
    for match in _CANDIDATE.finditer(scan):
        line = match.group()[1:]
        sample = _SAMPLE.fullmatch(line)
        if sample is None:
            raise ParseError(f"malformed line {_line_number(scan, match.start())}: {line[:120]!r}")
        samples.append(_to_sample(sample, scan, match.start()))
    if not samples and not any(marker in text for marker in _EXPOSITION_MARKERS):
        raise ParseError("response holds no Prometheus metrics (no # HELP/# TYPE lines)")
    return samples


def _to_sample(sample: re.Match[str], text: str, offset: int) -> RawSample:
    raw_value = sample["value"]
    try:
        value = float(raw_value)
    except ValueError:
        raise ParseError(
            f"line {_line_number(text, offset)}: value {raw_value[:40]!r} is not a number"
        ) from None
    body = sample["labels"]
    if not body:
        labels: dict[str, str] = {}
    else:
        labels = _LABEL_CACHE.get(body)  # type: ignore[assignment]
        if labels is None:
            labels = _parse_labels(body, text, offset)
    return RawSample(FAMILIES[sample["family"]], sample["suffix"] == "_created", labels, value)


def _parse_labels(body: str, text: str, offset: int) -> dict[str, str]:
    if _LABELS_VALID.fullmatch(body.rstrip(" \t")) is None:
        raise ParseError(f"line {_line_number(text, offset)}: malformed labels {{{body[:120]}}}")
    labels = {}
    for name, value in _LABEL.findall(body):
        if "\\" in value:
            value = _UNESCAPE.sub(lambda e: _UNESCAPES.get(e[1], "\\" + e[1]), value)
        labels[name] = value
    if len(_LABEL_CACHE) >= _LABEL_CACHE_MAX:
        _LABEL_CACHE.clear()
    _LABEL_CACHE[body] = labels
    return labels


def _line_number(scan: str, anchor: int) -> int:
    """1-based line number of the candidate whose anchoring newline is at `anchor` in `scan`."""
    return scan.count("\n", 0, anchor + 1)
