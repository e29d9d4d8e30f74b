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

from collections.abc import Callable
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


# Architecture in config.json -> the trainer's setting and its value. A Llama config without
# `num_key_value_heads` has as many as query heads (transformers' LlamaConfig default).
_ARCHITECTURE: tuple[tuple[str, str, Callable[[ModelConfig], int]], ...] = (
    ("hidden_size", "model.dim", lambda c: c.dim),
    ("num_hidden_layers", "model.n_layers", lambda c: c.n_layers),
    ("num_attention_heads", "model.n_heads", lambda c: c.n_heads),
    ("num_key_value_heads", "model.n_kv_heads", lambda c: c.n_kv_heads or c.n_heads),
    ("intermediate_size", "model.ffn_hidden", ffn_hidden_dim),
    ("vocab_size", "model.vocab_size", lambda c: c.vocab_size),
)
# How to turn a tied checkpoint into one this model reproduces (it has its own output layer).
UNTIE_HINT = (
    "untie it first (transformers: load it, set config.tie_word_embeddings=False and lm_head."
    "weight to a copy of the input embeddings, save_pretrained to a new directory) and point "
    "training.init_from there"
)


def _whole(hf: dict[str, object], key: str) -> int | str:
    """config.json's `key` as an int, or why it is not one."""
    value = hf.get(key)
    if value is None:
        return f"config.json has no {key}"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"config.json's {key} {value!r} is not a positive whole number"
    return value


def architecture_mismatches(hf: dict[str, object], cfg: ModelConfig) -> list[str]:
    """Each way the checkpoint's architecture (config.json) differs from the model's, with the
    setting that fixes it. Checked before any tensor: heads cannot be told from shapes (8 heads
    of 8 and 4 heads of 16 have the same projections), and neither can a tied output layer."""
    out: list[str] = []
    found: dict[str, int] = {}
    for key, setting, value_of in _ARCHITECTURE:
        kv_default = key == "num_key_value_heads" and key not in hf
        have = _whole(hf, "num_attention_heads" if kv_default else key)
        if isinstance(have, str):
            out.append(have)
            continue
        found[key] = have
        if have != value_of(cfg):
            out.append(
                f"{key} {have}, the model's {setting} {value_of(cfg)} (set {setting}={have})"
            )
    hidden, heads = found.get("hidden_size"), found.get("num_attention_heads")
    head_dim = hf.get("head_dim")
    if hidden and heads and head_dim is not None and head_dim != hidden / heads:
        out.append(
            f"head_dim {head_dim} is not hidden_size / num_attention_heads = {hidden / heads:g} "
            "(the trainer's head dim is model.dim / model.n_heads: such a checkpoint cannot load)"
        )
    if hf.get("tie_word_embeddings"):
        out.append(
            "tie_word_embeddings true: the output layer shares the input embeddings, the "
            f"model's has its own; {UNTIE_HINT}"
        )
    return list(dict.fromkeys(out))  # a missing head count is reported once


def config_mismatches(hf: dict[str, object], cfg: ModelConfig) -> list[str]:
    """Everything in a checkpoint's config.json the trainer's model would not reproduce: the
    architecture, then the settings of RoPE, the norms, the activation and the biases."""
    out = architecture_mismatches(hf, cfg)
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
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        out.append(f"hidden_act {act!r} (the trainer's MLP is SwiGLU)")
    for bias in ("attention_bias", "mlp_bias"):
        if hf.get(bias):
            out.append(f"{bias} true (the trainer's projections have no bias)")
    return out
