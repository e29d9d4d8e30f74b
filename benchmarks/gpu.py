"""GPU facts the benchmarks share: dense bf16 peaks (the MFU denominator) and peak memory."""

from __future__ import annotations

import torch

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
        "max_memory_allocated_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2)
        if cuda
        else None,
        "max_memory_reserved_gb": round(torch.cuda.max_memory_reserved() / 1e9, 2)
        if cuda
        else None,
    }
