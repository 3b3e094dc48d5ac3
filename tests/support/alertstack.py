"""A factory of alerting stacks for the tests that start them: a local webhook (pager and chat),
Alertmanager with the GENERATED routing (mixin/rules/alertmanager.py) pointed at it, and optionally a
rule engine (Prometheus, or VictoriaMetrics + vmalert) with the generated rule files.

    def test_x(alert_stack):                       # the fixture, support/plugin.py
        stack = alert_stack({"acceptance_low_for": "10s"}, scrape={"vllm-spec-exporter": [address]})
        stack.hook.received("/pager"); stack.rules.query(...); stack.alertmanager.post_alerts(...)

Each call writes its files under its own folder; every server it started is stopped when the test
ends (the factory is a context manager the fixture leaves), whatever happens. Missing binaries go
through the CI policy (`require`: skip locally, fail in CI).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.prom import require_binary
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import alertmanager, rule_files
from vllm_spec_lab.binaries import VICTORIA_METRICS_BIN, VMALERT_BIN
from vllm_spec_lab.monitoring import ALERTMANAGER_BIN, PROMETHEUS_BIN, Alertmanager, Prometheus, WebhookReceiver
from vllm_spec_lab.victoria import VictoriaRuleStack

# The rule engines a user may run on the same rule files.
RULE_ENGINES = {"prometheus": (PROMETHEUS_BIN,), "vmalert": (VICTORIA_METRICS_BIN, VMALERT_BIN)}


@dataclass
class AlertStack:
    """One started stack: its folder, config, webhook, Alertmanager and rule engine (None when
    the call gave no scrape targets)."""

    dir: Path
    config: MixinConfig
    hook: WebhookReceiver
    alertmanager: Alertmanager
    rules: Prometheus | VictoriaRuleStack | None


class AlertStackFactory:
    """Callable: `factory(overrides, scrape=..., engine=..., routing_key=...)` -> AlertStack."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._servers = ExitStack()
        self._made = 0

    def __call__(self, overrides: dict[str, Any] | None = None, *, scrape: dict[str, list[str]] | None = None,
                 engine: str = "prometheus", routing_key: str = "test-routing-key") -> AlertStack:
        for binary in (ALERTMANAGER_BIN, *(RULE_ENGINES[engine] if scrape is not None else ())):
            require_binary(binary)
        self._made += 1
        folder = self.root / str(self._made)
        folder.mkdir(parents=True)
        hook = self._servers.enter_context(WebhookReceiver())
        (folder / "routing-key").write_text(routing_key)
        (folder / "chat-url").write_text(f"{hook.url}/chat")
        config = MixinConfig().with_overrides({
            **(overrides or {}),
            "pager_routing_key_file": str(folder / "routing-key"),
            "pager_events_url": f"{hook.url}/pager",
            "chat_webhook_url_file": str(folder / "chat-url"),
        })
        rendered = generate.render_all(config)
        for rel, text in rendered.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
        am = self._servers.enter_context(Alertmanager(rendered[alertmanager.ALERTMANAGER_FILE]))
        rules = None
        if scrape is not None:
            files = [folder / rule_files.RULES_FILE, folder / rule_files.ALERTS_FILE]
            engine_server = (Prometheus(scrape_targets=scrape, rule_files=files, alertmanager_url=am.url)
                             if engine == "prometheus" else VictoriaRuleStack(scrape, files, alertmanager_url=am.url))
            rules = self._servers.enter_context(engine_server)
        return AlertStack(folder, config, hook, am, rules)

    def __enter__(self) -> AlertStackFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self._servers.close()
