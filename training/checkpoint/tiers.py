"""Checkpoint tiers: where checkpoints of one kind go and how their data is written and read.

A tier has a root directory (where committed checkpoints, or their markers, are listed), an
interval and a keep count. DirectoryTier writes DCP shards into the root itself (local disk,
``/dev/shm``, FSx); ManagedFastTier hands the data to HyperPod managed tiered checkpointing
and keeps only a marker directory with the manifest in the root, so resume selection is the
same for both. The manager (manager.py) owns schedule, commit and resume.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.planner import SavePlanner

from training.checkpoint import managed
from training.checkpoint.format import DURABLE, FAST, CheckpointRef
from training.checkpoint.planning import NodeLocalSavePlanner, RecordingWriter
from training.config import CheckpointConfig, checkpoint_roots


class Tier(ABC):
    # None: the data are files in the checkpoint directory, listed in its manifest.
    backend: str | None = None

    def __init__(self, name: str, root: Path, interval: int, keep: int) -> None:
        self.name, self.root, self.interval, self.keep = name, root, interval, keep
        # Set by the manager at start: a node's first rank cannot see rank 0's probe file.
        self.node_local = False

    def due(self, step: int) -> bool:
        return self.interval > 0 and step % self.interval == 0

    @abstractmethod
    def writer(self, step: int, tmp: Path, before_write: Callable[[Path], None]) -> Any:
        """The DCP StorageWriter of checkpoint `step`, whose directory is being built in `tmp`."""

    @abstractmethod
    def reader(self, ref: CheckpointRef) -> Any:
        """The DCP StorageReader of a committed checkpoint of this tier."""

    def planner(self, node_of_rank: list[int]) -> SavePlanner | None:
        return None


class DirectoryTier(Tier):
    """DCP shards in the tier's directory; a node-local one keeps a full copy per node."""

    def writer(self, step: int, tmp: Path, before_write: Callable[[Path], None]) -> Any:
        return RecordingWriter(tmp, before_write)

    def reader(self, ref: CheckpointRef) -> Any:
        return FileSystemReader(str(ref.path))

    def planner(self, node_of_rank: list[int]) -> SavePlanner | None:
        return NodeLocalSavePlanner(node_of_rank) if self.node_local else None


class ManagedFastTier(Tier):
    """Data in HyperPod managed tiered checkpointing; a marker directory per step here."""

    backend = managed.BACKEND_NAME

    def __init__(self, root: Path, interval: int, keep: int, client: managed.ManagedTier) -> None:
        super().__init__(FAST, root, interval, keep)
        self.client = client

    def writer(self, step: int, tmp: Path, before_write: Callable[[Path], None]) -> Any:
        return self.client.writer(step)

    def reader(self, ref: CheckpointRef) -> Any:
        return self.client.reader(ref.step)


def default_namespace(out: Path) -> str:
    """A managed-tier namespace that is the same on every restart of a run directory."""
    return "hptrain-" + hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:16]


def open_tiers(cfg: CheckpointConfig, out: Path, world_size: int) -> dict[str, Tier]:
    roots = checkpoint_roots(cfg, out)
    client = managed.open_if_enabled(
        cfg.fast_backend,
        world_size=world_size,
        namespace=cfg.managed_namespace or default_namespace(out),
        s3_path=cfg.managed_s3_path,
        s3_interval=cfg.s3_interval(),
    )
    fast: Tier = (
        ManagedFastTier(roots[FAST], cfg.fast_interval, cfg.fast_keep, client)
        if client is not None
        else DirectoryTier(FAST, roots[FAST], cfg.fast_interval, cfg.fast_keep)
    )
    durable = DirectoryTier(DURABLE, roots[DURABLE], cfg.durable_interval, cfg.durable_keep)
    return {FAST: fast, DURABLE: durable}
