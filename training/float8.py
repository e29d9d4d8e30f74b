"""FP8 training (``training.float8``) through torchao's float8 linear layers, as torchtitan
runs it: the decoder's large ``nn.Linear`` layers become ``Float8Linear`` (dynamic tensorwise
scaling: inputs, weights and gradients cast to FP8 for the matmuls, master weights and
optimizer state unchanged), before compile and FSDP2; with FSDP2 the weights are all-gathered
in FP8 (half the bytes of bf16), their scales computed for every layer in one all-reduce after
each optimizer step (`precompute_scales`).

Left in bf16: the output projection (the logits feed the loss; torchtitan keeps it out), and
linears too small for FP8 to pay (torchao's table for tensorwise scaling on H100: in_features
<= 4096 with out_features <= 1024, 8b's and 1b's key/value projections) or with a dimension
FP8 matmuls cannot take (not a multiple of 16).

torchao is imported only where FP8 is used: the CPU tests and jobs without FP8 never load it.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

import torch
from torch import nn

from training.config_parsing import ConfigError

if TYPE_CHECKING:
    from torchao.float8 import Float8LinearConfig

# FP8 tensor cores: Ada (8.9), Hopper (9.0) and later.
MIN_CAPABILITY = (8, 9)
# The output projection's module name (training.model.Transformer).
OUTPUT_LAYER = "output"
# FP8 matmuls (torch._scaled_mm) need both dimensions to be multiples of this.
FP8_DIM_MULTIPLE = 16
# torchao's tensorwise table: at or below both, FP8 casts cost more than the matmul saves.
SMALL_IN_FEATURES, SMALL_OUT_FEATURES = 4096, 1024


def unsupported_reason(device: torch.device) -> str | None:
    """Why `device` cannot run FP8 training, or None when it can."""
    if importlib.util.find_spec("torchao") is None:
        return "torchao is not installed (the training extra pins it)"
    if device.type != "cuda":
        return f"this rank runs on {device.type}, not a CUDA GPU"
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        return f"this rank's GPU, {name}, has compute capability {capability[0]}.{capability[1]}"
    return None


def require_support(device: torch.device) -> None:
    """Refuses `training.float8` in one line on a device without FP8 tensor cores."""
    reason = unsupported_reason(device)
    if reason is not None:
        need = ".".join(str(v) for v in MIN_CAPABILITY)
        raise ConfigError(
            f"training.float8=true needs a GPU of compute capability {need} or later "
            f"(H100, H200); {reason}; set training.float8=false"
        )


def converts(module: nn.Module, fqn: str) -> bool:
    """Whether the layer at `fqn` trains in FP8 (see the module docstring)."""
    if not isinstance(module, nn.Linear) or fqn.split(".")[-1] == OUTPUT_LAYER:
        return False
    out_features, in_features = module.weight.shape
    if in_features % FP8_DIM_MULTIPLE or out_features % FP8_DIM_MULTIPLE:
        return False
    return not (in_features <= SMALL_IN_FEATURES and out_features <= SMALL_OUT_FEATURES)


def linear_config(*, emulate: bool = False) -> Float8LinearConfig:
    """Dynamic tensorwise scaling with FP8 weight all-gathers under FSDP2. `emulate` runs the
    casts with high-precision matmuls (any device, for tests), never in a job."""
    from torchao.float8 import Float8LinearConfig

    return Float8LinearConfig(enable_fsdp_float8_all_gather=True, emulate=emulate)


def convert(model: nn.Module, *, emulate: bool = False) -> list[str]:
    """Swaps the layers `converts` selects for torchao's Float8Linear, in place (parameter
    names unchanged: checkpoints are the same); returns their names. Before compile and
    FSDP2, on the meta device or a real one."""
    from torchao.float8 import convert_to_float8_training

    chosen = [name for name, module in model.named_modules() if converts(module, name)]
    convert_to_float8_training(
        model, config=linear_config(emulate=emulate), module_filter_fn=converts
    )
    return chosen


def precompute_scales(model: nn.Module) -> None:
    """After each optimizer step: every FP8 weight's scale for the next all-gather, in one
    all-reduce instead of one per layer."""
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    precompute_float8_dynamic_scale_for_fsdp(model)
