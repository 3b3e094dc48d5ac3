"""The exposition shape prometheus/client_python#1177 produces under `escaping=underscores`."""

from __future__ import annotations


def escape_sample_names(text: str, prefix: str = "vllm:") -> str:
    """`vllm:` → `vllm_` (or `prefix` with its colons escaped) on sample lines only; HELP and TYPE
    lines keep the colon: what prometheus_client writes under underscore escaping (#1177)."""
    escaped = prefix.replace(":", "_")
    return "".join(escaped + line[len(prefix):] if line.startswith(prefix) else line
                   for line in text.splitlines(keepends=True))
