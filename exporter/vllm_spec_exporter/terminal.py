"""The one terminal rendering of a model's spec-decode figures, shared by `check` and `demo`.

Input is a *model entry*: the dict `check --json` prints per model (keys without the `vllm_`
prefix), which the demo builds from the exporter's /metrics with `entry_from_exporter`:

    {"model_name": str, "engines": [str], "k": int | None,
     "spec_decode_acceptance_ratio": float, "positions": {"0": float, ...},
     "spec_decode_mean_acceptance_length": float, "spec_decode_efficiency_ratio": float,
     "spec_decode_drafted_efficiency_ratio": float, "<flow>_per_second": float,
     "context": {"requests_running", "requests_waiting", "kv_cache_usage"},
     "advisor": {"recommended_k", "current_k", "estimated_speedup": {k: S},
                 "tokens_per_step": {k: E}, "draft_cost_ratio", "gain_vs_current", "try_raising_k"}}

Every key may be missing (no data is not zero): the line is then left out or says n/a. The
advisor's per-k tables may be partial (the exporter serves S only at the current k).
"""

from __future__ import annotations

from typing import Any

BAR_WIDTH = 24
TOKEN_FLOW = (("generated", "generation_tokens_per_second"), ("drafted", "spec_decode_draft_tokens_per_second"),
              ("accepted", "spec_decode_accepted_tokens_per_second"),
              ("rejected", "spec_decode_rejected_tokens_per_second"))


def bar(value: float, width: int = BAR_WIDTH) -> str:
    """A horizontal bar of `value` in [0, 1], in eighths of a character."""
    eighths = round(max(0.0, min(1.0, value)) * width * 8)
    return "█" * (eighths // 8) + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[eighths % 8]


def painter(color: bool):
    def paint(text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if color else text

    return paint


def fit(text: str, width: int) -> str:
    """One line cut to the terminal width, with an ellipsis when something was cut."""
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def model_lines(m: dict[str, Any], threshold: float, color: bool = False) -> list[str]:
    paint = painter(color)
    k = m.get("k")
    lines = [paint(f"model {m['model_name']}", "1") + f"  engines {', '.join(m.get('engines') or []) or '—'}"
             + (f" · k={k}" if k else "")]
    rate = m.get("spec_decode_acceptance_ratio")
    if rate is None:
        lines.append("  acceptance           n/a (too few draft tokens in the window)")
    else:
        judged = paint(f"{rate:6.1%}", "32" if rate >= threshold else "31;1")
        lines.append(f"  acceptance        {judged} {bar(rate)}   (threshold {threshold:.0%})")
    for pos, value in sorted(m.get("positions", {}).items(), key=lambda kv: int(kv[0])):
        lines.append(f"  position {pos:>2}       {value:6.1%} {bar(value)}")
    draft_length = m.get("spec_decode_mean_draft_length")
    if m.get("positions") and k and draft_length is not None and draft_length < k - 0.05:
        # vLLM has no per-position drafted counter: every draft is in each position's denominator.
        lines.append(f"  (drafts averaged {draft_length:.2f} of k={k} tokens: each position divides by all "
                     "drafts, so later positions read low; lower bounds)")
    mal = m.get("spec_decode_mean_acceptance_length")
    if mal is not None:
        lines.append(f"  mean accept. len  {mal:6.2f}  of k+1 = {k + 1 if k else '?'}")
    eff = m.get("spec_decode_efficiency_ratio")
    if eff is not None:
        drafted = m.get("spec_decode_drafted_efficiency_ratio")
        over_drafted = f"  (over drafted tokens {drafted:.1%})" if drafted else ""
        lines.append(f"  efficiency        {eff:6.1%}{over_drafted}")
    rates = " · ".join(f"{label} {m[key]:.1f}" for label, key in TOKEN_FLOW if m.get(key) is not None)
    if rates:
        lines.append(f"  tokens/s          {rates}")
    ctx = m.get("context", {})
    parts = []
    if "requests_running" in ctx:
        parts.append(f"running {ctx['requests_running']:g}")
    if "requests_waiting" in ctx:
        parts.append(f"waiting {ctx['requests_waiting']:g}")
    if "kv_cache_usage" in ctx:
        parts.append(f"KV cache {ctx['kv_cache_usage']:.0%}")
    if parts:
        lines.append("  load              " + " · ".join(parts))
    lines += _advisor_lines(m.get("advisor"))
    return lines


def _advisor_lines(adv: dict[str, Any] | None) -> list[str]:
    if not adv or adv.get("recommended_k") is None:
        return []
    best, cur = int(adv["recommended_k"]), adv.get("current_k")
    speed, tokens = adv.get("estimated_speedup", {}), adv.get("tokens_per_step", {})
    text = f"  advisor           best k = {best}"
    if best in tokens:
        text += f": {tokens[best]:.2f} tokens/step"
    if best in speed:
        text += f", est. speed-up {speed[best]:.2f}×"
    details = []
    if cur is not None and cur in speed and cur != best:
        details.append(f"k={cur}: {speed[cur]:.2f}×")
    elif cur is not None and cur in speed and best not in speed:
        details.append(f"est. speed-up {speed[cur]:.2f}× at k={cur}")
    if adv.get("draft_cost_ratio") is not None:
        details.append(f"draft cost {adv['draft_cost_ratio']:g}")
    if details:
        text += f" ({', '.join(details)})"
    lines = [text]
    if best == 0:
        lines.append("                    speculation does not pay here: consider turning it off "
                     "(no --speculative-config) or a better drafter")
    elif cur is not None and best < cur and adv.get("gain_vs_current") is not None:
        lines.append(f"                    lower num_speculative_tokens to {best}: "
                     f"+{adv['gain_vs_current'] - 1:.1%} expected")
    elif cur is not None and adv.get("try_raising_k"):
        lines.append(f"                    the last position is still accepted often: try k={cur + 1}")
    return lines


def entry_from_exporter(metrics: dict[str, dict[tuple, float]], labels: tuple) -> dict[str, Any]:
    """The model entry of one exporter series ({name: {sorted label items: value}} as read by
    `lab.pipeline.exporter_snapshot`); `labels` = (("engine", e), ("model_name", m))."""

    def get(name: str) -> float | None:
        return metrics.get("vllm_" + name, {}).get(labels)

    label = dict(labels)
    entry: dict[str, Any] = {"model_name": label.get("model_name"), "engines": [label.get("engine", "")]}
    k = get("spec_decode_num_speculative_tokens")
    entry["k"] = int(k) if k else None
    for name in ("spec_decode_acceptance_ratio", "spec_decode_mean_acceptance_length",
                 "spec_decode_efficiency_ratio", "spec_decode_drafted_efficiency_ratio",
                 *(key for _, key in TOKEN_FLOW)):
        value = get(name)
        if value is not None:
            entry[name] = value
    positions = {dict(key)["position"]: value
                 for key, value in metrics.get("vllm_spec_decode_position_acceptance_ratio", {}).items()
                 if tuple(x for x in key if x[0] != "position") == labels}
    if positions:
        entry["positions"] = positions
    best = get("spec_decode_recommended_k")
    if best is not None:
        speed: dict[int, float] = {}
        current, at_best = get("spec_decode_estimated_speedup"), get("spec_decode_recommended_k_estimated_speedup")
        if current is not None and entry["k"]:
            speed[entry["k"]] = current
        if at_best is not None:
            speed[int(best)] = at_best
        entry["advisor"] = {"recommended_k": int(best), "current_k": entry["k"], "estimated_speedup": speed}
    return entry
