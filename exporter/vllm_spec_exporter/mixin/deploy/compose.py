"""Prometheus configs of the compose stacks (compose/prometheus/*.yml), from one MixinConfig.

`render(cfg)` returns {relative path: exact text}. Their scrape and evaluation intervals are the
config's, the ones every window of the rules is sized for (windows.py), so the compose stack never
scrapes at an interval the rules were not built for. The rest of compose/ is written by hand.
"""

from __future__ import annotations

from ..config import MixinConfig
from ..templates import fill

__all__ = ["MONITORING_PROMETHEUS_FILE", "PROMETHEUS_FILE", "render"]

PROMETHEUS_FILE = "compose/prometheus/prometheus.yml"
MONITORING_PROMETHEUS_FILE = "compose/prometheus/prometheus.monitoring.yml"

_VLLM_IN_STACK = """\
  # vLLM's own /metrics: latency and load context panels of the dashboard.
  - job_name: vllm
    static_configs:
      - targets: ["vllm:8000"]"""

_VLLM_ELSEWHERE = """\
  # vLLM's own /metrics for the dashboard's latency and load panels. Prometheus does not expand
  # environment variables in targets, so list the server in targets/vllm.yml (re-read on change,
  # no restart). Alerts do not need this job; they read the exporter.
  - job_name: vllm
    file_sd_configs:
      - files: ["/etc/prometheus/targets/vllm.yml"]"""


def render(cfg: MixinConfig) -> dict[str, str]:
    w = cfg.windows
    intervals = {"scrape_interval": w.scrape_interval, "evaluation_interval": w.evaluation_interval}
    return {
        PROMETHEUS_FILE: fill("compose-prometheus.yml", {
            **intervals, "stack": "compose/docker-compose.yml (vLLM in the same stack)", "vllm_job": _VLLM_IN_STACK}),
        MONITORING_PROMETHEUS_FILE: fill("compose-prometheus.yml", {
            **intervals, "stack": "compose/docker-compose.monitoring.yml (vLLM runs elsewhere)",
            "vllm_job": _VLLM_ELSEWHERE}),
    }
