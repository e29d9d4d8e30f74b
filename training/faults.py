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
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_VAR = "HPTRAIN_FAULTS"
# A directory: each process notes there every file it opens for reading under a checkpoint
# tier (trace_tier_reads), so a test can prove a recovery read none.
TRACE_READS_ENV = "HPTRAIN_TRACE_TIER_READS"


@dataclass(frozen=True)
class FaultPlan:
    # Ranks SIGKILLed together at step kill_at_step.
    kill_ranks: tuple[int, ...] = ()
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
    # Under in-process recovery: this rank is SIGKILLed as the first recovery starts its
    # state transfer (after the rendezvous, before any shard moves).
    kill_in_transfer: int | None = None
    # Every rank waits this many milliseconds for each batch: a slow data source.
    slow_data_ms: int | None = None

    def given(self) -> dict[str, Any]:
        """The faults of the plan, by field (the ones left at their default out)."""
        return {k: v for k, v in self.__dict__.items() if v not in (None, ())}

    def to_env(self) -> str:
        return json.dumps(self.given())

    @classmethod
    def from_env(cls) -> FaultPlan:
        raw = os.environ.get(ENV_VAR, "")
        if not raw:
            return cls()
        data: dict[str, Any] = json.loads(raw)
        fields: dict[str, Any] = {
            k: tuple(int(r) for r in v) if isinstance(v, list) else int(v) for k, v in data.items()
        }
        return cls(**fields)

    @property
    def any(self) -> bool:
        return bool(self.given())


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

    def batch_read(self) -> None:
        """Right after a step's batch is read: a slow data source, on every rank."""
        if self.plan.slow_data_ms:
            time.sleep(self.plan.slow_data_ms / 1000)

    def mid_step(self, step: int) -> None:
        """Between backward and the optimizer update: the worst place to lose a process."""
        p = self.plan
        if p.kill_at_step == step and self.rank in p.kill_ranks:
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

    def before_transfer(self, generation: int) -> None:
        """An in-process recovery forming process-group generation `generation` is about to
        move state: a loss in the middle of a recovery."""
        if self.plan.kill_in_transfer == self.rank:
            self.record(
                {
                    "kind": "sigkill_in_transfer",
                    "generation": generation,
                    "rank": self.rank,
                    "unix": time.time(),
                }
            )
            os.kill(os.getpid(), signal.SIGKILL)

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


def trace_tier_reads(roots: Iterable[Path], rank: int) -> None:
    """Where TRACE_READS_ENV names a directory: an audit hook (sys.addaudithook) that appends
    to `<dir>/rank<R>_pid<P>.txt` every file this process opens for reading under `roots`.
    Test instrumentation: the hook stays for the life of the process."""
    directory = os.environ.get(TRACE_READS_ENV)
    if not directory:
        return
    prefixes = tuple(str(Path(r).resolve()) + os.sep for r in roots)
    log = Path(directory) / f"rank{rank}_pid{os.getpid()}.txt"
    busy = threading.local()

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or getattr(busy, "on", False) or not isinstance(args[0], str | Path):
            return
        mode, flags = args[1], args[2]
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else flags & 3 != 0
        path = os.path.abspath(args[0])
        # A directory is opened to fsync it after a write, not read.
        if writes or not path.startswith(prefixes) or os.path.isdir(path):
            return
        busy.on = True
        try:
            with open(log, "a") as f:
                f.write(path + "\n")
        finally:
            busy.on = False

    sys.addaudithook(hook)
