"""The sidecar's wheel holds only what users run: `serve` and `check` work with neither the
Grafana SDK (the `[generate]` extra) nor the lab (lab/, a separate package) importable, and load
none of the generators; `generate` and `demo` say in one line what to install.

Each command runs in a real process against the simulated vLLM (lab/vllm_spec_lab/fakes/vllm.py), with
an import hook that makes `grafana_foundation_sdk` and `vllm_spec_lab` unimportable, as in a plain
`pip install vllm-spec-exporter`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import requests

from support.paths import ROOT
from vllm_spec_lab.fakes.vllm import FakeVllm
from vllm_spec_lab.ports import free_port
from vllm_spec_lab.waiting import wait_until

BLOCKED = ("grafana_foundation_sdk", "vllm_spec_lab")
# Runs the CLI in-process with the optional packages unimportable; on exit it writes which of our
# modules were loaded, so the test can tell that serve/check never imported the generators.
RUNNER = textwrap.dedent(f"""
    import atexit, json, os, sys

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {BLOCKED!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    atexit.register(lambda: open(os.environ["LOADED_FILE"], "w").write(json.dumps(sorted(sys.modules))))
    from vllm_spec_exporter.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def run_cli(tmp_path: Path, *args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, list[str]]:
    loaded = tmp_path / "loaded.json"
    done = subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True, timeout=timeout,
                          env={"LOADED_FILE": str(loaded), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    return done, json.loads(loaded.read_text()) if loaded.exists() else []


def ours(modules: list[str]) -> set[str]:
    return {m for m in modules if m.startswith(("vllm_spec_exporter", "vllm_spec_lab", "grafana_foundation_sdk"))}


def test_check_runs_without_the_sdk_and_the_lab(tmp_path: Path) -> None:
    with FakeVllm(k=4) as fake:
        url = fake.start()
        fake.drive(40, 0.8)
        done, modules = run_cli(tmp_path, "check", "--target", url, "--duration", "2s", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["models"][0]["spec_decode_acceptance_ratio"] > 0.5
    assert not any(m.startswith(("vllm_spec_exporter.mixin", *BLOCKED)) for m in ours(modules)), ours(modules)


def test_serve_runs_without_the_sdk_and_the_lab(tmp_path: Path) -> None:
    port = free_port()
    loaded = tmp_path / "loaded.json"
    with FakeVllm(k=4) as fake:
        url = fake.start()
        fake.drive(40, 0.8)
        proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, "serve", "--target", url, "--listen", f"127.0.0.1:{port}",
             "--interval", "0.5", "--window", "10", "--min-draft-tokens", "0"],
            env={"LOADED_FILE": str(loaded), "PATH": "/usr/bin:/bin"}, cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        served = [""]  # the last /metrics read: the assertions below show what was served

        def serves_acceptance() -> bool:
            fake.drive(10, 0.8)
            with contextlib.suppress(requests.RequestException):
                served.append(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text)
            return "vllm_spec_decode_acceptance_ratio{" in served[-1]

        try:
            with contextlib.suppress(TimeoutError):
                wait_until(serves_acceptance, 20, interval=0.3)
            body = served[-1]
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=10)
    assert "vllm_spec_exporter_target_up 1.0" in body, out
    assert "vllm_spec_decode_acceptance_ratio{" in body, out
    modules = ours(json.loads(loaded.read_text()))
    assert "vllm_spec_exporter.collector" in modules
    assert not any(m.startswith(("vllm_spec_exporter.mixin", *BLOCKED)) for m in modules), modules


def test_generate_and_demo_name_what_to_install(tmp_path: Path) -> None:
    done, _ = run_cli(tmp_path, "generate", "--check")
    assert done.returncode == 2
    assert done.stderr.strip() == ("vllm-spec-exporter: error: generate needs the [generate] extra: "
                                   "pip install 'vllm-spec-exporter[generate]'")
    # `demo` comes from the lab's entry point; with the lab unimportable, one line names who adds it.
    done, _ = run_cli(tmp_path, "demo")
    assert done.returncode == 2
    assert done.stderr.strip() == ("vllm-spec-exporter: error: demo (added by vllm-spec-lab) cannot be loaded: "
                                   "No module named 'vllm_spec_lab'"), done.stderr
    # The command list still answers, naming the plugin that cannot load.
    done, _ = run_cli(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert "demo      (unavailable: demo (added by vllm-spec-lab) cannot be loaded" in " ".join(done.stdout.split("\n"))


def test_the_wheel_holds_no_lab_and_no_tests(tmp_path: Path) -> None:
    """What setuptools puts in the sidecar's wheel: the package and its templates, nothing else."""
    import shutil
    import zipfile

    # Exactly what the Dockerfile copies (.dockerignore's allowlist), built outside the work tree.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "exporter", source / "exporter", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--disable-pip-version-check",
                           "-w", str(tmp_path), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("vllm_spec_exporter-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"vllm_spec_exporter", f"{wheel.name.rsplit('-', 3)[0]}.dist-info"}, top
    assert "vllm_spec_exporter/mixin/templates/dashboards-README.md" in names
    assert not any("lab" in name.split("/") or name.startswith("tests") for name in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    sdk = [line for line in requires if "grafana-foundation-sdk" in line]
    assert sdk == ["Requires-Dist: grafana-foundation-sdk==0.0.21; extra == \"generate\""], requires


def test_the_sidecar_imports_neither_the_lab_nor_the_tests() -> None:
    """One direction between packages: the lab depends on the sidecar, never the reverse (the lab's
    `demo` reaches the exporter's CLI through an entry point, not an import)."""
    import ast

    offenders = []
    for path in sorted((ROOT / "exporter" / "vllm_spec_exporter").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(ROOT)}: {name}" for name in names
                          if name.split(".")[0] in ("vllm_spec_lab", "support", "tests", "conftest")]
    assert not offenders, offenders
