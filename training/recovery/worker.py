"""One rank of a job that recovers in process, built from the trainer's own parts.

    python -m training.recovery.worker --out DIR [--preset tiny] [--set section.field=value]

Started by training.recovery.supervisor, which hosts the store and replaces a dead rank.
The model, HSDP sharding, optimizer, schedule and data loader are the trainer's; the loop is
the driver's step protocol. At the end every rank writes `rank<R>.json` into DIR (its
process id, role and recoveries; rank 0 also the final parameters' SHA-256, as the trainer's
summary does), and a RecoveryFallbackError exits FALLBACK_EXIT_CODE with its one line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh

from training import metrics
from training.config import JobConfig
from training.data import ResumableLoader, TokenSource, build_source
from training.model import Transformer
from training.optim import build_optimizer, materialize_state
from training.parallel import apply_parallelism, build_mesh, clip_grad_norm, data_parallel_rank
from training.presets import build_config
from training.recovery import (
    ENV_ROLE,
    ENV_STORE,
    ENV_TEST_FAULTS,
    FALLBACK_EXIT_CODE,
    RecoveryTimeouts,
)
from training.recovery.coordination import Coordinator, RecoveryFallbackError, connect_store
from training.recovery.driver import InProcessRecovery, RecoveryHooks, RecoverySettings

_NO_MODEL = "the model is not built (rebuild() first)"


class HsdpJob:
    """The trainer's model, optimizer and data under the driver's Recoverable protocol."""

    def __init__(self, cfg: JobConfig, device: torch.device, world_size: int) -> None:
        self.cfg, self.device, self.world_size = cfg, device, world_size
        t = cfg.training
        self.source: TokenSource = build_source(
            cfg.data.source,
            path=cfg.data.path,
            dtype=cfg.data.dtype,
            seq_len=t.seq_len,
            vocab_size=cfg.model.vocab_size,
            seed=cfg.data.seed,
            synthetic_samples=cfg.data.synthetic_samples,
        )
        self.step = 0
        self.model: Transformer | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        self.loader: ResumableLoader | None = None
        self.batch: tuple[torch.Tensor, torch.Tensor] | None = None
        self.data_at_boundary: dict[str, Any] | None = None

    def rebuild(self, mesh: DeviceMesh) -> None:
        cfg, t = self.cfg, self.cfg.training
        torch.manual_seed(t.seed)
        with torch.device("meta"):
            model = Transformer(cfg.model, max_seq_len=t.seq_len)
        self.model = apply_parallelism(model, cfg, mesh, self.device)
        self.model.to_empty(device=self.device)
        self.model.init_weights(t.seed)
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg.optim, t.steps)
        materialize_state(self.optimizer)
        self.loader = ResumableLoader(
            self.source,
            t.global_batch_size,
            data_parallel_rank(mesh),
            cfg.data_parallel_size(self.world_size),
            cfg.data.seed,
            self.device,
        )
        self.batch = None
        self.data_at_boundary = self.loader.state_dict()

    def release(self) -> None:
        if self.loader is not None:
            self.loader.close()
        self.model = self.optimizer = self.scheduler = self.loader = None
        self.batch = None

    def state_tensors(self) -> list[torch.Tensor]:
        from training.recovery.transfer import state_tensors

        if self.model is None or self.optimizer is None:
            raise RuntimeError(_NO_MODEL)
        return state_tensors(self.model, self.optimizer)

    def train_state(self) -> dict[str, Any]:
        if self.scheduler is None:
            raise RuntimeError(_NO_MODEL)
        return {
            "step": self.step,
            "scheduler": self.scheduler.state_dict(),
            "data": self.data_at_boundary,
        }

    def load_train_state(self, state: dict[str, Any]) -> None:
        if self.scheduler is None or self.optimizer is None or self.loader is None:
            raise RuntimeError(_NO_MODEL)
        self.step = int(state["step"])
        self.scheduler.load_state_dict(state["scheduler"])
        # The schedule's current rate into the rebuilt optimizer, as a resume does.
        for group, lr in zip(
            self.optimizer.param_groups, self.scheduler.get_last_lr(), strict=True
        ):
            group["lr"] = lr
        self.loader.load_state_dict(state["data"])
        self.data_at_boundary = self.loader.state_dict()
        self.batch = None

    def compute(self) -> float:
        if self.model is None or self.loader is None:
            raise RuntimeError(_NO_MODEL)
        if self.batch is None:
            self.batch = self.loader.next_batch()
        inputs, labels = self.batch
        loss: torch.Tensor = self.model(inputs, labels)
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        _TestFaults.current.mid_step(self.step + 1)
        clip_grad_norm(self.model.parameters(), self.cfg.training.grad_clip)
        return float(loss.detach())

    def apply(self) -> None:
        if self.optimizer is None or self.scheduler is None or self.loader is None:
            raise RuntimeError(_NO_MODEL)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.batch = None
        self.data_at_boundary = self.loader.state_dict()

    def discard(self) -> None:
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        self.batch = None


class _TestFaults:
    """Kills armed by the supervisor for the first processes only (never a replacement):
    `kill` [[rank, step], ...] between backward and the update, `kill_in_transfer`
    [rank, generation] just before that generation's state transfer."""

    current: _TestFaults

    def __init__(self, rank: int, raw: str) -> None:
        plan = json.loads(raw) if raw else {}
        self.rank = rank
        self.kill_steps = {int(s) for r, s in plan.get("kill", []) if int(r) == rank}
        transfer = plan.get("kill_in_transfer")
        self.kill_generation = int(transfer[1]) if transfer and int(transfer[0]) == rank else None

    def mid_step(self, step: int) -> None:
        if step in self.kill_steps:
            os.kill(os.getpid(), signal.SIGKILL)

    def before_transfer(self, generation: int) -> None:
        if generation == self.kill_generation:
            os.kill(os.getpid(), signal.SIGKILL)


def _final_digest(model: torch.nn.Module) -> str:
    full: dict[str, Any] = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    return metrics.params_sha256(full)


def run(cfg: JobConfig, out: Path, timeouts: RecoveryTimeouts) -> dict[str, Any]:
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    replacement = os.environ.get(ENV_ROLE) == "replacement"
    _TestFaults.current = _TestFaults(rank, os.environ.get(ENV_TEST_FAULTS, ""))
    store = connect_store(os.environ[ENV_STORE], timeouts.rendezvous_s)
    coordinator = Coordinator(
        store,
        os.environ.get("HPTRAIN_ATTEMPT", "0"),
        rank,
        world_size,
        vote_timeout_s=timeouts.vote_s,
        rendezvous_timeout_s=timeouts.rendezvous_s,
    )
    device = torch.device("cpu")
    job = HsdpJob(cfg, device, world_size)
    settings = RecoverySettings(
        rank, world_size, device, timeouts.collective_s, timeouts.rendezvous_s
    )
    driver = InProcessRecovery(
        job,
        coordinator,
        lambda: build_mesh(cfg, world_size, device),
        settings,
        out,
        RecoveryHooks(before_transfer=_TestFaults.current.before_transfer),
    )
    driver.start(replacement=replacement)
    while job.step < cfg.training.steps:
        driver.step()
    if job.model is None:
        raise RuntimeError(_NO_MODEL)
    digest = _final_digest(job.model)
    return {
        "rank": rank,
        "pid": os.getpid(),
        "role": "replacement" if replacement else "initial",
        "steps": job.step,
        "final_params_sha256": digest if rank == 0 else None,
        "recoveries": [asdict(r) for r in driver.records],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.recovery.worker")
    p.add_argument("--out", required=True)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    defaults = RecoveryTimeouts()
    p.add_argument("--collective-s", type=float, default=defaults.collective_s)
    p.add_argument("--vote-s", type=float, default=defaults.vote_s)
    p.add_argument("--rendezvous-s", type=float, default=defaults.rendezvous_s)
    args = p.parse_args(argv)
    timeouts = RecoveryTimeouts(args.collective_s, args.vote_s, args.rendezvous_s)
    cfg = build_config(args.preset, args.overrides)
    out = Path(args.out)
    torch.set_num_threads(1)
    try:
        result = run(cfg, out, timeouts)
    except RecoveryFallbackError as e:
        sys.stderr.write(f"error: {e}\n")
        sys.stderr.flush()
        os._exit(FALLBACK_EXIT_CODE)
    (out / f"rank{result['rank']}.json").write_text(json.dumps(result, sort_keys=True))
    sys.stdout.flush()
    # Past the final digest every rank is done with the groups: no teardown to wait for.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
