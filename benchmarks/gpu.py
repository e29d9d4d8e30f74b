"""GPU facts the benchmarks share: dense bf16 peaks (the MFU denominator) and peak memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from training.trainer import Trainer

GB = 1e9  # decimal, as every memory figure of the benchmarks

# Dense bf16 peak per GPU (FLOP/s), by substring of the device name; the first match wins, so
# the PCIe and NVL variants (lower clocks and power) come before the SXM H100.
PEAK_BF16 = [
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("A10G", 125e12),
]


def peak_bf16(device_name: str) -> float | None:
    """The dense bf16 peak of the named device, or None for one not listed (or a CPU)."""
    return next((value for key, value in PEAK_BF16 if key in device_name), None)


def peak_memory_gb(cuda: bool) -> dict[str, float | None]:
    """Peak memory since the last reset (decimal GB): allocated by tensors, and reserved by
    the caching allocator, which is what runs out first. None on CPU."""
    return {
        "max_memory_allocated_gb": round(torch.cuda.max_memory_allocated() / GB, 2)
        if cuda
        else None,
        "max_memory_reserved_gb": round(torch.cuda.max_memory_reserved() / GB, 2) if cuda else None,
    }


def step_memory_split(trainer: Trainer) -> dict[str, float | None]:
    """Runs one more optimizer step of `trainer` with its peak memory taken apart (decimal GB,
    None on CPU): forward and backward alone, from their start (parameters and the optimizer's
    state already made, no gradients yet), and the update after them (gradient clipping, the
    optimizer step, whose foreach temporaries can exceed every activation).

    A peak over the whole step says which of the two is larger, not what the activations
    cost: comparing activation-checkpointing choices needs the first window alone."""
    if trainer.info.device.type != "cuda":
        trainer.train_step()
        return dict.fromkeys(
            (
                "forward_backward_start_allocated_gb",
                "forward_backward_peak_allocated_gb",
                "activation_peak_gb",
                "update_peak_allocated_gb",
            )
        )
    measured: dict[str, int] = {}
    forward_backward = trainer.forward_backward

    def measure(inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        measured["start"] = torch.cuda.memory_allocated()
        loss = forward_backward(inputs, labels)
        torch.cuda.synchronize()
        measured["peak"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        return loss

    # The instance attribute shadows the method for this one step only.
    trainer.forward_backward = measure  # type: ignore[method-assign]
    try:
        trainer.train_step()
    finally:
        del trainer.forward_backward
    torch.cuda.synchronize()
    start, peak = measured["start"], measured["peak"]
    return {
        "forward_backward_start_allocated_gb": round(start / GB, 2),
        "forward_backward_peak_allocated_gb": round(peak / GB, 2),
        "activation_peak_gb": round((peak - start) / GB, 2),
        "update_peak_allocated_gb": round(torch.cuda.max_memory_allocated() / GB, 2),
    }
