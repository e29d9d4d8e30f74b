"""Where a job's wall time went that no surviving step used: badput by cause.

Goodput (metrics.GOODPUT_DEFINITION) is the productive step time over the wall time; this
module names the rest, from the run ledger's attempt records (metrics.AttemptRecord) and the
job's recoveries (metrics.recovery_stats, training/recovery/record.py):

- `startup`: the job's start to the first attempt's first step (interpreter, imports,
  process group, model build, resume);
- `restart`: each restart, from the fault to the next attempt's first step (the dead
  attempt's teardown, the new processes' start-up and resume);
- `in_process_recovery`: each in-process recovery's detect, abort, rendezvous and state
  transfer (its first step is a step like any other);
- `recomputed_steps`: steps done again after a recovery rolled back to an older
  checkpoint, at the job's mean step time (their first run is in no checkpoint);
- `checkpoint_blocking`: the time checkpoints kept training waiting;
- `data_wait`: the time steps waited for their batch (outside the productive step time);
- `other`, in the summary only: the rest of the wall time (evaluation, the final save and
  export, logging), never below 0.

The first step of each attempt is productive time, compile included: the trainer cannot
tell a compile from a slow first step without timing both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from training.metrics import AttemptRecord

CAUSES: Final = (
    "startup",
    "restart",
    "in_process_recovery",
    "recomputed_steps",
    "checkpoint_blocking",
    "data_wait",
)
OTHER: Final = "other"
# The phases of an in-process recovery that are not a training step.
_RECOVERY_PHASES_BEFORE_STEPS: Final = ("detect", "abort", "rendezvous", "state_transfer")


def _first_step_start(record: AttemptRecord) -> float | None:
    if record.first_step_unix is None:
        return None
    return record.first_step_unix - (record.first_step_s or 0.0)


def by_cause(
    records: Sequence[AttemptRecord],
    recoveries: Sequence[dict[str, Any]],
    *,
    job_start_unix: float,
    mean_step_s: float,
) -> dict[str, float]:
    """Seconds per cause (CAUSES) of the job so far; `recoveries`: the summary's entries."""
    seconds = dict.fromkeys(CAUSES, 0.0)
    ordered = sorted(records, key=lambda r: r.attempt)
    by_attempt = {r.attempt: r for r in ordered}
    if ordered and (start := _first_step_start(ordered[0])) is not None:
        seconds["startup"] = max(start - job_start_unix, 0.0)
    for entry in recoveries:
        seconds["recomputed_steps"] += entry.get("steps_lost", 0) * mean_step_s
        phases = entry.get("phases_s", {})
        if entry["kind"] == "restart":
            record = by_attempt.get(entry["attempt"])
            first_step = record.first_step_s if record is not None else None
            lost = phases.get("restart", 0.0) + phases.get("first_step", 0.0)
            seconds["restart"] += max(lost - (first_step or 0.0), 0.0)
        else:
            seconds["in_process_recovery"] += sum(
                phases.get(phase, 0.0) for phase in _RECOVERY_PHASES_BEFORE_STEPS
            )
    seconds["checkpoint_blocking"] = sum(r.checkpoint_blocking_s for r in ordered)
    seconds["data_wait"] = sum(r.data_wait_s for r in ordered)
    return seconds


def with_other(causes: dict[str, float], *, wall_s: float, productive_s: float) -> dict[str, float]:
    """`causes` and `other`, the wall time neither productive nor named, rounded to ms."""
    other = max(wall_s - productive_s - sum(causes.values()), 0.0)
    return {cause: round(s, 3) for cause, s in {**causes, OTHER: other}.items()}
