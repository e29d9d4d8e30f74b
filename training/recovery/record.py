"""Each in-process recovery as recorded: its kind, where the state came from, and seconds per
phase.

`kind` is "in_process" (the healthy ranks kept their processes) and `state_source` "peer" (a
replacement received its shard from a replica) or "local" (every rank survived; each kept its
own state). Phases, each in seconds: `detect` (the failed step's start to the moment this
rank knew), `abort` (the old process groups torn down), `rendezvous` (the new generation
formed with the replacement), `state_transfer` (the rebuilt model filled, the replacement's
shard received) and `first_step` (the first committed step after). Restarts are recorded by
the run ledger (training/metrics.py); `summary_entries` gives both one shape in summary.json.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from training.metrics_export import RECOVERY_PHASES as PHASES

__all__ = ["PHASES", "RecoveryRecord", "append", "entries", "read", "summary_entries"]

RECORDS_FILE: Final = "recoveries.jsonl"


@dataclass
class RecoveryRecord:
    kind: str
    state_source: str
    attempt: int
    generation: int
    failed_step: int
    resumed_step: int
    replaced_ranks: list[int]
    started_unix: float
    phases_s: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def summary_entry(self) -> dict[str, Any]:
        """The summary's shape of a recovery (as metrics.recovery_stats gives a restart's)."""
        return {
            "kind": self.kind,
            "state_source": self.state_source,
            "attempt": self.attempt,
            "failed_at_step": self.failed_step - 1,
            "resumed_step": self.resumed_step,
            "steps_lost": max(self.failed_step - 1 - self.resumed_step, 0),
            "recovery_s": sum(self.phases_s.values()),
            "phases_s": self.phases_s,
            "replaced_ranks": self.replaced_ranks,
            "generation": self.generation,
        }


def append(out: Path, record: RecoveryRecord) -> None:
    """Adds `record` to the run directory's recovery log (one JSON object a line)."""
    path = out / RECORDS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(record.to_json() + "\n")
        f.flush()
        os.fsync(f.fileno())


def read(out: Path) -> list[RecoveryRecord]:
    path = out / RECORDS_FILE
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(RecoveryRecord(**json.loads(line)))
        except (ValueError, TypeError):
            continue  # a line torn by a kill carries no usable numbers
    return records


def summary_entries(restarts: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """Every recovery of the job in order: the restarts (metrics.recovery_stats) and the
    in-process recoveries recorded in `out`; a restart comes before its attempt's in-process
    recoveries."""
    return entries(restarts, read(out))


def entries(
    restarts: list[dict[str, Any]], in_process: list[RecoveryRecord]
) -> list[dict[str, Any]]:
    """summary_entries with the in-process recoveries given instead of read."""
    ordered = [(e["attempt"], 0, 0.0, e) for e in restarts]
    ordered += [(r.attempt, 1, r.started_unix, r.summary_entry()) for r in in_process]
    return [entry for *_, entry in sorted(ordered, key=lambda t: t[:3])]
