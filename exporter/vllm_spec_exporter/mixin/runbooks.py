"""docs/runbooks.md: one section per alert — Meaning, Impact, Diagnosis, Mitigation.

The structure follows prometheus-operator/runbooks and llm-d's alerting runbook. Each heading is
exactly the alert name, so GitHub's anchor is the lower-cased name that `runbook_url` points at.
Thresholds, windows and PromQL come from the same MixinConfig as the rules.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import rules
from .config import MixinConfig


@dataclass(frozen=True)
class Runbook:
    meaning: str
    impact: str
    diagnosis: str
    mitigation: str


def _pct(ratio: float) -> str:
    return f"{ratio * 100:g}%"


def _promql(*lines: str) -> str:
    # Indented by three spaces so the block stays inside the numbered list item it follows.
    return "\n".join(f"   {line}" for line in ("```promql", *lines, "```"))


def acceptance_meaning(cfg: MixinConfig, threshold: float, for_: str) -> str:
    """What an acceptance alert proves, in on-call words, and how to read its bound."""
    conf, t = cfg.confidence_label, _pct(threshold)
    fast = rules.evidence_names(cfg.acceptance_fast_long_window)
    evidence = rules.evidence_names(cfg.acceptance_slow_long_window)
    return (
        f"**We are {conf} sure that acceptance on this server and model is below {t}, and it is "
        f"still below now.** The alert does not fire because a ratio dipped: it fires because the "
        f"counters hold enough drafts to prove it. The number in the alert is the *upper "
        f"confidence bound*: the highest acceptance the data still allow. \"Upper bound 31 %\" "
        f"means acceptance is at most 31 % ({conf} sure) — the measured value is lower.\n\n"
        f"How it decides: over the last {cfg.acceptance_fast_long_window} *and* the last "
        f"{cfg.acceptance_fast_short_window} (busy servers), or over the last "
        f"{cfg.acceptance_slow_long_window} *and* the last {cfg.acceptance_slow_short_window} "
        f"(quiet servers, about 1 draft/s), the upper bound stayed below {t} — the short window's "
        f"for {for_} (busy) or {cfg.acceptance_slow_for} (quiet), so a dip of a minute or two "
        f"never alerts.\n\n"
        f"Reading it at low traffic: few drafts give a wide bound, so a quiet server alerts only "
        f"on a clear, lasting drop, and a page at night is as trustworthy as one at noon. Idle or "
        f"trickle traffic never alerts (no evidence, no bound). The alert ends on its own as soon "
        f"as the last {cfg.acceptance_fast_short_window} (busy) or "
        f"{cfg.acceptance_slow_short_window} (quiet) no longer shows low acceptance, and at once "
        f"when the server's series disappear (pod deleted: the down/absent alerts take over). "
        f"The bound itself: `{fast.upper}` and `{evidence.upper}`; the overview dashboard's "
        f"acceptance panel draws the same bound."
    )


def runbooks(cfg: MixinConfig) -> dict[str, Runbook]:
    n = rules.record_names(cfg)
    sel = "{" + cfg.exporter_selector + "}"
    inst = cfg.instance_label
    dash = f"`{rules.dashboard_url(cfg)}`"
    one_server = f'{{{inst}="<instance>", model_name="<model>"}}'
    one_model = '{model_name="<model>"}'
    # the exporter's own series (context gauges) of one server and model
    exporter_server = "{" + cfg.exporter_selector + f', {inst}="<instance>", model_name="<model>"}}'

    evidence_queries = [
        name for window in (cfg.acceptance_fast_long_window, cfg.acceptance_slow_long_window)
        for e in (rules.evidence_names(window),) for name in (e.upper, e.lower, e.drafts)
    ]
    acceptance_diagnosis = f"""\
1. Open the overview dashboard ({dash}; the alert's `dashboard_url` opens it on this server and
   model). Compare the **Acceptance rate** panel with the **Acceptance by draft position** panel
   and the **Requests running and waiting** panel:
   - every position fell at once → the drafter no longer matches the traffic (new prompt mix,
     new target or draft weights, a different chat template or sampling temperature);
   - position 0 is fine but later positions collapse → k is too large for this traffic;
   - acceptance fell when running requests rose → batching pressure; speculation pays least at
     high concurrency.
2. How strong is the evidence? The bounds and the drafts behind them, fast and slow tier (a
   wide gap between lower and upper bound = few drafts; the alert needed the upper one under
   the threshold):
{_promql(*(f"{name}{one_server}" for name in evidence_queries))}
   Is it one server or the whole model? Compare the server with the fleet:
{_promql(n.acceptance_ratio + one_model, n.fleet_acceptance_ratio + one_model)}
3. Per-position acceptance (share of drafts whose token at that position was accepted):
{_promql(f"{n.position_acceptance_ratio}{one_server}")}
4. Mean tokens per verification step (1 = speculation adds nothing; k+1 = every draft accepted;
   the **Tokens per step vs k+1** panel):
{_promql(f"{n.acceptance_length}{one_server}")}
5. Volume and concurrency behind the ratio:
{_promql(f"{n.draft_tokens_rate}{one_server}", f"vllm_num_requests_running{exporter_server}")}
6. What changed: deploys of the target or draft model, the `--speculative-config` in the pod
   spec, client-side sampling (temperature > 1 lowers acceptance sharply), a new tenant or use case.
   vLLM logs the same figures every ~10 s (`SpecDecoding metrics: Mean acceptance length ...
   Per-position acceptance rate ...`) — grep the server log to confirm."""

    acceptance_mitigation = """\
Pick by what the diagnosis showed; change one thing at a time and watch acceptance recover over
the next few minutes.
- **Later positions collapse:** lower k, e.g. `"num_speculative_tokens": 2` instead of 4, in
  `--speculative-config` (or `--spec-tokens 2`). Fewer positions waste less verification work.
- **Every position low with a draft model:** the draft no longer fits the target. Use the draft
  trained for this exact target version (same tokenizer), or an EAGLE/MTP head for it
  (`"method": "eagle3"`, `"mtp"`).
- **Code, RAG, extraction, editing traffic (output repeats the prompt):** switch to n-gram
  lookup, which needs no draft model:
  `--speculative-config '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":2,"prompt_lookup_max":5}'`.
- **Low only at high concurrency:** speculation costs the most when batches are large. Reduce k
  as the batch grows (`num_speculative_tokens_per_batch_size` in `--speculative-config`, recent
  vLLM releases), or
  disable speculation on the busiest replicas (restart without `--speculative-config`).
- **Started with a deploy:** roll back the target, draft or config to the last version whose
  acceptance was healthy.
- **Nothing helps:** run without speculative decoding. Plain decoding is better than speculation
  that is rejected most of the time."""

    return {
        rules.ACCEPTANCE_LOW: Runbook(
            meaning=acceptance_meaning(cfg, cfg.acceptance_warning_threshold, cfg.acceptance_low_for),
            impact=(
                "Every verification step spends target-model compute on the rejected draft tokens. At "
                "this acceptance a k=3..5 drafter returns little of that work: inter-token latency and "
                "GPU cost per output token are about what plain decoding would give, or worse, while "
                "the drafter still uses GPU memory and time. Users do not see errors, only slower "
                "output than the speculative setup was sized for."
            ),
            diagnosis=acceptance_diagnosis,
            mitigation=acceptance_mitigation,
        ),
        rules.ACCEPTANCE_CRITICAL: Runbook(
            meaning=acceptance_meaning(cfg, cfg.acceptance_critical_threshold, cfg.acceptance_critical_for)
            + f" It supersedes {rules.ACCEPTANCE_LOW} (Alertmanager inhibits the warning while this fires).",
            impact=(
                "Speculation is now a net loss: most draft tokens are rejected, so each step pays the "
                "drafter and the verification of k tokens for little more than one emitted token. "
                "Latency per output token and GPU cost are higher than with speculation turned off, "
                "and throughput at high concurrency drops. This usually follows a deploy or a traffic "
                "change and does not heal by itself."
            ),
            diagnosis=acceptance_diagnosis,
            mitigation=acceptance_mitigation.replace(
                "Pick by what the diagnosis showed;",
                "If users are affected now, first turn speculation off on the affected servers "
                "(restart without `--speculative-config`) or roll back the last change; then pick by "
                "what the diagnosis showed;",
            ),
        ),
        rules.DRAFTS_STOPPED: Runbook(
            meaning=(
                f"The server generated at least {cfg.min_generation_tokens_per_second:g} tokens/s for "
                f"{cfg.spec_decode_stopped_for}, its speculative-decoding counters exist (speculation is "
                "configured), but not one draft was proposed."
            ),
            impact=(
                "Every request runs at plain decoding speed while the drafter still holds GPU memory. "
                "Nothing fails, so without this alert the lost speed-up goes unnoticed."
            ),
            diagnosis=f"""\
1. Confirm drafts are zero while output flows (the **Output tokens by source** panel shows all
   output coming from plain decoding):
{_promql(f"{n.drafts_rate}{one_server}", f"{n.generation_rate}{one_server}")}
2. The method in `--speculative-config`:
   - **ngram / suffix:** drafts exist only when the output repeats a span of the prompt. Chat or
     creative traffic with no repeats proposes nothing — the traffic changed, not the server.
   - **draft_model / eagle / mtp:** zero drafts means speculation was switched off inside vLLM,
     e.g. by a per-batch-size rule (`num_speculative_tokens_per_batch_size`) at high load, or
     the drafter failed to load — search the server log for `spec` warnings at start-up.
3. Check whether it coincides with high concurrency: `vllm_num_requests_running{exporter_server}`.""",
            mitigation="""\
- n-gram on traffic without repeats: use a draft model or EAGLE head for this traffic, or turn
  speculation off on these servers to free memory.
- Speculation disabled by a batch-size rule: accept it if it is intended; otherwise raise the
  limit so speculation stays on at the concurrency you run.
- Drafter failed: fix the draft model path or version and restart the server; roll back the
  last change if it started with a deploy.""",
        ),
        rules.METRICS_MISSING: Runbook(
            meaning=(
                "The exporter reads the vLLM server's /metrics but finds no speculative-decoding series "
                f"(`vllm_spec_decode_enabled == 0`) for {cfg.spec_decode_missing_for}. Either vLLM runs "
                "without speculative decoding, or it exposes the counters under names the exporter "
                "does not know."
            ),
            impact=(
                "Acceptance is no longer monitored: the acceptance alerts cannot fire for this server. "
                "If speculation really is off, the latency and cost saving it was deployed for is gone."
            ),
            diagnosis=f"""\
1. Look at the raw endpoint the exporter polls: `curl -s http://<vllm>:8000/metrics | grep -i spec`.
   - No `spec` lines at all: the server was started without `--speculative-config` (check the
     pod spec / command line of the last restart), or with `--disable-log-stats`, which removes
     every `vllm:` metric.
   - `spec` lines under other names: a vLLM upgrade renamed them (the V0 names
     `vllm:spec_decode_draft_acceptance_rate` come back when vLLM falls back to the V0 engine).
2. What the exporter detected: the **Detected schema and spec decoding** panel, or
   `vllm_spec_exporter_target_info{sel}` (schema `v1`, `v0`, `none` and the vLLM version).
3. Did it start with a deploy? `changes(vllm_spec_exporter_counter_resets_total{sel}[1h])`.""",
            mitigation="""\
- Speculation dropped by mistake: restore `--speculative-config` and restart the server.
- Speculation turned off on purpose: remove the exporter sidecar from that deployment (or
  silence this alert for it) so the monitoring matches the setup.
- Metrics renamed by an upgrade: upgrade vllm-spec-exporter to a release that knows the new
  names, or roll vLLM back; until then acceptance is not monitored on that server.""",
        ),
        rules.VLLM_UNREACHABLE: Runbook(
            meaning=(
                "The exporter sidecar is up (Prometheus scrapes it), but its polls of the vLLM server's "
                f"/metrics have failed for {cfg.target_down_for} (`vllm_spec_exporter_target_up == 0`)."
            ),
            impact=(
                "Speculative decoding on that server is not monitored, and Alertmanager inhibits its "
                "acceptance alerts. Usually vLLM itself is down or restarting, so requests to that "
                "replica fail too — vLLM's own availability alerts own that outage."
            ),
            diagnosis=f"""\
1. Why the polls fail (the **Scrape errors by reason** panel):
{_promql(f"increase(vllm_spec_exporter_scrape_errors_total{sel}[10m])")}
   `connect` = vLLM not listening (crashed, starting, wrong `--target`); `timeout` = vLLM too
   busy to answer /metrics in time; `http_status` = wrong path or an auth proxy in between;
   `too_large` / `series_limit` = the exporter's limits are below what vLLM serves.
2. Is vLLM running and healthy? `kubectl get pod`, `curl http://<vllm>:8000/health`, the pod's
   restart count and last log lines (start-up takes a while for large models).
3. Last successful poll (the **Age of the last successful poll** panel):
   `time() - vllm_spec_exporter_last_success_timestamp_seconds{sel}`.""",
            mitigation="""\
- vLLM down or crash looping: handle it as a vLLM outage (logs, OOM, GPU errors); this alert
  clears once the server answers again.
- Wrong target: fix the exporter's `--target` URL (host, port, path) and restart the sidecar.
- Timeouts under load: raise the exporter's `--timeout` (keep it below Prometheus'
  scrape_timeout).
- Limits: raise `--max-bytes` / `--max-series` to fit the server's /metrics.""",
        ),
        rules.VLLM_RESTARTING: Runbook(
            meaning=(
                f"vLLM's counters reset at least {cfg.counter_resets_threshold} times in the last "
                f"{cfg.reset_window} (`vllm_spec_exporter_counter_resets_total`): the server behind "
                "this exporter keeps restarting."
            ),
            impact=(
                "Requests to the replica fail while it restarts and capacity is reduced. Acceptance "
                "figures cover only short runs and may look better or worse than steady state."
            ),
            diagnosis=f"""\
1. Restart history: the **Counter resets (vLLM restarts)** panel, or
   `increase(vllm_spec_exporter_counter_resets_total{sel}[{cfg.reset_window}])`, and the pod's
   restart count and last termination reason (`OOMKilled`, exit code).
2. Server logs around each restart: CUDA out of memory (the drafter needs memory too), engine
   core died, a failed health check killing a slow start.
3. Did it begin with a change of `--speculative-config` (larger k, a bigger draft model)?""",
            mitigation="""\
- Out of memory since speculation was enabled or k raised: lower k, use a smaller draft model,
  or lower `--gpu-memory-utilization` to leave headroom; roll back the last config change.
- Liveness probe kills a slow start: lengthen the probe's initial delay / failure threshold.
- Otherwise treat it as a vLLM crash loop: roll back the last deploy.""",
        ),
        rules.EXPORTER_DOWN: Runbook(
            meaning=(
                f"Prometheus has failed to scrape a vllm-spec-exporter target (`up{sel} == 0`) for "
                f"{cfg.target_down_for}."
            ),
            impact=(
                "Speculative decoding on that server is not monitored: no acceptance alert can fire "
                "for it. Serving itself is not affected by the sidecar being down."
            ),
            diagnosis=f"""\
1. The target page in Prometheus (Status → Targets) shows the scrape error for the job.
2. Is the sidecar running? Pod status, container restarts, `kubectl logs <pod> -c <exporter>`.
3. From the Prometheus host: `curl http://<instance>/metrics` (network policy, port, TLS).
4. Scrape too slow? `scrape_duration_seconds{sel}` against the job's scrape_timeout.""",
            mitigation="""\
- Sidecar crashed: check its log and restart it; report a bug with the log if it crashes again.
- Network policy or port changed: allow Prometheus to reach the exporter's `--listen` port.
- Scrape timeouts: lower the exporter's `--timeout` below the job's scrape_timeout.""",
        ),
        rules.EXPORTER_ABSENT: Runbook(
            meaning=(
                f"Prometheus has had no target at all matching `{sel}` for {cfg.target_down_for}: "
                "service discovery finds no exporter, so `up` does not exist and no per-target alert "
                "can fire."
            ),
            impact=(
                "Speculative decoding is not monitored anywhere in this Prometheus. Every alert in "
                "this runbook is silent, whatever happens to acceptance."
            ),
            diagnosis=f"""\
1. Does any target match the selector? `count(up{sel})`; Status → Service Discovery in the
   Prometheus UI shows which targets were dropped by relabelling and why.
2. Was the scrape config, ServiceMonitor/PodMonitor or its label selector changed? Were the
   vLLM deployments (and their sidecars) scaled to zero or renamed?
3. Does the selector in the generated rules still match your setup? It comes from
   `exporter_selector` in the mixin config (`{cfg.exporter_selector}`).""",
            mitigation="""\
- Restore the scrape config / ServiceMonitor so Prometheus discovers the sidecars.
- If the job was renamed on purpose, regenerate the rules with the new selector:
  `vllm-spec-exporter generate --set 'exporter_selector=job="<new job>"'`.
- If vLLM was intentionally removed from this cluster, remove these rules as well.""",
        ),
    }


def render_markdown(cfg: MixinConfig) -> str:
    books = runbooks(cfg)
    alerts = rules.all_alerts(cfg)
    missing = [a["alert"] for a in alerts if a["alert"] not in books]
    if missing:
        raise RuntimeError(f"alerts without a runbook: {missing}")
    lines = [
        "# Runbooks: vllm-spec-exporter alerts",
        "",
        "<!-- Generated by `vllm-spec-exporter generate` from mixin/runbooks.py; do not edit. -->",
        "",
        "One section per alert: what it means, what it costs, how to diagnose it and what to do. "
        "Every alert's `runbook_url` points at its section here.",
        "",
        "| Alert | Severity | Fires when |",
        "|---|---|---|",
    ]
    for alert in alerts:
        first_sentence = alert["annotations"]["summary"]
        lines.append(f"| [{alert['alert']}](#{alert['alert'].lower()}) | {alert['labels']['severity']} "
                     f"| {first_sentence} |")
    for alert in alerts:
        name = alert["alert"]
        book = books[name]
        lines += [
            "",
            f"## {name}",
            "",
            f"Severity: `{alert['labels']['severity']}`. Fires after: "
            f"`{alert.get('for', '0s')}`. Expression:",
            "",
            "```promql",
            alert["expr"],
            "```",
            "",
            "### Meaning",
            "",
            book.meaning,
            "",
            "### Impact",
            "",
            book.impact,
            "",
            "### Diagnosis",
            "",
            book.diagnosis,
            "",
            "### Mitigation",
            "",
            book.mitigation,
        ]
    return "\n".join(lines) + "\n"
