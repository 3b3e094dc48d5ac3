"""Is speculation paying? Measured against a baseline: the same model served without speculation.

load.py estimates the speed-up from a model of a step's cost; where a baseline exists (a canary, a
fleet in transition, a server whose config says `method="none"`, or servers the `baseline_selector`
knob names) these records measure it from what users feel, vLLM's own latency histograms:

    instance_model:vllm_request_time_per_output_token_seconds:mean_rate<w>        per server: TPOT mean
    instance_model:vllm_request_time_per_output_token_seconds:quantile_rate<w>    p50, p90 ({quantile})
    instance_model:vllm_inter_token_latency_seconds:mean_rate<w>                  per server: ITL mean
    instance_model:vllm_inter_token_latency_seconds:quantile_rate<w>              p50, p90 ({quantile})
    <fleet>_model:vllm_request_time_per_output_token_seconds:baseline_mean_rate<w>   the baseline's TPOT
    <fleet>_model:vllm_requests_running:baseline_mean<w>                             its running batch
    instance_model:vllm_spec_decode_speedup:measured_rate<w>                      per speculative server
    instance_model:vllm_e2e_request_latency_seconds_per_request_generation_tokens:ratio_rate<w>
    <fleet>_model:vllm_e2e_request_latency_seconds_per_request_generation_tokens:baseline_ratio_rate<w>
    instance_model:vllm_spec_decode_speedup:measured_end_to_end_rate<w>           per speculative server
    <fleet>_model_method:vllm_request_time_per_output_token_seconds:mean_rate<w>  by method (fleet view)

Contract. Time per output token (TPOT, `vllm:request_time_per_output_token_seconds`: decode time /
(generated - 1), one sample per finished request) is per *token* whatever a step emits, so the
measured speed-up is the baseline's TPOT mean over the speculative server's (quantities.
measured_speedup; measured.measured_speedup in Python). Inter-token latency is per output *event*:
with speculation one event carries every accepted token of a step, its mean grows with acceptance,
and it is recorded only to be shown, labelled. Means are rate(_sum) / rate(_count), engines summed;
quantiles histogram_quantile over the engines' summed bucket rates; each per (server, model), absent
while no request finished in `rate_window`. The baseline's TPOT is one mean over every baseline
server of a model (their sums over their counts), its batch the mean over those same servers
(the baseline servers where a request finished in the window) of each server's running batch
(load.py's batch record, engines summed), recorded beside the ratio so a
panel can show whether the two sides ran comparable loads. The measured speed-up exists only for
a server that drafts (its spec-decode counters are scraped), is not itself a baseline, and whose
model has a baseline under the same fleet labels: otherwise absent, never 1 and never 0. By method:
`none` is the baseline's TPOT, every other method the drafting servers that are no baseline, by the
sidecar's config series' `method` label (without the sidecar, `speculative`).

TPOT leaves out the time before a request's first token (queueing, prefill), which speculation
can lengthen: the end-to-end speed-up is the same ratio of the end-to-end latency per output token
(the end-to-end latency histogram's sum over the output-tokens histogram's, the same finished
requests, per server and over the same baseline servers; quantities.end_to_end_seconds_per_token),
what a client of a fixed concurrency receives in tokens/s. Both are recorded; they disagree where
time outside decoding differs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ...specconfig import OFF
from ..config import MixinConfig, once_per_config
from . import load, sources
from .fleet_counts import kept_labels, server_labels
from .quantities import end_to_end_seconds_per_token, histogram_mean, measured_speedup

__all__ = ["MEASURED_GROUP", "QUANTILES", "MeasuredNames", "measured_group", "measured_meanings", "measured_names"]

MEASURED_GROUP = "vllm-spec-decode.measured"
QUANTILES = (0.5, 0.9)
# Method label values without the sidecar (no series names the config there).
DIRECT_SPECULATIVE, DIRECT_OFF = "speculative", OFF


class MeasuredNames(NamedTuple):
    """The measured records' names for one config (the window is part of each name)."""

    tpot_mean: str
    tpot_quantile: str
    itl_mean: str
    itl_quantile: str
    baseline_tpot: str
    baseline_batch: str
    speedup: str
    tpot_by_method: str
    e2e_per_token: str
    baseline_e2e_per_token: str
    speedup_end_to_end: str


@once_per_config
def measured_names(cfg: MixinConfig) -> MeasuredNames:
    w, model = cfg.windows.rate_window, "_".join((*cfg.fleet_labels, "model"))
    tpot, itl = sources.TPOT.metric, sources.ITL.metric
    e2e_per_token = f"{sources.E2E.metric}_per_{sources.OUTPUT_TOKENS.metric.removeprefix('vllm_')}"
    return MeasuredNames(
        tpot_mean=f"instance_model:{tpot}:mean_rate{w}", tpot_quantile=f"instance_model:{tpot}:quantile_rate{w}",
        itl_mean=f"instance_model:{itl}:mean_rate{w}", itl_quantile=f"instance_model:{itl}:quantile_rate{w}",
        baseline_tpot=f"{model}:{tpot}:baseline_mean_rate{w}",
        baseline_batch=f"{model}:vllm_requests_running:baseline_mean{w}",
        speedup=f"instance_model:vllm_spec_decode_speedup:measured_rate{w}",
        tpot_by_method=f"{model}_method:{tpot}:mean_rate{w}",
        e2e_per_token=f"instance_model:{e2e_per_token}:ratio_rate{w}",
        baseline_e2e_per_token=f"{model}:{e2e_per_token}:baseline_ratio_rate{w}",
        speedup_end_to_end=f"instance_model:vllm_spec_decode_speedup:measured_end_to_end_rate{w}")


def _on(labels: tuple[str, ...]) -> str:
    return ", ".join(dict.fromkeys(labels))


def _per_server(cfg: MixinConfig) -> str:
    """The labels that name one server's series of one model (an `on (...)` list)."""
    return _on((*server_labels(cfg), "model_name"))


def baseline(cfg: MixinConfig, read: Callable[[str], str]) -> str:
    """`read(matchers)` (per server and model) for baseline servers only: those the baseline_selector
    matches (passed into the read, so only their series are selected), by default those configured
    `method="none"` or serving no spec-decode metrics (the sidecar), or serving no spec-decode counters (direct)."""
    if cfg.baseline_selector:
        return read(cfg.baseline_selector)
    if cfg.direct:
        # Drafted at any time in the rate window, not only now: a speculative server whose scrapes
        # failed for a while (a busy vLLM) keeps its window's latency out of the baseline.
        drafted = sources.drafts_present(cfg, cfg.windows.rate_window)
        return f"({read('')})\nunless on ({_per_server(cfg)})\n{drafted}"
    configured_off = sources.config_info(cfg, 'method="' + OFF + '"')
    off = f"({configured_off}\nor {sources.spec_off(cfg)})"
    return f"({read('')})\nand on ({_on(server_labels(cfg))})\n{off}"


def speculative(cfg: MixinConfig, read: Callable[[str], str]) -> str:
    """`read(matchers)` (per server and model) for servers that draft and are no baseline: the
    baseline_selector's servers (passed into the read) are taken out."""
    on = _per_server(cfg)
    drafting = f"{read('')}\nand on ({on})\n{sources.drafts_present(cfg)}"
    if not cfg.baseline_selector:
        return drafting
    return f"({drafting})\nunless on ({on})\n{read(cfg.baseline_selector)}"


def _quantile_rules(cfg: MixinConfig, record: str, histogram: sources.SourceHistogram) -> list[dict[str, Any]]:
    buckets = f"sum without (engine) ({sources.spelled_out(cfg, sources.histogram_rate(cfg, histogram, 'bucket'))})"
    # `>= 0` drops the NaN histogram_quantile gives where no request finished: absent, as the means.
    return [{"record": record, "expr": f"histogram_quantile({q:g}, {buckets}) >= 0", "labels": {"quantile": f"{q:g}"}}
            for q in QUANTILES]


def _baseline_total(cfg: MixinConfig, fleet: str, read: Callable[[str], str]) -> str:
    """`read` summed over the baseline servers, per `fleet` labels (a baseline ratio's one side)."""
    return f"sum by ({fleet}) (\n{baseline(cfg, read)}\n)"


def _summed(cfg: MixinConfig, histogram: sources.SourceHistogram, part: str, matchers: str = "") -> str:
    """`histogram`'s `part` rate per server and model (on `matchers` too), engines summed."""
    rate = sources.histogram_rate(cfg, histogram, part, matchers)
    return f"sum without (engine) ({sources.spelled_out(cfg, rate)})"


def measured_rules(cfg: MixinConfig) -> list[dict[str, Any]]:
    n = measured_names(cfg)
    fleet = _on((*kept_labels(cfg), "model_name"))
    rules: list[dict[str, Any]] = []
    for mean, quantile, histogram in ((n.tpot_mean, n.tpot_quantile, sources.TPOT),
                                      (n.itl_mean, n.itl_quantile, sources.ITL)):
        rules.append({"record": mean, "expr": histogram_mean(_summed(cfg, histogram, "sum"),
                                                              _summed(cfg, histogram, "count"))})
        rules += _quantile_rules(cfg, quantile, histogram)

    def baseline_tpot(part: str) -> str:
        return _baseline_total(cfg, fleet, lambda m: _summed(cfg, sources.TPOT, part, m))

    rules.append({"record": n.baseline_tpot, "expr": histogram_mean(baseline_tpot("sum"), baseline_tpot("count"))})
    def batch(matchers: str) -> str:
        # Only servers whose requests finished in the window: the same ones the baseline's TPOT
        # covers (an idle baseline, or another engine's, would pull the batch towards 0).
        served = f"{_summed(cfg, sources.TPOT, 'count', matchers)} > 0"
        return (f"sum without (engine) ({sources.own(cfg, load.load_names(cfg).batch, matchers)})\n"
                f"and on ({_per_server(cfg)})\n({served})")

    rules.append({"record": n.baseline_batch, "expr": f"avg by ({fleet}) (\n{baseline(cfg, batch)}\n)"})
    speculating_tpot = speculative(cfg, lambda matchers: sources.own(cfg, n.tpot_mean, matchers))
    rules.append({"record": n.speedup, "expr": measured_speedup(
        sources.own(cfg, n.baseline_tpot), speculating_tpot, f"on ({fleet}) group_right ()")})
    return rules + _end_to_end_rules(cfg, n, fleet) + _by_method_rules(cfg, n.tpot_by_method, fleet)


def _end_to_end_rules(cfg: MixinConfig, n: MeasuredNames, fleet: str) -> list[dict[str, Any]]:
    """The end-to-end latency per output token per server and of the baseline, and its speed-up: both
    histograms' sums cover the same finished requests (a server that finished none has no value,
    and adds nothing to the baseline's)."""
    def latency(matchers: str) -> str:
        return _summed(cfg, sources.E2E, "sum", matchers)

    def tokens(matchers: str) -> str:
        return _summed(cfg, sources.OUTPUT_TOKENS, "sum", matchers)

    def paired_baseline(read: Callable[[str], str], other: Callable[[str], str]) -> str:
        # Only servers serving both: one serving the latency alone would weigh in the numerator only.
        def paired(matchers: str) -> str:
            return f"{read(matchers)}\nand on ({_per_server(cfg)})\n{other(matchers)}"
        return _baseline_total(cfg, fleet, paired)

    speculating = speculative(cfg, lambda matchers: sources.own(cfg, n.e2e_per_token, matchers))
    return [
        {"record": n.e2e_per_token, "expr": end_to_end_seconds_per_token(latency(""), tokens(""))},
        {"record": n.baseline_e2e_per_token,
         "expr": end_to_end_seconds_per_token(paired_baseline(latency, tokens), paired_baseline(tokens, latency))},
        {"record": n.speedup_end_to_end, "expr": measured_speedup(
            sources.own(cfg, n.baseline_e2e_per_token), speculating, f"on ({fleet}) group_right ()")},
    ]


def _by_method_rules(cfg: MixinConfig, record: str, fleet: str) -> list[dict[str, Any]]:
    """TPOT per model and method, on the baseline's own definition: `none` is the baseline's TPOT
    (baseline()), every other method the servers that draft and are no baseline, by the sidecar's
    config `method` (without the sidecar, `speculative`). A server neither (idle drafter, unknown
    config without drafts) is in no method."""
    def drafting(part: str) -> str:
        return speculative(cfg, lambda matchers: _summed(cfg, sources.TPOT, part, matchers))

    if cfg.direct:
        def by_method(part: str) -> str:
            return f"sum by ({fleet}) (\n{drafting(part)}\n)"
        labels = {"labels": {"method": DIRECT_SPECULATIVE}}
    else:
        # Never the config's `none` here: that side is the baseline's rule below, and a drafting
        # server whose config reads `none` would write the same series twice.
        speculating = sources.config_info(cfg, 'method!="' + OFF + '"')

        def by_method(part: str) -> str:
            return (f"sum by ({fleet}, method) (\n({drafting(part)})\n"
                    f"* on ({_on(server_labels(cfg))}) group_left (method)\n{speculating}\n)")
        labels = {}
    baseline_tpot = sources.own(cfg, measured_names(cfg).baseline_tpot)
    return [{"record": record, "expr": histogram_mean(by_method("sum"), by_method("count")), **labels},
            {"record": record, "expr": baseline_tpot, "labels": {"method": OFF}}]


def measured_group(cfg: MixinConfig) -> dict[str, Any]:
    """The measured records, after load.py's group (whose batch record the baseline's batch reads)."""
    return {"name": MEASURED_GROUP, "interval": cfg.windows.evaluation_interval, "rules": measured_rules(cfg)}


def measured_meanings(cfg: MixinConfig) -> dict[str, str]:
    """Record name -> one-line meaning (alerts/README.md)."""
    n, w = measured_names(cfg), cfg.windows.rate_window
    q = "/".join(f"p{round(x * 100)}" for x in QUANTILES)
    return {
        n.tpot_mean: f"Per server and model: mean time per output token of the requests finished in `{w}` "
                     "(decode time / (tokens - 1)): per token, with or without speculation.",
        n.tpot_quantile: f"Per server and model: {q} of that time per output token (label `quantile`).",
        n.itl_mean: "Per server and model: mean inter-token latency, per output *event*: with speculation one "
                    "event carries several tokens, so it is not a time per token.",
        n.itl_quantile: f"Per server and model: {q} of that inter-token latency (label `quantile`).",
        n.baseline_tpot: "Per model: the baseline servers' (`baseline_selector`) mean time per output token.",
        n.baseline_batch: "Per model: the baseline servers' running batch (mean over them), to compare loads.",
        n.speedup: "Per speculative server and model: **measured** speed-up, the baseline's time per output token "
                   "over this server's; absent without a baseline (never 1).",
        n.tpot_by_method: "Per model and speculative method (`none` for the baseline): mean time per output token.",
        n.e2e_per_token: f"Per server and model: end-to-end latency per output token of the requests finished in "
                         f"`{w}` (queueing and prefill included: the latency's sum over their output tokens).",
        n.baseline_e2e_per_token: "Per model: the baseline servers' end-to-end latency per output token.",
        n.speedup_end_to_end: "Per speculative server and model: **measured** end-to-end speed-up, the baseline's "
                              "end-to-end latency per output token over this server's (what clients of a fixed "
                              "concurrency receive in tokens/s); absent without a baseline.",
    }
