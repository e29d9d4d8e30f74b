"""Forming and abandoning one generation's process groups inside a living process.

Two facts about torch.distributed shape this module (measured with gloo, torch 2.13):

- Groups that `init_device_mesh` and `new_group` create take the library's default timeout
  (30 minutes for gloo), not the one given to `init_process_group`. A survivor that never
  talks to the dead rank directly waits in a collective on a peer that has itself given up,
  so the mesh's groups, which every step's collectives use, get the collective timeout
  (`bound_collectives`): it bounds how long such a rank takes to see the failure.
- Aborting a gloo group does nothing: a collective blocked on it ends at its timeout only.
  Its connections close once nothing references the group any more (the device mesh, the
  FSDP state and the DTensors of the old model included). The caller aborts the groups
  (which does end NCCL's), drops its model, then `forget`s the groups.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable
from datetime import timedelta

import torch
import torch.distributed as dist

# torch.distributed re-exports its stores from torch._C at run time; its stubs do not say so.
from torch.distributed import ProcessGroup, Store  # type: ignore[attr-defined]

from training.parallel import DistInfo


def local_info() -> DistInfo:
    """This rank's place from the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE) and its device, before any process group: under in-process recovery the
    groups are formed, and formed again, by the recovery (`form`)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK") or 0)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE") or world)
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    return DistInfo(rank, world, local_rank, local_world, device)


def backend_for(device: torch.device) -> str:
    # The CPU backend too on GPUs: object collectives and checkpoint planning run on gloo.
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"


def form(store: Store, info: DistInfo, *, init_timeout_s: float) -> None:
    """Initialises the default group on `store` (one generation's namespace). Until
    `bound_collectives`, collectives wait as long as the rendezvous may: a replacement's
    first model build is part of the state transfer."""
    dist.init_process_group(
        backend=backend_for(info.device),
        store=store,
        rank=info.rank,
        world_size=info.world_size,
        timeout=timedelta(seconds=init_timeout_s),
    )


def bound_collectives(groups: Iterable[ProcessGroup], timeout_s: float) -> None:
    """Each of `groups` gives up on a collective after `timeout_s`."""
    for group in groups:
        group.set_timeout(timedelta(seconds=timeout_s))


def abort(groups: Iterable[ProcessGroup]) -> None:
    """Aborts `groups` (NCCL communicators are aborted, not waited for; a backend without
    abort does nothing), so that peers and this rank's own threads blocked on them see the
    failure."""
    for group in groups:
        try:
            group.abort()
        except RuntimeError:
            continue


def forget() -> None:
    """Destroys every process group of this process and frees them; call once nothing
    refers to them (the model, the mesh and the checkpointer released)."""
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()
