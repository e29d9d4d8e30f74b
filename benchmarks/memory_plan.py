"""Per-GPU memory plan of a preset under FSDP2, from the preset's own numbers (no GPU).

    python benchmarks/memory_plan.py --preset 8b --gpus 8
    python benchmarks/memory_plan.py --preset 1b --gpus 1 --set training.loss_chunk_tokens=0

Prints a markdown table, one column per activation-checkpointing choice (the preset's first):
FSDP2 with bf16 compute and fp32 master parameters, gradients and AdamW moments sharded over
`--gpus` ranks (one shard group, no HSDP replica), one pass of `training.micro_batch_size`
sequences. benchmarks/README.md holds the 8b table; a test checks it is the one this prints.

Every figure is arithmetic on the config. The activation bytes per token and layer are an
estimate of what eager PyTorch saves for backward in this model's block (see ACTIVATION_NOTE);
compiled blocks save less, so the estimate errs high (benchmarks/README.md compares it with
the 1b measurement).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.gpu import GB
from training.config import JobConfig, checkpointed_layers
from training.model import count_params, ffn_hidden_dim
from training.presets import build_config

# H100 80GB: what torch reports as total memory (79.1 GiB), in GB.
H100_GB = 85.0
ACTIVATION_NOTE = (
    "bf16 bytes saved per token in one block, eager: attention 14*dim + 8*kv_dim (norm input "
    "and output, q/k/v, fp32 RoPE halves, attention output, output-projection input), "
    "feed-forward 4*dim + 8*ffn_hidden (norm input and output, w1 and w3 outputs, SiLU "
    "output, their product)"
)


@dataclass(frozen=True)
class Shape:
    params: int
    root_params: int  # embeddings, output projection, final norm: FSDP's root group
    layer_params: int
    layers: int
    dim: int
    vocab: int
    tokens: int  # per forward/backward pass on one GPU
    activation_bytes_per_token_layer: int
    loss_chunk: int


def shape_of(cfg: JobConfig, gpus: int) -> Shape:
    """The shape of one forward/backward pass on one of `gpus` ranks (the trainer's split)."""
    m, t = cfg.model, cfg.training
    params = count_params(m)
    root = 2 * m.vocab_size * m.dim + m.dim
    kv_dim = (m.n_kv_heads or m.n_heads) * (m.dim // m.n_heads)
    micro, _ = cfg.micro_batches(gpus)
    return Shape(
        params=params,
        root_params=root,
        layer_params=(params - root) // m.n_layers,
        layers=m.n_layers,
        dim=m.dim,
        vocab=m.vocab_size,
        tokens=micro * t.seq_len,
        activation_bytes_per_token_layer=18 * m.dim + 8 * kv_dim + 8 * ffn_hidden_dim(m),
        loss_chunk=t.loss_chunk_tokens,
    )


def rows(cfg: JobConfig, gpus: int, checkpointed: int) -> list[tuple[str, float]]:
    """(item, bytes) per GPU, with `checkpointed` of the layers recomputed."""
    s = shape_of(cfg, gpus)
    p, r, lp, v, d, n = s.params, s.root_params, s.layer_params, s.vocab, s.dim, s.tokens
    kept, a = s.layers - checkpointed, s.activation_bytes_per_token_layer
    if s.loss_chunk:
        # fp32 gradient of the output weight and its bf16 per-chunk product; one chunk's fp32
        # logits beside logsumexp's fp32 temporary of the same size (the peak: 8CV), the
        # (tokens x dim) bf16 gradient of the hidden states.
        loss = 6 * v * d + 8 * s.loss_chunk * v + 2 * n * d
        loss_item = "chunked loss, C tokens a chunk: 6Vd + 8CV + 2Td"
    else:
        # bf16 logits, fp32 log-softmax output and the fp32 and bf16 gradients in backward.
        loss = 12 * n * v
        loss_item = "plain loss, full logits: 12TV"
    return [
        ("fp32 parameters, sharded: 4P / gpus", 4 * p / gpus),
        ("fp32 gradients, sharded: 4P / gpus", 4 * p / gpus),
        ("AdamW moments, 2 x fp32, sharded: 8P / gpus", 8 * p / gpus),
        ("root group gathered in bf16 through forward and backward: 2R", 2 * r),
        ("output-projection gradient, bf16, until the root reduce-scatter: 2Vd", 2 * v * d),
        ("layer all-gathers, bf16, current + prefetched: 4L", 4 * lp),
        ("layer gradient reduce-scatter, bf16 + fp32 copy: 6L", 6 * lp),
        ("activations of the layers not checkpointed: T x A x (layers - k)", n * a * kept),
        (
            "checkpointed layers: inputs T x 2d x k, one layer recomputed T x A",
            n * 2 * d * checkpointed + (n * a if checkpointed else 0),
        ),
        (loss_item, loss),
    ]


def totals(cfg: JobConfig, gpus: int, choices: list[str]) -> list[float]:
    """Estimated bytes per GPU for each activation-checkpointing choice."""
    n_layers = cfg.model.n_layers
    return [
        sum(b for _, b in rows(cfg, gpus, len(checkpointed_layers(c, n_layers)))) for c in choices
    ]


def table(cfg: JobConfig, gpus: int, choices: list[str]) -> str:
    s = shape_of(cfg, gpus)
    ks = [len(checkpointed_layers(c, s.layers)) for c in choices]
    columns = [rows(cfg, gpus, k) for k in ks]
    chunk = f", C = {s.loss_chunk:,}" if s.loss_chunk else ""
    lines = [
        f"Preset `{cfg.preset}` on {gpus} GPU{'s' if gpus != 1 else ''}: "
        f"P = {s.params:,} parameters (R = "
        f"{s.root_params:,} in the root group, L = {s.layer_params:,} in each of the "
        f"{s.layers} layers), T = {s.tokens:,} tokens a pass, A = "
        f"{s.activation_bytes_per_token_layer:,} bytes a token a layer, V = {s.vocab:,}, "
        f"d = {s.dim:,}{chunk}; GB = 1e9 bytes.",
        "",
        "| per GPU, GB | " + " | ".join(f"`{c}`" for c in choices) + " |",
        "| --- |" + " ---: |" * len(choices),
        "| layers checkpointed, k | " + " | ".join(str(k) for k in ks) + " |",
    ]
    for i, (item, _) in enumerate(columns[0]):
        cells = " | ".join(f"{col[i][1] / GB:.2f}" for col in columns)
        lines.append(f"| {item} | {cells} |")
    sums = [t / GB for t in totals(cfg, gpus, choices)]
    lines.append("| **total (estimate)** | " + " | ".join(f"**{t:.1f}**" for t in sums) + " |")
    lines.append(
        f"| headroom on an H100 80GB ({H100_GB:.0f} GB) | "
        + " | ".join(f"{H100_GB - t:.1f}" for t in sums)
        + " |"
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="8b")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument(
        "--choices",
        default="",
        help="activation_checkpoint values to compare (comma-separated); default: the "
        "preset's, every:2 and none",
    )
    args = ap.parse_args()
    cfg = build_config(args.preset, args.overrides)
    choices = [c for c in args.choices.split(",") if c] or list(
        dict.fromkeys([cfg.parallel.activation_checkpoint, "every:2", "none"])
    )
    print(table(cfg, args.gpus, choices))
    return 0


if __name__ == "__main__":
    sys.exit(main())
