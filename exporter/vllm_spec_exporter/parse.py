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

from .names import Family

__all__ = ["FAMILIES", "ParseError", "RawSample", "parse"]

# vLLM family name (without prefix and without _total) -> canonical key used downstream.
FAMILIES: dict[str, Family] = {
    "spec_decode_num_drafts": Family.DRAFTS,
    "spec_decode_num_draft_tokens": Family.DRAFT_TOKENS,
    "spec_decode_num_accepted_tokens": Family.ACCEPTED_TOKENS,
    "spec_decode_num_accepted_tokens_per_pos": Family.ACCEPTED_PER_POS,
    "generation_tokens": Family.GENERATION_TOKENS,
    # V0 engine (<= 0.9): lifetime gauges plus counters that must not be rate()d (sum-of-sums bug).
    "spec_decode_draft_acceptance_rate": Family.V0_ACCEPTANCE_RATE,
    "spec_decode_efficiency": Family.V0_EFFICIENCY,
    "spec_decode_num_emitted_tokens": Family.V0_EMITTED_TOKENS,
    # Context gauges.
    "num_requests_running": Family.REQUESTS_RUNNING,
    "num_requests_waiting": Family.REQUESTS_WAITING,
    "kv_cache_usage_perc": Family.KV_CACHE_USAGE,
    "gpu_cache_usage_perc": Family.KV_CACHE_USAGE,  # renamed in 0.9.2, removed in 0.12.0
}

# The FAMILIES keys as a factored alternation (a trie): the regex engine rejects the ~600 vLLM lines
# we do not want after a few characters. tests/test_parse.py checks it accepts exactly FAMILIES.
_FAMILY_TRIE = (
    r"(?:spec_decode_(?:num_(?:drafts|draft_tokens|accepted_tokens(?:_per_pos)?|emitted_tokens)"
    r"|draft_acceptance_rate|efficiency)|generation_tokens|num_requests_(?:running|waiting)"
    r"|(?:kv|gpu)_cache_usage_perc)"
)
_SUFFIX = r"(?:_total|_created)?"
# Label body, unrolled (no per-character alternation) and possessive: quoted values may hold } and ,
_LABEL_BODY = r'[^"}\n]*+(?:"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"[^"}\n]*+)*+'
# One pass over the body. A line that starts like a wanted family but does not parse strictly lands
# in the `bad` branch, so a malformed spec-decode line is an error, never silently skipped.
_LINE = re.compile(
    rf"\n(?:ray_)?vllm[:_](?:(?P<family>{_FAMILY_TRIE})(?P<suffix>_total|_created)?"
    rf"(?:\{{(?P<labels>{_LABEL_BODY})\}})?"
    r"[ \t]+(?P<value>[^ \t#\n]+)(?:[ \t]+-?[0-9.eE+-]+)?[ \t]*(?:#[^\n]*)?\r?(?=\n)"
    rf"|(?P<bad>{_FAMILY_TRIE}{_SUFFIX}[{{ \t][^\n]*))"
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

    reason = "parse"  # names.SCRAPE_ERROR_REASONS


class RawSample(NamedTuple):
    """One wanted sample. `labels` may be shared between samples (cached): never mutate it."""

    key: Family  # canonical family key, see FAMILIES
    created: bool  # a `_created` sample (start time of the counter), not a value
    labels: dict[str, str]
    value: float
    label_text: str  # the raw label body: identifies an exact duplicate series cheaply


def parse(text: str) -> list[RawSample]:
    """Return the wanted samples of `text`, or raise ParseError naming what is wrong."""
    if text and not text.endswith("\n"):
        raise ParseError("response is truncated (no newline after the last line)")
    head = text[:200].lstrip().lower()
    if head.startswith(("<!doctype", "<html", "<?xml", "{")):
        raise ParseError("response is not a Prometheus text exposition (looks like HTML/XML/JSON)")
    samples: list[RawSample] = []
    scan = text if text.startswith("\n") else "\n" + text
    append = samples.append
    for match in _LINE.finditer(scan):
        family, suffix, body, raw_value, bad = match.group("family", "suffix", "labels", "value", "bad")
        if bad is not None:
            raise ParseError(f"malformed line {_line_number(scan, match.start())}: {bad[:120]!r}")
        try:
            value = float(raw_value)
        except ValueError:
            raise ParseError(f"line {_line_number(scan, match.start())}: value {raw_value[:40]!r} "
                             "is not a number") from None
        body = body or ""
        labels = _LABEL_CACHE.get(body)
        if labels is None:
            labels = _parse_labels(body, scan, match.start())
        append(RawSample(FAMILIES[family], suffix == "_created", labels, value, body))
    if not samples and not any(marker in text for marker in _EXPOSITION_MARKERS):
        raise ParseError("response holds no Prometheus metrics (no # HELP/# TYPE lines)")
    return samples


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
