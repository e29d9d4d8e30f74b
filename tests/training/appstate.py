"""The trainer's real checkpoint state in one process: an FSDP2-sharded tiny model, AdamW,
schedule, data position and RNG streams, as Trainer builds them (needs the world_of_one
fixture's process group)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import DeviceMesh

from training.config import JobConfig
from training.data import ResumableLoader, build_source
from training.model import Transformer
from training.optim import build_optimizer, materialize_state
from training.parallel import apply_parallelism, build_mesh
from training.presets import build_config
from training.trainer import ModelOptimizerState, TrainState

CPU = torch.device("cpu")


@dataclass
class AppState:
    cfg: JobConfig
    model: Transformer
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    loader: ResumableLoader
    train: TrainState
    mesh: DeviceMesh

    @property
    def stateful(self) -> dict[str, Stateful]:
        return {"model_optim": ModelOptimizerState(self.model, self.optimizer), "train": self.train}

    def step(self) -> None:
        """One training step, as Trainer.train_step does it (no logging, no checkpoints)."""
        inputs, labels = self.loader.next_batch()
        loss = self.model(inputs, labels)
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.train.step += 1

    def params(self) -> dict[str, torch.Tensor]:
        return {k: v.full_tensor().clone() for k, v in self.model.state_dict().items()}

    def adam_steps(self) -> list[float]:
        return [float(s["step"]) for s in self.optimizer.state.values()]


def build(overrides: list[str] | None = None, *, materialize: bool = True) -> AppState:
    cfg = build_config_only(overrides)
    t = cfg.training
    torch.manual_seed(t.seed)
    mesh = build_mesh(cfg, 1, CPU)
    with torch.device("meta"):
        model = Transformer(cfg.model, max_seq_len=t.seq_len)
    model = apply_parallelism(model, cfg, mesh, CPU)
    model.to_empty(device=CPU)
    model.init_weights(t.seed)
    optimizer, scheduler = build_optimizer(model, cfg.optim, t.steps)
    if materialize:
        materialize_state(optimizer)
    source = build_source(
        "synthetic",
        path="",
        dtype="uint16",
        seq_len=t.seq_len,
        vocab_size=cfg.model.vocab_size,
        seed=cfg.data.seed,
        synthetic_samples=cfg.data.synthetic_samples,
    )
    loader = ResumableLoader(source, t.global_batch_size, 0, 1, cfg.data.seed, CPU)
    return AppState(
        cfg, model, optimizer, scheduler, loader, TrainState(scheduler, loader, 1), mesh
    )


def state_dict(app: AppState) -> dict[str, Any]:
    """What DCP saves (and a stager copies): each Stateful's state_dict()."""
    return {k: v.state_dict() for k, v in app.stateful.items()}


def build_config_only(overrides: list[str] | None = None) -> JobConfig:
    """The config build() uses, without building anything."""
    return build_config("tiny", ["model.dim=32", "model.vocab_size=128", *(overrides or [])])
