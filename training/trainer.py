"""The trainer: builds the components, then runs a step loop that reads top to bottom.

What is bound to the process groups (mesh, model, optimizer, loader, checkpointer) is built
by `rebuild`: once, or, under in-process recovery (fault.recovery=in_process,
training/recovery), again on each new generation of the groups after a rank was lost.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh

from training import float8, metrics, metrics_export, run_summary, tracking
from training.checkpoint.config import checkpoint_roots
from training.checkpoint.manager import CheckpointManager
from training.cli import SIGTERM_TIMEOUT_EXIT_CODE, UNSAVED_EXIT_CODE
from training.config import IN_PROCESS, JobConfig
from training.data import ResumableLoader, SampleTrace, build_source
from training.evaluation import Evaluator
from training.faults import FaultInjector, FaultPlan, trace_tier_reads
from training.init_from import load_pretrained
from training.model import Transformer
from training.optim import apply_config, build_optimizer, materialize_state
from training.parallel import (
    DistInfo,
    apply_parallelism,
    build_mesh,
    clip_grad_norm,
    data_parallel_rank,
    loss_context,
)
from training.presets import preset_global_batch
from training.recovery import driver, record, transfer
from training.run_identity import RunIdentity
from training.train_state import (
    ModelOptimizerState,
    TrainState,
    _local_rng_state,
    _set_local_rng_state,
)
from training.watchdog import Watchdog

__all__ = ["ModelOptimizerState", "TrainState", "Trainer", "install_signal_handlers"]


class Trainer:
    def __init__(
        self, cfg: JobConfig, out: Path, info: DistInfo, *, start_fresh: bool = False
    ) -> None:
        self.cfg, self.out, self.info = cfg, out, info
        self.start_fresh = start_fresh
        # First, so the endpoint answers while the model, data and checkpoints load.
        self.exporter = metrics_export.start(
            cfg.metrics.port, rank=info.rank, local_rank=info.local_rank
        )
        t = cfg.training
        # Sequences per forward/backward pass, and passes per step (gradient accumulation).
        self.micro_batch, self.micro_passes = cfg.micro_batches(info.world_size)
        torch.manual_seed(t.seed)
        np.random.seed(t.seed)
        random.seed(t.seed)
        self.identity = RunIdentity.of(cfg, info.world_size)
        self.faults = FaultInjector(FaultPlan.from_env(), info.rank, self._record_fault)
        trace_tier_reads(checkpoint_roots(cfg.checkpoint, out).values(), info.rank)
        # A rank started in place of a lost one receives its state from a peer replica.
        self.replacement = driver.is_replacement()
        self.ledger = self._open_ledger()
        self.attempt = self._attempt_of_ledger()
        # How the ranks agree on each step: builds the mesh and all on it (rebuild()).
        self.agreement = self._agree_on_steps()
        self.tracker = (
            tracking.start(cfg, out, self.identity, self.attempt) if info.is_main else None
        )
        self.watchdog = Watchdog(cfg.fault.watchdog_s)
        self._stop_requested = False
        # Why the run stops early: "sigterm" (a drain, a preemption) or "scale_event" (the
        # HyperPod elastic agent's SIGUSR1: save, exit 0, be restarted at a new world size).
        self._stop_reason = "sigterm"
        self._saved_after_sigterm = False
        # Rank 0 reads the job's start from the ledger once the attempt is recorded (run()).
        self._job_start = time.time()
        # Rank 0: the job's earlier attempts and in-process recoveries, for the live badput
        # figures (read once, not per step; a recovery that replaced rank 0 itself reaches
        # summary.json but not the live figures).
        self._earlier_records: list[metrics.AttemptRecord] = []
        self._in_process: list[record.RecoveryRecord] = []

    def _agree_on_steps(self) -> driver.StepAgreement:
        """The step agreement: one all-reduce per step, or the vote of in-process recovery,
        which forms the process groups itself (and again after a failure)."""
        if self.cfg.fault.recovery != IN_PROCESS:
            self.rebuild()
            return driver.AllReduceAgreement(self.info.world_size)
        recovery = driver.connect(
            self,
            self.cfg.fault,
            self.info,
            self.out,
            attempt=self.attempt,
            before_transfer=self.faults.before_transfer,
            on_recovered=self._on_recovered,
        )
        recovery.start(replacement=self.replacement)
        return recovery

    # ---- what is bound to the process groups (driver.Recoverable) -------------------------

    def rebuild(self) -> DeviceMesh:
        """The mesh and everything on it, built on the current process groups."""
        cfg, t, info = self.cfg, self.cfg.training, self.info
        # One mesh: (dp_replicate, dp_shard, tp); FSDP on its data-parallel part, TP on tp.
        self.mesh = build_mesh(cfg, info.world_size, info.device)
        self.dp_rank = data_parallel_rank(self.mesh)
        self.dp_size = cfg.data_parallel_size(info.world_size)
        self.model = self._build_model()
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg.optim, t.steps)
        # Full-size state from the start: DCP plans loads and sizes staging buffers from it.
        materialize_state(self.optimizer)
        self.loader = self._build_loader()
        self.evaluator = (
            Evaluator(cfg, self.model, info, self.mesh, self.micro_passes)
            if cfg.eval.batches
            else None
        )
        self.loader.trace = SampleTrace.from_env(info.world_size, info.rank)
        self.state = TrainState(self.scheduler, self.loader, info.world_size)
        self.checkpointer = self._build_checkpointer()
        if cfg.fault.recovery == IN_PROCESS:
            # A commit blocked on a lost rank gives up within the rendezvous bound, so the
            # thread left behind by a recovery ends (release); longer than any rank skew of a
            # commit.
            timeout = timedelta(seconds=cfg.fault.recovery_rendezvous_s)
            self.checkpointer.pg.set_timeout(timeout)
        self.faults.settle = self.checkpointer.wait
        return self.mesh

    def release(self) -> None:
        """Drops the mesh and everything on it. A checkpoint in flight is not waited for: its
        commit may be blocked on the lost rank (a gloo group cannot be aborted); it fails at
        its group's timeout (rebuild) and commits nothing."""
        self.faults.settle = lambda: None
        self.loader.close()
        del self.checkpointer, self.state, self.evaluator, self.loader
        del self.optimizer, self.scheduler, self.model, self.mesh

    def process_groups(self) -> list[ProcessGroup]:
        return [*self.mesh.get_all_groups(), self.checkpointer.pg]

    def state_tensors(self) -> list[torch.Tensor]:
        return transfer.state_tensors(self.optimizer)

    def train_state(self) -> dict[str, Any]:
        """What a rebuilt rank needs besides its shards, the same on every rank at a step
        boundary; the RNG streams too, which are alike on every rank (seeded alike, and no
        step draws from them)."""
        ckpt = self.checkpointer
        return {
            "step": self.state.step,
            "productive_s": self.state.productive_s,
            "scheduler": self.scheduler.state_dict(),
            "data": self.loader.state_dict(),
            "rng": _local_rng_state(),
            "attempt": self.attempt,
            "checkpoints": [ckpt.last_committed_step, ckpt.committed, ckpt.failed],
        }

    def load_train_state(self, state: dict[str, Any]) -> None:
        self.state.step = int(state["step"])
        self.state.productive_s = float(state["productive_s"])
        self.scheduler.load_state_dict(state["scheduler"])
        apply_config(self.optimizer, self.scheduler, self.cfg.optim)
        self.loader.load_state_dict(state["data"])
        _set_local_rng_state(state["rng"])
        self.attempt = int(state["attempt"])
        ckpt = self.checkpointer
        ckpt.last_committed_step, ckpt.committed, ckpt.failed = state["checkpoints"]
        ckpt.prepare_staging()

    def _build_model(self) -> Transformer:
        """The model on this rank's device, parallelised over the mesh, with initial weights."""
        cfg, t, info = self.cfg, self.cfg.training, self.info
        with torch.device("meta"):
            model = Transformer(cfg.model, max_seq_len=t.seq_len)
        model = apply_parallelism(model, cfg, self.mesh, info.device)
        if info.is_main and cfg.chunked_loss_tokens() != t.loss_chunk_tokens:
            sys.stderr.write(
                f"hptrain: parallel.tp={cfg.parallel.tp}: the loss is vocabulary-parallel; "
                f"training.loss_chunk_tokens={t.loss_chunk_tokens} applies without tensor "
                "parallelism only\n"
            )
        model.to_empty(device=info.device)
        model.init_weights(t.seed)
        return model

    def _build_loader(self) -> ResumableLoader:
        """This data-parallel rank's loader: the ranks of a tensor-parallel group read the
        same samples."""
        cfg, t = self.cfg, self.cfg.training
        source = build_source(
            cfg.data.source,
            path=cfg.data.path,
            dtype=cfg.data.dtype,
            seq_len=t.seq_len,
            vocab_size=cfg.model.vocab_size,
            seed=cfg.data.seed,
            synthetic_samples=cfg.data.synthetic_samples,
        )
        return ResumableLoader(
            source,
            t.global_batch_size,
            self.dp_rank,
            self.dp_size,
            cfg.data.seed,
            self.info.device,
            prefetch_batches=cfg.data.prefetch_batches,
        )

    def _open_ledger(self) -> metrics.RunLedger | None:
        """Rank 0's run ledger, its attempt numbered as the launcher says (HPTRAIN_ATTEMPT)."""
        if not self.info.is_main:
            return None
        attempt_env = os.environ.get("HPTRAIN_ATTEMPT")
        # A replacement rank 0 goes on with the record its attempt's first process kept.
        return metrics.RunLedger(
            self.out, int(attempt_env) if attempt_env else None, reopen=self.replacement
        )

    def _attempt_of_ledger(self) -> int:
        """The attempt's number, rank 0's ledger's on every rank; under in-process recovery,
        whose groups do not exist yet, the launcher's (HPTRAIN_ATTEMPT)."""
        if self.cfg.fault.recovery == IN_PROCESS:
            return driver.attempt_of_environment()
        attempt: list[Any] = [self.ledger.record.attempt if self.ledger else None]
        dist.broadcast_object_list(attempt, src=0)
        return int(attempt[0])

    def _build_checkpointer(self) -> CheckpointManager:
        return CheckpointManager(
            self.cfg.checkpoint,
            self.out,
            {"model_optim": ModelOptimizerState(self.model, self.optimizer), "train": self.state},
            rank=self.info.rank,
            world_size=self.info.world_size,
            local_rank=self.info.local_rank,
            device=self.info.device,
            identity=self.identity,
            start_fresh=self.start_fresh,
            before_write=self.faults.checkpoint_writing,
            on_checkpoint_written=self.faults.checkpoint_written,
            on_committed=self._on_committed,
            on_reported=self._on_checkpoint_reported,
        )

    # ---- bookkeeping callbacks ----------------------------------------------------------------

    def _record_fault(self, fault: dict[str, Any]) -> None:
        metrics.write_fault(self.out, self.attempt, self.info.rank, fault)

    def _on_committed(self, step: int, tier: str, blocking_s: float) -> None:
        if self.ledger:
            self.ledger.record.checkpoints_committed += 1
            self.ledger.record.checkpoint_blocking_s = self.checkpointer.blocking_total_s
            self.ledger.record.checkpoints_failed = self.checkpointer.failed
            self.ledger.flush()
        if self.tracker:
            self.tracker.checkpoint(step, tier, blocking_s)
        if self.evaluator:
            self.evaluator.committed(step, tier, self.out, self.tracker)

    def _evaluate_if_durable(self, tier: str) -> None:
        """Before a checkpoint of the last (durable) tier: the held-out loss of the weights it
        will hold, recorded when it commits (evaluation.py)."""
        if self.evaluator and tier == self.cfg.checkpoint.final_tier:
            self.evaluator.evaluate(self.state.step)

    def _on_checkpoint_reported(self, step: int, tier: str, blocking_s: float, ok: bool) -> None:
        self.exporter.record_checkpoint(blocking_s, committed=ok)

    def _on_recovered(self, recovery: record.RecoveryRecord) -> None:
        self.exporter.record_recovery(recovery.phases_s)
        self._in_process.append(recovery)

    def request_stop(self, signum: int, _frame: Any) -> None:
        """SIGTERM and SIGUSR1 handler: finish the current step, save, exit 0
        (UNSAVED_EXIT_CODE when the save did not commit), all within the grace period.

        SIGUSR1 is how HyperPod's elastic agent announces a scaling event to the workers
        (hyperpod_elastic_agent/elastic_event_handler.py; the AWS elastic training guide has
        the loop check it after each batch, save a DCP checkpoint and return). The step's
        stop flag already makes every rank agree on the step, as the agent's "distributed"
        coordination does, so its package is not needed here."""
        if self._stop_requested:
            return
        self._stop_requested = True
        self._stop_reason = "scale_event" if signum == signal.SIGUSR1 else "sigterm"
        timer = threading.Timer(self.cfg.fault.sigterm_grace_s, self._grace_expired)
        timer.daemon = True
        timer.start()

    def _grace_expired(self) -> None:
        # The checkpoint decides the exit code: saved means nothing is lost.
        metrics.emit(
            f"HPTRAIN sigterm grace of {self.cfg.fault.sigterm_grace_s:.0f}s expired; exiting"
        )
        os._exit(0 if self._saved_after_sigterm else SIGTERM_TIMEOUT_EXIT_CODE)

    # ---- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        resumed_from = self._load_initial_state()
        metrics.log_start(
            self.info.rank,
            self.info.world_size,
            self.state.step,
            resumed_from,
            self.cfg.preset,
            self.cfg.training.global_batch_size,
            preset_global_batch(self.cfg.preset),
        )
        if self.ledger and not self.replacement:
            self.ledger.record.resumed_step = self.state.step
            self.ledger.record.resumed_from = resumed_from
            self.ledger.record.last_step = self.state.step
            self.ledger.flush()
        if self.ledger:
            records = self.ledger.all_records()
            self._job_start = metrics.job_start_unix(records)
            self._earlier_records = [r for r in records if r.attempt < self.ledger.record.attempt]
            self._in_process = record.read(self.out)
        self.watchdog.start()
        try:
            if self.replacement:
                # Where the survivors of the recovery go on: the boundary's checkpoint, due
                # and lost with the rank (a commit cut short), is written again.
                self.maybe_checkpoint()
            while self.state.step < self.cfg.training.steps:
                stop = self.train_step()
                self.maybe_checkpoint()
                if stop:
                    return self.shutdown_on_signal()
            return self.finish()
        finally:
            self.watchdog.stop()

    def _load_initial_state(self) -> str:
        """The state the run starts from: a checkpoint tier's, the pretrained weights, the
        initial ones, or (a replacement rank) the peer's it received. Returns its source."""
        if self.replacement:
            return "peer"
        resumed = self.checkpointer.resume()
        if resumed is not None:
            # The loaded param groups and schedule carry the old run's values.
            apply_config(self.optimizer, self.scheduler, self.cfg.optim)
            self._log_resize()
        elif self.cfg.training.init_from:
            report = load_pretrained(self.model, self.cfg.training.init_from, self.cfg.model)
            metrics.emit(
                f"HPTRAIN init_from rank={self.info.rank} read={report.elements_read} "
                f"total={report.elements_total} from={self.cfg.training.init_from}"
            )
        # Staging buffers are allocated now, in the background, while the first steps run.
        self.checkpointer.prepare_staging()
        return resumed.tier if resumed else "none"

    def train_step(self) -> bool:
        """One optimizer step; returns True when any rank has been asked to stop. A step that
        a lost rank kept from committing is run again once its groups are re-formed
        (in-process recovery)."""
        step = self.state.step + 1
        self.watchdog.beat(self.state.step)
        self.faults.before_step(step)
        self.agreement.begin(step)
        t0 = time.perf_counter()

        loss: torch.Tensor | None = None
        data_wait = 0.0
        try:
            inputs, labels = self.loader.next_batch()
            self.faults.batch_read()
            data_wait = time.perf_counter() - t0
            loss = self.forward_backward(inputs, labels)
            self.faults.mid_step(step)
            clip_grad_norm(self.model.parameters(), self.cfg.training.grad_clip)
        except self.agreement.peer_failures as error:
            self.agreement.failed(step, error)
        # Every rank agrees on the step before any applies it; its mean loss comes with it.
        decision = self.agreement.decide(step, loss, self._stop_requested)
        if not decision.commit:
            self.agreement.recover(step)
            return False

        # The in-flight checkpoint copies parameters in the background during forward and
        # backward; the update must not start before that copy is complete.
        staging_wait = self.checkpointer.wait_for_staging()
        self.optimizer.step()
        if self.cfg.training.float8:
            float8.precompute_scales(self.model)  # for the next step's FP8 all-gathers
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

        step_time = time.perf_counter() - t0 - staging_wait - data_wait
        self.state.step = step
        self.state.productive_s += step_time
        self.watchdog.beat(step)
        self.agreement.committed()
        self._log_step(step, decision.mean_loss, step_time, data_wait)
        return decision.stop

    def forward_backward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Forward and backward over this rank's batch, `training.micro_batch_size` sequences
        per pass; returns the batch's mean loss, detached.

        Each pass's loss is weighted 1/passes, so the accumulated gradients are those of the
        batch's mean loss when every pass counts the same number of tokens: true here, since
        the loaders never emit the loss's IGNORE_INDEX (a loader that masks tokens must weight
        each pass by its counted tokens instead). FSDP reduce-scatters after every pass into
        the sharded gradients (no unsharded gradients are kept between passes: the memory
        plan's assumption).
        """
        passes = self.micro_passes
        total = torch.zeros((), device=inputs.device)
        # Under tensor parallelism the loss is vocabulary-parallel, backward included.
        with loss_context(self.mesh):
            for x, y in zip(inputs.chunk(passes), labels.chunk(passes), strict=True):
                loss: torch.Tensor = self.model(x, y)
                (loss / passes).backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
                total += loss.detach()
        return total / passes

    def maybe_checkpoint(self) -> None:
        self.checkpointer.poll()
        tier = self.cfg.checkpoint.tier_due(self.state.step)
        # A step run again after an in-process recovery may have committed its checkpoint.
        done = (
            tier is not None and self.checkpointer.last_committed_step.get(tier) == self.state.step
        )
        if tier is not None and not done and self.state.step < self.cfg.training.steps:
            self._evaluate_if_durable(tier)
            self.checkpointer.save(self.state.step, tier)

    def _log_resize(self) -> None:
        """One line on rank 0 when the checkpoint was written by another world size."""
        changes = {c.key: c.old for c in self.checkpointer.resumed_changes}
        if self.ledger is None or "world_size" not in changes:
            return
        old_world = int(changes["world_size"])
        old_tp = int(changes.get("parallel.tp", self.cfg.parallel.tp))
        metrics.log_resize(
            old_world,
            self.info.world_size,
            old_world // old_tp,
            self.dp_size,
            self.state.step,
            self.loader.consumed_samples,
            self.cfg.training.global_batch_size,
            self.micro_batch,
            self.micro_passes,
        )

    def _log_step(self, step: int, loss: float, step_time: float, data_wait: float) -> None:
        ledger = self.ledger
        if ledger is None:  # rank 0 alone logs steps and keeps the ledger
            return
        t = self.cfg.training
        # The global batch's tokens: each sample counted once, not once per tensor-parallel
        # rank that reads it.
        tokens_per_s = t.global_batch_size * t.seq_len / step_time
        metrics.log_step(step, loss, tokens_per_s, t.global_batch_size / step_time, step_time)
        if self.tracker:
            self.tracker.log_step(
                step, {"loss": loss, "tokens_per_s": tokens_per_s, "step_time_s": step_time}
            )
        rec = ledger.record
        now = time.time()
        self.exporter.record_step(
            step_time, tokens_per_s, metrics.goodput(self.state.productive_s, self._job_start, now)
        )
        if rec.first_step_unix is None:
            # The whole first step, its batch's wait too: start-up ends where it began.
            rec.first_step_unix, rec.first_step_s = now, step_time + data_wait
            ledger.flush()
        rec.last_step, rec.last_step_unix = step, now
        rec.checkpoint_blocking_s = self.checkpointer.blocking_total_s
        rec.checkpoints_failed = self.checkpointer.failed
        rec.data_wait_s += data_wait
        ledger.flush()
        self.exporter.record_badput(
            run_summary.badput_so_far(
                [*self._earlier_records, rec],
                self._in_process,
                steps=step,
                productive_s=self.state.productive_s,
            )
        )

    # ---- endings --------------------------------------------------------------------------

    def _save_final(self, tier: str, *, evaluate: bool = True) -> bool:
        """Saves the current step to `tier` unless it is there already; True when committed
        (the same on every rank: the commit's outcome is agreed). `evaluate`: the held-out
        loss first, as for any durable checkpoint (not within a SIGTERM's grace period)."""
        self.watchdog.beat(self.state.step)
        self.checkpointer.wait()
        if self.checkpointer.last_committed_step.get(tier) != self.state.step:
            if evaluate:
                self._evaluate_if_durable(tier)
            self.checkpointer.save(self.state.step, tier, sync=True)
        self.watchdog.beat(self.state.step)
        return self.checkpointer.last_committed_step.get(tier) == self.state.step

    def shutdown_on_signal(self) -> int:
        # The durable tier by default: after a drain or a scale-down the next world may not
        # have this node's memory or NVMe.
        tier = self.cfg.checkpoint.sigterm_tier
        self._saved_after_sigterm = self._save_final(tier, evaluate=False)
        return self._summarise(self._stop_reason, tier, self._saved_after_sigterm)

    def finish(self) -> int:
        tier = self.cfg.checkpoint.final_tier
        return self._summarise("completed", tier, self._save_final(tier))

    def _summarise(self, reason: str, tier: str, saved: bool) -> int:
        """Summary and exit code: 0 when the final checkpoint committed, else UNSAVED_EXIT_CODE
        with one line saying so."""
        self.watchdog.beat(self.state.step)
        self.checkpointer.close()
        full = get_model_state_dict(
            self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        if self.ledger is not None:  # rank 0
            self._write_summary(self.ledger, reason, full, saved)
            if not saved:
                metrics.log_unsaved(self.state.step, tier, UNSAVED_EXIT_CODE)
        return 0 if saved else UNSAVED_EXIT_CODE

    def teardown(self) -> None:
        """Orderly end on every rank, after the summary: no rank leaves while a peer still
        uses a group, and no background thread or group outlives the process group."""
        dist.barrier()
        self.loader.close()
        self.checkpointer.close()
        self.checkpointer.destroy_group()
        self.agreement.close()
        self.exporter.close()

    def _write_summary(
        self, ledger: metrics.RunLedger, reason: str, full: dict[str, Any], saved: bool
    ) -> None:
        export = self.cfg.checkpoint.export_final and reason == "completed"
        end = run_summary.RunEnd(
            steps=self.state.step,
            target_steps=self.cfg.training.steps,
            reason=reason,
            preset=self.cfg.preset,
            world_size=self.info.world_size,
            productive_s=self.state.productive_s,
            saved=saved,
            last_checkpoint=dict(self.checkpointer.last_committed_step),
            params_sha256=metrics.params_sha256(full),
            export_path=run_summary.export_final(full, self.out) if export else None,
        )
        rec = ledger.record
        rec.ended = reason if saved else f"{reason}_unsaved"
        rec.last_step = self.state.step
        rec.checkpoint_blocking_s = self.checkpointer.blocking_total_s
        rec.checkpoints_failed = self.checkpointer.failed
        ledger.flush()
        summary = run_summary.summary(end, rec, ledger.all_records(), self.out)
        metrics.write_summary(self.out, summary)
        if self.tracker:
            self.tracker.finish(summary)


def install_signal_handlers(trainer: Trainer) -> None:
    signal.signal(signal.SIGTERM, trainer.request_stop)
    signal.signal(signal.SIGUSR1, trainer.request_stop)
