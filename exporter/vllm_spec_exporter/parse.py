"""Parse a Prometheus text exposition, keeping only the engine families the exporter needs.

A vLLM /metrics body is ~52 KB per engine, almost all of it histograms we never read. Instead of
building every family (prometheus_client's parser), a regex finds just the candidate lines of the
families we want, and only those are parsed strictly. A malformed candidate line rejects the whole
body: a derived ratio from half a scrape would be a lie.

vLLM's names and their four spellings (`vllm:`, `vllm_`, `ray_vllm:`, `ray_vllm_`) come from
engines.VLLM_NAMES and engines.VLLM_PREFIXES (plus the `_bucket`, `_sum` and `_count` samples of
the histograms of engines.VLLM_HISTOGRAM_NAMES a caller selects, each tagged with its `part`), the other
engines' (llama.cpp, TensorRT-LLM, SGLang, TGI) from engines.NAMES; every sample says which family
it came from, and a spec-decode-like name of an engine we do not know is reported as one
`Family.FOREIGN_SPEC` sample so that normalise can say so instead of reporting "speculation off".
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from operator import itemgetter
from typing import NamedTuple

from .engines import (
    HISTOGRAM_PARTS,
    NAMES,
    PREFIXES,
    SPEC_KEYS,
    TOTALS_ONLY,
    VLLM_HISTOGRAM_NAMES,
    VLLM_NAMES,
    VLLM_PREFIXES,
)
from .names import EngineFamily, Family

__all__ = ["ParseError", "RawSample", "parse"]

def _trie(words: Iterable[str]) -> str:
    """A regex matching exactly `words`, factored on common prefixes (a trie): the engine rejects
    a line that names none of them after a few characters instead of trying every word."""
    tree: dict = {}
    for word in words:
        node = tree
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here

    def emit(node: dict) -> str:
        branches = [re.escape(char) + emit(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(tree)


# vLLM's names (engines.VLLM_NAMES) and the other engines' (engines.NAMES) as two tries, chosen by a
# conditional on the prefix: one pattern serves every engine, and a vLLM line costs what it did
# before other engines were known (a second alternative for every line cost ~15 %; one trie of all
# names ~30 %, since vLLM's many unwanted `request_*` lines then match TGI's `request_` prefix).
# vLLM's histograms (engines.VLLM_HISTOGRAM_NAMES) join as their samples' names, `<name>_bucket`,
# `_sum` and `_count` (no `_bucket` for engines.TOTALS_ONLY): each word maps to the histogram's key,
# and _PARTS says which part it is.
_HISTOGRAM_WORDS: dict[str, tuple[Family, str]] = {
    f"{name}_{part}": (key, part) for name, key in VLLM_HISTOGRAM_NAMES.items()
    for part in HISTOGRAM_PARTS if part != "bucket" or key not in TOTALS_ONLY}
_PARTS: dict[str, str] = {word: part for word, (_, part) in _HISTOGRAM_WORDS.items()}
_VLLM_WORDS: dict[str, Family] = {**VLLM_NAMES, **{word: key for word, (key, _) in _HISTOGRAM_WORDS.items()}}
_ENGINE_TRIE = _trie({name for names in NAMES.values() for name in names})
# prefix on the wire -> (engine family, its names -> canonical key)
_TABLES: dict[str, tuple[str, dict[str, Family]]] = {
    **{prefix: (EngineFamily.VLLM, _VLLM_WORDS) for prefix in VLLM_PREFIXES},
    **{prefix: (family, NAMES[family]) for prefix, family in PREFIXES.items()},
}
_SUFFIX = r"(?:_total|_created)?"
# Label body, unrolled (no per-character alternation) and possessive: quoted values may hold } and ,
_LABEL_BODY = r'[^"}\n]*+(?:"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"[^"}\n]*+)*+'


def _line_pattern(vllm_words: Iterable[str]) -> re.Pattern[str]:
    """One pass over the body. A line that starts like a wanted family but does not parse strictly
    lands in the `bad` branch, so a malformed spec-decode line is an error, never silently skipped.
    vLLM's prefixes are VLLM_PREFIXES, factored (checked at import below)."""
    name_trie = rf"(?(other){_ENGINE_TRIE}|{_trie(vllm_words)})"
    return re.compile(
        rf"\n(?P<prefix>vllm[:_]|ray_vllm[:_]|(?P<other>{'|'.join(re.escape(p) for p in PREFIXES)}))"
        rf"(?:(?P<family>{name_trie})(?P<suffix>_total|_created)?(?:\{{(?P<labels>{_LABEL_BODY})\}})?"
        r"[ \t]+(?P<value>[^ \t#\n]+)(?:[ \t]+-?[0-9.eE+-]+)?[ \t]*(?:#[^\n]*)?\r?(?=\n)"
        rf"|(?P<bad>(?P<badname>{name_trie}){_SUFFIX}[{{ \t][^\n]*))"
    )


# One pattern per selection of histograms: VLLM_NAMES plus the samples of the selected histograms
# only (a line of another histogram is skipped after a few characters). A pattern per selection,
# not a filter after matching: on a real one-engine scrape a poll (parse to derive) took ~0.14 ms
# without histograms, ~0.24 ms with the time per output token and the inter-token latency, ~0.32 ms
# with every histogram's buckets; the two totals-only ones, without theirs, add ~7 % to the second
# (the pipeline bench). Callers pass a few fixed selections, so the cache stays small.
_FAMILY_TRIE = _trie(VLLM_NAMES)  # accepts exactly VLLM_NAMES' names


@functools.cache
def _line_for(histograms: frozenset[Family]) -> re.Pattern[str]:
    """The line pattern for VLLM_NAMES plus the samples of the histograms in `histograms`."""
    return _line_pattern({word: key for word, key in _VLLM_WORDS.items() if word in VLLM_NAMES or key in histograms})


# Spec-decode-like sample names. Only searched when no known engine's spec metric was found, so an
# unknown engine is named instead of being reported as "speculation off".
_FOREIGN_SPEC = re.compile(r"\n([a-zA-Z_:][a-zA-Z0-9_:]*(?:spec_decode|spec_accept|speculative|draft_accept)"
                           r"[a-zA-Z0-9_:]*)[{ \t]")
_KNOWN_PREFIXES = (*VLLM_PREFIXES, *PREFIXES)
assert all(re.fullmatch(r"vllm[:_]|ray_vllm[:_]", p) for p in VLLM_PREFIXES) and len(VLLM_PREFIXES) == 4
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
_GROUPS = ("prefix", "family", "suffix", "labels", "value", "bad", "badname")
_KEY_OF = itemgetter(0)  # RawSample.key


class ParseError(ValueError):
    """The body is not a usable Prometheus text exposition; the message names the problem."""

    reason = "parse"  # names.SCRAPE_ERROR_REASONS


class RawSample(NamedTuple):
    """One wanted sample. `labels` may be shared between samples (cached): never mutate it."""

    key: Family  # canonical family key, see engines.VLLM_NAMES and engines.NAMES
    created: bool  # a `_created` sample (start time of the counter), not a value
    labels: dict[str, str]
    value: float
    label_text: str  # the raw label body: identifies an exact duplicate series cheaply
    engine_family: str = EngineFamily.VLLM  # which engine's name this was (names.EngineFamily)
    part: str = ""  # a histogram's sample: "bucket", "sum" or "count" (engines.HISTOGRAM_PARTS)


def parse(text: str, histograms: frozenset[Family] = frozenset()) -> list[RawSample]:
    """Return the wanted samples of `text`, or raise ParseError naming what is wrong; `histograms`:
    also the `_bucket`, `_sum` and `_count` samples of those histograms (keys of
    engines.VLLM_HISTOGRAM_NAMES' values: engines.SERVED_HISTOGRAMS, engines.ALL_HISTOGRAMS)."""
    if text and not text.endswith("\n"):
        raise ParseError("response is truncated (no newline after the last line)")
    head = text[:200].lstrip().lower()
    if head.startswith(("<!doctype", "<html", "<?xml", "{")):
        raise ParseError("response is not a Prometheus text exposition (looks like HTML/XML/JSON)")
    samples: list[RawSample] = []
    scan = text if text.startswith("\n") else "\n" + text
    append = samples.append
    for match in _line_for(histograms).finditer(scan):
        prefix, family, suffix, body, raw_value, bad, bad_name = match.group(*_GROUPS)
        engine_family, names = _TABLES[prefix]
        key = names.get(family or bad_name)
        if key is None:
            continue  # another engine's name under this prefix: not one of ours
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
        append(RawSample(key, suffix == "_created", labels, value, body, engine_family, _PARTS.get(family, "")))
    if not samples and not any(marker in text for marker in _EXPOSITION_MARKERS):
        raise ParseError("response holds no Prometheus metrics (no # HELP/# TYPE lines)")
    if SPEC_KEYS.isdisjoint(map(_KEY_OF, samples)):  # C-level, stops at the first spec sample
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
