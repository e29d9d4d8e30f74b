"""Process group, device mesh, tensor parallelism and FSDP2 (optionally HSDP) application.

One device mesh, (dp_replicate, dp_shard, tp) as `JobConfig.mesh_shape` gives it, with the
tensor-parallel dimension innermost: its ranks are consecutive, so a TP group stays inside a
node (NVLink) and the data-parallel dimensions span nodes. A dimension of size 1 is left out
(dp_shard is always there: FSDP needs a mesh), so a run without TP or HSDP builds the same
one-dimensional mesh, and writes the same checkpoints, as before TP existed.

The tensor-parallel plan follows torchtitan's for Llama (torchtitan/models/llama3,
parallelize): the embedding row-wise with a sequence-sharded output, q/k/v and w1/w3
column-wise, wo and w2 row-wise back to sequence-sharded activations, the RMSNorms
sequence-parallel, the output projection column-wise over the vocabulary with the loss
computed vocabulary-parallel (no rank holds the full logits).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

from training import float8
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


# Mesh dimension names, outermost first (torchtitan's names for the same dimensions).
DP_REPLICATE, DP_SHARD, TP = "dp_replicate", "dp_shard", "tp"


def build_mesh(cfg: JobConfig, world_size: int, device: torch.device) -> DeviceMesh:
    """The job's one device mesh: (dp_replicate, dp_shard, tp) from `JobConfig.mesh_shape`,
    dimensions of size 1 left out but dp_shard."""
    replicate, shard, tp = cfg.mesh_shape(world_size)
    dims = [(DP_REPLICATE, replicate), (DP_SHARD, shard), (TP, tp)]
    kept = [(name, size) for name, size in dims if size > 1 or name == DP_SHARD]
    return init_device_mesh(
        device.type,
        tuple(size for _, size in kept),
        mesh_dim_names=tuple(name for name, _ in kept),
    )


def _dims(mesh: DeviceMesh) -> tuple[str, ...]:
    return mesh.mesh_dim_names or ()


def data_parallel_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The sub-mesh FSDP shards over: dp_shard, or (dp_replicate, dp_shard) for HSDP
    (parameters sharded inside a group, e.g. a node over NVLink, replicated across groups)."""
    names = tuple(n for n in (DP_REPLICATE, DP_SHARD) if n in _dims(mesh))
    return mesh[names]


def tensor_parallel_size(mesh: DeviceMesh) -> int:
    return mesh[TP].size() if TP in _dims(mesh) else 1


def data_parallel_rank(mesh: DeviceMesh) -> int:
    """This rank's index among the data-parallel ranks (the ranks that read different
    samples): its coordinate on the data-parallel dimensions, ignoring tp."""
    dp = data_parallel_mesh(mesh)
    coordinate = dp.get_coordinate()
    if coordinate is None:  # every rank of the world is in the mesh
        raise RuntimeError("this rank is not part of the device mesh")
    rank = 0
    for index, size in zip(coordinate, dp.shape, strict=True):
        rank = rank * size + index
    return rank


def use_bf16(cfg: JobConfig, device: torch.device) -> bool:
    mode = cfg.parallel.mixed_precision
    return mode == "bf16" or (mode == "auto" and device.type == "cuda")


def apply_parallelism(
    model: Transformer, cfg: JobConfig, mesh: DeviceMesh, device: torch.device
) -> Transformer:
    """FP8 layers, tensor parallelism, activation checkpointing, chunked loss, per-block
    compile and FSDP2 sharding on the data-parallel sub-mesh, in that order (FSDP wraps the
    tensor-parallel parameters into DTensors over both meshes)."""
    if cfg.training.float8:
        float8.require_support(device)
        float8.convert(model)
    if cfg.parallel.compile and cfg.parallel.compile_cache_dir:
        use_compile_cache(cfg.parallel.compile_cache_dir)
    if tensor_parallel_size(mesh) > 1:
        apply_tensor_parallel(model, mesh[TP])
    apply_activation_checkpointing(model, cfg.parallel.activation_checkpoint)
    model.loss_chunk_tokens = cfg.chunked_loss_tokens()
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
    dp_mesh = data_parallel_mesh(mesh)
    for i, block in enumerate(blocks):
        # The last block is resharded by the root right after, so skip its extra reshard.
        fully_shard(
            block, mesh=dp_mesh, mp_policy=block_mp, reshard_after_forward=i < len(blocks) - 1
        )
    fully_shard(model, mesh=dp_mesh, mp_policy=mp)
    return model


def use_compile_cache(directory: str) -> None:
    """Keeps Inductor's caches (compiled graphs, AOT autograd's, Triton's kernels) in
    `directory`, where a restarted process on the same node finds them: its first step loads
    compiled code instead of compiling. Read when compile first runs, so set before it."""
    os.makedirs(directory, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.abspath(directory)


def apply_tensor_parallel(model: Transformer, tp_mesh: DeviceMesh) -> None:
    """Splits every layer over the `tp_mesh` ranks (see the module docstring for the plan).

    Between blocks the residual stream is sharded over the sequence (Shard(1)); attention and
    the MLP gather it, compute on their share of the heads and hidden units, and reduce-scatter
    back. Attention then sees n_heads / tp query and n_kv_heads / tp key/value heads."""
    tp = tp_mesh.size()
    parallelize_module(
        model,
        tp_mesh,
        {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            # Logits stay sharded over the vocabulary (a DTensor) for the loss_parallel loss.
            "output": ColwiseParallel(
                input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False
            ),
        },
    )
    for block in model.blocks():
        parallelize_module(
            block,
            tp_mesh,
            {
                "attention_norm": SequenceParallel(),
                # (x, cos, sin): the RoPE tables are plain tensors, the same on every rank.
                "attention": PrepareModuleInput(
                    input_layouts=(Shard(1), None, None),
                    desired_input_layouts=(Replicate(), None, None),
                ),
                "attention.wq": ColwiseParallel(),
                "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(),
                "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
                "ffn_norm": SequenceParallel(),
                "feed_forward": PrepareModuleInput(
                    input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
                ),
                "feed_forward.w1": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
                "feed_forward.w3": ColwiseParallel(),
            },
        )
        block.attention.use_local_heads(tp)


def loss_context(mesh: DeviceMesh) -> contextlib.AbstractContextManager[None]:
    """Where forward and backward run: the vocabulary-parallel cross-entropy under tensor
    parallelism (its backward must run inside it too), nothing otherwise."""
    if tensor_parallel_size(mesh) > 1:
        return loss_parallel()
    return contextlib.nullcontext()


@torch.no_grad()
def clip_grad_norm(parameters: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Clips the gradients to a total L2 norm of `max_norm`; returns the norm before.

    The total is taken over every mesh dimension: with FSDP and TP the gradients are
    DTensors whose norm is a partial value per rank, which full_tensor() reduces over both
    the data-parallel and the tensor-parallel ranks (as torchtitan's clip_grad_norm_)."""
    params = list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, foreach=True)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach=True)
    return total


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
