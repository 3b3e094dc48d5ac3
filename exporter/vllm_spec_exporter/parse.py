"""Parse a Prometheus text exposition, keeping only the engine families the exporter needs.

A vLLM /metrics body is ~52 KB per engine, almost all of it histograms we never read. Instead of
building every family (prometheus_client's parser), a regex finds just the candidate lines of the
families we want, and only those are parsed strictly. A malformed candidate line rejects the whole
body: a derived ratio from half a scrape would be a lie.

Name variants accepted for every vLLM family: `vllm:` (vLLM), `vllm_` (OpenMetrics underscore
escaping, client_python#1177), `ray_vllm:` and `ray_vllm_` (Ray Serve's stat logger). Other engines'
names (llama.cpp, TensorRT-LLM, SGLang, TGI) come from engines.NAMES; every sample says which
family it came from, and a spec-decode-like name of an engine we do not know is reported as one
`Family.FOREIGN_SPEC` sample so that normalise can say so instead of reporting "speculation off".
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from .engines import NAMES, PREFIXES, SPEC_KEYS
from .names import EngineFamily, Family

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
    # Diffusion models (vLLM 0.32+) reuse the spec-decode path under these names.
    "diffusion_num_denoising_steps": Family.DIFFUSION_STEPS,
    "diffusion_num_canvas_positions": Family.DIFFUSION_CANVAS_POSITIONS,
    "diffusion_num_committed_tokens": Family.DIFFUSION_COMMITTED_TOKENS,
}

# The FAMILIES keys as a factored alternation (a trie): the regex engine rejects the ~600 vLLM lines
# we do not want after a few characters. tests/test_parse.py checks it accepts exactly FAMILIES.
_FAMILY_TRIE = (
    r"(?:spec_decode_(?:num_(?:drafts|draft_tokens|accepted_tokens(?:_per_pos)?|emitted_tokens)"
    r"|draft_acceptance_rate|efficiency)|generation_tokens|num_requests_(?:running|waiting)"
    r"|(?:kv|gpu)_cache_usage_perc|diffusion_num_(?:denoising_steps|canvas_positions|committed_tokens))"
)
_SUFFIX = r"(?:_total|_created)?"
# Label body, unrolled (no per-character alternation) and possessive: quoted values may hold } and ,
_LABEL_BODY = r'[^"}\n]*+(?:"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"[^"}\n]*+)*+'


def _tail(group_prefix: str) -> str:
    """Suffix, labels and value of a sample line, under group names starting with `group_prefix`."""
    g = group_prefix
    return (rf"(?P<{g}suffix>_total|_created)?(?:\{{(?P<{g}labels>{_LABEL_BODY})\}})?"
            rf"[ \t]+(?P<{g}value>[^ \t#\n]+)(?:[ \t]+-?[0-9.eE+-]+)?[ \t]*(?:#[^\n]*)?\r?(?=\n)")


# The other engines' names (engines.NAMES): a few lines per body, so a plain alternation.
_ENGINE_NAMES = "|".join(sorted({re.escape(n) for names in NAMES.values() for n in names}, key=lambda n: -len(n)))
_ENGINE_PREFIX = "|".join(re.escape(p) for p in PREFIXES)
# One pass over the body; each line is dispatched on its prefix, so a vLLM line costs what it did
# before other engines were known. A line that starts like a wanted family but does not parse
# strictly lands in a `bad` branch, so a malformed spec-decode line is an error, never skipped.
_LINE = re.compile(
    rf"\n(?:(?:ray_)?vllm[:_](?:(?P<family>{_FAMILY_TRIE}){_tail('')}"
    rf"|(?P<bad>{_FAMILY_TRIE}{_SUFFIX}[{{ \t][^\n]*))"
    rf"|(?P<prefix>{_ENGINE_PREFIX})(?:(?P<efamily>{_ENGINE_NAMES}){_tail('e')}"
    rf"|(?P<ebad>(?:{_ENGINE_NAMES}){_SUFFIX}[{{ \t][^\n]*)))"
)
# Spec-decode-like sample names. Only searched when no known engine's spec metric was found, so an
# unknown engine is named instead of being reported as "speculation off".
_FOREIGN_SPEC = re.compile(r"\n([a-zA-Z_:][a-zA-Z0-9_:]*(?:spec_decode|spec_accept|speculative|draft_accept)"
                           r"[a-zA-Z0-9_:]*)[{ \t]")
_KNOWN_PREFIXES = ("vllm:", "vllm_", "ray_vllm:", "ray_vllm_", *PREFIXES)
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

    key: Family  # canonical family key, see FAMILIES and engines.NAMES
    created: bool  # a `_created` sample (start time of the counter), not a value
    labels: dict[str, str]
    value: float
    label_text: str  # the raw label body: identifies an exact duplicate series cheaply
    engine_family: str = EngineFamily.VLLM  # which engine's name this was (names.EngineFamily)


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
        prefix = match.group("prefix")
        if prefix is None:
            family, suffix, body, raw_value, bad = match.group("family", "suffix", "labels", "value", "bad")
            engine_family, key = EngineFamily.VLLM, FAMILIES.get(family or "")
        else:
            family, suffix, body, raw_value, bad = match.group("efamily", "esuffix", "elabels", "evalue", "ebad")
            engine_family = PREFIXES[prefix]
            key = NAMES[engine_family].get(family or "")
            if key is None and bad is None:
                continue  # another engine's name that only looks like one of this engine's
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
        append(RawSample(key, suffix == "_created", labels, value, body, engine_family))
    if not samples and not any(marker in text for marker in _EXPOSITION_MARKERS):
        raise ParseError("response holds no Prometheus metrics (no # HELP/# TYPE lines)")
    if not any(s.key in SPEC_KEYS for s in samples):
        for name in _FOREIGN_SPEC.findall(scan):
            if not name.startswith(_KNOWN_PREFIXES):
                append(RawSample(Family.FOREIGN_SPEC, False, {}, math.nan, name, ""))
                break
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
