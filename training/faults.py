"""Fault injection hooks, armed by the local launcher for the first attempt only.

The launcher passes the plan in the HPTRAIN_FAULTS environment variable (JSON). The faults
are real: SIGKILL/SIGTERM are delivered as signals and a hang blocks the main thread, so
the code paths under test are the same ones a node failure, a drain or a stuck collective
would take. Hooks fire at exact steps, which keeps fault tests reproducible.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_VAR = "HPTRAIN_FAULTS"


@dataclass(frozen=True)
class FaultPlan:
    kill_rank: int | None = None
    kill_at_step: int | None = None
    kill_during_checkpoint: int | None = None
    sigterm_at_step: int | None = None
    # SIGUSR1, the HyperPod elastic agent's scaling event, to rank 0 only: the step's stop
    # flag must carry it to the other ranks.
    scale_event_at_step: int | None = None
    hang_rank: int | None = None
    hang_at_step: int | None = None
    # Rank 0's checkpoint write fails with ENOSPC, after writing part of a shard: for the
    # checkpoint of this step only, or for every checkpoint from this step on (the final one
    # too), as on a disk that stays full.
    disk_full_at_checkpoint: int | None = None
    disk_full_from_step: int | None = None

    def to_env(self) -> str:
        return json.dumps({k: v for k, v in self.__dict__.items() if v is not None})

    @classmethod
    def from_env(cls) -> FaultPlan:
        raw = os.environ.get(ENV_VAR, "")
        if not raw:
            return cls()
        data: dict[str, Any] = json.loads(raw)
        return cls(**{k: int(v) for k, v in data.items()})

    @property
    def any(self) -> bool:
        return any(v is not None for v in self.__dict__.values())


class FaultInjector:
    """Calls `record` (to note the fault time in the run ledger) just before acting.

    `settle` is called before a step-exact kill: it waits until the in-flight checkpoint is
    committed, so which checkpoint a restart finds does not depend on timing.
    """

    def __init__(
        self,
        plan: FaultPlan,
        rank: int,
        record: Callable[[dict[str, Any]], None],
        settle: Callable[[], object] = lambda: None,
    ) -> None:
        self.plan = plan
        self.rank = rank
        self.record = record
        self.settle = settle

    def _note(self, kind: str, step: int) -> None:
        self.record({"kind": kind, "step": step, "rank": self.rank, "unix": time.time()})

    def before_step(self, step: int) -> None:
        """`step` is the number of the step about to run (1-based)."""
        p = self.plan
        if p.hang_at_step == step and p.hang_rank == self.rank:
            self._note("hang", step)
            while True:  # the watchdog (or the launcher) is the only way out
                time.sleep(3600)

    def mid_step(self, step: int) -> None:
        """Between backward and the optimizer update: the worst place to lose a process."""
        p = self.plan
        if p.kill_at_step == step and p.kill_rank == self.rank:
            self.settle()
            self._note("sigkill", step)
            os.kill(os.getpid(), signal.SIGKILL)
        if p.sigterm_at_step == step:
            # Every rank gets it, as when the kubelet terminates all pods of the job.
            if self.rank == 0:
                self._note("sigterm", step)
            os.kill(os.getpid(), signal.SIGTERM)
        if p.scale_event_at_step == step and self.rank == 0:
            self._note("scale_event", step)
            os.kill(os.getpid(), signal.SIGUSR1)

    def checkpoint_writing(self, step: int, ckpt_dir: Path) -> None:
        """Inside the DCP write of checkpoint `step` (its files go to `ckpt_dir`): a full disk.
        Not fired for the managed tier, which writes no files here."""
        p = self.plan
        full = p.disk_full_at_checkpoint == step or (
            p.disk_full_from_step is not None and step >= p.disk_full_from_step
        )
        if full and self.rank == 0:
            # Not recorded as a fault: the process goes on, the run ledger counts the failure.
            ckpt_dir.mkdir(parents=True, exist_ok=True)
            # Part of a shard made it to disk before the space ran out.
            (ckpt_dir / "__0_0.distcp").write_bytes(b"\0" * 4096)
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (injected)")

    def checkpoint_written(self, step: int) -> None:
        """After the shards of `step` are on storage but before the commit: a torn checkpoint."""
        if self.plan.kill_during_checkpoint == step and self.rank == 0:
            self._note("sigkill_during_checkpoint", step)
            os.kill(os.getpid(), signal.SIGKILL)
