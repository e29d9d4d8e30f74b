"""The mapping between this trainer's Llama and Hugging Face's ``LlamaForCausalLM``.

The two are the same network layer for layer; they differ in parameter names and in the row
order of the query and key projections. The trainer rotates interleaved pairs (dims 2i, 2i+1
of each head, as Meta's checkpoints do); Hugging Face rotates halves (dims i and i + head_dim/2),
so its conversion script permutes the rows of q_proj and k_proj within each head
(transformers' models/llama/convert_llama_weights_to_hf.py, ``permute``). ``to_hf_rows`` is
that permutation, ``from_hf_rows`` its inverse.

Standard library and torch only: the loader (training/init_from.py) and the exporter
(training/export_hf.py) share it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from training.config import ModelConfig
from training.model import ffn_hidden_dim

# Hugging Face's index of a sharded checkpoint and its shards' suffix.
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
CONFIG_FILE = "config.json"

_LAYER_NAMES = {
    "attention_norm.weight": "input_layernorm.weight",
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
}
_TOP_NAMES = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


@dataclass(frozen=True)
class HfTensor:
    """Where one trainer parameter lives in a Hugging Face checkpoint."""

    name: str
    # Query/key projection: rows permuted per head, `heads` of them.
    permuted_heads: int | None = None


def hf_tensor(name: str, cfg: ModelConfig) -> HfTensor:
    """The Hugging Face tensor behind the trainer's parameter `name`."""
    if name in _TOP_NAMES:
        return HfTensor(_TOP_NAMES[name])
    prefix, layer, rest = name.split(".", 2)
    if prefix != "layers" or rest not in _LAYER_NAMES:
        raise KeyError(f"no Hugging Face Llama tensor for parameter {name!r}")
    hf = f"model.layers.{layer}.{_LAYER_NAMES[rest]}"
    if rest == "attention.wq.weight":
        return HfTensor(hf, cfg.n_heads)
    if rest == "attention.wk.weight":
        return HfTensor(hf, cfg.n_kv_heads or cfg.n_heads)
    return HfTensor(hf)


def from_hf_rows(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Hugging Face's rotate-half row order of whole heads -> interleaved pairs."""
    rows, cols = w.shape
    half = rows // heads // 2
    return w.reshape(heads, 2, half, cols).transpose(1, 2).reshape(rows, cols)


def to_hf_rows(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Interleaved pairs -> Hugging Face's rotate-half row order (its ``permute``)."""
    rows, cols = w.shape
    half = rows // heads // 2
    return w.reshape(heads, half, 2, cols).transpose(1, 2).reshape(rows, cols)


def hf_config(cfg: ModelConfig, *, torch_dtype: str = "float32") -> dict[str, object]:
    """config.json of the equivalent ``LlamaForCausalLM``."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg.dim,
        "intermediate_size": ffn_hidden_dim(cfg),
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads,
        "head_dim": cfg.dim // cfg.n_heads,
        "vocab_size": cfg.vocab_size,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": torch_dtype,
    }


def config_mismatches(hf: dict[str, object], cfg: ModelConfig) -> list[str]:
    """Settings of a checkpoint's config.json the trainer's model would not reproduce (shapes
    are checked tensor by tensor as they are read)."""
    out: list[str] = []
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    theta = hf.get("rope_theta", rope.get("rope_theta") if isinstance(rope, dict) else None)
    if theta is not None and float(theta) != cfg.rope_theta:  # type: ignore[arg-type]
        out.append(f"rope_theta {theta} (set model.rope_theta={theta})")
    rope_type = (
        rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    )
    if rope_type not in ("default", None):
        out.append(f"rope scaling {rope_type!r} (the trainer implements plain RoPE only)")
    eps = hf.get("rms_norm_eps")
    if eps is not None and float(eps) != cfg.norm_eps:  # type: ignore[arg-type]
        out.append(f"rms_norm_eps {eps} (set model.norm_eps={eps})")
    head_dim = hf.get("head_dim")
    if head_dim is not None and int(head_dim) != cfg.dim // cfg.n_heads:  # type: ignore[call-overload]
        out.append(f"head_dim {head_dim} (the trainer uses model.dim / model.n_heads)")
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        out.append(f"hidden_act {act!r} (the trainer's MLP is SwiGLU)")
    for bias in ("attention_bias", "mlp_bias"):
        if hf.get(bias):
            out.append(f"{bias} true (the trainer's projections have no bias)")
    return out
