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


def materialize_state(optimizer: torch.optim.Optimizer) -> None:
    """Creates the optimizer's state now instead of at its first step, exactly as that step
    would (zero moments, step counter 0), without changing any parameter.

    DCP needs the state's tensors to plan a load and to size staging buffers; left lazy,
    torch.distributed.checkpoint.state_dict creates it by running a zero-lr step, which
    leaves every step counter at 1 and so shifts AdamW's bias correction for the whole run
    when no checkpoint is then loaded. Here the counters are reset after that step, so the
    run is identical to one with lazy state, and state_dict() never mutates the optimizer.
    """
    if optimizer.state:
        return
    lrs = []
    for group in optimizer.param_groups:
        lrs.append(group["lr"])
        group["lr"] = 0.0
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    # lr 0: AdamW's decay multiplies by exactly 1 and its update adds exactly 0.
    optimizer.step()
    for group, lr in zip(optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    for state in optimizer.state.values():
        step = state.get("step")
        if isinstance(step, torch.Tensor):
            step.zero_()
        elif step is not None:
            state["step"] = 0


def apply_config(optimizer: torch.optim.Optimizer, scheduler: LambdaLR, cfg: OptimConfig) -> None:
    """Makes the config the source of the hyperparameters after a checkpoint was loaded
    (the loaded param groups and schedule carry the values of the run that wrote it), so a
    changed optim.* takes effect from the resumed step. A no-op when nothing changed."""
    decays = [cfg.weight_decay, 0.0]
    for i, group in enumerate(optimizer.param_groups):
        group["initial_lr"] = cfg.lr
        group["betas"] = (cfg.beta1, cfg.beta2)
        group["eps"] = cfg.eps
        group["weight_decay"] = decays[i] if i < len(decays) else group["weight_decay"]
    scheduler.base_lrs = [cfg.lr for _ in optimizer.param_groups]
    lrs = [
        base * fn(scheduler.last_epoch)
        for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)
    ]
    for group, lr in zip(optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    scheduler._last_lr = lrs  # what get_last_lr() reports
