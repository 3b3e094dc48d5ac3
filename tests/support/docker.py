"""A private Docker engine for the container tests, and the stand-in base images it needs.

Contract:
- `PrivateDockerd` starts Debian's `dockerd` (engine 20.10) with its own socket, exec-root and
  pidfile in a fresh folder under /tmp, and its `--data-root` under the cache folder
  (`$VLLM_SPEC_EXPORTER_CACHE/docker`) so images survive between runs. No bridge, no iptables, no
  IP forwarding: every container runs with host networking, so all traffic stays on 127.0.0.1
  (`host-gateway` maps to 127.0.0.1 for the same reason). One daemon a data-root at a time (a file
  lock). `stop()` removes every container of this private daemon and then stops the daemon's whole
  process group, whatever happened before.
- `ensure_standin_images()` makes, once, the images the tests use in place of registry images that
  cannot be pulled here: a Debian 12 minbase made with `debootstrap` and `docker import`ed (with
  the machine's CA bundle, so pip inside builds reaches PyPI through whatever proxy the machine
  trusts), and, built on it from `tests/support/images/`, the stand-ins for
  `python:3.11-slim-bookworm`, `prom/prometheus` and `prom/alertmanager` (those two from Debian
  testing's 3.x / 0.3x debs in the cache, see `prometheus_build_context`). Later runs reuse them
  (the legacy builder's layer cache makes the rebuild check take a second or two).
- `DockerUnavailable` carries a one-line reason (not root, no dockerd, daemon does not start);
  `BuildError` a one-line summary of a failed `docker build` (notably: pip cannot reach PyPI).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from vllm_spec_lab import default_cache_dir, processes
from vllm_spec_lab.binaries import TESTING_ROOT, TESTING_VERSIONS_FILE

IMAGES_DIR = Path(__file__).parent / "images"
MINBASE_IMAGE = "vse-standin/debian:bookworm-minbase"
PYTHON_IMAGE = "vse-standin/python:3.11-slim-bookworm"
PROMETHEUS_IMAGE = "vse-standin/prometheus:debian-testing"
ALERTMANAGER_IMAGE = "vse-standin/alertmanager:debian-testing"
# Debian testing's packages the stand-ins unpack: the debs scripts/bootstrap.sh keeps in the cache.
STANDIN_DEB_PACKAGES = ("prometheus", "prometheus-alertmanager")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# What the official python:3.11-slim-bookworm has and the exporter's Dockerfile uses: python,
# venv (with Debian's bundled pip/setuptools wheels), and groupadd/useradd (passwd). The wheel
# packages let the stand-in install pip, setuptools and wheel offline, as the official image has.
MINBASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "passwd", "python3-pip-whl",
                    "python3-setuptools-whl", "python3-wheel-whl")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Lines pip prints when it cannot reach the index (DNS, connect, TLS, proxy).
_PYPI_UNREACHABLE = re.compile(
    r"Failed to establish a new connection|Temporary failure in name resolution|Name or service not known"
    r"|Network is unreachable|SSLError|CERTIFICATE_VERIFY_FAILED|ProxyError|ConnectTimeoutError"
    r"|No matching distribution found|Could not find a version that satisfies")
_NETWORK_CAUSE = re.compile(r"\[Errno -?\d+\] [^'\")\]]+|CERTIFICATE_VERIFY_FAILED|ProxyError")


class DockerUnavailable(RuntimeError):
    """No Docker engine can be started here; the message is one line saying why."""


class BuildError(RuntimeError):
    """`docker build` failed; the message is one line, the full output is in `.output`."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


def docker_cache_dir() -> Path:
    return default_cache_dir() / "docker"


class PrivateDockerd:
    """``with PrivateDockerd() as engine: engine.docker("ps")`` — see the module docstring."""

    def __init__(self, data_root: Path | None = None, start_timeout_s: float = 60.0) -> None:
        self.data_root = data_root or docker_cache_dir() / "data-root"
        self.start_timeout_s = start_timeout_s
        self.run_dir: Path | None = None
        self.process: processes.ChildProcess | None = None
        self._lock_file = None
        self._run_tmp: processes.TempDir | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    @property
    def socket(self) -> Path:
        assert self.run_dir is not None, "not started"
        return self.run_dir / "docker.sock"

    @property
    def env(self) -> dict[str, str]:
        """Environment for `docker` and Compose: this daemon, the legacy builder, no user config."""
        assert self.run_dir is not None, "not started"
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}", "DOCKER_BUILDKIT": "0",
                "DOCKER_CONFIG": str(self.run_dir / "client-config"), "COMPOSE_BAKE": "false"}

    def start(self) -> PrivateDockerd:
        dockerd = shutil.which("dockerd") or ("/usr/sbin/dockerd" if os.access("/usr/sbin/dockerd", os.X_OK) else None)
        if os.geteuid() != 0:
            raise DockerUnavailable("the container tests need root to run a private dockerd")
        if not dockerd or not shutil.which("docker"):
            raise DockerUnavailable("dockerd or docker not installed (Debian: apt-get install docker.io; "
                                    "scripts/bootstrap.sh does it as root)")
        self.data_root.mkdir(parents=True, exist_ok=True)
        self._lock_data_root()
        # Sockets live under /tmp: unix socket paths are limited to 108 bytes.
        self._run_tmp = processes.TempDir("vse-dockerd-", parent=Path("/tmp"))
        self.run_dir = self._run_tmp.path
        (self.run_dir / "client-config").mkdir()
        command = [
            dockerd, "--host", f"unix://{self.socket}", "--data-root", str(self.data_root),
            "--exec-root", str(self.run_dir / "exec"), "--pidfile", str(self.run_dir / "dockerd.pid"),
            "--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false",
            "--host-gateway-ip=127.0.0.1", "--log-level=warn",
        ]
        # Own process group (its containerd joins it) so stop() reaches both, and the warden's
        # list, so a SIGKILLed test run takes them down too. dockerd inherits the lock: should this
        # test process die, the lock lives as long as the daemon does.
        self.process = processes.spawn(command, name="dockerd", log=self.run_dir / "dockerd.log",
                                       pass_fds=(self._lock_file.fileno(),), grace=30)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _lock_data_root(self, timeout_s: float = 900.0) -> None:
        """One daemon a data-root: wait (bounded) while another session's dockerd uses it."""
        self._lock_file = open(self.data_root.parent / ".dockerd.lock", "w")  # noqa: SIM115 (held while running)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    self._lock_file.close()
                    self._lock_file = None
                    raise DockerUnavailable(f"{self.data_root} stayed in use by another dockerd for "
                                            f"{timeout_s:.0f} s") from None
                time.sleep(1)

    def _wait_ready(self) -> None:
        assert self.process is not None
        try:
            self.process.wait_ready(self._answers, self.start_timeout_s, interval=0.3)
        except processes.ChildStartError as error:
            raise DockerUnavailable(str(error)) from None

    def _answers(self) -> bool:
        """The daemon answers `docker version`. A probe that times out is "not yet": on a loaded
        machine a starting dockerd has taken over 10 s to answer one (seen in CI), and the start's
        own deadline, not one probe's, decides when it failed."""
        try:
            return self.socket.exists() and self.docker("version", check=False, timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def log_tail(self, lines: int = 20) -> str:
        if self.run_dir is None or not (self.run_dir / "dockerd.log").exists():
            return "(no log)"
        text = (self.run_dir / "dockerd.log").read_text(errors="replace").strip()
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                # Containers first (their shims are not in dockerd's process group), then the daemon.
                with contextlib.suppress(Exception):
                    ids = self.docker("ps", "-aq", check=False, timeout=30).stdout.split()
                    if ids:
                        self.docker("rm", "-f", "-v", *ids, check=False, timeout=120)
            process.stop()  # SIGTERM, 30 s, then SIGKILL: containerd may outlive dockerd for a moment
        if self.run_dir is not None:
            _unmount_under(self.run_dir)  # dockerd leaves its netns bind mount behind
            if self._run_tmp is not None:
                self._run_tmp.cleanup()
            self.run_dir = None
        if self._lock_file is not None:
            self._lock_file.close()  # releases the lock
            self._lock_file = None

    def __enter__(self) -> PrivateDockerd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- commands -----------------------------------------------------------------------------
    def docker(self, *args: str, check: bool = True, timeout: float = 300.0,
               input: bytes | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["docker", *args], env=self.env, capture_output=True, timeout=timeout,
                                input=input, check=False)
        completed = subprocess.CompletedProcess(result.args, result.returncode,
                                                result.stdout.decode(errors="replace"),
                                                result.stderr.decode(errors="replace"))
        if check and completed.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args[:3])} … failed ({completed.returncode}): "
                               f"{completed.stderr.strip()[-2000:]}")
        return completed

    def has_image(self, image: str) -> bool:
        return self.docker("image", "inspect", image, check=False, timeout=30).returncode == 0

    def image_label(self, image: str, label: str) -> str | None:
        result = self.docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', image,
                             check=False, timeout=30)
        return result.stdout.strip() if result.returncode == 0 else None

    def image_ids(self) -> set[str]:
        """Every image, intermediate layers of the legacy builder included."""
        return set(self.docker("images", "-a", "-q", "--no-trunc").stdout.split())

    def remove_images_except(self, keep: set[str]) -> None:
        """Remove images not in `keep` (children before parents). A failed or --no-cache build leaves
        duplicate intermediate images that the legacy builder would otherwise pick as cache parents,
        making the next ordinary build miss its cache."""
        for _ in range(10):
            extra = self.image_ids() - keep
            if not extra:
                return
            self.docker("rmi", *sorted(extra), check=False, timeout=120)

    def image_size(self, image: str) -> int:
        return int(self.docker("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())

    def build(self, context: Path, tag: str, *, dockerfile: Path | None = None,
              build_args: dict[str, str] | None = None, target: str | None = None, network: str = "host",
              extra: Sequence[str] = (), timeout: float = 1200.0) -> str:
        """`docker build` with the legacy builder and host networking; returns the build output.
        Raises BuildError with one line: pip's network error when PyPI is unreachable."""
        args = ["build", "--network", network, "-t", tag]
        if dockerfile is not None:
            args += ["-f", str(dockerfile)]
        for key, value in (build_args or {}).items():
            args += ["--build-arg", f"{key}={value}"]
        if target:
            args += ["--target", target]
        result = self.docker(*args, *extra, str(context), check=False, timeout=timeout)
        output = result.stdout + result.stderr
        if result.returncode != 0:
            raise BuildError(build_failure_line(tag, output), output)
        return output


def _unmount_under(folder: Path) -> None:
    """Lazily unmount every mount point below `folder`, deepest first."""
    prefix = str(folder.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False, timeout=30)


def build_failure_line(tag: str, output: str) -> str:
    """One line that says why a build failed; PyPI unreachability is named as such."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if any(_PYPI_UNREACHABLE.search(line) for line in lines):
        # pip's final verdict, and the first low-level cause it retried on.
        verdict = next((line for line in reversed(lines) if line.startswith("ERROR:")), "pip failed")
        cause = _NETWORK_CAUSE.search(output)
        because = f" ({cause.group(0).strip()})" if cause else ""
        return (f"docker build {tag}: pip inside the build cannot reach PyPI{because}: {verdict[:200]}; "
                "build with --network host and a CA bundle the proxy accepts")
    errors = [line for line in lines if re.search(r"error|returned a non-zero code", line, re.IGNORECASE)]
    return f"docker build {tag} failed: {(errors or lines or ['no output'])[-1][:300]}"


# ---- stand-in base images --------------------------------------------------------------------

def _recipe_hash(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
    return digest.hexdigest()[:16]


def ensure_minbase(engine: PrivateDockerd, progress: Callable[[str], None] = print) -> None:
    """Debian 12 minbase with python3 from debootstrap, imported once (≈ 90 s, then cached)."""
    recipe = _recipe_hash(" ".join(MINBASE_PACKAGES), DEBIAN_MIRROR, HOST_CA_BUNDLE.read_bytes()
                          if HOST_CA_BUNDLE.exists() else b"")
    if engine.image_label(MINBASE_IMAGE, "vse.recipe") == recipe:
        return
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if not os.access(debootstrap, os.X_OK):
        raise DockerUnavailable("debootstrap not installed (Debian: apt-get install debootstrap; "
                                "scripts/bootstrap.sh does it as root)")
    started = time.monotonic()
    progress(f"making {MINBASE_IMAGE} with debootstrap (once, ≈ 90 s)")
    with tempfile.TemporaryDirectory(prefix="vse-rootfs-", dir=docker_cache_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        result = subprocess.run(
            [debootstrap, "--variant=minbase", f"--include={','.join(MINBASE_PACKAGES)}", "bookworm", str(rootfs),
             DEBIAN_MIRROR], capture_output=True, text=True, timeout=1200, check=False)
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["no output"]
            raise DockerUnavailable(f"debootstrap failed ({result.returncode}): {tail[0]}")
        # pip inside builds verifies PyPI against the bundle this machine trusts.
        if HOST_CA_BUNDLE.exists():
            (rootfs / "etc/ssl/certs").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(HOST_CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
        # What the official slim images leave out too: package caches and lists.
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        imported = subprocess.run(
            ["docker", "import", "--change", f"LABEL vse.recipe={recipe}", "--change", 'CMD ["/bin/bash"]',
             "-", MINBASE_IMAGE], stdin=tar.stdout, env=engine.env, capture_output=True, text=True, timeout=600,
            check=False)
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise DockerUnavailable(f"docker import failed: {imported.stderr.strip()[-300:]}")
    progress(f"{MINBASE_IMAGE} imported in {time.monotonic() - started:.0f} s")


def prometheus_build_context() -> Path:
    """A build context with prometheus.Dockerfile and the Prometheus and Alertmanager debs of the
    versions bootstrap unpacked (debian-testing/versions.txt; older debs may pile up in the cache as
    testing moves), so the stand-ins run the same 3.x / 0.3x packages as the other tests. A missing
    deb: one line naming it."""
    versions = dict(line.split(" ", 1) for line in TESTING_VERSIONS_FILE.read_text().splitlines()
                    if " " in line) if TESTING_VERSIONS_FILE.exists() else {}
    debs = []
    for package in STANDIN_DEB_PACKAGES:
        # Deb file names carry the version without its epoch ("1:2.3-4" -> "2.3-4").
        version = versions.get(package, "").split(":")[-1]
        found = sorted((TESTING_ROOT / "debs").glob(f"{package}_{version}_*.deb")) if version else []
        if len(found) != 1:
            raise DockerUnavailable(f"Debian testing's {package} {version or '(no version in versions.txt)'} "
                                    f"deb not in {TESTING_ROOT / 'debs'} (run scripts/bootstrap.sh)")
        debs.append(found[0])
    context = docker_cache_dir() / "prometheus-context"
    shutil.rmtree(context, ignore_errors=True)
    (context / "debs").mkdir(parents=True)
    shutil.copyfile(IMAGES_DIR / "prometheus.Dockerfile", context / "prometheus.Dockerfile")
    for deb in debs:
        shutil.copyfile(deb, context / "debs" / deb.name)
    return context


def ensure_standin_images(engine: PrivateDockerd, progress: Callable[[str], None] = print) -> dict[str, float]:
    """Every stand-in image, built when missing or changed; returns seconds spent per image."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    ensure_minbase(engine, progress)
    timings[MINBASE_IMAGE] = time.monotonic() - started
    prometheus_context = prometheus_build_context()
    for tag, context, dockerfile, args, target in (
        (PYTHON_IMAGE, IMAGES_DIR, "python-slim.Dockerfile", {"MINBASE": MINBASE_IMAGE}, None),
        (PROMETHEUS_IMAGE, prometheus_context, "prometheus.Dockerfile", {"BASE": MINBASE_IMAGE}, "prometheus"),
        (ALERTMANAGER_IMAGE, prometheus_context, "prometheus.Dockerfile", {"BASE": MINBASE_IMAGE}, "alertmanager"),
    ):
        started = time.monotonic()
        engine.build(context, tag, dockerfile=context / dockerfile, build_args=args, target=target)
        timings[tag] = time.monotonic() - started
    return timings
