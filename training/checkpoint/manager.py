"""CheckpointManager: the background save and commit, keep-last-k and resume.

When to save is the config's (CheckpointConfig.tier_due). The parts it puts together, each
testable alone:

* format: directory layout, manifest (with the run identity), commit, validation;
* planning: node-local save planning and the files a load reads;
* tiers: the storage of each configured tier (a directory, or managed tiered checkpointing);
* staging: the run-long staging buffers (pinned on GPU hosts);
* run_identity: which config changes a resume may make.

Save: the state is copied into the staging buffers in the background while the next step's
forward/backward runs (the optimizer update waits for the copy), then written with DCP and
committed on a background thread; one checkpoint is in flight at a time. Commit protocol:
every rank writes its shards into a tmp directory, hashes the files it wrote, and the hashes
are gathered to rank 0, which writes manifest.json and the COMMITTED marker and renames the
directory. When the tier is node-local, rank 0 sends each node its own manifest and DCP
metadata and the first rank of every other node commits that node's copy. A failed write
or commit is reported on every rank and its tmp directory removed, so the next checkpoint
starts clean.

Resume: the newest checkpoint, across all tiers, that every rank validates and whose run
identity allows this job to continue it; a failed load falls back to the next one. When
checkpoints exist but none can be used the job stops (IncompatibleCheckpointError, one line
naming each checkpoint and why) instead of silently training from step 0 over them;
start_fresh discards them deliberately.
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.checkpoint.stateful import Stateful

from training.checkpoint.config import CheckpointConfig
from training.checkpoint.format import (
    DCP_METADATA,
    CheckpointRef,
    build_manifest,
    clean_stale,
    commit_dir,
    file_entry,
    files_written_by,
    list_committed,
    prune,
    remove_checkpoint,
    step_dir_name,
    tmp_dir_name,
)
from training.checkpoint.interval import IntervalPlanner
from training.checkpoint.planning import node_metadata
from training.checkpoint.safe_load import SafeFileSystemReader, SafeLoadPlanner
from training.checkpoint.selection import (
    IncompatibleCheckpointError,
    candidate_order,
    check_candidate,
    first_line,
    warn,
)
from training.checkpoint.staging import StateStager
from training.checkpoint.tiers import Tier, open_tiers
from training.fileio import write_bytes_durably
from training.metrics import log_checkpoint
from training.run_identity import Change, RunIdentity, describe

# Importers name the resume error and warn() from here too.
__all__ = ["CheckpointManager", "IncompatibleCheckpointError", "candidate_order", "warn"]


class CheckpointFailedError(RuntimeError):
    """A checkpoint that did not commit (the same message on every rank)."""


def _use_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.set_device(device)


@dataclass
class _InFlight:
    step: int
    tier: str
    staging: Future[Any] | None
    done: Future[tuple[float, int]]  # (seconds from start to commit, bytes this rank wrote)
    blocking_s: float
    staged: bool = False
    started_at: float = 0.0
    staged_at: float | None = None


class CheckpointManager:
    """Owns the tiers: async save + commit, keep-last-k and resume."""

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
        identity: RunIdentity | None = None,
        start_fresh: bool = False,
        before_write: Callable[[int, Path], None] = lambda step, path: None,
        on_checkpoint_written: Callable[[int], None] = lambda step: None,
        on_committed: Callable[[int, str, float], None] = lambda step, tier, blocking: None,
        on_reported: Callable[[int, str, float, bool], None] = (
            lambda step, tier, blocking, committed: None
        ),
    ) -> None:
        self.cfg = cfg
        self.app_state = app_state
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.identity = identity
        self.start_fresh = start_fresh
        self.tiers: dict[str, Tier] = open_tiers(cfg, out, world_size)
        self.roots = {name: tier.root for name, tier in self.tiers.items()}
        self.before_write = before_write
        self.on_checkpoint_written = on_checkpoint_written
        self.on_committed = on_committed
        self.on_reported = on_reported
        self.blocking_total_s = 0.0
        self.committed = 0
        self.failed = 0
        self.last_error: str | None = None
        self.last_committed_step: dict[str, int] = {}
        self.last_commit: tuple[float, int] | None = None  # (commit_s, bytes) of the last one
        # Config differences the resumed checkpoint was accepted with (run_identity).
        self.resumed_changes: list[Change] = []
        # Duration of the last background staging copy (benchmarks report it).
        self.last_staging_s: float | None = None
        # Checkpoint traffic (DCP planning, commit) runs in a background thread; a separate
        # gloo group keeps it from interleaving with the training collectives.
        self.pg = dist.new_group(backend="gloo")
        nonce: list[Any] = [secrets.token_hex(4) if rank == 0 else None]
        dist.broadcast_object_list(nonce, src=0)
        self.nonce: str = nonce[0]
        self._inflight: _InFlight | None = None
        # Auto intervals, decided on rank 0 after a commit and applied by every rank at its
        # next save (checkpoint/interval.py); the planner's record is rank 0's.
        self._next_intervals: dict[str, int] = {}
        # A new thread's current CUDA device is 0: any CUDA call a storage writer makes from
        # it must reach this rank's GPU, not open a context on another rank's.
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="hptrain-ckpt-commit",
            initializer=_use_device,
            initargs=(device,),
        )
        # Run-long staging buffers (see staging.py for why not DefaultStager).
        self._stager: StateStager | None = (
            StateStager(device, device_snapshot=cfg.device_snapshot)
            if cfg.async_mode == "thread"
            else None
        )
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
        self.intervals = IntervalPlanner(cfg, len(set(node_of_rank)), judge=rank == 0)
        for name, local in self._detect_node_local().items():
            self.tiers[name].node_local = local

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

    def _state_dict(self) -> dict[str, Any]:
        """The state DCP saves: each Stateful's state_dict() (collectives: every rank)."""
        return {
            key: obj.state_dict() if isinstance(obj, Stateful) else obj
            for key, obj in self.app_state.items()
        }

    def has_committed(self, step: int) -> bool:
        return step in self.last_committed_step.values()

    # ---- save -------------------------------------------------------------------------------

    def prepare_staging(self) -> Future[float] | None:
        """Starts allocating the staging buffers in the background (call on every rank once
        the state has its final shapes, i.e. after resume): no checkpoint allocates or pins
        memory while training waits. The first save queues behind it."""
        if self._stager is None:
            return None
        return self._stager.allocate(self._state_dict())

    def save(self, step: int, tier: str, *, sync: bool = False) -> None:
        """Starts (or, with sync=True or async_mode=sync, completes) a checkpoint of `step`.

        Blocking time is measured once per call: a wait for the previous checkpoint counts
        for that one (wait()), the rest of this call for the new one."""
        self.wait()  # one checkpoint in flight at a time: the staging buffers are reused
        for name, interval in self._next_intervals.items():  # the same step on every rank
            self.cfg.set_interval(name, interval)
        self._next_intervals = {}
        t0 = time.perf_counter()
        self.intervals.started(step, t0)
        if sync or self._stager is None:
            error: str | None = None
            commit: tuple[float, int] | None = None
            try:
                commit = self._write_and_commit(step, tier, self.app_state, None, t0)
            except CheckpointFailedError as e:
                error = str(e)
            blocking = time.perf_counter() - t0
            self.blocking_total_s += blocking
            if self.rank == 0:
                log_checkpoint(step, tier, blocking, "started")
            self._note_result(step, tier, blocking, error, commit)
            return
        # `copied`: the optimizer may update the state; `staged`: the host copy to write.
        copied, staged = self._stager.stage(self._state_dict())
        done = self._executor.submit(self._finish_async, step, tier, staged, t0)
        blocking = time.perf_counter() - t0
        inf = _InFlight(step, tier, copied, done, blocking, started_at=t0)
        # Remembered for reporting how long the background copy took.
        staged.add_done_callback(lambda _f: setattr(inf, "staged_at", time.perf_counter()))
        self._inflight = inf
        self.blocking_total_s += blocking
        if self.rank == 0:
            log_checkpoint(step, tier, blocking, "started")

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
        # A failed copy is reported by the checkpoint itself (_finish_async).
        futures_wait([inf.staging])
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
        commit, error = None, None
        try:
            commit = inf.done.result()
        except Exception as e:  # noqa: BLE001 - reported; training goes on
            error = str(e) if isinstance(e, CheckpointFailedError) else first_line(e)
        self._note_result(inf.step, inf.tier, inf.blocking_s, error, commit)

    def _note_result(
        self,
        step: int,
        tier: str,
        blocking: float,
        error: str | None,
        commit: tuple[float, int] | None,
    ) -> None:
        if error is not None:
            self.failed += 1
            self.last_error = error
            warn(f"checkpoint step {step} tier {tier} failed: {error}")
        if self.rank == 0:
            log_checkpoint(step, tier, blocking, "failed" if error else "committed", commit)
            self.intervals.reported(tier, blocking)
            self.on_reported(step, tier, blocking, error is None)
        if error is None:
            self.last_commit = commit
            self.committed += 1
            self.last_committed_step[tier] = step
            self.on_committed(step, tier, blocking)

    def _finish_async(
        self, step: int, tier: str, staging: Future[dict[str, Any]], started: float
    ) -> tuple[float, int]:
        try:
            staged: dict[str, Any] | None = staging.result()
            error = None
        except Exception as e:  # noqa: BLE001 - every rank learns of it in the commit
            staged, error = None, f"rank {self.rank}: staging: {first_line(e)}"
        return self._write_and_commit(step, tier, staged, error, started)

    def _agree(self, error: str | None) -> str | None:
        """Every rank's error, joined; the same on every rank (a collective on the group)."""
        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, error, group=self.pg)
        errors = list(dict.fromkeys(e for e in everyone if e))
        return "; ".join(errors) if errors else None

    def _write_and_commit(
        self,
        step: int,
        tier_name: str,
        state: dict[str, Any] | None,
        error: str | None,
        started: float,
    ) -> tuple[float, int]:
        """Writes and commits checkpoint `step` on every rank (in the background thread for
        async saves; collectives use the checkpoint group only). Returns the seconds from
        `started` to the commit and the bytes this rank wrote. Raises CheckpointFailedError
        on every rank when any rank failed, after removing the tmp directory."""
        tier = self.tiers[tier_name]
        tmp = tier.root / tmp_dir_name(step, self.nonce)
        final = tier.root / step_dir_name(step)
        error = self._agree(error)  # nobody starts a write that a peer cannot join
        writer: Any = None
        if error is None:
            assert state is not None  # noqa: S101 - no error means this rank staged its state
            writer = tier.writer(step, tmp, lambda path: self.before_write(step, path))
            try:
                dcp_save(
                    state,
                    storage_writer=writer,
                    planner=tier.planner(self.node_of_rank),
                    process_group=self.pg,
                )
            except (Exception, CheckpointException) as e:  # noqa: BLE001 - reported below
                error = f"write: {first_line(e)}"
            if error is None:
                self.on_checkpoint_written(step)
            error = self._commit(step, tier, tmp, final, writer, error)
        if error is not None:
            self._discard(tmp)
            raise CheckpointFailedError(error)
        commit_s = time.perf_counter() - started
        if self.rank == 0 or (tier.node_local and self.local_rank == 0):
            prune(tier.root, tier.name, tier.keep)  # keep-last-k, after the commit point
        self._plan_interval(tier_name, commit_s)
        digests = getattr(writer, "digests", None)
        written = sum(d.size for d in digests.values()) if digests is not None else 0
        return commit_s, written

    def _plan_interval(self, tier: str, commit_s: float) -> None:
        """Rank 0 judges the interval (interval.py); an auto one goes to every rank."""
        interval, line = self.intervals.committed(tier, commit_s)
        if line is not None:
            warn(line)
        if self.cfg.tier(tier).auto_interval:  # the same on every rank
            box: list[Any] = [interval]
            dist.broadcast_object_list(box, src=0, group=self.pg)
            if box[0] is not None:
                self._next_intervals[tier] = box[0]

    def _discard(self, tmp: Path) -> None:
        """Removes a failed checkpoint's tmp directory (its space too: a full disk must not
        stay full), once no rank writes into it any more."""
        dist.barrier(group=self.pg)
        if self.rank == 0 or self.local_rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        dist.barrier(group=self.pg)

    def _commit(
        self, step: int, tier: Tier, tmp: Path, final: Path, writer: Any, error: str | None
    ) -> str | None:
        """The commit protocol (module docstring). Returns the error, the same on every rank."""
        node_local = tier.node_local
        results = getattr(writer, "results", None) if node_local else None
        entries: dict[str, Any] = {}
        if error is None and tier.backend is None:
            try:
                entries = files_written_by(tmp, self.rank, getattr(writer, "digests", None))
                if node_local and results is None:
                    raise RuntimeError("write results were not recorded")
            except (OSError, RuntimeError) as e:
                error = f"rank {self.rank}: {e!r}"
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object((error, entries, results), gathered, dst=0, group=self.pg)
        # Rank 0 always reaches the broadcast, success or not, so no rank is left waiting.
        payload: list[Any] = [None, None]
        if gathered is not None:  # rank 0
            payload = self._commit_on_rank0(step, tier, tmp, final, gathered)
        dist.broadcast_object_list(payload, src=0, group=self.pg)
        per_node, error = payload
        if error is None and node_local and self.rank != 0 and self.local_rank == 0:
            # This node holds its own copy: commit it too.
            try:
                manifest, meta = per_node[self.node]
                tmp.mkdir(parents=True, exist_ok=True)
                if meta is not None:
                    write_bytes_durably(tmp / DCP_METADATA, meta)
                commit_dir(tmp, final, manifest)
            except (OSError, ValueError) as e:
                error = f"rank {self.rank}: commit of node {self.node}'s copy: {e!r}"
        return self._agree(error)

    def _commit_on_rank0(
        self, step: int, tier: Tier, tmp: Path, final: Path, gathered: list[Any]
    ) -> list[Any]:
        """[per-node (manifest, metadata) or {}, None] on success, [None, error] otherwise."""
        errors = [g[0] for g in gathered if g[0]]
        if errors:
            return [None, "; ".join(dict.fromkeys(errors))]
        run = self.identity.to_json() if self.identity is not None else None
        per_node: dict[int, tuple[dict[str, Any], bytes | None]] = {}
        try:
            if tier.backend is not None:
                # The library holds the data; a marker directory with the manifest keeps
                # resume selection identical for both backends.
                manifest = build_manifest(step, tier.name, self.world_size, [], run, tier.backend)
                tmp.mkdir(parents=True, exist_ok=True)
                per_node = {node: (manifest, None) for node in set(self.node_of_rank)}
            else:
                manifest = build_manifest(
                    step, tier.name, self.world_size, [g[1] for g in gathered], run
                )
                if tier.node_local:
                    # Each node reads its own copy of replicated items, so each node gets
                    # metadata (and a manifest entry for it) of its own.
                    metadata = SafeFileSystemReader(str(tmp)).read_metadata()
                    for node in sorted(set(self.node_of_rank)):
                        ranks = [r for r, n in enumerate(self.node_of_rank) if n == node]
                        meta = node_metadata(metadata, [gathered[r][2] for r in ranks])
                        m = dict(manifest, files=dict(manifest["files"]))
                        m["files"][DCP_METADATA] = file_entry(node, meta)
                        per_node[node] = (m, meta)
                    node_meta = per_node[self.node][1]
                    assert node_meta is not None  # noqa: S101 - built just above
                    write_bytes_durably(tmp / DCP_METADATA, node_meta)
                    manifest = per_node[self.node][0]
            commit_dir(tmp, final, manifest)
        except Exception as e:  # noqa: BLE001 - sent to every rank
            return [None, f"commit on rank 0: {first_line(e)}"]
        return [per_node, None]

    # ---- resume -----------------------------------------------------------------------------

    def resume(self) -> CheckpointRef | None:
        """Loads the newest checkpoint this job may continue from (see the module docstring).

        Returns None only when there is no checkpoint at all (or start_fresh discarded them);
        raises IncompatibleCheckpointError when checkpoints exist and none can be used."""
        listed = [
            (ref.step, name)
            for name, tier in self.tiers.items()
            for ref in list_committed(tier.root, name)
        ]
        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, listed)
        candidates = candidate_order(everyone, self.cfg)
        if self.start_fresh:
            self._discard_all()
            return None
        if not candidates:
            return None
        target = self._target_steps()
        newest_step, newest_tier = candidates[0]
        if target is not None and newest_step > target:
            raise IncompatibleCheckpointError(
                f"checkpoint {newest_tier}/{step_dir_name(newest_step)} is beyond "
                f"training.steps={target}: raise training.steps to continue this run, or "
                "pass --start-fresh to discard its checkpoints"
            )
        # The state to load, for the files each load plan reads (the optimizer state is
        # materialised at build time, so this does not step the optimizer).
        wanted = self._state_dict()
        rejected: list[str] = []
        for step, name in candidates:
            ref = CheckpointRef(name, step, self.tiers[name].root / step_dir_name(step))
            ok, why, changes = check_candidate(
                ref,
                wanted,
                rank=self.rank,
                identity=self.identity,
                backend=self.tiers[name].backend,
                verify_checksums=self.cfg.verify_checksums,
            )
            verdicts: list[Any] = [None] * self.world_size
            dist.all_gather_object(verdicts, (ok, why))
            failing = [(r, w) for r, (o, w) in enumerate(verdicts) if not o]
            if failing:
                r, w = failing[0]
                rejected.append(
                    f"{ref.name}: {w}" + (f" (rank {r})" if self.world_size > 1 else "")
                )
                if self.rank == 0:
                    warn(f"{rejected[-1]}; trying an older checkpoint")
                continue
            try:
                dcp_load(
                    self.app_state,
                    storage_reader=self.tiers[name].reader(ref),
                    planner=SafeLoadPlanner(),
                )
            except IncompatibleCheckpointError:
                raise
            except (Exception, CheckpointException) as e:  # noqa: BLE001 - same on every rank
                warn(f"rank {self.rank}: loading {ref.name} failed, falling back: {first_line(e)}")
                rejected.append(f"{ref.name}: load failed: {first_line(e)}")
                continue
            self.last_committed_step[name] = step
            self.resumed_changes = changes
            if self.rank == 0:
                if changes:
                    warn(f"resuming {ref.name} with changes: {describe(changes)}")
                if "not verified" in why:
                    warn(
                        f"{ref.name} loaded without checksum verification "
                        "(checkpoint.verify_checksums=false)"
                    )
            return ref
        raise IncompatibleCheckpointError(
            "refusing to start from scratch over existing checkpoints, none of which can be "
            f"used (pass --start-fresh to discard them): {'; '.join(rejected)}"
        )

    def _target_steps(self) -> int | None:
        if self.identity is None:
            return None
        return int(self.identity.config["training"]["steps"])

    def _discard_all(self) -> None:
        """start_fresh: removes every committed checkpoint (each node its own copies), so no
        later resume mixes the old run with the new one."""
        if self.rank == 0 or self.local_rank == 0:
            for name, tier in self.tiers.items():
                for ref in list_committed(tier.root, name):
                    remove_checkpoint(ref.path)
                    if self.rank == 0:
                        warn(f"--start-fresh: removed {ref.name}")
        dist.barrier()

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
