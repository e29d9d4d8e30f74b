"""Held-out loss for every durable checkpoint (eval.batches > 0).

The loss is computed on all ranks at the step a durable checkpoint is taken, so it is the loss
of exactly the weights that checkpoint holds, and is recorded once that checkpoint commits
(rank 0: a log line, ``<out>/eval.jsonl`` and the tracker); a checkpoint that fails to commit
records none. The held-out data are ``data.eval_path`` read as the training data are, or,
for the synthetic source, samples past the end of its training epoch (never trained on). The
same fixed batches are scored every time, so evaluations compare across checkpoints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from training import metrics
from training.config import JobConfig
from training.data import ResumableLoader, SyntheticTokenSource, TokenSource, build_source
from training.parallel import DistInfo, data_parallel_rank, loss_context

EVAL_FMT = "HPTRAIN eval step={step} tier={tier} loss={loss:.4f} batches={batches}"
EVAL_LOG = "eval.jsonl"


class HeldOutSynthetic:
    """Samples num_samples .. num_samples + n - 1 of the synthetic source: the training epoch
    covers ids below num_samples only."""

    def __init__(self, train: SyntheticTokenSource, n: int) -> None:
        self._all = SyntheticTokenSource(
            train.num_samples + n, train.seq_len, train.vocab_size, train.seed
        )
        self._offset = train.num_samples
        self.num_samples = n
        self.seq_len = train.seq_len

    def sample(self, idx: int) -> np.ndarray:
        if not 0 <= idx < self.num_samples:
            raise IndexError(idx)
        return self._all.sample(self._offset + idx)


def eval_source(cfg: JobConfig) -> TokenSource:
    d, t = cfg.data, cfg.training
    if d.source == "synthetic":
        train = SyntheticTokenSource(d.synthetic_samples, t.seq_len, cfg.model.vocab_size, d.seed)
        return HeldOutSynthetic(train, cfg.eval.batches * t.global_batch_size)
    return build_source(
        d.source,
        path=d.eval_path,
        dtype=d.dtype,
        seq_len=t.seq_len,
        vocab_size=cfg.model.vocab_size,
        seed=d.seed,
        synthetic_samples=d.synthetic_samples,
    )


class Evaluator:
    def __init__(
        self,
        cfg: JobConfig,
        model: nn.Module,
        info: DistInfo,
        mesh: DeviceMesh,
        passes: int,
    ) -> None:
        self.batches = cfg.eval.batches
        self.model = model
        self.mesh = mesh
        # Forward passes per batch, as in training (training.micro_batch_size).
        self.passes = passes
        # Per data-parallel rank, as the training loader: a tensor-parallel group reads one
        # batch together.
        self.loader = ResumableLoader(
            eval_source(cfg),
            cfg.training.global_batch_size,
            data_parallel_rank(mesh),
            cfg.data_parallel_size(info.world_size),
            cfg.data.seed,
            info.device,
        )
        # Every rank's loss is summed; the ranks of a tensor-parallel group hold the same one.
        self.world_size = info.world_size
        self.records = info.is_main
        # Losses computed at checkpointed steps, recorded when (if) those checkpoints commit.
        self.pending: dict[int, float] = {}

    @torch.no_grad()
    def evaluate(self, step: int) -> float:
        """Mean held-out loss of the current weights (a collective: every rank calls it)."""
        self.loader.consumed_samples = 0
        was_training = self.model.training
        self.model.eval()
        total = torch.zeros((), dtype=torch.float64)
        count = 0
        for _ in range(self.batches):
            inputs, labels = self.loader.next_batch()
            with loss_context(self.mesh):
                for x, y in zip(inputs.chunk(self.passes), labels.chunk(self.passes), strict=True):
                    loss = self.model(x, y).detach()
                    if isinstance(loss, DTensor):  # the vocabulary-parallel loss
                        loss = loss.full_tensor()
                    total += loss.double().cpu()
                    count += 1
        self.model.train(was_training)
        mean = (total / count).to(inputs.device)
        dist.all_reduce(mean)
        loss = float(mean.item()) / self.world_size
        self.pending[step] = loss
        return loss

    def committed(
        self, step: int, tier: str, out: Path, tracker: Any | None
    ) -> dict[str, Any] | None:
        """Once checkpoint `step` has committed (every rank calls it): rank 0 records its
        evaluation; the evaluations of checkpoints that never committed are dropped."""
        loss = self.pending.pop(step, None)
        for older in [s for s in self.pending if s < step]:
            del self.pending[older]
        if loss is None or not self.records:
            return None
        record = {"step": step, "tier": tier, "loss": loss, "batches": self.batches}
        metrics.emit(EVAL_FMT.format(**record))
        with open(out / EVAL_LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if tracker is not None:
            tracker.log_metrics(step, {"eval.loss": loss})
        return record
