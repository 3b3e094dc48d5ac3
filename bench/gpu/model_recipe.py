"""The GPU run's models: a random-weight Llama target and a small draft that agrees with it part of
the time, written as bf16 safetensors with the lab's tokenizer for vLLM to serve.

Contract. `ModelSpec` is one model's shape and seed (`parameters(vocab)` its parameter count);
`TARGET` (~0.95B parameters with the 2048-token vocabulary) and `DRAFT` (2 layers) are the run's.
`build_models(root)` writes ``root/target`` and ``root/draft`` (weights, config, tokenizer of
lab/vllm_spec_lab/tinymodel.py, and ``gpu-model-recipe.json`` holding the spec) and returns their
folders. The draft shares the target's tokenizer, embeddings, final norm and LM head; both scale
their residual branches by ``residual_scale``, so greedy output stays close to the shared
embedding→LM-head map: it loops (n-gram drafts are accepted) and the draft agrees with the target
part of the time. Needs torch and transformers (imported on call), and vllm_spec_lab on the path
(run.py puts it there); runs on a CPU at any size (`device="cpu"`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ModelSpec:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    seed: int
    residual_scale: float = 1.0

    def parameters(self, vocab: int) -> int:
        head_dim = self.hidden // self.heads
        attention = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * head_dim
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attention + mlp + 2 * self.hidden) + 2 * vocab * self.hidden + self.hidden


# ~0.95B parameters with the 2048-token vocabulary: weight reads dominate a small decode step.
TARGET = ModelSpec(hidden=2048, layers=20, heads=16, kv_heads=8, intermediate=5632, seed=1234, residual_scale=0.002)
DRAFT = ModelSpec(hidden=2048, layers=2, heads=16, kv_heads=8, intermediate=5632, seed=4321, residual_scale=0.002)


def build_models(root: Path, target: ModelSpec = TARGET, draft: ModelSpec = DRAFT, device: str | None = None,
                 ) -> tuple[Path, Path]:
    """Write ``root/target`` and ``root/draft`` (bf16 safetensors + tokenizer); returns their dirs.

    The draft copies the target's embeddings, final norm and LM head, so the two agree where the
    target's residual branches (scaled by ``residual_scale``) change little."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from vllm_spec_lab import tinymodel

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = tinymodel._build_tokenizer(root)
    built: dict[str, Any] = {}
    dirs = []
    for name, spec in (("target", target), ("draft", draft)):
        torch.manual_seed(spec.seed)
        config = LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=spec.hidden, intermediate_size=spec.intermediate,
            num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
            max_position_embeddings=tinymodel.MAX_POSITIONS, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False, torch_dtype="bfloat16",
        )
        with torch.device(device):
            model = LlamaForCausalLM(config).to(torch.bfloat16)
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.mul_(spec.residual_scale)
                layer.mlp.down_proj.weight.mul_(spec.residual_scale)
            if "target" in built:
                shared = built["target"]
                model.model.embed_tokens.weight.copy_(shared.model.embed_tokens.weight)
                model.model.norm.weight.copy_(shared.model.norm.weight)
                model.lm_head.weight.copy_(shared.lm_head.weight)
        built[name] = model
        out = root / name
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        (out / "gpu-model-recipe.json").write_text(json.dumps(asdict(spec), indent=1) + "\n")
        dirs.append(out)
    del built
    if device == "cuda":
        torch.cuda.empty_cache()
    return dirs[0], dirs[1]
