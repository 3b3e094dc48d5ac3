"""Real Prometheus / Alertmanager / webhook receiver on 127.0.0.1, for the demo and the tests.

Every server gets a free port and a fresh temporary data folder and is always stopped (use them as
context managers). Binaries are chosen in `binaries`: Debian testing's Prometheus 3.x and
Alertmanager 0.3x from the cache when bootstrap installed them, else Debian 12's 2.42 / 0.25
(the binary is `prometheus-alertmanager` in both). VictoriaMetrics and vmalert live in `victoria`.

    with Prometheus(rule_files=[...], scrape_targets={"vllm-spec-exporter": ["127.0.0.1:9400"]},
                    alertmanager_url=am.url) as prom:
        prom.wait_for(lambda: prom.query("up") != [])

Tests reach these through tests/support/prom.py, which adds `require_binary()`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from urllib.request import Request, urlopen

import yaml

from . import processes
from .binaries import (  # re-exported: tests and the demo import the paths from here
    ALERTMANAGER_BIN,
    AMTOOL_BIN,
    PROMETHEUS_BIN,
    PROMTOOL_BIN,
    PROMTOOL_OLDEST_BIN,
    have_binary,
    working_dir,
)
from .httpd import LoopbackServer, QuietHandler
from .ports import free_port
from .waiting import wait_until

__all__ = ["ALERTMANAGER_BIN", "ALERT_RESEND_DELAY", "AMTOOL_BIN", "LOCAL_API_TIMEOUT_SECONDS", "PROMETHEUS_BIN",
           "PROMTOOL_BIN", "PROMTOOL_OLDEST_BIN", "Alertmanager", "PromQueryApi", "Prometheus", "RulesApi",
           "WebhookReceiver", "have_binary", "http_get_json", "wait_until"]


# How long a read of a local server's API may take before it counts as hung. Generous on purpose: it
# is a ceiling, not a speed check. A Prometheus starved of CPU by a real vLLM under load answered an
# instant query in more than 5 s (CI, test_e2e's dashboard sweep); its own query timeout is 2 min.
LOCAL_API_TIMEOUT_SECONDS = 30.0


def http_get_json(url: str, timeout: float = LOCAL_API_TIMEOUT_SECONDS) -> Any:
    with urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def static_scrape_configs(scrape_targets: Mapping[str, Iterable[str]] | None) -> list[dict[str, Any]]:
    """One static scrape job per `{job: [host:port, ...]}` entry (Prometheus' and VictoriaMetrics'
    -promscrape.config share this shape)."""
    return [{"job_name": job, "static_configs": [{"targets": list(targets)}]}
            for job, targets in (scrape_targets or {}).items()]


class ServerProcess:
    """A child process with a temp folder, a port and a readiness URL (``/-/ready``), owned by
    `processes.spawn`: it never outlives this program. Its log is `log_path` (default: inside the
    temp folder, kept readable in memory after `stop()` removes that folder)."""

    name = "server"

    def __init__(self, log_path: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._tmp = processes.TempDir(f"vse-{self.name}-")
        self.dir = self._tmp.path
        self.proc: processes.ChildProcess | None = None
        self.log_path = log_path or self.dir / "server.log"
        self._final_log: str | None = None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> None:
        try:
            command = self._command()
            self.proc = processes.spawn(command, name=self.name, log=self.log_path, cwd=working_dir(command[0]),
                                        ready=self.url + "/-/ready", ready_timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        if self._final_log is not None:
            return self._final_log
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.stop()
        if self._final_log is None and self.log_path.is_relative_to(self.dir):
            self._final_log = self.log()  # before the folder it lives in goes
        self._tmp.cleanup()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PromQueryApi:
    """The Prometheus HTTP query API, which Prometheus and VictoriaMetrics both speak."""

    url: str

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query at `at` (Unix seconds; the server's now by default); returns the `result`
        list (vector elements with `metric` and `value`)."""
        params: dict[str, str | float] = {"query": expr}
        if at is not None:
            params["time"] = at
        data = http_get_json(f"{self.url}/api/v1/query?{urlencode(params)}")
        if data.get("status") != "success":
            raise RuntimeError(f"query {expr!r} failed: {data}")
        return list(data["data"]["result"])

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """Range query (Unix seconds); returns the `result` list (matrix elements with `metric` and
        `values`, each value a [time, "text"] pair)."""
        params = {"query": expr, "start": start, "end": end, "step": step}
        data = http_get_json(f"{self.url}/api/v1/query_range?{urlencode(params)}")
        if data.get("status") != "success":
            raise RuntimeError(f"query_range {expr!r} failed: {data}")
        return list(data["data"]["result"])

    def query_value(self, expr: str) -> float | None:
        """The single value of an instant query, or None when the result is empty."""
        result = self.query(expr)
        if not result:
            return None
        if len(result) > 1:
            raise AssertionError(f"{expr!r} returned {len(result)} series, expected one")
        return float(result[0]["value"][1])

    def targets_up(self) -> bool:
        """True once every scrape target answered (/api/v1/targets: Prometheus' and VictoriaMetrics')."""
        targets = http_get_json(f"{self.url}/api/v1/targets")["data"]["activeTargets"]
        return bool(targets) and all(t["health"] == "up" for t in targets)


class RulesApi:
    """The Prometheus rules/alerts API, which Prometheus and vmalert both speak."""

    url: str

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing) from /api/v1/alerts."""
        return list(http_get_json(f"{self.url}/api/v1/alerts")["data"]["alerts"])

    def firing(self, alertname: str) -> list[dict[str, Any]]:
        """The active alerts named `alertname` whose state is firing (pending ones left out)."""
        return [a for a in self.alerts() if a["labels"].get("alertname") == alertname and a["state"] == "firing"]

    def rule_groups(self) -> list[dict[str, Any]]:
        """Every loaded rule group from /api/v1/rules, with its rules' health and last evaluation."""
        return list(http_get_json(f"{self.url}/api/v1/rules")["data"]["groups"])


# Prometheus sends each firing alert valid for 4 × max(resend delay, evaluation interval); when no
# resend arrives in that time Alertmanager resolves it itself. At 1 s (4 s of validity) a Prometheus
# starved of CPU by parallel tests missed that once, and the pager saw a resolve while the alert was
# still firing; 2 s gives 8 s and still resends within seconds.
ALERT_RESEND_DELAY = "2s"


class Prometheus(PromQueryApi, RulesApi, ServerProcess):
    """A real Prometheus with a generated config: scrape jobs, rule files, optional Alertmanager.

    Short intervals by default (1 s) so tests see rates and `for` transitions within seconds;
    `--rules.alert.resend-delay` of `ALERT_RESEND_DELAY` because Prometheus drops the first
    notification while it discovers Alertmanager and otherwise resends only after a minute. `scrape_configs` are whole
    jobs added after the static ones (e.g. relabelled paths); `data_path` keeps the TSDB outside the
    temporary folder, so it survives `stop()` (a benchmark restarts on backfilled blocks).
    """

    name = "prometheus"

    def __init__(
        self,
        scrape_targets: Mapping[str, Iterable[str]] | None = None,
        rule_files: Iterable[str | Path] = (),
        alertmanager_url: str | None = None,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        extra_args: Iterable[str] = (),
        log_path: Path | None = None,
        scrape_configs: Iterable[dict[str, Any]] = (),
        data_path: Path | None = None,
    ) -> None:
        super().__init__(log_path)
        self.config_path = self.dir / "prometheus.yml"
        self.data_path = data_path or self.dir / "data"
        config: dict[str, Any] = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval,
                       "scrape_timeout": scrape_interval},
            "rule_files": [str(Path(p).resolve()) for p in rule_files],
            "scrape_configs": [*static_scrape_configs(scrape_targets), *scrape_configs],
        }
        if alertmanager_url:
            host = alertmanager_url.split("://", 1)[-1].rstrip("/")
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [host]}]}]}
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=True))
        self.extra_args = list(extra_args)

    def _command(self) -> list[str]:
        return [
            PROMETHEUS_BIN,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_path}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--rules.alert.resend-delay={ALERT_RESEND_DELAY}",
            "--web.enable-lifecycle",  # POST /-/reload for tests that swap rule files
            *self.extra_args,
        ]

    def head_series(self) -> int:
        """Series in the TSDB head (/api/v1/status/tsdb): what the scrapes and rules keep in memory."""
        return int(http_get_json(f"{self.url}/api/v1/status/tsdb")["data"]["headStats"]["numSeries"])

class Alertmanager(ServerProcess):
    """A real Alertmanager (0.3x, or 0.25 on the fallback) with the given config text; fresh storage
    so it always notifies."""

    name = "alertmanager"

    def __init__(self, config_text: str, log_path: Path | None = None) -> None:
        super().__init__(log_path)
        self.config_path = self.dir / "alertmanager.yml"
        self.config_path.write_text(config_text)

    def _command(self) -> list[str]:
        return [
            ALERTMANAGER_BIN,
            f"--config.file={self.config_path}",
            f"--storage.path={self.dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",  # empty: no gossip port on 0.0.0.0
        ]

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """Alerts Alertmanager holds (/api/v2/alerts), inhibited and silenced ones included."""
        query = urlencode({"filter": [f'{k}="{v}"' for k, v in filters.items()]}, doseq=True)
        return list(http_get_json(f"{self.url}/api/v2/alerts?{query}"))

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        """Push alerts directly (API v2), e.g. to test routing and inhibition without Prometheus."""
        request = Request(f"{self.url}/api/v2/alerts", data=json.dumps(alerts).encode(),
                          headers={"Content-Type": "application/json"}, method="POST")
        with urlopen(request, timeout=LOCAL_API_TIMEOUT_SECONDS):
            pass


class WebhookReceiver:
    """Records every POST (path, parsed JSON body, arrival time) sent to it by Alertmanager."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                try:
                    payload: Any = json.loads(body)
                except ValueError:
                    payload = body.decode(errors="replace")
                with receiver._lock:
                    receiver.requests.append({"path": self.path, "body": payload, "time": time.time(),
                                              "headers": dict(self.headers)})
                # Slack's answer ({"ok": true}): Alertmanager 0.3x reads it and retries on anything
                # else ("error response from Slack"); PagerDuty's notifier reads only the status.
                body = b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._handler = Handler
        self._server: LoopbackServer | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("WebhookReceiver.url before start(): it has no port yet")
        return self._server.url

    def start(self) -> WebhookReceiver:
        if self._server is not None:
            raise RuntimeError("WebhookReceiver started twice")
        self._server = LoopbackServer(self._handler)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def received(self, path: str | None = None) -> list[dict[str, Any]]:
        """A snapshot of recorded requests, optionally only those sent to `path`."""
        with self._lock:
            return [r for r in self.requests if path is None or r["path"] == path]

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
