"""The trainer: builds the components once, then runs a step loop that reads top to bottom."""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from training import fileio, metrics, metrics_export, tracking
from training.checkpoint.manager import CheckpointManager, IncompatibleCheckpointError, warn
from training.cli import SIGTERM_TIMEOUT_EXIT_CODE, UNSAVED_EXIT_CODE
from training.config import JobConfig
from training.data import ResumableLoader, SampleTrace, build_source
from training.evaluation import Evaluator
from training.faults import FaultInjector, FaultPlan
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
from training.run_identity import RunIdentity
from training.watchdog import Watchdog


class ModelOptimizerState(Stateful):
    """Sharded model + optimizer state through the FSDP-aware state_dict helpers."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optim"],
        )


def _local_rng_state() -> dict[str, Any]:
    """This rank's RNG streams as JSON-ready data: a checkpoint holds them as JSON text, which
    loads without unpickling (training/checkpoint/safe_load.py)."""
    numpy_state = np.random.get_state(legacy=False)
    version, words, gauss = random.getstate()
    return {
        "torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode(),
        # This rank's GPU only: a restart may see another number of devices per process.
        "cuda": base64.b64encode(torch.cuda.get_rng_state().numpy().tobytes()).decode()
        if torch.cuda.is_available()
        else "",
        "numpy": dict(
            numpy_state, state=dict(numpy_state["state"], key=numpy_state["state"]["key"].tolist())
        ),
        "python": [version, list(words), gauss],
    }


def _set_local_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(
        torch.frombuffer(bytearray(base64.b64decode(state["torch"])), dtype=torch.uint8)
    )
    cuda = base64.b64decode(state["cuda"])
    if torch.cuda.is_available() and cuda:
        torch.cuda.set_rng_state(torch.frombuffer(bytearray(cuda), dtype=torch.uint8))
    numpy_state = state["numpy"]
    key = np.array(numpy_state["state"]["key"], dtype=np.uint32)
    np.random.set_state(dict(numpy_state, state=dict(numpy_state["state"], key=key)))
    version, words, gauss = state["python"]
    random.setstate((version, tuple(words), gauss))


class TrainState(Stateful):
    """Step counter, LR schedule, data position, RNG streams and goodput accounting."""

    def __init__(
        self,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        loader: ResumableLoader,
        world_size: int,
    ) -> None:
        self.scheduler, self.loader, self.world_size = scheduler, loader, world_size
        self.step = 0
        # Step time of the steps in this model's lineage: rolled back with the checkpoint, so
        # a step redone after a failure is counted once (see metrics.GOODPUT_DEFINITION).
        self.productive_s = 0.0

    def state_dict(self) -> dict[str, Any]:
        # RNG streams are per rank: gather them so one object holds all ranks, in rank order.
        per_rank: list[Any] = [None] * self.world_size
        dist.all_gather_object(per_rank, _local_rng_state())
        return {
            "step": self.step,
            "productive_s": self.productive_s,
            "scheduler": self.scheduler.state_dict(),
            "data": self.loader.state_dict(),
            "rng": json.dumps(per_rank),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.step = int(state_dict["step"])
        self.productive_s = float(state_dict["productive_s"])
        self.scheduler.load_state_dict(state_dict["scheduler"])
        try:
            self.loader.load_state_dict(state_dict["data"])
        except ValueError as e:
            raise IncompatibleCheckpointError(str(e)) from None
        rng = state_dict["rng"]
        if not isinstance(rng, str):
            # Written before the streams were JSON: a pickle, which is never loaded.
            warn("checkpoint holds RNG streams in the old pickled format: not restored")
            return
        per_rank = json.loads(rng)
        if len(per_rank) == self.world_size:
            _set_local_rng_state(per_rank[dist.get_rank()])


class Trainer:
    def __init__(
        self, cfg: JobConfig, out: Path, info: DistInfo, *, start_fresh: bool = False
    ) -> None:
        self.cfg, self.out, self.info = cfg, out, info
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
        self.ledger = self._open_ledger()
        attempt: list[Any] = [self.ledger.record.attempt if self.ledger else None]
        dist.broadcast_object_list(attempt, src=0)
        self.attempt: int = attempt[0]
        self.faults = FaultInjector(FaultPlan.from_env(), info.rank, self._record_fault)
        identity = RunIdentity.of(cfg, info.world_size)
        self.tracker = tracking.start(cfg, out, identity, self.attempt) if info.is_main else None
        self.checkpointer = CheckpointManager(
            cfg.checkpoint,
            out,
            {"model_optim": ModelOptimizerState(self.model, self.optimizer), "train": self.state},
            rank=info.rank,
            world_size=info.world_size,
            local_rank=info.local_rank,
            device=info.device,
            identity=identity,
            start_fresh=start_fresh,
            before_write=self.faults.checkpoint_writing,
            on_checkpoint_written=self.faults.checkpoint_written,
            on_committed=self._on_committed,
            on_reported=self._on_checkpoint_reported,
        )
        self.faults.settle = self.checkpointer.wait
        self.watchdog = Watchdog(cfg.fault.watchdog_s)
        self._stop_requested = False
        # Why the run stops early: "sigterm" (a drain, a preemption) or "scale_event" (the
        # HyperPod elastic agent's SIGUSR1: save, exit 0, be restarted at a new world size).
        self._stop_reason = "sigterm"
        self._saved_after_sigterm = False
        # Rank 0 reads the job's start from the ledger once the attempt is recorded (run()).
        self._job_start = time.time()

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
        return metrics.RunLedger(self.out, int(attempt_env) if attempt_env else None)

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
        metrics.log_start(
            self.info.rank,
            self.info.world_size,
            self.state.step,
            resumed.tier if resumed else "none",
            self.cfg.preset,
            self.cfg.training.global_batch_size,
            preset_global_batch(self.cfg.preset),
        )
        if self.ledger:
            self.ledger.record.resumed_step = self.state.step
            self.ledger.record.resumed_from = resumed.tier if resumed else "none"
            self.ledger.record.last_step = self.state.step
            self.ledger.flush()
            self._job_start = metrics.job_start_unix(self.ledger.all_records())
        self.watchdog.start()
        try:
            while self.state.step < self.cfg.training.steps:
                stop = self.train_step()
                self.maybe_checkpoint()
                if stop:
                    return self.shutdown_on_signal()
            return self.finish()
        finally:
            self.watchdog.stop()

    def train_step(self) -> bool:
        """One optimizer step; returns True when any rank has been asked to stop."""
        step = self.state.step + 1
        self.watchdog.beat(self.state.step)
        self.faults.before_step(step)
        t0 = time.perf_counter()

        inputs, labels = self.loader.next_batch()
        loss = self.forward_backward(inputs, labels)
        self.faults.mid_step(step)
        clip_grad_norm(self.model.parameters(), self.cfg.training.grad_clip)

        # The in-flight checkpoint copies parameters in the background during forward and
        # backward; the update must not start before that copy is complete.
        staging_wait = self.checkpointer.wait_for_staging()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

        # One small all-reduce carries the loss for logging and the stop flag, so every rank
        # agrees on the step at which a SIGTERM takes effect. The mean over the world is the
        # mean over data-parallel ranks: the ranks of a tensor-parallel group hold one loss.
        flags = torch.stack(
            [loss.detach().float(), torch.tensor(float(self._stop_requested), device=loss.device)]
        )
        dist.all_reduce(flags)
        loss_avg, stop = (flags[0] / self.info.world_size).item(), flags[1].item() > 0

        step_time = time.perf_counter() - t0 - staging_wait
        self.state.step = step
        self.state.productive_s += step_time
        self.watchdog.beat(step)
        self._log_step(step, loss_avg, step_time)
        return stop

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
        if tier is not None and self.state.step < self.cfg.training.steps:
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

    def _log_step(self, step: int, loss: float, step_time: float) -> None:
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
            rec.first_step_unix = now
            ledger.flush()
        rec.last_step, rec.last_step_unix = step, now
        rec.checkpoint_blocking_s = self.checkpointer.blocking_total_s
        rec.checkpoints_failed = self.checkpointer.failed
        ledger.flush()

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
        self.exporter.close()

    def _write_summary(
        self, ledger: metrics.RunLedger, reason: str, full: dict[str, Any], saved: bool
    ) -> None:
        digest = metrics.params_sha256(full)
        export_path = None
        if self.cfg.checkpoint.export_final and reason == "completed":
            export_path = self.out / "final" / "model.pt"
            tmp = fileio.part_path(export_path)
            try:
                export_path.parent.mkdir(parents=True, exist_ok=True)
                torch.save(full, tmp)
                fileio.replace_durably(tmp, export_path)
            except (OSError, RuntimeError) as e:  # torch.save reports a full disk as RuntimeError
                tmp.unlink(missing_ok=True)
                sys.stderr.write(f"hptrain: final export to {export_path} failed: {e}\n")
                export_path = None
        rec = ledger.record
        rec.ended = reason if saved else f"{reason}_unsaved"
        rec.last_step = self.state.step
        rec.checkpoint_blocking_s = self.checkpointer.blocking_total_s
        rec.checkpoints_failed = self.checkpointer.failed
        ledger.flush()
        records = ledger.all_records()
        wall = metrics.wall_time_s(metrics.job_start_unix(records), time.time())
        recoveries = metrics.recovery_stats(records)
        summary = {
            "steps": self.state.step,
            "target_steps": self.cfg.training.steps,
            "exit_reason": reason,
            "preset": self.cfg.preset,
            "world_size": self.info.world_size,
            "goodput": self.state.productive_s / wall,
            "goodput_definition": metrics.GOODPUT_DEFINITION,
            "productive_step_time_s": self.state.productive_s,
            "wall_time_s": wall,
            "checkpoint_blocking_s_total": sum(r.checkpoint_blocking_s for r in records),
            "checkpoints_committed": sum(r.checkpoints_committed for r in records),
            "checkpoints_failed": sum(r.checkpoints_failed for r in records),
            # False: the run ended but its last steps are in no checkpoint (exit code 5).
            "final_checkpoint_committed": saved,
            "restarts": len(records) - 1,
            "steps_lost_total": sum(r["steps_lost"] for r in recoveries),
            "recoveries": recoveries,
            "resumed_from": {"tier": rec.resumed_from, "step": rec.resumed_step},
            "last_checkpoint": {
                tier: step for tier, step in sorted(self.checkpointer.last_committed_step.items())
            },
            "final_params_sha256": digest,
            "export_path": str(export_path) if export_path else None,
        }
        metrics.write_summary(self.out, summary)
        if self.tracker:
            self.tracker.finish(summary)


def install_signal_handlers(trainer: Trainer) -> None:
    signal.signal(signal.SIGTERM, trainer.request_stop)
    signal.signal(signal.SIGUSR1, trainer.request_stop)
