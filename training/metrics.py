"""Fixed log lines, run accounting across restarts, goodput and the final params digest.

The ``HPTRAIN`` line formats are a contract with the operator's log monitoring: keep the
format strings below byte-for-byte stable.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training import fileio

if TYPE_CHECKING:
    import torch


# global_batch is the batch this run trains with, preset_batch the one its preset declares:
# they differ where the batch was fitted to the world size (hpctl job render) or overridden.
START_FMT = (
    "HPTRAIN start rank={rank} world={world} step={step} resumed_from={resumed} preset={preset} "
    "global_batch={batch} preset_batch={preset_batch}"
)
STEP_FMT = "HPTRAIN step={step} loss={loss:.4f} tokens_per_s={tps:.1f} samples_per_s={sps:.2f} step_time_s={dt:.3f}"
CKPT_FMT = "HPTRAIN checkpoint step={step} tier={tier} blocking_s={blocking:.3f} status={status}"
# A committed checkpoint's line adds the seconds from its start to its commit and the bytes
# rank 0 wrote, so every run shows its tier's speed.
CKPT_COMMITTED_FMT = CKPT_FMT + " commit_s={commit:.3f} bytes={bytes}"
WATCHDOG_FMT = "HPTRAIN watchdog no progress for {seconds}s at step={step}; exiting"
# A job resumed at another world size (an elastic scale-down or -up, or a relaunch at a new
# size): once per resize, on rank 0. The global batch is the same; each data-parallel rank
# runs its share as micro_batch sequences x passes.
RESIZE_FMT = (
    "HPTRAIN resize: world {old_world} -> {world} (dp {old_dp} -> {dp}), resumed at "
    "step={step} sample_position={position} global_batch={batch} "
    "per_dp_rank={micro}x{passes}"
)
UNSAVED_FMT = "HPTRAIN final checkpoint step={step} tier={tier} did not commit; exit_code={code}"

GOODPUT_DEFINITION = (
    "productive_step_time_s / wall_time_s. productive_step_time_s sums the step times "
    "(forward, backward, optimizer; not the wait for the batch) of the steps that survive "
    "into the final model; it is carried in checkpoint state, so steps redone after a "
    "rollback count once. wall_time_s runs from the job start (launcher start, else the "
    "first attempt's start) to the end of the final attempt and includes start-up, restarts, "
    "recovery, checkpoint blocking, data waits and the final export (badput_s names each)."
)


def emit(line: str) -> None:
    # Flush per line: the launcher and the operator read these as they happen.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def log_start(
    rank: int, world: int, step: int, resumed: str, preset: str, batch: int, preset_batch: int
) -> None:
    emit(
        START_FMT.format(
            rank=rank,
            world=world,
            step=step,
            resumed=resumed,
            preset=preset,
            batch=batch,
            preset_batch=preset_batch,
        )
    )


def log_step(
    step: int, loss: float, tokens_per_s: float, samples_per_s: float, step_time_s: float
) -> None:
    emit(STEP_FMT.format(step=step, loss=loss, tps=tokens_per_s, sps=samples_per_s, dt=step_time_s))


def log_checkpoint(
    step: int, tier: str, blocking_s: float, status: str, commit: tuple[float, int] | None = None
) -> None:
    """`commit`: (seconds from start to commit, bytes written) of a committed checkpoint."""
    fields = {"step": step, "tier": tier, "blocking": blocking_s, "status": status}
    if commit is None:
        emit(CKPT_FMT.format(**fields))
    else:
        emit(CKPT_COMMITTED_FMT.format(**fields, commit=commit[0], bytes=commit[1]))


def log_resize(
    old_world: int,
    world: int,
    old_dp: int,
    dp: int,
    step: int,
    position: int,
    batch: int,
    micro: int,
    passes: int,
) -> None:
    emit(
        RESIZE_FMT.format(
            old_world=old_world,
            world=world,
            old_dp=old_dp,
            dp=dp,
            step=step,
            position=position,
            batch=batch,
            micro=micro,
            passes=passes,
        )
    )


def log_unsaved(step: int, tier: str, code: int) -> None:
    emit(UNSAVED_FMT.format(step=step, tier=tier, code=code))


def watchdog_line(seconds: float, step: int) -> str:
    return WATCHDOG_FMT.format(seconds=int(seconds), step=step)


def params_sha256(full_state: dict[str, torch.Tensor]) -> str:
    """sha256 over the full model state: sorted names, each name + shape + fp32 LE bytes."""
    import torch

    h = hashlib.sha256()
    for name in sorted(full_state):
        t = full_state[name].detach().to("cpu", torch.float32).contiguous()
        h.update(name.encode())
        h.update(repr(tuple(t.shape)).encode())
        h.update(t.numpy().astype("<f4", copy=False).tobytes())
    return h.hexdigest()


@dataclass
class AttemptRecord:
    """One start of the job (the first or a restart), kept in <out>/attempts/ by rank 0."""

    attempt: int
    started_unix: float
    resumed_step: int = 0
    resumed_from: str = "none"
    first_step_unix: float | None = None
    # The first step's wall time (its batch's wait included): its start is the end of
    # start-up (training/badput.py).
    first_step_s: float | None = None
    last_step: int = 0
    last_step_unix: float | None = None
    checkpoint_blocking_s: float = 0.0
    # Steps' waits for their batch, outside the productive step time.
    data_wait_s: float = 0.0
    checkpoints_committed: int = 0
    checkpoints_failed: int = 0
    ended: str = "running"
    faults: list[dict[str, Any]] = field(default_factory=list)


class RunLedger:
    """Per-attempt records on the shared output directory (FSx), written by rank 0 only.

    Restarts, steps lost per fault, recovery time and job wall time are all derived from
    these files, so they survive whatever launcher restarted the job.
    """

    def __init__(self, out: Path, attempt: int | None, *, reopen: bool = False) -> None:
        """`reopen`: go on with the attempt's record where one exists (a rank 0 that replaced
        a lost one during the attempt, training/recovery)."""
        self.dir = out / "attempts"
        self.dir.mkdir(parents=True, exist_ok=True)
        if attempt is None:
            attempt = len(list(self.dir.glob("attempt_*.json")))
        self.record = AttemptRecord(attempt=attempt, started_unix=time.time())
        if reopen and self.path.is_file():
            # A record torn by the kill: a new one.
            with contextlib.suppress(ValueError, TypeError):
                self.record = AttemptRecord(**json.loads(self.path.read_text()))

    @property
    def path(self) -> Path:
        return self.dir / f"attempt_{self.record.attempt:04d}.json"

    def flush(self) -> None:
        # Called once per step too: one small file rewrite, so the step reached before a
        # fault is known even when the process is killed right after. Not fsynced: a
        # per-step fsync on FSx would slow every step for a record only a lost node loses.
        fileio.write_json_atomic(self.path, asdict(self.record), indent=1, durable=False)

    def all_records(self) -> list[AttemptRecord]:
        return read_records(self.dir.parent)


def write_fault(out: Path, attempt: int, rank: int, fault: dict[str, Any]) -> None:
    """Any rank may call this right before it is killed: a separate small file per rank, so it
    never races with rank 0 rewriting the attempt record."""
    fileio.write_json_atomic(out / "attempts" / f"fault_{attempt:04d}_r{rank}.json", fault)


def read_records(out: Path) -> list[AttemptRecord]:
    """All attempt records of a run directory, with the faults injected into each."""
    d = out / "attempts"
    records = []
    for p in sorted(d.glob("attempt_*.json")):
        try:
            rec = AttemptRecord(**json.loads(p.read_text()))
        except (ValueError, TypeError, OSError):
            continue  # a record torn by a kill carries no usable numbers
        for fp in sorted(d.glob(f"fault_{rec.attempt:04d}_r*.json")):
            try:
                rec.faults.append(json.loads(fp.read_text()))
            except (ValueError, OSError):
                continue
        records.append(rec)
    return records


def recovery_stats(records: list[AttemptRecord]) -> list[dict[str, Any]]:
    """Per restart: steps lost (last step reached before the fault minus the resume step),
    recovery time (fault, else last progress, to the first step of the next attempt), the tier
    it resumed from ("none": from step 0) and its phases: `restart` (the fault to the new
    attempt's start) and `first_step` (that start to its first step: start-up and resume)."""
    out = []
    ordered = sorted(records, key=lambda r: r.attempt)
    for prev, cur in itertools.pairwise(ordered):
        fault_unix = next((f["unix"] for f in prev.faults if "unix" in f), prev.last_step_unix)
        # A fault injected during step k means k - 1 steps were complete, even if the last
        # ledger write before the kill did not get out.
        reached = max([prev.last_step] + [int(f["step"]) - 1 for f in prev.faults if "step" in f])
        phases = {}
        if fault_unix is not None:
            phases["restart"] = cur.started_unix - fault_unix
        if cur.first_step_unix is not None:
            phases["first_step"] = cur.first_step_unix - cur.started_unix
        out.append(
            {
                "kind": "restart",
                "state_source": cur.resumed_from,
                "phases_s": phases,
                "attempt": cur.attempt,
                "failed_at_step": reached,
                "resumed_step": cur.resumed_step,
                "resumed_from": cur.resumed_from,
                "steps_lost": max(reached - cur.resumed_step, 0),
                "recovery_s": (cur.first_step_unix - fault_unix)
                if (cur.first_step_unix is not None and fault_unix is not None)
                else None,
            }
        )
    return out


def job_start_unix(records: list[AttemptRecord]) -> float:
    """When the job started: the launcher's start (HPTRAIN_JOB_START_UNIX), else the first
    attempt's start (see GOODPUT_DEFINITION)."""
    return float(os.environ.get("HPTRAIN_JOB_START_UNIX") or min(r.started_unix for r in records))


def wall_time_s(job_start: float, now: float) -> float:
    """Wall time since the job start (never zero, so goodput is always defined)."""
    return max(now - job_start, 1e-9)


def goodput(productive_s: float, job_start: float, now: float) -> float:
    """GOODPUT_DEFINITION at `now`: the summary's figure, and the exported gauge's."""
    return productive_s / wall_time_s(job_start, now)


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    fileio.write_json_atomic(out / "summary.json", summary, indent=2, sort_keys=True)
    emit(json.dumps(summary, sort_keys=True))
