"""The one terminal rendering of a model's spec-decode figures, shared by `check` and `demo`.

Input is a `ModelView`: `check` builds it from its own sampling (check.ModelReport.view), the
demo from the exporter's /metrics (`view_from_exporter`). Figures are keyed by the `MetricName`
the exporter serves them under; every figure may be missing (no data is not zero): its line is
then left out or says n/a. The advisor's per-k tables may be partial (the exporter serves the
speed-up only at the current and the recommended k).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from .names import MetricName


class AdvisorView(NamedTuple):
    """The k advisor's answer as shown: best k, and what is known of each k' (speed-up, tokens per step)."""

    recommended_k: int
    current_k: int | None
    estimated_speedup: Mapping[int, float]
    tokens_per_step: Mapping[int, float] = {}
    draft_cost_ratio: float | None = None
    gain_vs_current: float | None = None
    try_raising_k: bool = False


class LoadView(NamedTuple):
    """The server's load next to the figures (None: not exposed)."""

    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None


class PayingView(NamedTuple):
    """Speculation's estimated speed-up at the running batch (advisor.speedup_at_load)."""

    speedup: float
    batch: float  # running requests per engine
    compute_bound_tokens: float
    batch_source: str = "request_steps_per_step"  # check_sampling.BATCH_COUNTER or BATCH_GAUGE


class ModelView(NamedTuple):
    """One model's figures over the window, as the terminal shows them."""

    model_name: str
    engines: tuple[str, ...]
    k: int | None
    values: Mapping[MetricName, float]  # served name -> value; positions are in `positions`
    positions: Mapping[int, float] = {}  # 0-based draft position -> acceptance
    load: LoadView = LoadView()
    advisor: AdvisorView | None = None
    paying: PayingView | None = None
    positions_exact: bool = False  # the server counts drafts per position: `positions` are exact


BAR_WIDTH = 24
TOKEN_FLOW = (("generated", MetricName.GENERATION_TOKENS_PER_SECOND), ("drafted", MetricName.DRAFT_TOKENS_PER_SECOND),
              ("accepted", MetricName.ACCEPTED_TOKENS_PER_SECOND), ("rejected", MetricName.REJECTED_TOKENS_PER_SECOND))


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


def model_lines(m: ModelView, threshold: float, color: bool = False) -> list[str]:
    paint = painter(color)
    k, values = m.k, m.values
    lines = [paint(f"model {m.model_name}", "1") + f"  engines {', '.join(m.engines) or '—'}"
             + (f" · k={k}" if k else "")]
    rate = values.get(MetricName.ACCEPTANCE_RATIO)
    if rate is None:
        lines.append("  acceptance           n/a (too few draft tokens in the window)")
    else:
        judged = paint(f"{rate:6.1%}", "32" if rate >= threshold else "31;1")
        lines.append(f"  acceptance        {judged} {bar(rate)}   (threshold {threshold:.0%})")
    for pos, value in sorted(m.positions.items()):
        lines.append(f"  position {pos:>2}       {value:6.1%} {bar(value)}")
    draft_length = values.get(MetricName.MEAN_DRAFT_LENGTH)
    if m.positions and k and draft_length is not None and draft_length < k - 0.05 and not m.positions_exact:
        # vLLM upstream exports no per-position drafted counter: every draft is in each position's denominator.
        lines.append(f"  (drafts averaged {draft_length:.2f} of k={k} tokens: each position divides by all "
                     "drafts, so later positions read low; lower bounds)")
    mal = values.get(MetricName.MEAN_ACCEPTANCE_LENGTH)
    if mal is not None:
        lines.append(f"  mean accept. len  {mal:6.2f}  of k+1 = {k + 1 if k else '?'}")
    eff = values.get(MetricName.EFFICIENCY_RATIO)
    if eff is not None:
        drafted = values.get(MetricName.DRAFTED_EFFICIENCY_RATIO)
        over_drafted = f"  (over drafted tokens {drafted:.1%})" if drafted else ""
        lines.append(f"  efficiency        {eff:6.1%}{over_drafted}")
    rates = " · ".join(f"{label} {values[name]:.1f}" for label, name in TOKEN_FLOW if values.get(name) is not None)
    if rates:
        lines.append(f"  tokens/s          {rates}")
    load = m.load
    parts = []
    if load.requests_running is not None:
        parts.append(f"running {load.requests_running:g}")
    if load.requests_waiting is not None:
        parts.append(f"waiting {load.requests_waiting:g}")
    if load.kv_cache_usage is not None:
        parts.append(f"KV cache {load.kv_cache_usage:.0%}")
    if parts:
        lines.append("  load              " + " · ".join(parts))
    lines += _paying_lines(m.paying, color)
    lines += _advisor_lines(m.advisor)
    return lines


def _paying_lines(paying: PayingView | None, color: bool) -> list[str]:
    """Is speculation paying at this batch? Below 1x it costs more than it saves."""
    if paying is None:
        return []
    verdict = "paying" if paying.speedup >= 1 else "COSTS MORE THAN IT SAVES"
    shown = painter(color)(f"{paying.speedup:.2f}× — {verdict}", "32" if paying.speedup >= 1 else "31;1")
    return [f"  at this load      {shown} at {paying.batch:.3g} running per engine "
            f"(break-even 1×; compute-bound from {paying.compute_bound_tokens:g} tokens a step)"]


def _advisor_lines(adv: AdvisorView | None) -> list[str]:
    if adv is None:
        return []
    best, cur = adv.recommended_k, adv.current_k
    speed, tokens = adv.estimated_speedup, adv.tokens_per_step
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
    if adv.draft_cost_ratio is not None:
        details.append(f"draft cost {adv.draft_cost_ratio:g}")
    if details:
        text += f" ({', '.join(details)})"
    lines = [text]
    if best == 0:
        lines.append("                    speculation does not pay here: consider turning it off "
                     "(no --speculative-config) or a better drafter")
    elif cur is not None and best < cur and adv.gain_vs_current is not None:
        lines.append(f"                    lower num_speculative_tokens to {best}: "
                     f"+{adv.gain_vs_current - 1:.1%} expected")
    elif cur is not None and adv.try_raising_k:
        lines.append(f"                    the last position is still accepted often: try k={cur + 1}")
    return lines


# What the demo shows of each model, read back from the exporter's /metrics.
SHOWN = (MetricName.ACCEPTANCE_RATIO, MetricName.MEAN_ACCEPTANCE_LENGTH, MetricName.EFFICIENCY_RATIO,
         MetricName.DRAFTED_EFFICIENCY_RATIO, *(name for _, name in TOKEN_FLOW))


def view_from_exporter(metrics: Mapping[str, Mapping[tuple, float]], labels: tuple,
                       draft_cost: float | None = None) -> ModelView:
    """The view of one exporter series ({name: {sorted label items: value}} as read by
    `lab.pipeline.exporter_snapshot`); `labels` = (("engine", e), ("model_name", m)); `draft_cost`:
    the advisor's draft cost, when the caller knows it (the exporter does not serve it)."""

    def get(name: MetricName) -> float | None:
        return metrics.get(name, {}).get(labels)

    label = dict(labels)
    served_k = get(MetricName.NUM_SPECULATIVE_TOKENS)
    k = int(served_k) if served_k else None
    values = {name: value for name in SHOWN if (value := get(name)) is not None}
    positions = {int(dict(key)["position"]): value
                 for key, value in metrics.get(MetricName.POSITION_ACCEPTANCE_RATIO, {}).items()
                 if tuple(x for x in key if x[0] != "position") == labels}
    advisor = None
    best = get(MetricName.RECOMMENDED_K)
    if best is not None:
        speed: dict[int, float] = {}
        current, at_best = get(MetricName.ESTIMATED_SPEEDUP), get(MetricName.RECOMMENDED_K_ESTIMATED_SPEEDUP)
        if current is not None and k:
            speed[k] = current
        if at_best is not None:
            speed[int(best)] = at_best
        advisor = AdvisorView(recommended_k=int(best), current_k=k, estimated_speedup=speed,
                              draft_cost_ratio=draft_cost)
    return ModelView(model_name=label.get("model_name", ""), engines=(label.get("engine", ""),), k=k,
                     values=values, positions=positions, advisor=advisor)
