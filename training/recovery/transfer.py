"""Model and optimizer state from a healthy replica to a replacement, over the network.

Under HSDP (`parallel.dp_replicate` >= 2) the ranks that share a shard coordinate (the same
dp_shard and tp index, a different dp_replicate index) hold bit-identical shards of the
parameters and of the optimizer state: a replica group. A replacement receives its shard
from an intact member of its own replica group by broadcast within that group; a group
without an intact member means the shard is lost everywhere, and only a checkpoint tier has
it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from training.recovery.coordination import Member, RecoveryFallbackError

REPLICA_DIM = "dp_replicate"


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


@torch.no_grad()
def state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """This rank's shards of the parameters and the optimizer state, in an order every rank
    of the same configuration agrees on (the optimizer's parameter order, then state keys
    sorted). The optimizer's parameters, not the model's: a step cut short in forward or
    backward leaves FSDP's unsharded parameters registered on the model."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    out = [_local(p) for p in params]
    for p in params:
        state = optimizer.state.get(p, {})
        out += [_local(state[k]) for k in sorted(state) if isinstance(state[k], torch.Tensor)]
    return out


@torch.no_grad()
def copy_into(target: Sequence[torch.Tensor], source: Sequence[torch.Tensor]) -> None:
    """A survivor's old shards into the model rebuilt on the new mesh (same shapes: the
    layout and this rank's place in it are unchanged)."""
    if len(target) != len(source):
        raise RuntimeError(f"state has {len(source)} tensors, the rebuilt model {len(target)}")
    for t, s in zip(target, source, strict=True):
        t.copy_(s)


def replica_groups(mesh: DeviceMesh) -> list[list[int]]:
    """Every replica group of the mesh, as global ranks ordered by replica index."""
    names = list(mesh.mesh_dim_names or ())
    if REPLICA_DIM not in names:
        return [[int(r)] for r in mesh.mesh.flatten().tolist()]
    layout = mesh.mesh.movedim(names.index(REPLICA_DIM), -1)
    return [[int(r) for r in row] for row in layout.reshape(-1, layout.shape[-1]).tolist()]


@dataclass(frozen=True)
class TransferPlan:
    """What this rank does: `source` sends to the ranks of `group` that need state (None when
    its group is whole), `step` is the step every intact member holds, and `state_source`,
    the lowest intact rank, sends the train state to every rank."""

    group: tuple[int, ...]
    source: int | None
    step: int
    state_source: int


def plan(members: Sequence[Member], groups: Sequence[Sequence[int]], rank: int) -> TransferPlan:
    """The same plan on every rank, from the rendezvous' members; RecoveryFallbackError (one line)
    when a replica group has no intact member or the intact members disagree on the step."""
    by_rank = {m.rank: m for m in members}
    steps = {m.step for m in members if m.intact}
    if len(steps) != 1:
        raise RecoveryFallbackError(
            f"in-process recovery: intact ranks hold different steps {sorted(steps)}; "
            "falling back to a checkpoint tier"
        )
    step = steps.pop()
    mine: TransferPlan | None = None
    for group in groups:
        intact = [r for r in group if by_rank[r].intact]
        if not intact:
            raise RecoveryFallbackError(
                f"in-process recovery: every replica of the shard held by ranks {list(group)} "
                "was lost (no intact peer); falling back to a checkpoint tier"
            )
        needs = any(not by_rank[r].intact for r in group)
        if rank in group:
            state_source = min(m.rank for m in members if m.intact)
            mine = TransferPlan(tuple(group), intact[0] if needs else None, step, state_source)
    if mine is None:
        raise RuntimeError(f"rank {rank} is in no replica group of the mesh")
    return mine


@torch.no_grad()
def broadcast_shards(
    tensors: Sequence[torch.Tensor], transfer: TransferPlan, mesh: DeviceMesh
) -> None:
    """Sends (source) or receives (the others) the shard within the replica group, one
    broadcast per dtype; nothing when the group is whole."""
    if transfer.source is None:
        return
    group = mesh[REPLICA_DIM].get_group()
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    for dtype in sorted(by_dtype, key=str):
        parts = by_dtype[dtype]
        flat = torch.cat([p.reshape(-1) for p in parts])
        dist.broadcast(flat, src=transfer.source, group=group)
        offset = 0
        for p in parts:
            p.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()


def agree_train_state(train_state: Any, transfer: TransferPlan) -> Any:
    """The lowest intact rank's train state (step, schedule, data position, checkpoint
    bookkeeping), on every rank: survivors that saw a failure at slightly different moments
    (a checkpoint commit in flight) go on from one view of it."""
    box = [train_state]
    dist.broadcast_object_list(box, src=transfer.state_source)
    return box[0]
