"""Tiny random-weight Llama models that vLLM can serve on a CPU without downloading anything.

Two halves:

* ``ensure_tiny_models(python, cache_dir)``: called from the main venv. It only uses the stdlib and
  runs this very file as a script under the vLLM venv's python, which has torch/transformers.
* ``python tinymodel.py --out DIR``: the builder. It trains a byte-level BPE tokenizer on Python's
  own stdlib sources (local text, always present) and saves two models sharing it: the target and,
  with a different seed, a draft model for ``{"method": "draft_model"}``.

Keep the module-level imports stdlib-only: the script runs in a venv without this package.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import shutil
import subprocess
import sys
from pathlib import Path

# Bump when the recipe changes so that stale caches are rebuilt instead of silently reused.
RECIPE_VERSION = "1"
VOCAB_SIZE = 2048
# The CPU attention kernel rejects head_dim 16; 128 / 2 heads = head_dim 64 works.
HIDDEN_SIZE = 128
NUM_HEADS = 2
TARGET_LAYERS = 2
DRAFT_LAYERS = 1
TARGET_SEED = 1234
DRAFT_SEED = 4321
MAX_POSITIONS = 2048
DONE_MARKER = ".tiny-model-complete"

# A fixed, ordered list keeps the tokenizer identical across runs; all ship with every CPython.
CORPUS_MODULES = (
    "argparse.py",
    "collections/__init__.py",
    "dataclasses.py",
    "functools.py",
    "inspect.py",
    "json/decoder.py",
    "json/encoder.py",
    "logging/__init__.py",
    "pathlib.py",
    "subprocess.py",
    "textwrap.py",
    "typing.py",
)


def models_root(cache_dir: Path) -> Path:
    return cache_dir / f"tiny-models-v{RECIPE_VERSION}"


def ensure_tiny_models(python: Path, cache_dir: Path, timeout_s: float = 600.0) -> tuple[Path, Path]:
    """Return ``(target_dir, draft_dir)``, building them with the vLLM venv's ``python`` if needed."""
    from .venv import venv_environment  # here: this file also runs as a script in the vLLM venv

    root = models_root(cache_dir)
    target_dir, draft_dir = root / "target", root / "draft"
    if (target_dir / DONE_MARKER).exists() and (draft_dir / DONE_MARKER).exists():
        return target_dir, draft_dir
    root.mkdir(parents=True, exist_ok=True)
    # Two test sessions must not rebuild (rmtree + rename) under each other's running servers.
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ((target_dir / DONE_MARKER).exists() and (draft_dir / DONE_MARKER).exists()):
            subprocess.run(
                [str(python), str(Path(__file__).resolve()), "--out", str(root)],
                check=True,
                timeout=timeout_s,
                env=venv_environment(),
            )
    return target_dir, draft_dir


def _corpus_files() -> list[str]:
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [str(stdlib / name) for name in CORPUS_MODULES if (stdlib / name).exists()]
    if not files:
        raise RuntimeError(f"no corpus files found under {stdlib}")
    return files


def _build_tokenizer(work_dir: Path):  # -> PreTrainedTokenizerFast (only importable in the vLLM venv)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train(_corpus_files(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=MAX_POSITIONS,
    )


def _build_model(out_dir: Path, tokenizer, num_layers: int, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        intermediate_size=2 * HIDDEN_SIZE,
        num_hidden_layers=num_layers,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "tiny-model-recipe.json").write_text(
        json.dumps({"recipe": RECIPE_VERSION, "seed": seed, "layers": num_layers}, indent=1) + "\n"
    )
    (out_dir / DONE_MARKER).write_text("ok\n")


def build(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_tokenizer(root)
    for name, layers, seed in (("target", TARGET_LAYERS, TARGET_SEED), ("draft", DRAFT_LAYERS, DRAFT_SEED)):
        out_dir = root / name
        # Build next to the final place, then rename: a crash never leaves a half model behind.
        staging = root / f".{name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        _build_model(staging, tokenizer, layers, seed)
        shutil.rmtree(out_dir, ignore_errors=True)
        staging.rename(out_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for target/ and draft/")
    args = parser.parse_args(argv)
    build(args.out)
    print(f"tiny models written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
