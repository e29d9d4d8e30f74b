"""AdamW with a linear-warmup / cosine-decay learning-rate schedule."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from training.config import OptimConfig


def lr_multiplier(step: int, *, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> float:
    """Multiplier on the peak LR for the update that follows `step` completed updates.

    Linear warmup from 1/(warmup+1) to 1 over `warmup_steps`, then cosine decay to
    `min_lr_ratio` at `total_steps`; flat at the floor afterwards.
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    decay_steps = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / decay_steps, 1.0)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr_ratio + (1.0 - min_lr_ratio) * cosine


def build_optimizer(
    model: nn.Module, cfg: OptimConfig, total_steps: int
) -> tuple[torch.optim.Optimizer, LambdaLR]:
    # Norm weights and other 1-D params are not decayed (standard for Llama-style models).
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
        # foreach: one code path on CPU and GPU, so results do not depend on a fused kernel.
        foreach=True,
    )
    scheduler = LambdaLR(
        optimizer,
        lambda step: lr_multiplier(
            step,
            warmup_steps=cfg.warmup_steps,
            total_steps=total_steps,
            min_lr_ratio=cfg.min_lr_ratio,
        ),
    )
    return optimizer, scheduler
