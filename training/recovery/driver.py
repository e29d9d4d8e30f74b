"""The step agreement and the recovery itself, for the trainer (training/trainer.py).

The trainer's step: forward, backward and gradient clipping (every collective of the step),
then `decide` (every rank agrees on the step), then the update, which is local. Under
in-process recovery the agreement is a vote through the store (coordination.Coordinator), so
a step whose vote does not commit is discarded on every rank and the survivors of a failure
all stand at the same step boundary with the same state. Then `recover`: abandon the old
groups, meet the replacement in the next generation, rebuild the model on the new mesh, fill
it (a survivor from its own shards, a replacement from an intact replica peer), and the step
runs again. Without it (`AllReduceAgreement`) one small all-reduce carries the loss and the
stop flag, and a failed rank fails the job (a restart from a checkpoint tier).
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup
from torch.distributed.device_mesh import DeviceMesh

from training.config import FaultConfig
from training.config_parsing import ConfigError
from training.parallel import DistInfo
from training.recovery import ENV_ROLE, ENV_STORE, REPLACEMENT, record, transfer, world
from training.recovery.coordination import (
    Coordinator,
    Decision,
    Heartbeat,
    RecoveryFallbackError,
    connect_store,
    this_member,
)

# The longest a rank waits in a step's vote on a rank whose loss has been announced (a beat
# of its Heartbeat).
LOSS_NOTICE_S = 0.25
# Failures a collective or the store reports; anything else is a bug and ends the process.
COLLECTIVE_ERRORS: tuple[type[Exception], ...] = (RuntimeError, dist.DistError)


class Recoverable(Protocol):
    """What the trainer gives the recovery."""

    def rebuild(self) -> DeviceMesh:
        """Builds the mesh and everything bound to it (model, optimizer, checkpointer), afresh,
        on the process group just formed; returns the mesh."""

    def release(self) -> None:
        """Drops every reference to the mesh and its groups (model, optimizer, mesh)."""

    def process_groups(self) -> list[ProcessGroup]:
        """Every group a collective of this rank may wait in (aborted on a failure)."""

    def state_tensors(self) -> list[torch.Tensor]:
        """This rank's shards of model and optimizer state (transfer.state_tensors)."""

    def train_state(self) -> dict[str, Any]:
        """Step ("step"), schedule, data position, ...: the same on every intact rank."""

    def load_train_state(self, state: dict[str, Any]) -> None: ...


class StepAgreement(Protocol):
    """How the ranks agree on a step before any applies it."""

    # Exceptions of the step's collectives that mean a peer failed (none: the job fails).
    peer_failures: tuple[type[Exception], ...]

    def begin(self, step: int) -> None: ...

    def failed(self, step: int, error: Exception) -> None: ...

    def decide(self, step: int, loss: torch.Tensor | None, stop: bool) -> Decision: ...

    def recover(self, step: int) -> None: ...

    def committed(self) -> None: ...

    def close(self) -> None: ...


class AllReduceAgreement:
    """One small all-reduce carries the loss for logging and the stop flag, so every rank
    agrees on the step at which a SIGTERM takes effect. The mean over the world is the mean
    over data-parallel ranks: the ranks of a tensor-parallel group hold one loss. A failed
    peer is an error that ends this process."""

    peer_failures: tuple[type[Exception], ...] = ()

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size

    def begin(self, step: int) -> None:
        pass

    def failed(self, step: int, error: Exception) -> None:
        raise error

    def decide(self, step: int, loss: torch.Tensor | None, stop: bool) -> Decision:
        if loss is None:
            raise RuntimeError(f"step {step} has no loss")
        flags = torch.stack([loss.detach().float(), torch.tensor(float(stop), device=loss.device)])
        dist.all_reduce(flags)
        mean = (flags[0] / self.world_size).item()
        return Decision(commit=True, stop=flags[1].item() > 0, losses=(mean,))

    def recover(self, step: int) -> None:
        raise RuntimeError(f"step {step} did not commit and nothing recovers in process")

    def committed(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class RecoverySettings:
    info: DistInfo
    collective_timeout_s: float
    rendezvous_timeout_s: float
    # In-process recoveries tried for one failure before falling back to a checkpoint tier.
    max_rounds: int = 3


class InProcessRecovery:
    """The step vote and in-process recovery of one rank (a StepAgreement)."""

    peer_failures = COLLECTIVE_ERRORS

    def __init__(
        self,
        job: Recoverable,
        coordinator: Coordinator,
        heartbeat: Heartbeat,
        settings: RecoverySettings,
        out: Path,
        *,
        attempt: int,
        before_transfer: Callable[[int], None] = lambda _generation: None,
        on_recovered: Callable[[record.RecoveryRecord], None] = lambda _record: None,
    ) -> None:
        self.job, self.coord, self.heartbeat = job, coordinator, heartbeat
        self.settings, self.out, self.attempt = settings, out, attempt
        self.before_transfer, self.on_recovered = before_transfer, on_recovered
        self.rank = settings.info.rank
        self.generation = -1
        self.records: list[record.RecoveryRecord] = []
        # A recovery waiting for its first committed step.
        self._pending: record.RecoveryRecord | None = None
        # The train state at the current step's boundary, and when the step started.
        self._boundary: dict[str, Any] = {}
        self._step_started = (time.monotonic(), time.time())
        # A survivor's shards once its groups are abandoned, and what that took.
        self._saved: list[torch.Tensor] | None = None
        self._abort_s = 0.0
        # The first generation's mesh until its groups are bounded.
        self._unbounded: DeviceMesh | None = None
        # Losses announced when the current generation formed (Heartbeat.watch).
        self._losses_at_formation = 0

    # ---- start ---------------------------------------------------------------------------

    def start(self, *, replacement: bool) -> None:
        """Joins the world: the first generation, or, for a replacement, the one the
        survivors re-form, receiving its state from a peer."""
        # What lives now (modules, the trainer's set-up) lives as long as the process: out of
        # the collector's reach, a recovery's full collection (world.forget) walks only what
        # the generations' groups and models made, a small part of the heap.
        gc.freeze()
        if not replacement:
            self.generation = self.coord.current_generation()
            self.coord.join(self.generation, this_member(self.rank, intact=True, step=0))
            self._form()
            # Bounded from the first step on: a resume's reads may keep ranks apart longer.
            self._unbounded = self.job.rebuild()
            dist.barrier()
            return
        self.coord.announce_loss()
        self.generation = self.coord.generation_for_replacement()
        self._rejoin(failed_step=-1, phases={}, started=time.time())

    # ---- the step ------------------------------------------------------------------------

    def begin(self, step: int) -> None:
        """Step `step` starts: its boundary is what a failed step returns to."""
        if self._unbounded is not None:
            world.bound_collectives(
                self._unbounded.get_all_groups(), self.settings.collective_timeout_s
            )
            self._unbounded = None
        self._boundary = self.job.train_state()
        self._step_started = (time.monotonic(), time.time())
        self.heartbeat.watch(self.generation, step, self._losses_at_formation)

    def failed(self, step: int, error: Exception) -> None:
        """A collective of step `step` failed: abandon the groups at once, so peers blocked on
        this rank see the failure without waiting it out."""
        _say(f"rank {self.rank}: step {step} failed: {_first_line(error)}")
        # The traceback's frames hold the model, whose groups must go now.
        for e in (error, error.__context__, error.__cause__):
            if e is not None:
                e.__traceback__ = None
        self._abandon()

    def decide(self, step: int, loss: torch.Tensor | None, stop: bool) -> Decision:
        """The vote on step `step`: it commits when every rank has its gradients (`loss` is
        None where the step failed)."""
        ok = loss is not None and self._saved is None
        value = float(loss.detach()) if loss is not None else float("nan")
        return self.coord.decide(self.generation, step, ok=ok, stop=stop, loss=value)

    def recover(self, step: int) -> None:
        """Step `step` did not commit anywhere: re-form the groups with a replacement for any
        rank that is gone and go on from the step before."""
        detect_s = time.monotonic() - self._step_started[0]
        if self._saved is None:
            self._abandon()
        phases = {"detect": detect_s, "abort": self._abort_s}
        self._rejoin(failed_step=step, phases=phases, started=self._step_started[1])

    def committed(self) -> None:
        """A step committed: completes the pending recovery's record with its first step;
        the lowest rank that kept its state writes it."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        pending.phases_s["first_step"] = time.monotonic() - self._step_started[0]
        self.records.append(pending)
        self.on_recovered(pending)
        survivors = [
            r for r in range(self.settings.info.world_size) if r not in pending.replaced_ranks
        ]
        if survivors and self.rank == survivors[0]:
            record.append(self.out, pending)
        _say(
            f"rank {self.rank}: recovered in process at step {pending.resumed_step} "
            f"(generation {pending.generation}, state from {pending.state_source}, "
            f"replaced {pending.replaced_ranks})"
        )

    def close(self) -> None:
        self.heartbeat.stop()

    # ---- recovery ------------------------------------------------------------------------

    def _abandon(self) -> None:
        """Keeps this rank's shards (plain tensors, no mesh), aborts the groups, drops the
        job's model and forgets the groups."""
        t = time.monotonic()
        self._saved = [s.detach() for s in self.job.state_tensors()]
        world.abort(self.job.process_groups())
        self.job.release()
        world.forget()
        self._abort_s = time.monotonic() - t

    def _rejoin(self, failed_step: int, phases: dict[str, float], started: float) -> None:
        """Forms the next generation until one succeeds (RecoveryFallbackError after
        max_rounds)."""
        for attempt_round in range(self.settings.max_rounds):
            if attempt_round or self._saved is not None:
                self.generation = self.coord.next_generation(self.generation)
            try:
                replaced = self._round(phases)
            except COLLECTIVE_ERRORS as e:
                _say(
                    f"rank {self.rank}: recovery in generation {self.generation} "
                    f"failed: {_first_line(e)}"
                )
                world.abort(self.job.process_groups())
                self.job.release()
                world.forget()
                continue
            self._saved = None
            self._pending = record.RecoveryRecord(
                kind="in_process",
                state_source="peer" if replaced else "local",
                attempt=self.attempt,
                generation=self.generation,
                failed_step=failed_step,
                resumed_step=int(self._boundary["step"]),
                replaced_ranks=replaced,
                started_unix=started,
                phases_s=dict(phases),
            )
            return
        raise RecoveryFallbackError(
            f"in-process recovery: no generation formed in {self.settings.max_rounds} rounds; "
            "falling back to a checkpoint tier"
        )

    def _round(self, phases: dict[str, float]) -> list[int]:
        """One try: rendezvous, rebuild, transfer, and a barrier that says all went well.
        Returns the ranks that received their state from a peer."""
        saved = self._saved
        t = time.monotonic()
        step = int(self._boundary["step"]) if saved is not None else -1
        me = this_member(self.rank, intact=saved is not None, step=step)
        members = self.coord.join(self.generation, me)
        self._form()
        phases["rendezvous"] = time.monotonic() - t
        t = time.monotonic()
        mesh = self.job.rebuild()
        plan = transfer.plan(members, transfer.replica_groups(mesh), self.rank)
        self.before_transfer(self.generation)
        if saved is not None:
            transfer.copy_into(self.job.state_tensors(), saved)
        transfer.broadcast_shards(self.job.state_tensors(), plan, mesh)
        own = self._boundary if saved is not None else None
        self._boundary = transfer.agree_train_state(own, plan)
        self.job.load_train_state(self._boundary)
        dist.barrier()
        world.bound_collectives(mesh.get_all_groups(), self.settings.collective_timeout_s)
        phases["state_transfer"] = time.monotonic() - t
        return [m.rank for m in members if not m.intact]

    def _form(self) -> None:
        """Forms the generation every rank has joined (so every replacement in it has
        announced its loss)."""
        self._losses_at_formation = self.coord.losses()
        world.form(
            self.coord.process_group_store(self.generation),
            self.settings.info,
            init_timeout_s=self.settings.rendezvous_timeout_s,
        )


def is_replacement() -> bool:
    """Whether the launcher started this process in place of a lost rank."""
    return os.environ.get(ENV_ROLE) == REPLACEMENT


def attempt_of_environment() -> int:
    """The launch attempt (HPTRAIN_ATTEMPT): the store's keys of each attempt are its own."""
    return int(os.environ.get("HPTRAIN_ATTEMPT") or 0)


def connect(
    job: Recoverable,
    cfg: FaultConfig,
    info: DistInfo,
    out: Path,
    *,
    attempt: int,
    before_transfer: Callable[[int], None],
    on_recovered: Callable[[record.RecoveryRecord], None],
) -> InProcessRecovery:
    """This rank's in-process recovery, on the store the launcher hosts (ENV_STORE)."""
    address = os.environ.get(ENV_STORE)
    if not address:
        # Bad input, not a failure to retry: every restart would find the same environment.
        raise ConfigError(
            f"fault.recovery=in_process needs a launcher that hosts the recovery store and "
            f"replaces a lost rank ({ENV_STORE} is not set; training.launch does both); "
            "set fault.recovery=restart"
        )
    namespace = f"attempt{attempt}"
    coordinator = Coordinator(
        connect_store(address, cfg.recovery_rendezvous_s),
        namespace,
        info.rank,
        info.world_size,
        silence_s=cfg.recovery_silence_s,
        rendezvous_timeout_s=cfg.recovery_rendezvous_s,
    )
    heartbeat = Heartbeat(
        connect_store(address, cfg.recovery_rendezvous_s),
        namespace,
        info.rank,
        period_s=min(cfg.recovery_silence_s / 10, LOSS_NOTICE_S),
    )
    settings = RecoverySettings(info, cfg.recovery_collective_s, cfg.recovery_rendezvous_s)
    return InProcessRecovery(
        job,
        coordinator,
        heartbeat,
        settings,
        out,
        attempt=attempt,
        before_transfer=before_transfer,
        on_recovered=on_recovered,
    )


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def _say(line: str) -> None:
    sys.stdout.write(f"HPTRAIN recovery pid={os.getpid()} {line}\n")
    sys.stdout.flush()
