"""Real VictoriaMetrics single-node and vmalert on 127.0.0.1, the Prometheus alternative the bundle
is tested on (binaries from Debian testing, see `binaries`).

VictoriaMetrics scrapes like Prometheus (`-promscrape.config`, only `global` and `scrape_configs`)
and answers the same query API; it has no rule engine, so vmalert evaluates the generated rule
files against it, writes the recording rules back (remote write) and sends alerts to Alertmanager:

    with VictoriaMetrics({"vllm-spec-exporter": ["127.0.0.1:9400"]}) as vm, \\
         VMAlert(vm.url, rule_files=[...], alertmanager_url=am.url) as vmalert:
        vm.query("vllm_spec_decode_acceptance_ratio")

The flags the bundle's timings assume (docs repeat them): vmalert `-rule.evalDelay=0s` (default 30 s:
every recording rule and alert would lag 30 s behind Prometheus'), VictoriaMetrics
`-search.latencyOffset=0s` (default 30 s: the newest samples are hidden from queries) and
`-search.disableCache` (a test reads data seconds old; the cache would serve stale answers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from .binaries import VICTORIA_METRICS_BIN, VMALERT_BIN
from .monitoring import PromQueryApi, RulesApi, ServerProcess, static_scrape_configs

# Without these, VictoriaMetrics + vmalert answer 30 s late (see the module docstring).
VICTORIA_METRICS_TIMING_FLAGS = ("-search.latencyOffset=0s", "-search.disableCache")
VMALERT_TIMING_FLAGS = ("-rule.evalDelay=0s",)


class VictoriaMetrics(PromQueryApi, ServerProcess):
    """A real VictoriaMetrics single-node scraping `scrape_targets` every `scrape_interval`;
    `scrape_configs` are whole jobs added after the static ones, `data_path` a storage folder that
    outlives `stop()` (default: inside the temporary folder)."""

    name = "victoria-metrics"

    def __init__(self, scrape_targets: Mapping[str, Iterable[str]] | None = None, scrape_interval: str = "1s",
                 extra_args: Iterable[str] = (), log_path: Path | None = None,
                 scrape_configs: Iterable[dict[str, Any]] = (), data_path: Path | None = None) -> None:
        super().__init__(log_path)
        self.config_path = self.dir / "scrape.yml"
        self.data_path = data_path or self.dir / "data"
        config: dict[str, Any] = {
            "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval},
            "scrape_configs": [*static_scrape_configs(scrape_targets), *scrape_configs],
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=True))
        self.extra_args = list(extra_args)

    def _command(self) -> list[str]:
        return [
            VICTORIA_METRICS_BIN,
            f"-storageDataPath={self.data_path}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-promscrape.config={self.config_path}",
            *VICTORIA_METRICS_TIMING_FLAGS,
            *self.extra_args,
        ]


class VMAlert(RulesApi, ServerProcess):
    """A real vmalert evaluating Prometheus rule files against `datasource_url` every
    `evaluation_interval`, writing recording rules and alert state back to it, and notifying
    `alertmanager_url` (optional: without it vmalert only records)."""

    name = "vmalert"

    def __init__(self, datasource_url: str, rule_files: Iterable[str | Path], alertmanager_url: str | None = None,
                 evaluation_interval: str = "1s", extra_args: Iterable[str] = (),
                 log_path: Path | None = None) -> None:
        super().__init__(log_path)
        self.datasource_url = datasource_url
        self.rule_files = [str(Path(p).resolve()) for p in rule_files]
        self.alertmanager_url = alertmanager_url
        self.evaluation_interval = evaluation_interval
        self.extra_args = list(extra_args)

    def _command(self) -> list[str]:
        notifier = ([f"-notifier.url={self.alertmanager_url}"] if self.alertmanager_url
                    else ["-notifier.blackhole"])
        return [
            VMALERT_BIN,
            *(f"-rule={path}" for path in self.rule_files),
            f"-datasource.url={self.datasource_url}",
            f"-remoteWrite.url={self.datasource_url}",
            f"-remoteRead.url={self.datasource_url}",
            *notifier,
            f"-evaluationInterval={self.evaluation_interval}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-external.url={self.url}",
            *VMALERT_TIMING_FLAGS,
            *self.extra_args,
        ]


class VictoriaRuleStack(PromQueryApi):
    """VictoriaMetrics scraping `scrape_targets` plus vmalert evaluating `rule_files` against it:
    the same surface as `monitoring.Prometheus` (queries go to VictoriaMetrics, alerts and rule
    groups to vmalert), so a test can run one scenario on either. vmalert adds an `alertgroup`
    label (the rule group's name) to every alert it sends and records, as it does by default."""

    def __init__(self, scrape_targets: Mapping[str, Iterable[str]], rule_files: Iterable[str | Path],
                 alertmanager_url: str | None = None, scrape_interval: str = "1s",
                 evaluation_interval: str = "1s") -> None:
        self.vm = VictoriaMetrics(scrape_targets, scrape_interval=scrape_interval)
        self.vmalert = VMAlert(self.vm.url, rule_files, alertmanager_url=alertmanager_url,
                               evaluation_interval=evaluation_interval)
        self.url = self.vm.url

    def start(self) -> None:
        self.vm.start()
        try:
            self.vmalert.start()
        except BaseException:
            self.vm.stop()
            raise

    def stop(self) -> None:
        try:
            self.vmalert.stop()
        finally:
            self.vm.stop()

    def __enter__(self) -> VictoriaRuleStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def alerts(self) -> list[dict[str, Any]]:
        return self.vmalert.alerts()

    def firing(self, alertname: str) -> list[dict[str, Any]]:
        return self.vmalert.firing(alertname)

    def rule_groups(self) -> list[dict[str, Any]]:
        return self.vmalert.rule_groups()
