"""`vllm-spec-exporter demo --target URL`: the live view of an existing server, and a clean Ctrl-C.
(The demo's own vLLM + phased traffic path is the pipeline that tests/test_e2e.py runs for real.)"""

from __future__ import annotations

import signal
import subprocess
import time

from support.exporter import SCRIPT
from support.fakevllm import FakeVllm


def test_demo_watches_an_existing_server_and_stops_on_ctrl_c():
    with FakeVllm(k=4) as fake:
        url = fake.start()
        fake.drive(40, 0.75)
        proc = subprocess.Popen([str(SCRIPT), "demo", "--target", url, "--no-monitoring", "--refresh", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(6)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "watching (Ctrl-C to stop)" in out
    assert "acceptance" in out and "75.0%" in out and "position  3" in out
    assert "stopping everything the demo started" in out and out.rstrip().endswith("done.")
