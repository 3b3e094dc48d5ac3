"""Replaying reconstructed engine fixtures through the exporter's own poller and collector, for the
engine tests (test_engines, test_sglang_tier): `scrapes(name)` reads a fixture's scrapes in order,
`serve(bodies)` polls each once on a fake clock and returns what the exporter serves."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from vllm_spec_exporter.collector import SpecDecodeCollector
from vllm_spec_exporter.poller import Poller

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reconstructed"


class FileFetcher:
    """Stands in for Fetcher: hands the poller the fixture's scrapes in order, then repeats the last."""

    url = "http://127.0.0.1:1/metrics"
    timeout = 1.0

    def __init__(self, bodies: list[str], model: str = "") -> None:
        self.bodies, self.model = bodies, model

    def get_metrics(self) -> str:
        return self.bodies.pop(0) if len(self.bodies) > 1 else self.bodies[0]

    def get_version(self) -> str:
        return ""

    def get_model_name(self) -> str:
        return self.model

    def close(self) -> None:
        pass


def serve(bodies: list[str], model: str = "") -> tuple[Poller, dict[str, list[tuple[dict, float]]]]:
    """Poll every body once (1 s apart on a fake clock) and return what the exporter serves."""
    clock = [0.0]
    poller = Poller(FileFetcher(list(bodies), model), interval=1, window=60, min_draft_tokens=100,
                    clock=lambda: clock[0])
    for _ in bodies:
        poller.poll_once()
        clock[0] += 1.0
    registry = CollectorRegistry()
    registry.register(SpecDecodeCollector(poller))
    served: dict[str, list[tuple[dict, float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            served.setdefault(sample.name, []).append((sample.labels, sample.value))
    return poller, served


def scrapes(name: str) -> list[str]:
    return [p.read_text() for p in sorted((FIXTURES / name).glob("scrape-*.prom"))]
