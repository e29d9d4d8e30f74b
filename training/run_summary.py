"""The end of a run on rank 0: the final model export and summary.json, whose fields
docs/training-jobs.md describes (goodput, badput by cause, recoveries, checkpoints, the final
parameters' digest)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training import badput, fileio, metrics
from training.recovery import record


def export_final(full: dict[str, Any], out: Path) -> Path | None:
    """The full model state as `out/final/model.pt`, written durably; None (and one line on
    stderr) when it cannot be written: the run's checkpoints still hold it."""
    path = out / "final" / "model.pt"
    tmp = fileio.part_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(full, tmp)
        fileio.replace_durably(tmp, path)
    except (OSError, RuntimeError) as e:  # torch.save reports a full disk as RuntimeError
        tmp.unlink(missing_ok=True)
        sys.stderr.write(f"hptrain: final export to {path} failed: {e}\n")
        return None
    return path


@dataclass(frozen=True)
class RunEnd:
    """What the trainer knows at the end of a run that the ledger does not."""

    steps: int
    target_steps: int
    reason: str
    preset: str
    world_size: int
    productive_s: float
    saved: bool
    last_checkpoint: dict[str, int]
    params_sha256: str
    export_path: Path | None


def badput_so_far(
    records: list[metrics.AttemptRecord],
    in_process: list[record.RecoveryRecord],
    *,
    steps: int,
    productive_s: float,
) -> dict[str, float]:
    """badput.by_cause of the job up to now (also the live export's figures), from the
    attempt records and the in-process recoveries, without reading anything."""
    recoveries = record.entries(metrics.recovery_stats(records), in_process)
    return _by_cause(records, recoveries, steps=steps, productive_s=productive_s)


def _by_cause(
    records: list[metrics.AttemptRecord],
    recoveries: list[dict[str, Any]],
    *,
    steps: int,
    productive_s: float,
) -> dict[str, float]:
    return badput.by_cause(
        records,
        recoveries,
        job_start_unix=metrics.job_start_unix(records),
        mean_step_s=productive_s / steps if steps else 0.0,
    )


def summary(
    end: RunEnd,
    current: metrics.AttemptRecord,
    records: list[metrics.AttemptRecord],
    out: Path,
) -> dict[str, Any]:
    """summary.json of the run: `current` is this attempt's record, `records` every one."""
    wall = metrics.wall_time_s(metrics.job_start_unix(records), time.time())
    recoveries = record.summary_entries(metrics.recovery_stats(records), out)
    causes = _by_cause(records, recoveries, steps=end.steps, productive_s=end.productive_s)
    return {
        "steps": end.steps,
        "target_steps": end.target_steps,
        "exit_reason": end.reason,
        "preset": end.preset,
        "world_size": end.world_size,
        "goodput": end.productive_s / wall,
        "goodput_definition": metrics.GOODPUT_DEFINITION,
        "productive_step_time_s": end.productive_s,
        "wall_time_s": wall,
        # The wall time that is not productive, by cause (training/badput.py).
        "badput_s": badput.with_other(causes, wall_s=wall, productive_s=end.productive_s),
        "checkpoint_blocking_s_total": sum(r.checkpoint_blocking_s for r in records),
        "checkpoints_committed": sum(r.checkpoints_committed for r in records),
        "checkpoints_failed": sum(r.checkpoints_failed for r in records),
        # False: the run ended but its last steps are in no checkpoint (exit code 5).
        "final_checkpoint_committed": end.saved,
        "restarts": len(records) - 1,
        "steps_lost_total": sum(r["steps_lost"] for r in recoveries),
        "recoveries": recoveries,
        "resumed_from": {"tier": current.resumed_from, "step": current.resumed_step},
        "last_checkpoint": dict(sorted(end.last_checkpoint.items())),
        "final_params_sha256": end.params_sha256,
        "export_path": str(end.export_path) if end.export_path else None,
    }
