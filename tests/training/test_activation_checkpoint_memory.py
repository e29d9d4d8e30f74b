"""Activation checkpointing applies as the trainer builds the model (apply_parallelism: FSDP2,
and per-block compile as the GPU presets ship it): the tensors kept for backward shrink to
about each checkpointed layer's input. Counted with saved-tensor hooks, which see what
autograd (and a compiled graph's backward) keeps, whatever the allocator does."""

from __future__ import annotations

import pytest
import torch

from training.model import Transformer
from training.parallel import apply_parallelism, build_mesh
from training.presets import build_config

BATCH, SEQ = 2, 256


def _saved_bytes(activation_checkpoint: str, compile_blocks: bool) -> int:
    """Bytes of every tensor kept for backward in one training forward of the trainer's
    model (tiny preset, 4 layers, a sequence long enough that activations dominate)."""
    cfg = build_config(
        "tiny",
        [
            "model.n_layers=4",
            f"training.seq_len={SEQ}",
            f"parallel.activation_checkpoint={activation_checkpoint}",
            f"parallel.compile={str(compile_blocks).lower()}",
        ],
    )
    device = torch.device("cpu")
    with torch.device("meta"):
        model = Transformer(cfg.model, max_seq_len=SEQ)
    model = apply_parallelism(model, cfg, build_mesh(cfg, 1, device), device)
    model.to_empty(device=device)
    model.init_weights(0)
    tokens = torch.randint(0, cfg.model.vocab_size, (BATCH, SEQ))
    sizes: list[int] = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        sizes.append(t.numel() * t.element_size())
        return t

    for _ in range(2):  # the second pass: compiled, and past FSDP's lazy initialisation
        sizes.clear()
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            loss = model(tokens, tokens)
        loss.backward()
    return sum(sizes)


@pytest.mark.parametrize(
    "compile_blocks",
    [False, pytest.param(True, marks=pytest.mark.slow)],
    ids=["eager", "compiled"],
)
def test_checkpointing_every_layer_keeps_far_fewer_activations(
    world_of_one: None, compile_blocks: bool
) -> None:
    kept = _saved_bytes("none", compile_blocks)
    checkpointed = _saved_bytes("all", compile_blocks)
    # A block keeps over a dozen (tokens x dim)-sized tensors without checkpointing, its
    # input (and a few small ones) with it.
    assert checkpointed < 0.5 * kept, (checkpointed, kept)
