"""What the checkpoints hold besides the model: the optimizer through the FSDP-aware
state_dict helpers, and the train state (step, schedule, data position, RNG streams, goodput
accounting)."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from training.checkpoint.manager import IncompatibleCheckpointError, warn
from training.data import ResumableLoader


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
