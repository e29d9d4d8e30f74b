"""The storage a checkpoint tier can use, registered by name (TierConfig.storage).

A tier (training.config.TierConfig: name, directory, interval, keep, storage) has a root
directory where its committed checkpoints, or their markers, are listed. DirectoryTier
("local") writes DCP shards into the root itself (local disk, ``/dev/shm``, FSx);
ManagedStorageTier ("managed") hands the data to HyperPod managed tiered checkpointing and
keeps only a marker directory with the manifest in the root, so resume selection is the same
for both. A new kind of storage is one more class registered with @storage. The manager
(manager.py) owns schedule, commit and resume.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from torch.distributed.checkpoint.planner import SavePlanner

from training.checkpoint import managed
from training.checkpoint.config import (
    AUTO_STORAGE,
    LOCAL_STORAGE,
    MANAGED_STORAGE,
    CheckpointConfig,
    TierConfig,
    checkpoint_roots,
    tier_key,
)
from training.checkpoint.format import CheckpointRef
from training.checkpoint.hashing import write_threads
from training.checkpoint.planning import NodeLocalSavePlanner, RecordingWriter
from training.checkpoint.safe_load import SafeFileSystemReader
from training.config_parsing import ConfigError


class Tier(ABC):
    # None: the data are files in the checkpoint directory, listed in its manifest.
    backend: str | None = None

    def __init__(self, spec: TierConfig, root: Path) -> None:
        self.name, self.keep, self.root = spec.name, spec.keep, root
        # Set by the manager at start: a node's first rank cannot see rank 0's probe file.
        self.node_local = False

    @classmethod
    def open(
        cls, spec: TierConfig, root: Path, cfg: CheckpointConfig, out: Path, world_size: int
    ) -> Tier:
        """The tier of `spec` in a job of `world_size` ranks writing to run directory `out`."""
        return cls(spec, root)

    @abstractmethod
    def writer(self, step: int, tmp: Path, before_write: Callable[[Path], None]) -> Any:
        """The DCP StorageWriter of checkpoint `step`, whose directory is being built in `tmp`."""

    @abstractmethod
    def reader(self, ref: CheckpointRef) -> Any:
        """The DCP StorageReader of a committed checkpoint of this tier."""

    def planner(self, node_of_rank: list[int]) -> SavePlanner | None:
        return None


T = TypeVar("T", bound=type[Tier])
# Storage kind (TierConfig.storage) -> the class of its tiers.
STORAGE: dict[str, type[Tier]] = {}


def storage(kind: str) -> Callable[[T], T]:
    """Registers a Tier class as the storage kind `kind`."""

    def register(cls: T) -> T:
        STORAGE[kind] = cls
        return cls

    return register


@storage(LOCAL_STORAGE)
class DirectoryTier(Tier):
    """DCP shards in the tier's directory; a node-local one keeps a full copy per node."""

    def __init__(self, spec: TierConfig, root: Path, write_threads: int = 1) -> None:
        super().__init__(spec, root)
        self.write_threads = write_threads

    @classmethod
    def open(
        cls, spec: TierConfig, root: Path, cfg: CheckpointConfig, out: Path, world_size: int
    ) -> Tier:
        return cls(spec, root, cfg.write_threads or write_threads())

    def writer(self, step: int, tmp: Path, before_write: Callable[[Path], None]) -> Any:
        return RecordingWriter(tmp, before_write, self.write_threads)

    def reader(self, ref: CheckpointRef) -> Any:
        return SafeFileSystemReader(str(ref.path))

    def planner(self, node_of_rank: list[int]) -> SavePlanner | None:
        return NodeLocalSavePlanner(node_of_rank) if self.node_local else None


@storage(MANAGED_STORAGE)
class ManagedStorageTier(Tier):
    """Data in HyperPod managed tiered checkpointing; a marker directory per step here."""

    backend = managed.BACKEND_NAME

    def __init__(self, spec: TierConfig, root: Path, client: managed.ManagedTier) -> None:
        super().__init__(spec, root)
        self.client = client

    @classmethod
    def open(
        cls, spec: TierConfig, root: Path, cfg: CheckpointConfig, out: Path, world_size: int
    ) -> Tier:
        if not managed.AVAILABLE:
            raise RuntimeError(
                f"{tier_key(spec.name, 'storage')}={MANAGED_STORAGE} but amzn-sagemaker-checkpointing is "
                "not installed"
            )
        client = managed.ManagedTier(
            world_size,
            cfg.managed_namespace or default_namespace(out),
            cfg.managed_s3_path,
            cfg.s3_interval(),
        )
        return cls(spec, root, client)

    def writer(self, step: int, tmp: Path, before_write: Callable[[Path], None]) -> Any:
        return self.client.writer(step)

    def reader(self, ref: CheckpointRef) -> Any:
        return self.client.reader(ref.step)


def default_namespace(out: Path) -> str:
    """A managed-tier namespace that is the same on every restart of a run directory."""
    return "hptrain-" + hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:16]


def storage_kind(spec: TierConfig) -> str:
    """The registered storage kind `spec` uses ("auto" resolved)."""
    if spec.storage == AUTO_STORAGE:
        return MANAGED_STORAGE if managed.AVAILABLE else LOCAL_STORAGE
    if spec.storage not in STORAGE:
        kinds = ", ".join((AUTO_STORAGE, *STORAGE))
        raise ConfigError(
            f"{tier_key(spec.name, 'storage')} must be one of {kinds}, got {spec.storage!r}"
        )
    return spec.storage


def open_tiers(cfg: CheckpointConfig, out: Path, world_size: int) -> dict[str, Tier]:
    """Every tier of `cfg`, in its order."""
    roots = checkpoint_roots(cfg, out)
    tiers = {
        spec.name: STORAGE[storage_kind(spec)].open(spec, roots[spec.name], cfg, out, world_size)
        for spec in cfg.tiers
    }
    backends = [t.backend for t in tiers.values() if t.backend is not None]
    if len(set(backends)) < len(backends):
        # One namespace per job: two tiers in it would list each other's checkpoints.
        raise ConfigError("at most one checkpoint tier can use managed storage")
    return tiers
