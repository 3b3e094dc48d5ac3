"""Load benchmark: 100 concurrent scrapers against the exporter's /metrics (bounded, loopback only).

Phases, each --duration seconds (default 60):
  1. healthy target (real wire format, traffic flowing)   -> scrape latency p50/p99, errors, polls done
  2. hung target (accepts, never answers)                -> /metrics must not block on the target
Baseline in the same run: one scraper alone against the same exporter; the printed ratio is the
throughput of 100 scrapers over that of one (>= 1 means concurrency costs nothing; the client's
100 threads share the same cores, so latency under load is mostly queueing: N / throughput).
Also prints the SIGTERM shutdown time.

Usage: python bench/bench_load.py [--duration 60] [--scrapers 100]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import requests

from vllm_spec_lab.exporter_process import ExporterProcess
from vllm_spec_lab.fakes.badtarget import BadTarget, http_response
from vllm_spec_lab.fakes.vllm import FakeVllm


def hammer(url: str, scrapers: int, seconds: float) -> tuple[list[float], int]:
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker() -> None:
        nonlocal errors
        session = requests.Session()
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                ok = session.get(url, timeout=5).status_code == 200
            except requests.RequestException:
                ok = False
            elapsed = time.perf_counter() - started
            with lock:
                if ok:
                    latencies.append(elapsed)
                else:
                    errors += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(scrapers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 10)
    return latencies, errors


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000 if len(values) > 1 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description="exporter /metrics under concurrent scrapers")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--scrapers", type=int, default=100)
    args = parser.parse_args()
    with FakeVllm(engines=("0", "1"), k=4) as fake, BadTarget() as target:
        def healthy(conn):
            fake.step(20, 0.7)
            from prometheus_client import generate_latest

            conn.sendall(http_response(generate_latest(fake.registry)))

        target.set(healthy)
        exporter = ExporterProcess(target.url, "--log-level", "warning", interval=1, window=30, timeout=0.8)
        exporter.start()
        time.sleep(2.5)
        url = exporter.url + "/metrics"
        base_seconds = min(10.0, args.duration)
        base, _ = hammer(url, 1, base_seconds)
        print(f"baseline, 1 scraper:          p50 {pct(base, 50):6.2f} ms  p99 {pct(base, 99):6.2f} ms  "
              f"({len(base)} scrapes)")
        for label, behaviour in (("healthy target", healthy), ("hung target", target.hang())):
            target.set(behaviour)
            time.sleep(1.5)
            last_before = exporter.metrics()["vllm_spec_exporter_last_success_timestamp_seconds"][()]
            errors_before = sum(exporter.metrics()["vllm_spec_exporter_scrape_errors_total"].values())
            lat, errors = hammer(url, args.scrapers, args.duration)
            m = exporter.metrics()
            last_after = m["vllm_spec_exporter_last_success_timestamp_seconds"][()]
            timeouts = sum(m["vllm_spec_exporter_scrape_errors_total"].values()) - errors_before
            progress = (f"last successful poll advanced {last_after - last_before:.0f} s" if label == "healthy target"
                        else f"{timeouts:.0f} polls timed out (expected ~{args.duration:.0f})")
            print(f"{label}, {args.scrapers} scrapers: p50 {pct(lat, 50):6.2f} ms  p99 {pct(lat, 99):6.2f} ms  "
                  f"{len(lat) / args.duration:7.0f} scrapes/s  errors {errors}  "
                  f"throughput vs 1 scraper {len(lat) / len(base) * base_seconds / args.duration:4.2f}x  "
                  f"polling: {progress}")
        started = time.monotonic()
        logs = exporter.stop()
        print(f"SIGTERM to exit (a poll blocked on the hung target): {time.monotonic() - started:.2f} s; "
              + next((line.split(": ", 1)[-1] for line in logs.splitlines() if "stopped in" in line), ""))


if __name__ == "__main__":
    main()
