"""Each recovery as recorded: its kind, where the state came from, and seconds per phase.

The shape is the one `summary.json` lists under its recoveries: `kind` "in_process" (the
healthy ranks kept their processes) or "restart" (every rank started again), `state_source`
"peer", "fast", "managed" or "durable". Phases, each in seconds: `detect` (the failed step's
start to the moment this rank knew), `abort` (the old process groups torn down), `rendezvous`
(the new generation formed with the replacement), `state_transfer` (the replacement's shard
received, and the rebuilt model filled) and `first_step` (the first committed step after).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

PHASES: Final = ("detect", "abort", "rendezvous", "state_transfer", "first_step")
RECORDS_FILE: Final = "recoveries.jsonl"
PHASE_METRIC: Final = "hptrain_recovery_phase_seconds"


@dataclass
class RecoveryRecord:
    kind: str
    state_source: str
    generation: int
    failed_step: int
    resumed_step: int
    replaced_ranks: list[int]
    started_unix: float
    phases_s: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


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
    return [RecoveryRecord(**json.loads(line)) for line in path.read_text().splitlines() if line]


class RecoveryMetrics(Collector):
    """The last recovery's phases as one gauge family labelled by phase, for a registry such
    as the trainer's metrics endpoint (`registry.register(RecoveryMetrics())`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: RecoveryRecord | None = None

    def observe(self, record: RecoveryRecord) -> None:
        with self._lock:
            self._last = record

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            last = self._last
        if last is None:
            return
        family = GaugeMetricFamily(
            PHASE_METRIC,
            "Seconds per phase of the last recovery (training/recovery/record.py).",
            labels=["phase", "kind", "state_source"],
        )
        for phase in PHASES:
            if phase in last.phases_s:
                family.add_metric([phase, last.kind, last.state_source], last.phases_s[phase])
        yield family
