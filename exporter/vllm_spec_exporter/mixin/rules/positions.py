"""k, the draft positions configured, per (server, model, engine): with the sidecar its gauge, without
it a record that counts the per-position rates, in a group of its own.

    instance_model_engine:vllm_spec_decode_draft_positions:count     group `vllm-spec-decode.k`

vLLM serves no k; it creates every position series 0..k-1 at start-up, so k is their number
(count_positions), and at All the dashboards count the fleet's per-position record the same way
(promql.Queries.k). Efficiency's terms (fleet_records.efficiency_terms) and both dashboards (tokens
per step vs k+1, efficiency, draft length vs k and positions that pay with servers selected; the
fleet dashboard's k and servers per model) read k_series.
"""

from __future__ import annotations

from ..config import MixinConfig
from .sources import ACCEPTED_BY_POSITION, SERVED, raw_rate, series, spelled_out

__all__ = ["DRAFT_POSITIONS", "K_GROUP", "count_positions", "k_group", "k_record", "k_rule", "k_series"]

# The metric part of the k record's name (k_record), and its group (k_group).
DRAFT_POSITIONS = "vllm_spec_decode_draft_positions"
K_GROUP = "vllm-spec-decode.k"


def k_record(cfg: MixinConfig) -> str:
    """Name of the direct bundle's k record: draft positions per (server, model, engine)."""
    return f"instance_model_engine:{DRAFT_POSITIONS}:count"


def count_positions(per_position: str) -> str:
    """k from per-position series: vLLM creates every position series 0..k-1 at start-up."""
    return f"count without (position) ({per_position})"


def k_series(cfg: MixinConfig, matchers: str) -> str:
    """k per (server, model, engine) on `matchers` (the source's selector included): the sidecar's
    gauge, or directly the k record (k_rule)."""
    return series(k_record(cfg) if cfg.direct else SERVED.NUM_SPECULATIVE_TOKENS, matchers)


def k_rule(cfg: MixinConfig) -> dict[str, str]:
    """The k record: the positions of the per-position rates, counted. k exists while those
    rates do, whatever the spellings, restarts or missed scrapes the rates already ride out.
    Efficiency's two fleet terms read this record instead of counting every server's k position
    series each (a third of the cost); counting them costs the k group the most of its work, so
    it runs once a minute (k_group): k changes only when a server restarts."""
    return {"record": k_record(cfg), "expr": count_positions(spelled_out(cfg, raw_rate(cfg, ACCEPTED_BY_POSITION)))}


def k_group(cfg: MixinConfig) -> dict[str, object]:
    """The k record's own group, evaluated every `windows.k_interval` (a minute at 15 s): k changes
    only when a server restarts with another k, and counting it reads every position series of
    every server. What its readers (module docstring) read is up to one such interval old:
    - a server has no k for up to that interval after its per-position rates first exist
      (llama-server: after its first speculative request); efficiency leaves it out on both sides
      meanwhile (fleet_records.efficiency_terms), and the panels of k with it selected, and the
      fleet dashboard's k and servers-per-model panels, miss it;
    - after a restart with another k on the same labels, the old k stands for up to rate_window
      (the old positions' rates) plus that interval;
    - when the rules are first loaded (or this group is renamed), k is absent until the group's
      first evaluation, up to that interval."""
    return {"name": K_GROUP, "interval": cfg.windows.k_interval, "rules": [k_rule(cfg)]}
