"""Process group, device mesh and FSDP2 (optionally HSDP) application."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from training.config import JobConfig, checkpointed_layers
from training.model import Transformer


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return default if raw in (None, "") else int(raw)


def ensure_single_process_env() -> None:
    """Lets `python -m training.train` run without a launcher as a world of one."""
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )


def init_distributed(timeout_s: float = 1800.0) -> DistInfo:
    """Initialises the default group from the torchrun/hyperpodrun environment."""
    rank = _env_int("RANK", 0)
    world = _env_int("WORLD_SIZE", 1)
    local_rank = _env_int("LOCAL_RANK", 0)
    local_world = _env_int("LOCAL_WORLD_SIZE", world)
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        # CPU backend too: async checkpoint planning and object collectives run on gloo.
        backend = "cpu:gloo,cuda:nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(
        backend=backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s)
    )
    return DistInfo(rank, world, local_rank, local_world, device)


def build_mesh(cfg: JobConfig, world_size: int, device: torch.device) -> DeviceMesh:
    """The data-parallel mesh `JobConfig.mesh_shape` gives this world."""
    replicate, shard, _ = cfg.mesh_shape(world_size)
    if replicate > 1:
        # HSDP: parameters sharded inside a group, replicated across groups (e.g. shard
        # within a node over NVLink, replicate across nodes over EFA).
        return init_device_mesh(
            device.type, (replicate, shard), mesh_dim_names=("dp_replicate", "dp_shard")
        )
    return init_device_mesh(device.type, (shard,), mesh_dim_names=("dp_shard",))


def use_bf16(cfg: JobConfig, device: torch.device) -> bool:
    mode = cfg.parallel.mixed_precision
    return mode == "bf16" or (mode == "auto" and device.type == "cuda")


def apply_parallelism(
    model: Transformer, cfg: JobConfig, mesh: DeviceMesh, device: torch.device
) -> Transformer:
    """Activation checkpointing, chunked loss, per-block compile and FSDP2 sharding, in that
    order."""
    apply_activation_checkpointing(model, cfg.parallel.activation_checkpoint)
    model.loss_chunk_tokens = cfg.training.loss_chunk_tokens
    blocks = model.blocks()
    for block in blocks:
        if cfg.parallel.compile:
            # In-place compile keeps parameter names (no _orig_mod prefix in checkpoints).
            block.compile()
    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if use_bf16(cfg, device)
        else MixedPrecisionPolicy()
    )
    # Blocks take their inputs as given: the hidden state is bf16 already (the embedding's
    # output), and the RoPE tables stay fp32 for the fp32 rotation in apply_rope (a block's
    # cast would round them to bf16's 3 significant digits, and cost two casts per block).
    block_mp = replace(mp, cast_forward_inputs=False)
    for i, block in enumerate(blocks):
        # The last block is resharded by the root right after, so skip its extra reshard.
        fully_shard(block, mesh=mesh, mp_policy=block_mp, reshard_after_forward=i < len(blocks) - 1)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def apply_activation_checkpointing(model: Transformer, spec: str) -> list[int]:
    """Marks the blocks `parallel.activation_checkpoint` selects (the rest keep their
    activations); returns their indices."""
    selected = checkpointed_layers(spec, len(model.blocks()))
    for i, block in enumerate(model.blocks()):
        block.activation_checkpoint = i in selected
    return selected


def configure_cpu_threads(requested: int, local_world_size: int) -> None:
    if torch.cuda.is_available():
        return
    threads = requested or max(1, (os.cpu_count() or 1) // max(local_world_size, 1))
    torch.set_num_threads(threads)


def configure_determinism(enabled: bool) -> None:
    """training.deterministic: deterministic kernels, before the first GPU kernel runs."""
    if not enabled:
        return
    # cuBLAS reads this when its handle is created, at the first matmul.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # warn_only: an op without a deterministic kernel warns instead of stopping the run.
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    # Under warn_only, attention would still pick the flash, memory-efficient or cuDNN
    # kernels, whose backward passes accumulate in a nondeterministic order: the math kernel
    # alone is (slower; it takes grouped-query attention too).
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
