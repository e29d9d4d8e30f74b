"""Tiered, atomically committed DCP checkpoints.

Layout of one tier root::

    step_00000020.tmp-<nonce>/   being written (never loaded; removed at the next start)
    step_00000020/               committed: DCP shards + .metadata + manifest.json + COMMITTED

Commit protocol: every rank writes its shards into the tmp directory (DCP), hashes the files
it wrote, and the hashes are gathered to rank 0, which writes manifest.json, the COMMITTED
marker and renames the directory. The rename is the atomic commit point on a POSIX
filesystem; the marker covers stores without atomic rename. When the tier is node-local
(one directory per node), rank 0 broadcasts the manifest and DCP metadata and the first rank
of every other node commits its own copy the same way.

Loading validates (marker, manifest, DCP metadata, sizes and sha256 of the files each rank
wrote), agrees across ranks on the newest step valid everywhere and across both tiers, and
falls back to older checkpoints if a load still fails.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import re
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint._dedup_save_plans import dedup_save_plans
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import (
    AsyncCheckpointerType,
    AsyncSaveResponse,
)
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.checkpoint.storage import WriteResult

from training import fileio, managed_tier
from training.config import CheckpointConfig
from training.metrics import log_checkpoint

FAST, DURABLE = "fast", "durable"
TIERS = (FAST, DURABLE)
# For the same step the fast tier is preferred: it is quicker to read back.
TIER_PRIORITY = {FAST: 0, DURABLE: 1}
MANIFEST = "manifest.json"
COMMITTED = "COMMITTED"
DCP_METADATA = ".metadata"
MANIFEST_VERSION = 1
_STEP_RE = re.compile(r"^step_(\d{8})$")
_TMP_RE = re.compile(r"^step_\d{8}\.tmp-[0-9A-Za-z]+$")
_TRASH_PREFIX = ".trash-"
_SHARD_RE = re.compile(r"^__(\d+)_\d+\.distcp$")


class IncompatibleCheckpointError(RuntimeError):
    """An intact checkpoint that belongs to a different job configuration."""


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


@dataclass(frozen=True)
class CheckpointRef:
    tier: str
    step: int
    path: Path


def warn(msg: str) -> None:
    sys.stderr.write(f"hptrain: {msg}\n")
    sys.stderr.flush()


def _first_line(e: BaseException) -> str:
    """DCP errors embed every rank's traceback; the log needs the cause only."""
    text = str(e).strip().splitlines()
    cause = next((ln for ln in reversed(text) if ln and not ln.startswith(" ")), type(e).__name__)
    return f"{type(e).__name__}: {cause}"


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def list_committed(root: Path, tier: str) -> list[CheckpointRef]:
    """Committed checkpoints of a tier, newest first (by name and marker only, no validation)."""
    if not root.is_dir():
        return []
    refs = []
    for entry in root.iterdir():
        m = _STEP_RE.match(entry.name)
        if m and entry.is_dir() and (entry / COMMITTED).is_file():
            refs.append(CheckpointRef(tier, int(m.group(1)), entry))
    return sorted(refs, key=lambda r: r.step, reverse=True)


def files_written_by(ckpt_dir: Path, rank: int) -> dict[str, dict[str, Any]]:
    """Manifest entries for the files `rank` wrote: its DCP shards, plus .metadata for rank 0."""
    entries: dict[str, dict[str, Any]] = {}
    for p in sorted(ckpt_dir.iterdir()):
        m = _SHARD_RE.match(p.name)
        owner = int(m.group(1)) if m else (0 if p.name == DCP_METADATA else None)
        if owner == rank:
            entries[p.name] = {"rank": rank, "size": p.stat().st_size, "sha256": sha256_file(p)}
    return entries


def build_manifest(
    step: int, tier: str, world_size: int, entries: list[dict[str, dict[str, Any]]]
) -> dict[str, Any]:
    files: dict[str, dict[str, Any]] = {}
    for per_rank in entries:
        files.update(per_rank)
    return {
        "version": MANIFEST_VERSION,
        "step": step,
        "tier": tier,
        "world_size": world_size,
        "created_unix": time.time(),
        "files": files,
    }


def commit_dir(tmp_dir: Path, final_dir: Path, manifest: dict[str, Any]) -> None:
    """Manifest, marker, then the rename that makes the checkpoint visible."""
    fileio.write_json_atomic(tmp_dir / MANIFEST, manifest, indent=1, sort_keys=True)
    fileio.write_bytes_durably(tmp_dir / COMMITTED, f"{manifest['step']}\n".encode())
    fileio.fsync_dir(tmp_dir)
    if final_dir.exists():
        # A checkpoint of the same step from an earlier attempt (e.g. a restart that redid
        # this step): replace it, retiring the old one first so no mix of both is visible.
        remove_checkpoint(final_dir)
    os.rename(tmp_dir, final_dir)
    fileio.fsync_dir(final_dir.parent)


def remove_checkpoint(path: Path) -> None:
    """Drops the marker first so a half-deleted directory is never taken for a checkpoint."""
    try:
        (path / COMMITTED).unlink(missing_ok=True)
        trash = path.with_name(f"{_TRASH_PREFIX}{path.name}-{secrets.token_hex(4)}")
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def prune(root: Path, tier: str, keep: int) -> list[int]:
    """Keep-last-k: removes all but the `keep` newest committed checkpoints; returns their steps."""
    removed: list[int] = []
    for ref in list_committed(root, tier)[keep:]:
        remove_checkpoint(ref.path)
        removed.append(ref.step)
    return removed


def clean_stale(root: Path) -> list[str]:
    """Removes uncommitted tmp and trash directories left by a killed attempt."""
    removed: list[str] = []
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        if entry.is_dir() and (_TMP_RE.match(entry.name) or entry.name.startswith(_TRASH_PREFIX)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def files_read_by(path: Path, state_dict: dict[str, Any]) -> set[str]:
    """Files a DCP load of `state_dict` from `path` reads, from its load plan and metadata.

    Raises when the metadata does not load or does not cover `state_dict` (the load would
    fail the same way).
    """
    metadata = FileSystemReader(str(path)).read_metadata()
    planner = DefaultLoadPlanner()
    planner.set_up_planner(state_dict, metadata, is_coordinator=False)
    plan = planner.create_local_plan()
    storage = metadata.storage_data
    return {storage[item.storage_index].relative_path for item in plan.items}


def validate_checkpoint(
    path: Path, rank: int, verify_checksums: bool = True, reads: set[str] | None = None
) -> tuple[bool, str]:
    """Checks a committed checkpoint from the point of view of one rank.

    Each rank verifies the files it wrote, the DCP metadata and, given `reads` (the files
    its load plan reads, see files_read_by), every file it will read, which includes
    replicated state another rank of its node wrote. Other nodes' files are not needed, so
    this also works for node-local tiers where a rank cannot see them.
    """
    m = _STEP_RE.match(path.name)
    if not m:
        return False, "not a committed checkpoint directory name"
    if not (path / COMMITTED).is_file():
        return False, "COMMITTED marker missing"
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        return False, f"manifest unreadable: {e}"
    if manifest.get("version") != MANIFEST_VERSION or manifest.get("step") != int(m.group(1)):
        return False, "manifest does not match the directory"
    if manifest.get("backend") == managed_tier.BACKEND_NAME:
        return True, "ok (managed tier; the library validates its own data)"
    files: dict[str, dict[str, Any]] = manifest.get("files", {})
    if DCP_METADATA not in files:
        return False, "manifest lists no DCP metadata"
    mine = {n: e for n, e in files.items() if e.get("rank") == rank or n == DCP_METADATA}
    if rank >= int(manifest.get("world_size", 0)):
        return False, f"rank {rank} did not exist when this checkpoint was written"
    if not any(_SHARD_RE.match(n) for n in mine):
        return False, f"manifest lists no shard written by rank {rank}"
    for name in sorted(reads or ()):
        if name not in files:
            return False, f"{name} (read by rank {rank}) is not in the manifest"
        mine[name] = files[name]
    for name, entry in mine.items():
        p = path / name
        try:
            size = p.stat().st_size
        except FileNotFoundError:
            return False, f"{name} missing"
        if size != entry["size"]:
            return False, f"{name} size {size} != manifest {entry['size']}"
        if verify_checksums and sha256_file(p) != entry["sha256"]:
            return False, f"{name} checksum mismatch"
    try:
        FileSystemReader(str(path)).read_metadata()
    except Exception as e:  # noqa: BLE001 - any unpickling failure means "not loadable"
        return False, f"DCP metadata does not load: {e}"
    return True, "ok"


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


class _RecordingWriter(FileSystemWriter):
    """Keeps this rank's write results (file and offset of each item it wrote)."""

    results: list[WriteResult] | None = None

    def write_data(
        self, plan: SavePlan, planner: SavePlanner
    ) -> torch.futures.Future[list[WriteResult]]:
        fut = super().write_data(plan, planner)
        try:
            # The file system writer returns a completed future.
            self.results = fut.wait()
        except Exception:  # noqa: BLE001 - DCP reports the failure from the same future
            self.results = None
        return fut


def node_metadata(metadata: Metadata, results: list[Any]) -> bytes:
    """DCP metadata for one node: each item read from the copy a rank of that node wrote."""
    storage = dict(metadata.storage_data)
    for per_rank in results:
        storage.update({wr.index: wr.storage_data for wr in per_rank})
    return pickle.dumps(dataclasses.replace(metadata, storage_data=storage))


def candidate_order(per_rank_listed: list[list[tuple[int, str]]]) -> list[tuple[int, str]]:
    """Resume candidates: every (step, tier) any rank lists, newest step first and, for the
    same step, the fast tier first. Each is then used only if every rank validates it."""
    union = {(int(step), str(tier)) for listed in per_rank_listed for step, tier in listed}
    return sorted(union, key=lambda c: (-c[0], TIER_PRIORITY[c[1]]))


@dataclass
class _InFlight:
    step: int
    tier: str
    staging: Future[Any] | None
    done: Future[None]
    blocking_s: float
    staged: bool = False
    started_at: float = 0.0
    staged_at: float | None = None


class CheckpointManager:
    """Owns both tiers: when to save, async save + commit, keep-last-k and resume."""

    def __init__(
        self,
        cfg: CheckpointConfig,
        out: Path,
        app_state: dict[str, Stateful],
        *,
        rank: int,
        world_size: int,
        local_rank: int,
        device: torch.device,
        on_checkpoint_written: Callable[[int], None] = lambda step: None,
        on_committed: Callable[[int, str, float], None] = lambda step, tier, blocking: None,
    ) -> None:
        self.cfg = cfg
        self.app_state = app_state
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.roots = {
            FAST: Path(cfg.fast_dir) if cfg.fast_dir else out / "ckpt" / FAST,
            DURABLE: Path(cfg.durable_dir) if cfg.durable_dir else out / "ckpt" / DURABLE,
        }
        self.intervals = {FAST: cfg.fast_interval, DURABLE: cfg.durable_interval}
        self.keep = {FAST: cfg.fast_keep, DURABLE: cfg.durable_keep}
        self.on_checkpoint_written = on_checkpoint_written
        self.on_committed = on_committed
        self.blocking_total_s = 0.0
        self.committed = 0
        self.last_committed_step: dict[str, int] = {}
        # Duration of the last background staging copy (benchmarks report it).
        self.last_staging_s: float | None = None
        # Checkpoint traffic (DCP planning, commit) runs in a background thread; a separate
        # gloo group keeps it from interleaving with the training collectives.
        self.pg = dist.new_group(backend="gloo")
        nonce: list[Any] = [secrets.token_hex(4) if rank == 0 else None]
        dist.broadcast_object_list(nonce, src=0)
        self.nonce: str = nonce[0]
        self._inflight: _InFlight | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hptrain-ckpt-commit")
        # One stager for the whole run: it caches its CPU (pinned on GPU hosts) buffers, so
        # every checkpoint after the first reuses them instead of allocating again.
        self._stager: DefaultStager | None = None
        if cfg.async_mode == "thread":
            cuda = device.type == "cuda"
            self._stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=cuda,
                    use_shared_memory=False,
                    use_async_staging=True,
                    use_non_blocking_copy=cuda,
                )
            )
        self.managed = managed_tier.open_if_enabled(cfg.fast_backend, world_size=world_size)
        if self.rank == 0 or self.local_rank == 0:
            for root in self.roots.values():
                root.mkdir(parents=True, exist_ok=True)
                clean_stale(root)
        dist.barrier()
        # Ranks are numbered node by node (torchrun, hyperpodrun): a node is named by the
        # rank of its first local rank.
        self.node = rank - local_rank
        node_of_rank: list[Any] = [None] * world_size
        dist.all_gather_object(node_of_rank, self.node)
        self.node_of_rank: list[int] = node_of_rank
        self.node_local = self._detect_node_local()

    def _detect_node_local(self) -> dict[str, bool]:
        """A tier is node-local when some node's first rank cannot see a file rank 0 put there."""
        probe = f".probe-{self.nonce}"
        if self.rank == 0:
            for root in self.roots.values():
                (root / probe).touch()
        dist.barrier()
        seen = (
            {tier: (root / probe).exists() for tier, root in self.roots.items()}
            if self.local_rank == 0
            else None
        )
        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, seen)
        dist.barrier()
        if self.rank == 0:
            for root in self.roots.values():
                (root / probe).unlink(missing_ok=True)
        return {tier: not all(s[tier] for s in everyone if s is not None) for tier in self.roots}

    # ---- schedule -------------------------------------------------------------------------

    def tier_due(self, step: int) -> str | None:
        """Tier to write after `step`; when both are due the durable write covers the fast one."""
        for tier in (DURABLE, FAST):
            every = self.intervals[tier]
            if every > 0 and step % every == 0:
                return tier
        return None

    def has_committed(self, step: int) -> bool:
        return step in self.last_committed_step.values()

    # ---- save -------------------------------------------------------------------------------

    def save(self, step: int, tier: str, *, sync: bool = False) -> None:
        """Starts (or, with sync=True or async_mode=sync, completes) a checkpoint of `step`.

        Blocking time is measured once per call: a wait for the previous checkpoint counts
        for that one (wait()), the rest of this call for the new one."""
        self.wait()  # one checkpoint in flight at a time: the staging buffers are reused
        t0 = time.perf_counter()
        sync = sync or self._stager is None
        final = self.roots[tier] / step_dir_name(step)
        tmp = self.roots[tier] / f"{step_dir_name(step)}.tmp-{self.nonce}"
        writer = self._writer(tier, step, tmp)
        managed = tier == FAST and self.managed is not None
        planner = (
            NodeLocalSavePlanner(self.node_of_rank)
            if self.node_local[tier] and not managed
            else None
        )
        if sync:
            try:
                dcp_save(
                    self.app_state, storage_writer=writer, planner=planner, process_group=self.pg
                )
                self._commit(step, tier, tmp, final, writer)
                status = "committed"
            except (Exception, CheckpointException) as e:  # noqa: BLE001 - reported, training goes on
                warn(f"checkpoint step {step} tier {tier} failed: {_first_line(e)}")
                status = "failed"
            blocking = time.perf_counter() - t0
            self.blocking_total_s += blocking
            if self.rank == 0:
                log_checkpoint(step, tier, blocking, "started")
                log_checkpoint(step, tier, blocking, status)
            if status == "committed":
                self._note_committed(step, tier, blocking)
            return
        response = dcp_async_save(
            self.app_state,
            storage_writer=writer,
            planner=planner,
            process_group=self.pg,
            async_checkpointer_type=AsyncCheckpointerType.THREAD,
            async_stager=self._stager,
        )
        if isinstance(response, AsyncSaveResponse):
            staging, upload = response.staging_completion, response.upload_completion
        else:
            staging, upload = None, response
        done = self._executor.submit(self._finish_async, step, tier, tmp, final, upload, writer)
        blocking = time.perf_counter() - t0
        inf = _InFlight(step, tier, staging, done, blocking, staged=staging is None, started_at=t0)
        if staging is not None:
            # Remembered for reporting how long the background copy took.
            staging.add_done_callback(lambda _f: setattr(inf, "staged_at", time.perf_counter()))
        self._inflight = inf
        self.blocking_total_s += blocking
        if self.rank == 0:
            log_checkpoint(step, tier, blocking, "started")

    def _writer(self, tier: str, step: int, tmp: Path) -> Any:
        if tier == FAST and self.managed is not None:
            return self.managed.writer(step)
        return _RecordingWriter(str(tmp), sync_files=True)

    def wait_for_staging(self) -> float:
        """Blocks until the in-flight checkpoint has copied the state; call before the
        optimizer mutates parameters. Returns the seconds waited (counted as blocking)."""
        inf = self._inflight
        if inf is None or inf.staged:
            return 0.0
        t0 = time.perf_counter()
        self._await_staging(inf)
        waited = time.perf_counter() - t0
        inf.blocking_s += waited
        self.blocking_total_s += waited
        return waited

    @staticmethod
    def _await_staging(inf: _InFlight) -> None:
        if inf.staged or inf.staging is None:
            return
        try:
            inf.staging.result()
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - the upload reports it too
            warn(f"checkpoint step {inf.step} staging failed: {_first_line(e)}")
        inf.staged = True

    def poll(self) -> None:
        """Reports a finished background checkpoint without waiting for a running one."""
        inf = self._inflight
        if inf is not None and inf.done.done():
            self._complete_inflight(inf)

    def wait(self) -> float:
        """Waits for the in-flight checkpoint (if any) to be committed or to fail; the time
        waited is blocking time of that checkpoint. Returns it."""
        inf = self._inflight
        if inf is None:
            return 0.0
        t0 = time.perf_counter()
        self._await_staging(inf)
        futures_wait([inf.done])
        waited = time.perf_counter() - t0
        inf.blocking_s += waited
        self.blocking_total_s += waited
        self._complete_inflight(inf)
        return waited

    def _complete_inflight(self, inf: _InFlight) -> None:
        self._inflight = None
        if inf.staged_at is not None:
            self.last_staging_s = inf.staged_at - inf.started_at
        try:
            inf.done.result()
            status = "committed"
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - training goes on
            warn(f"checkpoint step {inf.step} tier {inf.tier} failed: {_first_line(e)}")
            status = "failed"
        if self.rank == 0:
            log_checkpoint(inf.step, inf.tier, inf.blocking_s, status)
        if status == "committed":
            self._note_committed(inf.step, inf.tier, inf.blocking_s)

    def _note_committed(self, step: int, tier: str, blocking: float) -> None:
        self.committed += 1
        self.last_committed_step[tier] = step
        self.on_committed(step, tier, blocking)

    def _finish_async(
        self, step: int, tier: str, tmp: Path, final: Path, upload: Future[Any], writer: Any
    ) -> None:
        upload.result()
        self._commit(step, tier, tmp, final, writer)

    def _commit(self, step: int, tier: str, tmp: Path, final: Path, writer: Any) -> None:
        """Runs on every rank after its shards are written (in the background thread for
        async saves); collectives use the checkpoint group only."""
        self.on_checkpoint_written(step)
        if tier == FAST and self.managed is not None:
            self._commit_managed(step, final)
            return
        node_local = self.node_local[tier]
        results = getattr(writer, "results", None) if node_local else None
        try:
            entries: dict[str, Any] = files_written_by(tmp, self.rank)
            if node_local and results is None:
                raise RuntimeError("write results were not recorded")
        except (OSError, RuntimeError) as e:
            entries = {"__error__": f"rank {self.rank}: {e!r}"}
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object((entries, results), gathered, dst=0, group=self.pg)
        # Rank 0 always reaches the broadcast, success or not, so no rank is left waiting.
        payload: list[Any] = [None, None]
        if gathered is not None:  # rank 0
            try:
                errors = [g["__error__"] for g, _ in gathered if "__error__" in g]
                if errors:
                    raise RuntimeError("; ".join(errors))
                manifest = build_manifest(step, tier, self.world_size, [g for g, _ in gathered])
                per_node: dict[int, tuple[dict[str, Any], bytes]] = {}
                if node_local:
                    # Node-local tier: each node reads its own copy of replicated items, so
                    # each node gets metadata (and a manifest entry for it) of its own.
                    metadata = FileSystemReader(str(tmp)).read_metadata()
                    for node in sorted(set(self.node_of_rank)):
                        ranks = [r for r, n in enumerate(self.node_of_rank) if n == node]
                        meta = node_metadata(metadata, [gathered[r][1] for r in ranks])
                        m = json.loads(json.dumps(manifest))
                        m["files"][DCP_METADATA] = {
                            "rank": node,
                            "size": len(meta),
                            "sha256": hashlib.sha256(meta).hexdigest(),
                        }
                        per_node[node] = (m, meta)
                    fileio.write_bytes_durably(tmp / DCP_METADATA, per_node[self.node][1])
                    manifest = per_node[self.node][0]
                commit_dir(tmp, final, manifest)
                prune(self.roots[tier], tier, self.keep[tier])
                payload = [per_node, None]
            except (Exception, CheckpointException) as e:  # noqa: BLE001 - sent to every rank below
                payload = [None, f"commit failed on rank 0: {e!r}"]
        dist.broadcast_object_list(payload, src=0, group=self.pg)
        if payload[0] is None:
            raise RuntimeError(payload[1])
        if node_local and self.rank != 0 and self.local_rank == 0:
            # This node holds its own shards and copies: commit its copy too.
            manifest, meta = payload[0][self.node]
            fileio.write_bytes_durably(tmp / DCP_METADATA, meta)
            commit_dir(tmp, final, manifest)
            prune(self.roots[tier], tier, self.keep[tier])
        dist.barrier(group=self.pg)

    def _commit_managed(self, step: int, final: Path) -> None:
        # The managed library replicates and persists on its own; a marker directory with
        # a manifest keeps resume selection identical for both backends.
        dist.barrier(group=self.pg)
        # Every node must see the marker: on a node-local root each node's first rank
        # writes its own.
        if self.rank == 0 or (self.node_local[FAST] and self.local_rank == 0):
            tmp = final.with_name(f"{final.name}.tmp-{self.nonce}")
            tmp.mkdir(parents=True, exist_ok=True)
            manifest = build_manifest(step, FAST, self.world_size, [])
            manifest["backend"] = managed_tier.BACKEND_NAME
            commit_dir(tmp, final, manifest)
            prune(self.roots[FAST], FAST, self.keep[FAST])
        dist.barrier(group=self.pg)

    # ---- resume -----------------------------------------------------------------------------

    def resume(self) -> CheckpointRef | None:
        """Loads the newest checkpoint that every rank validates, across both tiers.

        Candidates are the union of what any rank lists, newest first; each is validated on
        every rank (its own shards) and used only if all ranks agree, so typically a single
        checkpoint is hashed. A load that still fails falls back to the next candidate.
        """
        listed = [
            (ref.step, tier)
            for tier, root in self.roots.items()
            for ref in list_committed(root, tier)
        ]
        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, listed)
        validated_but_unloadable: list[str] = []
        # The state to load (a collective on every rank), for the files each load plan reads.
        wanted = (
            {
                key: obj.state_dict() if isinstance(obj, Stateful) else obj
                for key, obj in self.app_state.items()
            }
            if any(everyone)
            else {}
        )
        for step, tier in candidate_order(everyone):
            path = self.roots[tier] / step_dir_name(step)
            try:
                reads: set[str] | None = files_read_by(path, wanted)
            except Exception:  # noqa: BLE001 - validation (or the load) reports the cause
                reads = None
            ok, why = validate_checkpoint(path, self.rank, self.cfg.verify_checksums, reads)
            if not ok:
                warn(f"rank {self.rank}: {tier} checkpoint step {step} rejected: {why}")
            verdicts: list[Any] = [None] * self.world_size
            dist.all_gather_object(verdicts, ok)
            if not all(verdicts):
                continue
            try:
                if tier == FAST and self.managed is not None and managed_tier.is_managed(path):
                    dcp_load(self.app_state, storage_reader=self.managed.reader(step))
                else:
                    dcp_load(self.app_state, checkpoint_id=str(path))
            except IncompatibleCheckpointError:
                raise
            except (Exception, CheckpointException) as e:  # noqa: BLE001 - same error on every rank
                warn(
                    f"rank {self.rank}: loading {tier} checkpoint step {step} failed, falling back: {_first_line(e)}"
                )
                validated_but_unloadable.append(f"{tier}/{step_dir_name(step)}")
                continue
            self.last_committed_step[tier] = step
            return CheckpointRef(tier, step, path)
        if validated_but_unloadable:
            # Intact checkpoints that do not fit this job (changed model shape, ...): starting
            # from scratch would prune them and lose the run, so stop and let a human decide.
            raise IncompatibleCheckpointError(
                f"checkpoints {', '.join(validated_but_unloadable)} are intact but do not load into this "
                "job; refusing to start from scratch"
            )
        return None

    def close(self) -> None:
        """Waits for the in-flight checkpoint and stops the background threads (idempotent)."""
        self.wait()
        self._executor.shutdown(wait=True)
        if self._stager is not None:
            self._stager.close()
            self._stager = None

    def destroy_group(self) -> None:
        """Destroys the checkpoint process group; call after close(), on every rank."""
        if self.pg is not None:
            dist.destroy_process_group(self.pg)
            self.pg = None
