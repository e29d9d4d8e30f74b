"""Forming and abandoning one generation's process groups inside a living process.

Two facts about torch.distributed shape this module (measured with gloo, torch 2.13):

- Groups that `init_device_mesh` creates take the library's default timeout (30 minutes for
  gloo), not the one given to `init_process_group`. A survivor that never talks to the dead
  rank directly waits in a collective on a peer that has itself given up, so every group's
  timeout is set here to the collective timeout: it bounds how long such a rank takes to see
  the failure.
- A gloo group's connections close only when nothing references the group any more: the
  device mesh, the FSDP state and the DTensors of the old model included. `abandon` aborts
  the groups and collects garbage; the caller drops its model first.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch._C._distributed_c10d import Store
from torch.distributed.device_mesh import DeviceMesh


def backend_for(device: torch.device) -> str:
    # The CPU backend too on GPUs: object collectives and checkpoint planning run on gloo.
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"


def form(
    store: Store,
    rank: int,
    world_size: int,
    device: torch.device,
    build_mesh: Callable[[], DeviceMesh],
    *,
    init_timeout_s: float,
) -> DeviceMesh:
    """Initialises the default group on `store` (one generation's namespace) and builds the
    device mesh with `build_mesh`. Until `bound_collectives`, collectives wait as long as
    the rendezvous may: a replacement's first model build is part of the state transfer."""
    dist.init_process_group(
        backend=backend_for(device),
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=init_timeout_s),
    )
    return build_mesh()


def bound_collectives(timeout_s: float) -> None:
    """Every group of this generation gives up on a collective after `timeout_s`."""
    for group in list(c10d._world.pg_map):
        c10d._set_pg_timeout(timedelta(seconds=timeout_s), group)


def abandon() -> None:
    """Aborts every process group of this process (NCCL communicators are aborted, not
    waited for) and frees them, so that peers still blocked on this rank see the failure."""
    if dist.is_initialized():
        try:
            c10d._abort_process_group()
        except (RuntimeError, ValueError):
            # A backend without abort: destroying the groups is what is left.
            if dist.is_initialized():
                dist.destroy_process_group()
    gc.collect()
