"""Fetch, trim and chunk the wheels that put vLLM 0.26.0 on the lent GPU image (run here, with PyPI).

Contract. The GPU machine has no network, carries at most 64 MiB per call and already holds torch
2.11.0+cu130 and most of the scientific stack (``IMAGE_PACKAGES``). This script:

* ``lock``: resolves vLLM 0.26.0's requirements minus what the image has and minus the optional GPU
  kernel libraries a bf16 Llama on an H100 never imports (``LEFT_OUT``), one ``pip download --no-deps``
  per breadth-first level, and writes ``bench/gpu/wheels.lock.json`` (name, version, file, sha256,
  size, the wheel's own Requires-Dist). The lock is committed; tests check it is closed without network.
* ``fetch``: downloads exactly the locked files (``--no-deps``), checks their sha256.
* ``pack``: rewrites the vLLM wheel without ``TRIM`` members (FA2, the vllm-rs frontend, SM100-only and
  other-Python files), tars all wheels in lock order and splits the tar into parts of at most
  ``--limit`` bytes, written as ``OUT/cN/part-NN`` plus ``OUT/kit/manifest.json`` (sha256 of each part
  and of the joined tar). ``bench/gpu/install.sh`` joins them there.

Usage (from the repository root)::

    python3 bench/gpu/wheels.py lock            # only when changing the set; rewrites the lock
    python3 bench/gpu/wheels.py fetch --dir /tmp/gpu-wheels
    python3 bench/gpu/wheels.py pack --dir /tmp/gpu-wheels --out .gpu --limit auto
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

HERE = Path(__file__).resolve().parent
LOCK_PATH = HERE / "wheels.lock.json"
VLLM = "vllm==0.26.0"
MIB = 1 << 20
# What one device call may carry, working tree included.
CALL_LIMIT = 64 * MIB
PLATFORM_ARGS = (
    "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
    *(arg for n in ("2_17", "2_24", "2_27", "2_28", "2_31", "2_34", "2_35")
      for arg in ("--platform", f"manylinux_{n}_x86_64")),
    "--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64", "--platform", "any",
)
# The GPU image's Python packages (/work/.library/device/KINDS.md, read 2026-11-17): satisfied there,
# whatever the version vLLM asks for (torch, torchvision, torchaudio are exactly its pins).
IMAGE_PACKAGES = frozenset(canonicalize_name(n) for n in """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop
wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())  # noqa: SIM905
# vLLM requirements left out: GPU kernel libraries and media codecs that vLLM imports only behind an
# availability check (has_flashinfer(), find_spec, try/except) or for other models, quantisations or
# chips; a bf16 Llama with FA3 on an H100 never loads them. Together several hundred MiB.
LEFT_OUT = {
    "flashinfer-python": "FlashInfer attention/sampling: optional, checked with has_flashinfer()",
    "tilelang": "kernels for other models/quantisations, imported lazily",
    "nvidia-cutlass-dsl": "CuTe DSL kernels (vllm.cute_utils), imported lazily, mostly SM100",
    "quack-kernels": "CuTe DSL kernels, imported lazily",
    "tokenspeed-mla": "MLA kernels (DeepSeek-style models)",
    "humming-kernels": "quantised GEMM kernels",
    "nvidia-cudnn-frontend": "cuDNN attention for other backends",
    "fastsafetensors": "optional GPU-direct weight loading (--load-format fastsafetensors)",
    "torchcodec": "video decoding (multimodal)",
    "pynvvideocodec": "video decoding (multimodal)",
}
# Versions chosen where the newest that fits one requirement breaks another: xgrammar 0.2.8 needs
# apache-tvm-ffi >= 0.1.11, vLLM pins 0.1.10; 0.2.7 accepts it (vLLM asks xgrammar >= 0.2.1, < 1).
RESOLVE_PINS = {"xgrammar": "==0.2.7"}
# Members dropped from the vLLM wheel (regexes on the archive path).
TRIM = (
    r"^vllm/vllm_flash_attn/_vllm_fa2_C\.abi3\.so$",  # FA2, imported in try/except; Hopper runs FA3
    r"^vllm/vllm-rs$",  # the opt-in Rust frontend binary (VLLM_RUST_FRONTEND_PATH)
    r"^vllm/third_party/fmha_sm100/",  # Blackwell-only attention, imported lazily by MiniMax M3
    r"^vllm/third_party/deep_gemm/_C\.cpython-3(?:10|11|13|14)-",  # other Pythons' builds
)
TARGET_ENV = {
    **default_environment(),
    "python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
    "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
    "platform_machine": "x86_64", "os_name": "posix",
}


@dataclass(frozen=True)
class Locked:
    name: str
    version: str
    file: str
    sha256: str
    size: int
    requires: tuple[str, ...]
    extras: tuple[str, ...] = ()


def wheel_metadata(wheel: Path) -> tuple[str, str, list[str]]:
    """``(name, version, Requires-Dist lines)`` read from a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        meta_name = next(n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        text = archive.read(meta_name).decode()
    headers = text.split("\n\n", 1)[0].splitlines()
    field = {k: v for k, _, v in (h.partition(": ") for h in headers) if k in ("Name", "Version")}
    requires = [h.partition(": ")[2] for h in headers if h.startswith("Requires-Dist: ")]
    return field["Name"], field["Version"], requires


def needed(requirements: Iterable[str], extras: Iterable[str] = ()) -> Iterator[Requirement]:
    """The requirements that apply on the GPU image (Python 3.12, Linux x86_64) for these extras."""
    for line in requirements:
        req = Requirement(line)
        if req.marker is None:
            yield req
            continue
        if any(req.marker.evaluate({**TARGET_ENV, "extra": extra}) for extra in ("", *extras)):
            yield req


def outside_image(req: Requirement) -> bool:
    name = canonicalize_name(req.name)
    return name not in IMAGE_PACKAGES and name not in LEFT_OUT


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def pip_download(specs: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", *PLATFORM_ARGS, "-d", str(dest), *specs]
    subprocess.run(command, check=True, env={"PIP_CONSTRAINT": "", "PATH": "/usr/bin:/bin"})


def resolve(dest: Path) -> list[Locked]:
    """Breadth-first to a fixed point: download each round's new requirements with ``--no-deps``
    (pip picks the newest version that fits), then read their Requires-Dist for the extras asked."""
    wanted: dict[str, Requirement] = {}
    extras: dict[str, set[str]] = {}
    todo = [Requirement(VLLM)]
    while todo:
        specs = []
        for req in todo:
            name = canonicalize_name(req.name)
            extras.setdefault(name, set()).update(req.extras)
            if name not in wanted:
                wanted[name] = Requirement(f"{req.name}{req.specifier & SpecifierSet(RESOLVE_PINS.get(name, ''))}")
                specs.append(str(wanted[name]))
            else:
                narrowed = Requirement(f"{req.name}{wanted[name].specifier & req.specifier}")
                if str(narrowed) != str(wanted[name]):
                    wanted[name] = narrowed
                    specs.append(str(narrowed))
        if specs:
            pip_download(specs, dest)
        todo = []
        versions = {}
        for wheel in dest.glob("*.whl"):
            name, version, requires = wheel_metadata(wheel)
            key = canonicalize_name(name)
            if key not in wanted:
                continue
            if not wanted[key].specifier.contains(version, prereleases=True):
                wheel.unlink()  # an older pick that a later requirement excluded
                continue
            versions[key] = version
        for wheel in dest.glob("*.whl"):
            name, version, requires = wheel_metadata(wheel)
            key = canonicalize_name(name)
            if versions.get(key) != version:
                continue
            for req in needed(requires, extras[key]):
                other = canonicalize_name(req.name)
                if not outside_image(req):
                    continue
                if (other not in wanted or not req.extras <= extras[other]
                        or (other in versions and not req.specifier.contains(versions[other], prereleases=True))):
                    todo.append(req)
    locked = []
    for wheel in sorted(dest.glob("*.whl")):
        name, version, requires = wheel_metadata(wheel)
        key = canonicalize_name(name)
        if key in wanted and wanted[key].specifier.contains(version, prereleases=True):
            locked.append(Locked(key, version, wheel.name, sha256_of(wheel), wheel.stat().st_size,
                                 tuple(requires), tuple(sorted(extras.get(key, ())))))
    return sorted(locked, key=lambda w: (w.name != "vllm", w.name))


def read_lock(path: Path = LOCK_PATH) -> list[Locked]:
    return [Locked(**{**w, "requires": tuple(w["requires"]), "extras": tuple(w["extras"])})
            for w in json.loads(path.read_text())["wheels"]]


def unmet(lock: list[Locked]) -> list[str]:
    """Every requirement of a locked wheel (for its locked extras) that neither the lock, the image
    nor ``LEFT_OUT`` satisfies: empty when the set is closed."""
    by_name = {w.name: w for w in lock}
    problems = []
    for wheel in lock:
        for req in needed(wheel.requires, wheel.extras):
            name = canonicalize_name(req.name)
            if name in IMAGE_PACKAGES or name in LEFT_OUT:
                continue
            have = by_name.get(name)
            if have is None:
                problems.append(f"{wheel.name} needs {req}: not locked")
            elif not req.specifier.contains(have.version, prereleases=True):
                problems.append(f"{wheel.name} needs {req}: locked {have.version}")
            elif missing := set(map(canonicalize_name, req.extras)) - set(map(canonicalize_name, have.extras)):
                problems.append(f"{wheel.name} needs {req}: extras {sorted(missing)} not locked")
    return problems


def fetch(lock: list[Locked], dest: Path) -> list[Path]:
    paths = []
    missing = [w for w in lock if not (dest / w.file).exists()]
    if missing:
        pip_download([f"{w.name}=={w.version}" for w in missing], dest)
    for wheel in lock:
        path = dest / wheel.file
        if sha256_of(path) != wheel.sha256:
            raise RuntimeError(f"{path}: sha256 differs from the lock")
        paths.append(path)
    return paths


def trim_wheel(source: Path, dest: Path, patterns: Iterable[str] = TRIM) -> list[str]:
    """Copy the wheel without the members matching ``patterns`` (and their RECORD lines); returns
    the dropped names. Members are copied compressed as they are (no re-compression)."""
    compiled = [re.compile(p) for p in patterns]
    dropped = []
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(dest, "w") as out:
        for info in src.infolist():
            if any(p.search(info.filename) for p in compiled):
                dropped.append(info.filename)
                continue
            if info.filename.endswith(".dist-info/RECORD"):
                lines = src.read(info).decode().splitlines(keepends=True)
                kept = "".join(line for line in lines if line.split(",", 1)[0] not in dropped)
                out.writestr(info, kept)
                continue
            with src.open(info) as member, out.open(info, "w") as copy:
                while block := member.read(MIB):
                    copy.write(block)
    # RECORD lists files in archive order and sits last, so every dropped name was seen before it.
    return dropped


def split_stream(data: io.BufferedIOBase, limit: int) -> Iterator[bytes]:
    """Consecutive pieces of ``data``, each at most ``limit`` bytes (in memory, one at a time)."""
    if limit <= 0:
        raise ValueError("limit must be positive")
    while piece := data.read(limit):
        yield piece


def pack(wheels: list[Path], out: Path, limit: int) -> dict:
    """Tar ``wheels`` (in order, uncompressed: wheels are zips already) and split the tar into
    ``out/cN/part-NN`` of at most ``limit`` bytes; write ``out/kit/manifest.json``."""
    out.mkdir(parents=True, exist_ok=True)
    tar_path = out / "wheels.tar"
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for wheel in wheels:
            info = tar.gettarinfo(str(wheel), arcname=wheel.name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with wheel.open("rb") as handle:
                tar.addfile(info, handle)
    parts = []
    with tar_path.open("rb") as data:
        for number, piece in enumerate(split_stream(data, limit), start=1):
            folder = out / f"c{number}"
            folder.mkdir(exist_ok=True)
            for old in folder.glob("part-*"):
                old.unlink()
            path = folder / f"part-{number:02d}"
            path.write_bytes(piece)
            parts.append({"file": f"c{number}/{path.name}", "size": len(piece),
                          "sha256": hashlib.sha256(piece).hexdigest()})
    manifest = {"tar_sha256": sha256_of(tar_path), "tar_size": tar_path.stat().st_size, "limit": limit,
                "wheels": [w.name for w in wheels], "parts": parts}
    tar_path.unlink()
    (out / "kit").mkdir(exist_ok=True)
    (out / "kit" / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def join_parts(parts: list[Path], dest: Path) -> str:
    """Concatenate parts into ``dest``; returns its sha256."""
    with dest.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    return sha256_of(dest)


def tree_bytes(repo: Path) -> int:
    """Bytes a device call sends from ``repo`` besides carried paths: tracked files plus untracked,
    not ignored ones."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True).stdout.split(b"\0")
    return sum((repo / name.decode()).stat().st_size for name in listed if name and (repo / name.decode()).is_file())


def auto_limit(repo: Path, kit_bytes: int, margin: int = 6 * MIB, cap: int = 48 * MIB) -> int:
    """The largest part size that keeps part + working tree + kit + margin under the call limit."""
    return min(cap, CALL_LIMIT - tree_bytes(repo) - kit_bytes - margin)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lock_cmd = sub.add_parser("lock", help="resolve and rewrite the lock (network)")
    lock_cmd.add_argument("--dir", type=Path, default=Path("/tmp/gpu-wheels-resolve"))
    fetch_cmd = sub.add_parser("fetch", help="download the locked wheels (network)")
    fetch_cmd.add_argument("--dir", type=Path, default=Path("/tmp/gpu-wheels"))
    pack_cmd = sub.add_parser("pack", help="trim vLLM, tar and split into parts")
    pack_cmd.add_argument("--dir", type=Path, default=Path("/tmp/gpu-wheels"))
    pack_cmd.add_argument("--out", type=Path, default=Path(".gpu"))
    pack_cmd.add_argument("--limit", default="auto", help="bytes per part, or 'auto' (from the working tree)")
    pack_cmd.add_argument("--repo", type=Path, default=Path("."))
    args = parser.parse_args(argv)

    if args.command == "lock":
        locked = resolve(args.dir)
        LOCK_PATH.write_text(json.dumps({"vllm": VLLM, "left_out": LEFT_OUT,
                                         "wheels": [asdict(w) for w in locked]}, indent=1) + "\n")
        problems = unmet(locked)
        total = sum(w.size for w in locked)
        print(f"{len(locked)} wheels, {total / MIB:.1f} MiB; unmet: {problems or 'none'}")
        return 1 if problems else 0
    lock = read_lock()
    if args.command == "fetch":
        paths = fetch(lock, args.dir)
        print(f"{len(paths)} wheels in {args.dir}, {sum(p.stat().st_size for p in paths) / MIB:.1f} MiB")
        return 0
    paths = [args.dir / w.file for w in lock]
    trimmed_dir = args.dir / "trimmed"
    trimmed_dir.mkdir(exist_ok=True)
    trimmed = trimmed_dir / paths[0].name
    dropped = trim_wheel(paths[0], trimmed)
    print(f"trimmed {paths[0].name}: {len(dropped)} members dropped, "
          f"{paths[0].stat().st_size / MIB:.1f} -> {trimmed.stat().st_size / MIB:.1f} MiB")
    limit = auto_limit(args.repo, kit_bytes=2 * MIB) if args.limit == "auto" else int(args.limit)
    manifest = pack([trimmed, *paths[1:]], args.out, limit)
    print(f"{len(manifest['parts'])} parts of at most {limit / MIB:.1f} MiB, tar {manifest['tar_size'] / MIB:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
