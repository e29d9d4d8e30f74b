"""The step protocol and the recovery itself, for any job that can rebuild its model.

Each step: forward, backward and gradient clipping (every collective of the step), then the
vote (coordination.Coordinator.decide), then the update, which is local. A step whose vote
does not commit is discarded on every rank, so the survivors of a failure all stand at the
same step boundary with the same state. Then: abandon the old groups, meet the replacement in
the next generation, rebuild the model on the new mesh, fill it (a survivor from its own
shards, a replacement from an intact replica peer) and run the step again.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from training.recovery import record, transfer, world
from training.recovery.coordination import Coordinator, Decision, RecoveryFallbackError, this_member


class Recoverable(Protocol):
    """What a job gives the driver. `step` is the number of committed steps."""

    step: int

    def rebuild(self, mesh: DeviceMesh) -> None:
        """Creates the model, optimizer and anything else bound to the mesh, afresh."""

    def release(self) -> None:
        """Drops every reference to the mesh and its groups (model, optimizer, mesh)."""

    def state_tensors(self) -> list[torch.Tensor]:
        """This rank's shards of model and optimizer state (transfer.state_tensors)."""

    def train_state(self) -> dict[str, Any]:
        """Step, schedule, data position: the same on every intact rank."""

    def load_train_state(self, state: dict[str, Any]) -> None: ...

    def compute(self) -> float:
        """Forward, backward and clipping of step `step + 1`: every collective of the step.
        Returns this rank's loss."""

    def apply(self) -> None:
        """The local update; increments `step`."""

    def discard(self) -> None:
        """Forgets the gradients; the next compute() runs the same batch again."""


@dataclass(frozen=True)
class RecoverySettings:
    rank: int
    world_size: int
    device: torch.device
    collective_timeout_s: float
    init_timeout_s: float
    # In-process recoveries tried for one failure before falling back to a checkpoint tier.
    max_rounds: int = 3


@dataclass(frozen=True)
class RecoveryHooks:
    """Fault injection points for tests; `before_transfer` gets the generation."""

    before_transfer: Callable[[int], None] = lambda _generation: None


# Failures a collective or the store reports; anything else is a bug and ends the process.
COLLECTIVE_ERRORS = (RuntimeError, dist.DistError)


class InProcessRecovery:
    def __init__(
        self,
        job: Recoverable,
        coordinator: Coordinator,
        build_mesh: Callable[[], DeviceMesh],
        settings: RecoverySettings,
        out: Path,
        hooks: RecoveryHooks | None = None,
    ) -> None:
        self.job, self.coord, self.build_mesh = job, coordinator, build_mesh
        self.settings, self.out = settings, out
        self.hooks = hooks or RecoveryHooks()
        self.generation = -1
        self.metrics = record.RecoveryMetrics()
        self.records: list[record.RecoveryRecord] = []
        # A recovery waiting for its first committed step, and when that step started.
        self._pending: record.RecoveryRecord | None = None
        self._mesh: DeviceMesh | None = None
        self._replaced: list[int] = []
        # A survivor's train state at the boundary, kept while its model is rebuilt.
        self._train_state: dict[str, Any] = {}

    # ---- start ---------------------------------------------------------------------------

    def start(self, *, replacement: bool) -> None:
        """Joins the world: the first generation, or, for a replacement, the one the
        survivors re-form, receiving its state from a peer."""
        rank = self.settings.rank
        if not replacement:
            self.generation = self.coord.current_generation()
            me = this_member(rank, intact=True, step=self.job.step)
            members = self.coord.join(self.generation, me)
            self.job.rebuild(self._form())
            transfer.plan(members, transfer.replica_groups(self._mesh_now()), rank)
            dist.barrier()
            world.bound_collectives(self.settings.collective_timeout_s)
            return
        self.generation = self.coord.generation_for_replacement()
        self._rejoin(saved=None, failed_step=-1, phases={}, started=time.time())

    # ---- the step ------------------------------------------------------------------------

    def step(self, *, stop: bool = False) -> Decision:
        """Runs step `job.step + 1` once; on a failure, recovers and returns a decision that
        did not commit (the caller runs the step again)."""
        t0, started = time.monotonic(), time.time()
        saved: list[torch.Tensor] | None = None
        abort_s = 0.0
        try:
            loss, ok = self.job.compute(), True
        except COLLECTIVE_ERRORS as e:
            loss, ok = float("nan"), False
            _say(f"rank {self.settings.rank}: step {self.job.step + 1} failed: {_first_line(e)}")
            # At once: peers blocked on this rank see the failure without waiting it out.
            saved, abort_s = self._abandon()
        decision = self.coord.decide(
            self.generation, self.job.step + 1, ok=ok, stop=stop, loss=loss
        )
        if decision.commit:
            self.job.apply()
            self._first_step_done(t0)
            return decision
        detect_s = time.monotonic() - t0
        self.job.discard()
        if saved is None:
            saved, abort_s = self._abandon()
        phases = {"detect": detect_s, "abort": abort_s}
        self._rejoin(saved=saved, failed_step=self.job.step + 1, phases=phases, started=started)
        return decision

    # ---- recovery ------------------------------------------------------------------------

    def _abandon(self) -> tuple[list[torch.Tensor], float]:
        """Keeps this rank's shards (plain tensors, no mesh), drops the job's model and the
        process groups; returns the shards and the seconds it took."""
        t = time.monotonic()
        saved = [s.detach() for s in self.job.state_tensors()]
        self._train_state = self.job.train_state()
        self.job.release()
        self._mesh = None
        world.abandon()
        return saved, time.monotonic() - t

    def _rejoin(
        self,
        saved: list[torch.Tensor] | None,
        failed_step: int,
        phases: dict[str, float],
        started: float,
    ) -> None:
        """Forms the next generation until one succeeds (RecoveryFallbackError after max_rounds)."""
        for _round in range(self.settings.max_rounds):
            if _round or saved is not None:
                self.generation = self.coord.next_generation(self.generation)
            try:
                self._round(saved, phases)
            except COLLECTIVE_ERRORS as e:
                _say(
                    f"rank {self.settings.rank}: recovery in generation {self.generation} "
                    f"failed: {_first_line(e)}"
                )
                self.job.release()
                self._mesh = None
                world.abandon()
                continue
            self._pending = record.RecoveryRecord(
                kind="in_process",
                state_source="peer" if self._replaced else "local",
                generation=self.generation,
                failed_step=failed_step,
                resumed_step=self.job.step,
                replaced_ranks=self._replaced,
                started_unix=started,
                phases_s=dict(phases),
            )
            return
        raise RecoveryFallbackError(
            f"in-process recovery: no generation formed in {self.settings.max_rounds} rounds; "
            "falling back to a checkpoint tier"
        )

    def _round(self, saved: list[torch.Tensor] | None, phases: dict[str, float]) -> None:
        """One try: rendezvous, rebuild, transfer, and a barrier that says all went well."""
        rank = self.settings.rank
        t = time.monotonic()
        me = this_member(rank, intact=saved is not None, step=self.job.step)
        members = self.coord.join(self.generation, me)
        mesh = self._form()
        phases["rendezvous"] = time.monotonic() - t
        t = time.monotonic()
        plan = transfer.plan(members, transfer.replica_groups(mesh), rank)
        self._replaced = [m.rank for m in members if not m.intact]
        self.hooks.before_transfer(self.generation)
        self.job.rebuild(mesh)
        if saved is not None:
            transfer.copy_into(self.job.state_tensors(), saved)
            self.job.load_train_state(self._train_state)
        state = transfer.broadcast_state(
            self.job.state_tensors(), self.job.train_state(), plan, mesh
        )
        if saved is None:
            self.job.load_train_state(state)
        dist.barrier()
        world.bound_collectives(self.settings.collective_timeout_s)
        phases["state_transfer"] = time.monotonic() - t

    def _form(self) -> DeviceMesh:
        s = self.settings
        self._mesh = world.form(
            self.coord.process_group_store(self.generation),
            s.rank,
            s.world_size,
            s.device,
            self.build_mesh,
            init_timeout_s=s.init_timeout_s,
        )
        return self._mesh

    def _mesh_now(self) -> DeviceMesh:
        if self._mesh is None:
            raise RuntimeError("no process groups are formed")
        return self._mesh

    def _first_step_done(self, t0: float) -> None:
        """Completes the pending recovery's record with its first committed step; the lowest
        rank that kept its state writes it."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        pending.phases_s["first_step"] = time.monotonic() - t0
        self.records.append(pending)
        self.metrics.observe(pending)
        survivors = [r for r in range(self.settings.world_size) if r not in pending.replaced_ranks]
        if survivors and self.settings.rank == survivors[0]:
            record.append(self.out, pending)
        _say(
            f"rank {self.settings.rank}: recovered in process at step {pending.resumed_step} "
            f"(generation {pending.generation}, state from {pending.state_source}, "
            f"replaced {pending.replaced_ranks})"
        )


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def _say(line: str) -> None:
    sys.stdout.write(f"HPTRAIN recovery pid={os.getpid()} {line}\n")
    sys.stdout.flush()
