"""The health panels' queries, per scrape target: up, scrape errors, restarts, the age of the last
poll, the detected schema and speculative config, drafting stopped or paused, firing alerts, the
servers not speculating, and the servers seen (the crowded panels' shared variable).
"""

from __future__ import annotations

from collections.abc import Sequence

from ....names import SPEC_CONFIG_LABELS
from ...rules import drafting_state, fleet_counts, recording_rules, sources
from ...rules.sources import SERVED, series
from .. import crowd
from ..crowd import Crowd, ServerVariable
from .reads import Reads
from .selectors import (
    ALERT_NAME_REGEX,
    GENERATED,
    PROBLEM_EXPORTER_UNSCRAPED,
    PROBLEM_LABEL,
    PROBLEM_SPEC_OFF,
    PROBLEM_VLLM_UNREADABLE,
    RANGE,
    RATE_INTERVAL,
    SPEC_DECODE_ENABLED,
    TARGET_UP,
    join_matchers,
    rate,
    sum_by,
    sum_rate,
)


class HealthQueries(Reads):
    """Per scrape target: can the numbers be trusted?"""

    def server_variables(self, rankings: Sequence[Crowd]) -> list[ServerVariable]:
        """The hidden variables of the crowded panels' `rankings` (the rows return them, the frame
        collects them): crowd.SEEN_VARIABLE, which every one of them reads, then each ranking
        (none without a crowded panel)."""
        if not rankings:
            return []
        return [crowd.seen_variable(self.cfg, self.servers_seen()), *rankings]

    def servers_seen(self) -> str:
        """Every selected server seen in the range, one series each, on every variable: the series
        the model and engine variables read (frame), the sidecar's running requests or directly the
        generation rate record, so a selected model or engine counts only its own servers."""
        seen = self.counter_rate(GENERATED) if self.direct else series(SERVED.REQUESTS_RUNNING, self.sel.series)
        return sum_by((self.cfg.instance_label,), f"last_over_time({seen}[{RANGE}])", op="group")

    def drafting_state(self) -> str:
        """Per server and model while it drafts or generates: 0 drafting, 1 paused by design (no
        drafts at a larger batch than any at which it drafted), 2 stopped, 3 paused by design by
        the engine's own adaptive tier (SGLang tier 0; recording_rules)."""
        names = recording_rules.record_names(self.cfg)
        matchers = join_matchers(self.sel.target, 'model_name=~"$model_name"')
        state = (f"(0 * {series(names.drafts_stopped, matchers)} + 2)"
                 f" or (0 * {series(names.drafting_paused, matchers)} + 1)")
        if self.cfg.direct:  # vLLM's own series: no engine declares a tier
            return state + f" or (0 * ({series(names.draft_tokens_rate, matchers)} > 0))"
        tier = drafting_state.engine_tier_steps(matchers)
        return (state + f" or (0 * ({tier} == 0) + 3)"
                f" or (0 * ({series(names.draft_tokens_rate, matchers)} > 0))"
                f" or (0 * ({tier} > 0))")

    def per_target(self, metric: str, op: str = "min") -> str:
        """One value per scrape target of an exporter health gauge (no model/engine labels)."""
        return sum_by((self.cfg.instance_label,), series(metric, self.sel.target), op=op)

    def scrape_up(self) -> str:
        """`up` of the source job's targets: the sidecars, or with source=vllm the vLLM servers."""
        return sources.scrape_up(self.cfg, join_matchers('job=~"$job"', f'{self.cfg.instance_label}=~"$instance"'))

    def spec_off_series(self) -> str:
        """source=vllm: (server, model) pairs generating tokens whose spec-decode counters are not
        scraped at all, the direct form of the sidecar's `spec_decode_enabled 0`."""
        return (f"group without (engine) ({self.counter_rate(GENERATED)})\n"
                f"unless {sources.drafts_present(self.cfg)}")

    def spec_decode_off_servers(self) -> str:
        """Servers the exporter reads where vLLM exposes no spec-decode metrics; 0 (not empty)
        while exporters are scraped, so "No exporter" stays distinguishable."""
        up = self.scrape_up()
        if self.direct:
            return f"count(count by ({self.cfg.instance_label}) ({self.spec_off_series()})) or (0 * count({up}))"
        return f"count({self.per_target(SPEC_DECODE_ENABLED, op='max')} == 0) or (0 * count({up}))"

    def not_speculating(self) -> str:
        """One row per server that is not speculating, with the reason in label `problem`."""
        instance = (self.cfg.instance_label,)
        if self.direct:
            reasons = ((f"sum by ({instance[0]}) ({self.spec_off_series()}) * 0", PROBLEM_SPEC_OFF),
                       (sum_by(instance, self.scrape_up(), op="min"), PROBLEM_VLLM_UNREADABLE))
        else:
            reasons = (
                (self.per_target(SPEC_DECODE_ENABLED, op="max"), PROBLEM_SPEC_OFF),
                (self.per_target(TARGET_UP), PROBLEM_VLLM_UNREADABLE),
                (self.per_target(sources.UP), PROBLEM_EXPORTER_UNSCRAPED),
            )
        return " or ".join(f'label_replace({expr} == 0, "{PROBLEM_LABEL}", "{text}", "", "")'
                           for expr, text in reasons)

    # Health: per scrape target, no model/engine labels.
    def targets_down(self) -> str:
        """Exporters that cannot read vLLM, plus exporters Prometheus cannot scrape (source=vllm:
        vLLM servers Prometheus cannot scrape). Empty (shown as "No exporter") when no target is
        scraped at all, so silence is never green."""
        up = self.scrape_up()
        if self.direct:
            return f"count({up} == 0) or (0 * count({up}))"
        target_up = series(TARGET_UP, self.sel.target)
        return f"count(({target_up} == 0) or ({up} == 0)) or (0 * count({up}))"

    def firing_alerts(self) -> str:
        return series(sources.ALERTS, f'alertname=~"{ALERT_NAME_REGEX}", alertstate="firing"')

    def firing_alerts_count(self) -> str:
        return f"count({self.firing_alerts()}) or vector(0)"

    def scrape_errors_by_reason(self) -> str:
        """The sidecars' failed polls per second by reason: the fleet count at All (fleet_counts.py),
        averaged over the panel's rate interval so a burst between two steps of a long range still
        shows, else its last value (its name dropped, as the average's): the count is recorded once
        a fleet interval (a minute), which a short rate interval (4 scrapes of 10 s) may not hold;
        with servers selected their own counters. Per target: no model or engine label, so only the
        server selection switches."""
        by = ("reason",)
        if not self.fleet_scope(()):  # the record keeps `reason` besides the fleet's labels
            return sum_rate(SERVED.SCRAPE_ERRORS_TOTAL, self.sel.target, by)
        record = series(fleet_counts.scrape_errors_record(self.cfg), self.sel.target)
        fleet = f"(avg_over_time({record}[{RATE_INTERVAL}]) or sum without () ({record}))"
        servers = rate(SERVED.SCRAPE_ERRORS_TOTAL, join_matchers(self.sel.target, 'job!~"$instance"'))
        return f"({sum_by(by, fleet)} or {sum_by(by, servers)})"

    def counter_resets(self, window: str = RATE_INTERVAL) -> str:
        """vLLM restarts per server per interval (sidecar: polls in which its counters reset;
        source=vllm: resets of vLLM's generation counter); over `window`."""
        matchers = join_matchers('job=~"$job"', f'{self.cfg.instance_label}=~"$instance"')
        return sum_by((self.cfg.instance_label,), sources.restarts(self.cfg, window, matchers))

    def poll_age(self) -> str:
        """Seconds since each exporter last read vLLM successfully (0 before the first success)."""
        last = series(SERVED.LAST_SUCCESS_TIMESTAMP_SECONDS, self.sel.target) + " > 0"
        return f"time() - {sum_by((self.cfg.instance_label,), last, op='max')}"

    def spec_config(self) -> str:
        """One row per server with the speculative config the exporter reads (method, k,
        verification, lossy, dynamic k and where it came from; specconfig.py)."""
        return sum_by((self.cfg.instance_label, *SPEC_CONFIG_LABELS),
                      series(SERVED.SPEC_CONFIG_INFO, self.sel.target), op="max")

    def detected_schema(self) -> str:
        """One row per server with the engine family, schema and server version the exporter detected."""
        return sum_by((self.cfg.instance_label, "engine_family", "schema", "version"),
                      series(SERVED.TARGET_INFO, self.sel.target), op="max")
