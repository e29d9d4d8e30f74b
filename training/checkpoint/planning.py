"""DCP planning for node-local tiers, and the files a load reads.

A node-local tier (``/dev/shm`` or NVMe per node) must hold on every node all that node's
ranks read back, including state the default planner writes once for the whole job. The
save planner here deduplicates within a node only, the writer records where each item went,
and node_metadata derives each node's own DCP metadata from those records. files_read_by
tells which files a rank's load plan reads, for validation before a load.

No process group here: the planners take plans, the functions take paths and dicts.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult

from training.checkpoint.hashing import FileDigest, HashingFileSystem, without_zip_crc32
from training.checkpoint.safe_load import SafeFileSystemReader


def dedup_save_plans(plans: list[SavePlan]) -> list[SavePlan]:
    """Each item held by several of `plans` is kept in one of them only: the plan with the
    least storage assigned so far, in the order the items first appear.

    The same rule as DCP's own deduplication (a private torch module, which the trainer does
    not import), written against the public planner types. The input plans are not modified.
    """
    holders: dict[MetadataIndex, list[int]] = {}
    items: dict[MetadataIndex, Any] = {}
    for i, plan in enumerate(plans):
        for item in plan.items:
            holders.setdefault(item.index, []).append(i)
            items[item.index] = item
    size = [0] * len(plans)
    dropped: list[set[MetadataIndex]] = [set() for _ in plans]
    for index, ranks in holders.items():
        keep = min(ranks, key=lambda r: size[r])
        # Non-tensor items count 1: their storage size is unknown.
        size[keep] += items[index].tensor_storage_size() or 1
        for r in ranks:
            if r != keep:
                dropped[r].add(index)
    return [
        dataclasses.replace(plan, items=[it for it in plan.items if it.index not in dropped[i]])
        for i, plan in enumerate(plans)
    ]


class NodeLocalSavePlanner(DefaultSavePlanner):
    """Save planner for a node-local tier: every node keeps its own copy of replicated items.

    The default planner writes an item held by several ranks (the whole train state, HSDP
    replicas) once, on one rank, which on a node-local tier leaves the other nodes without
    it. Here items are deduplicated within each node only. The metadata is the usual global
    one; the commit then points each node's copy of it at that node's files.
    """

    def __init__(self, node_of_rank: list[int]) -> None:
        super().__init__()
        self.node_of_rank = node_of_rank

    def create_global_plan(self, all_plans: list[SavePlan]) -> tuple[list[SavePlan], Metadata]:
        _, metadata = super().create_global_plan(all_plans)
        plans = list(all_plans)
        for node in sorted(set(self.node_of_rank)):
            ranks = [r for r, n in enumerate(self.node_of_rank) if n == node]
            for r, plan in zip(ranks, dedup_save_plans([all_plans[r] for r in ranks]), strict=True):
                plans[r] = plan
        self.global_plan = plans
        return plans, metadata


class RecordingWriter(FileSystemWriter):
    """Keeps this rank's write results (file and offset of each item it wrote) and the
    digest of every file it wrote (`digests`, by name), hashed while writing (hashing.py),
    with `thread_count` files written in parallel.

    `before_write` runs inside DCP's write step, where an exception is reported to every
    rank the way a real storage error is (fault injection uses it for a full disk)."""

    def __init__(
        self,
        path: Path,
        before_write: Callable[[Path], None] = lambda path: None,
        thread_count: int = 1,
    ) -> None:
        # per_thread_copy_ahead=0: the serial loader. The state is already in host memory
        # (staged), and on a CUDA host DCP's default overlapping loader would synchronize the
        # commit thread's current stream, device 0's default stream, every 10 MB: waiting
        # on rank 0's training kernels and opening a context on GPU 0 from every other rank.
        # (With more than one thread DCP uses the serial loader anyway.)
        super().__init__(
            str(path),
            sync_files=True,
            per_thread_copy_ahead=0,
            thread_count=thread_count,
        )
        self.fs: HashingFileSystem = HashingFileSystem()
        self.dir = path
        self.before_write = before_write
        self.results: list[WriteResult] | None = None

    @property
    def digests(self) -> dict[str, FileDigest]:
        return self.fs.digests

    def write_data(
        self, plan: SavePlan, planner: SavePlanner
    ) -> torch.futures.Future[list[WriteResult]]:
        self.before_write(self.dir)
        # One hashing thread beside each write thread, for this checkpoint only.
        with (
            ThreadPoolExecutor(self.thread_count, thread_name_prefix="hptrain-ckpt-hash") as pool,
            without_zip_crc32(),
        ):
            self.fs.pool = pool
            try:
                fut = super().write_data(plan, planner)
            finally:
                self.fs.pool = None
        try:
            # The file system writer returns a completed future.
            self.results = fut.wait()
        except Exception:  # noqa: BLE001 - DCP reports the failure from the same future
            self.results = None
            return fut
        # A write thread other than DCP's own that fails only prints its traceback and
        # leaves its items out of the results: a checkpoint without them must not commit.
        written = {r.index for r in self.results}
        lost = [item.index.fqn for item in plan.items if item.index not in written]
        if lost:
            self.results = None
            raise OSError(f"{len(lost)} items not written ({lost[0]}, ...): {self.fs.failed}")
        return fut


def node_metadata(metadata: Metadata, results: list[Any]) -> bytes:
    """DCP metadata for one node: each item read from the copy a rank of that node wrote."""
    storage = dict(metadata.storage_data)
    for per_rank in results:
        storage.update({wr.index: wr.storage_data for wr in per_rank})
    return pickle.dumps(dataclasses.replace(metadata, storage_data=storage))


def files_read_by(path: Path, state_dict: dict[str, Any]) -> set[str]:
    """Files a DCP load of `state_dict` from `path` reads, from its load plan and metadata.

    Works for any world size: the plan of a resharding load names the shards it reads from.
    Raises when the metadata does not load or does not cover `state_dict` (the load would
    fail the same way). Plans only: `state_dict` is not modified.
    """
    metadata = SafeFileSystemReader(str(path)).read_metadata()
    planner = DefaultLoadPlanner()
    planner.set_up_planner(state_dict, metadata, is_coordinator=False)
    plan = planner.create_local_plan()
    storage = metadata.storage_data
    return {storage[item.storage_index].relative_path for item in plan.items}
