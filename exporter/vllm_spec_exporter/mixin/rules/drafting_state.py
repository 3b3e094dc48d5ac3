"""Drafting paused by design vs speculation stopped, per server and model: the records that tell
them apart from the running batch (vLLM's dynamic k) or from the engine's own adaptive tier
(SGLang), which recording_rules.py adds to its group and the dashboards' drafting state reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config import MixinConfig
from . import sources
from .sources import own

if TYPE_CHECKING:
    from .recording_rules import RecordNames

__all__ = ["drafting_state_rules", "engine_tier_steps"]


def drafting_state_rules(cfg: MixinConfig, n: RecordNames) -> list[dict[str, Any]]:
    """Drafting paused by design vs speculation stopped, per server and model.

    vLLM's dynamic k (num_speculative_tokens_per_batch_size) sets k = 0 above a batch size, and
    such steps count no draft at all: drafts/s falls to 0 under load while output flows. The
    server's running batch tells the two apart. `drafting_batch` is the smallest batch of a window
    in which the server drafted (a batch size at which it drafts, whatever its k table); with no
    drafts now, a batch still larger than any such size over drafting_batch_memory is a pause by
    design, and a batch at or below one is speculation stopped. Idle moments (no running request)
    are left out, so bursts separated by idle gaps do not look like a small batch. A server with
    no drafting on record is neither: nothing to compare with, so nothing is claimed.

    Engines that say which tier they run need no inference: SGLang's adaptive mode serves the
    active tier's draft steps, and a tier of 0 steps drafts nothing on purpose (its own acceptance
    gauges then read 0 %). drafts_stopped never holds while engine_tier_steps is 0. (An expression,
    not a record: the recording group is at mixtool's 20-rule limit.)
    """
    w = cfg.windows.rate_window
    generation, draft_tokens, running_batch = (own(cfg, name) for name in
                                               (n.generation_rate, n.draft_tokens_rate, n.running_batch))
    no_drafts = (f"(\n  {generation} >= {cfg.min_generation_tokens_per_second:g}\nand\n"
                 f"  {draft_tokens} == 0\n)")
    drafted_at = f"max_over_time({own(cfg, n.drafting_batch)}[{cfg.drafting_batch_memory}])"
    # Only the sidecar serves an engine's tier (SGLang); vLLM's own series (source=vllm) have none.
    tier_0 = "" if cfg.direct else f"\nunless\n({engine_tier_steps(cfg.exporter_selector)} == 0)"
    running = sources.raw_gauge(cfg, sources.SERVED.REQUESTS_RUNNING, sources.source_matchers(cfg))
    return [
        # A subquery at the evaluation interval, so idle moments (no sample above 0) are skipped. The
        # step is explicit: MetricsQL (vmalert) defaults a subquery's step to the query's, not to the
        # evaluation interval, and then the window can hold no point at all.
        {"record": n.running_batch,
         "expr": f"min_over_time((sum without (engine) ({running}) > 0)[{w}:{cfg.windows.evaluation_interval}])"},
        {"record": n.drafting_batch, "expr": f"{running_batch}\nand\n({draft_tokens} > 0)"},
        {"record": n.drafts_stopped, "expr": f"{no_drafts}\nand\n({running_batch} <= {drafted_at}){tier_0}"},
        {"record": n.drafting_paused, "expr": f"{no_drafts}\nand\n({running_batch} > {drafted_at})"},
    ]


def engine_tier_steps(matchers: str) -> str:
    """Per server and model on `matchers`: the draft steps of an adaptive engine's active tier (SGLang
    --speculative-adaptive), the highest engine; 0 = the tier drafts nothing, paused by design.
    Only servers with a drafter (verify tokens >= 1: SGLang reports 0 / 0 without one)."""
    steps, verify = (sources.series(name, matchers)
                     for name in (sources.SERVED.ENGINE_DRAFT_STEPS, sources.SERVED.ENGINE_VERIFY_TOKENS))
    return f"(max without (engine) ({steps}) and max without (engine) ({verify}) > 0)"
