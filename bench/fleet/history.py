"""A fleet's samples over time: the backfilled history (OpenMetrics for promtool, JSON lines for
VictoriaMetrics' /api/v1/import) and the live target that continues the same series on
127.0.0.1 afterwards, one scrape path per shard of pods. The live series carry exactly the
history's labels, so the two meet as one series each."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fleet.synth import Fleet, value_at
from vllm_spec_lab.httpd import LoopbackServer, QuietHandler

SLICE_SAMPLES = 25_000_000  # samples per promtool backfill run (~4.5 GB of OpenMetrics text)


def write_openmetrics(fleet: Fleet, origin: int, start: int, end: int, step: int, path: Path) -> int:
    """Every series' samples from start to end (exclusive) as OpenMetrics, counters ramping from
    `origin`; returns the sample count."""
    times = range(start, end, step)
    count = 0
    with path.open("w") as out:
        names_done: set[str] = set()
        by_name: dict[str, list[tuple[str, bool, float]]] = {}
        for entry in fleet.series:
            by_name.setdefault(entry[0].split("{", 1)[0], []).append(entry)
        for name, entries in by_name.items():
            if name not in names_done:  # one family block per name, all its series together
                out.write(f"# TYPE {name} unknown\n")
                names_done.add(name)
            for text, counter, value in entries:
                if counter:
                    out.write("".join(f"{text} {int(value * (t - origin))} {t}\n" for t in times))
                else:
                    v = repr(value)
                    out.write("".join(f"{text} {v} {t}\n" for t in times))
                count += len(times)
        out.write("# EOF\n")
    return count


def vm_import_lines(fleet: Fleet, start: int, end: int, step: int) -> Iterator[bytes]:
    """The same history as VictoriaMetrics' /api/v1/import JSON lines (one line per series)."""
    times = list(range(start, end, step))
    stamps = json.dumps([t * 1000 for t in times])
    for text, counter, value in fleet.series:
        name, rest = text.split("{", 1)
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"', rest))
        values = [int(value * (t - start)) for t in times] if counter else [value] * len(times)
        yield (json.dumps({"metric": {"__name__": name, **labels}, "values": values})[:-1]
               + f', "timestamps": {stamps}}}\n').encode()


# --- The live target ----------------------------------------------------------------------------


class LiveTarget:
    """Serves /metrics/<shard>: the fleet's series at the current time, continuing the history."""

    def __init__(self, fleet: Fleet, start: int, job: str) -> None:
        self.fleet, self.start, self.job = fleet, start, job
        target = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                shard = int(self.path.rsplit("/", 1)[-1])
                body = target.body(shard)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = LoopbackServer(Handler)
        self.port = self.server.port

    def body(self, shard: int) -> bytes:
        seconds = time.time() - self.start
        series = self.fleet.series
        return "".join(f"{series[i][0]} {value_at(series[i][1], series[i][2], seconds)}\n"
                       for i in self.fleet.per_shard[shard]).encode()

    def scrape_config(self, interval: int) -> dict[str, Any]:
        # Each shard's path is a target label that starts with "__", so it never reaches the
        # series: a visible shard label would make the live series differ from the history's and
        # double every series (and every rule's work) where the two meet. Each target has its own
        # instance (its `up` and scrape_* series); honor_labels keeps every pod's own.
        return {"job_name": self.job, "honor_labels": True, "scrape_interval": f"{interval}s",
                "scrape_timeout": f"{interval}s",
                "static_configs": [{"targets": [f"127.0.0.1:{self.port}"],
                                    "labels": {"__metrics_path__": f"/metrics/{s}", "instance": f"shard-{s}"}}
                                   for s in self.fleet.per_shard]}

    def stop(self) -> None:
        self.server.stop()


