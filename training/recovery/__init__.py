"""In-process recovery from a peer replica.

When one rank's process dies, the others keep their processes (no new interpreter, no new
CUDA context, no re-import), abandon their process groups, meet the replacement rank in a
new generation of the job's store, rebuild the device mesh, and the replacement receives its
shard of model and optimizer state from an intact replica of that shard (HSDP,
`parallel.dp_replicate` >= 2) over the network; no checkpoint is read. When no replica of a
shard is intact, or the replacement does not arrive in time, the ranks exit with
FALLBACK_EXIT_CODE and the job restarts from a checkpoint tier, as without this package.

Why not a library (checked 2026-11 on CPU, gloo, torch 2.13):

- torchft 0.2.0 installs and heals a replica from a peer here, but its unit of failure is a
  whole replica group: each group is its own torch.distributed world, restarted as a whole
  when one of its ranks dies (so that rank's shard peers lose their processes too), joined
  through a separate Rust lighthouse service, with the cross-replica reduction done by its
  own manager. Adopting it means re-plumbing the trainer's one-world HSDP mesh, its DCP
  checkpoints and its data sharding around per-replica worlds; its protocol (a quorum per
  generation, a commit vote before the optimizer step, healing from a peer) is what this
  package does on the trainer's own mesh.
- nvidia-resiliency-ext's in-process Wrapper needs NCCL (>= 2.26.2) and handles a dead
  process by dropping its rank for a warm spare, not by a replacement receiving state; it
  cannot be tested on CPU.
- hyperpod-elastic-agent (`--inprocess-restart`) needs torch < 2.12 and its state transfer
  is HyperPod's checkpointless training for NeMo.

Modules: coordination (store agreements), world (process groups), transfer (peer state),
driver (the step agreement and the recovery, for training/trainer.py), record (what each
recovery cost). training/launch.py hosts the store and replaces a lost rank.
"""

from __future__ import annotations

from typing import Final

# The ranks exit with this code when in-process recovery gives way to a checkpoint tier.
FALLBACK_EXIT_CODE: Final = 6
# Environment a rank gets from the launcher: the store's host:port and its role (REPLACEMENT
# for a process started in place of a lost rank).
ENV_STORE: Final = "HPTRAIN_RECOVERY_STORE"
ENV_ROLE: Final = "HPTRAIN_RECOVERY_ROLE"
REPLACEMENT: Final = "replacement"
