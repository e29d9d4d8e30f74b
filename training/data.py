"""Deterministic, resumable token data pipeline.

Sample order is a pure function of (seed, epoch, global sample index): global index ``g``
falls in epoch ``g // N`` at position ``g % N``, and a keyed Feistel permutation maps the
position to a sample id. The permutation needs O(1) memory, so it scales to billions of
samples without materialising an index array. The only state is the number of samples
consumed by the whole job, so a resume continues mid-epoch without repeating or skipping a
sample, and each rank reads only its own slice of every global batch.
"""

from __future__ import annotations

import bisect
import glob
import os
from typing import Any, Protocol

import numpy as np
import torch

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


class TokenSource(Protocol):
    num_samples: int
    seq_len: int

    def sample(self, idx: int) -> np.ndarray:
        """Returns seq_len + 1 tokens (inputs plus the shifted label) as int64."""
        ...


class SyntheticTokenSource:
    """Learnable arithmetic sequences; sample ``i`` depends only on (seed, i)."""

    def __init__(self, num_samples: int, seq_len: int, vocab_size: int, seed: int) -> None:
        self.num_samples = num_samples
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.seed = seed

    def sample(self, idx: int) -> np.ndarray:
        if not 0 <= idx < self.num_samples:
            raise IndexError(idx)
        rng = np.random.default_rng([self.seed, idx])
        start = int(rng.integers(0, self.vocab_size))
        stride = int(rng.integers(1, 8))
        return (start + stride * np.arange(self.seq_len + 1, dtype=np.int64)) % self.vocab_size


class MemmapTokenSource:
    """Token shards (*.bin, raw little-endian uint16/uint32) memory-mapped read-only.

    Sample ``j`` of a shard is the window [j*T, j*T + T + 1): consecutive samples share one
    boundary token so every token is a label exactly once. Only touched pages are read, which
    suits FSx for Lustre (no copy to local disk before training starts).
    """

    def __init__(self, path: str, seq_len: int, dtype: str) -> None:
        files = (
            sorted(glob.glob(os.path.join(path, "*.bin")))
            if os.path.isdir(path)
            else sorted(glob.glob(path))
        )
        if not files:
            raise FileNotFoundError(f"no token shards (*.bin) found at {path}")
        self.seq_len = seq_len
        self.files = files
        self._maps: list[np.memmap] = []
        self._starts: list[int] = []
        total = 0
        for f in files:
            if os.path.getsize(f) == 0:
                continue  # too short for a sample like any other, but mmap refuses it
            m = np.memmap(f, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
            n = (len(m) - 1) // seq_len if len(m) > seq_len else 0
            if n == 0:
                continue
            self._maps.append(m)
            self._starts.append(total)
            total += n
        if total == 0:
            raise ValueError(
                f"token shards at {path} are shorter than one sample of {seq_len + 1} tokens"
            )
        self.num_samples = total

    def sample(self, idx: int) -> np.ndarray:
        if not 0 <= idx < self.num_samples:
            raise IndexError(idx)
        shard = bisect.bisect_right(self._starts, idx) - 1
        off = (idx - self._starts[shard]) * self.seq_len
        return np.asarray(self._maps[shard][off : off + self.seq_len + 1], dtype=np.int64)


def write_token_shard(path: str, tokens: np.ndarray, dtype: str = "uint16") -> None:
    """Writes one shard in the on-disk format read by MemmapTokenSource."""
    np.asarray(tokens, dtype=np.dtype(dtype).newbyteorder("<")).tofile(path)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a cheap, well-mixed round function for the Feistel network."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        mixed: np.ndarray = x ^ (x >> np.uint64(31))
        return mixed


class FeistelPermutation:
    """Bijection of [0, n) keyed by (seed, epoch), evaluated index by index.

    A balanced Feistel network permutes [0, 4**h) for the smallest 4**h >= n; values that land
    outside [0, n) are re-encrypted (cycle walking) until they fall inside, which keeps it a
    bijection on [0, n).
    """

    ROUNDS = 4

    def __init__(self, n: int, seed: int, epoch: int) -> None:
        if n < 1:
            raise ValueError("permutation domain must be non-empty")
        self.n = n
        bits = max(2, (n - 1).bit_length())
        self.half = (bits + 1) // 2
        self.mask = np.uint64((1 << self.half) - 1)
        self.keys = np.random.SeedSequence([seed, epoch]).generate_state(
            self.ROUNDS, dtype=np.uint64
        )

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        h = np.uint64(self.half)
        left, right = x >> h, x & self.mask
        for k in self.keys:
            with np.errstate(over="ignore"):
                f = _mix64(right ^ k) & self.mask
            left, right = right, left ^ f
        return (left << h) | right

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        x = np.asarray(positions, dtype=np.uint64)
        if x.size and (x.max() >= self.n):
            raise IndexError("position outside the permutation domain")
        y = self._encrypt(x)
        out = y >= np.uint64(self.n)
        while out.any():
            y[out] = self._encrypt(y[out])
            out = y >= np.uint64(self.n)
        return y.astype(np.int64)


def global_sample_ids(global_indices: np.ndarray, num_samples: int, seed: int) -> np.ndarray:
    """Maps global sample indices (across epochs) to sample ids of the source."""
    g = np.asarray(global_indices, dtype=np.int64)
    epochs, positions = g // num_samples, g % num_samples
    out = np.empty_like(g)
    for epoch in np.unique(epochs):
        sel = epochs == epoch
        out[sel] = FeistelPermutation(num_samples, seed, int(epoch))(positions[sel])
    return out


class ResumableLoader:
    """Yields this rank's slice of each global batch; DCP-Stateful through state_dict()."""

    def __init__(
        self,
        source: TokenSource,
        global_batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
        device: torch.device | None = None,
    ) -> None:
        if global_batch_size % world_size:
            raise ValueError("global batch size must be divisible by the world size")
        self.source = source
        self.global_batch_size = global_batch_size
        self.local_batch_size = global_batch_size // world_size
        self.rank = rank
        self.seed = seed
        self.device = device or torch.device("cpu")
        self.consumed_samples = 0

    def local_indices(self) -> np.ndarray:
        """Global sample indices this rank reads for the next step."""
        start = self.consumed_samples + self.rank * self.local_batch_size
        return np.arange(start, start + self.local_batch_size, dtype=np.int64)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids = global_sample_ids(self.local_indices(), self.source.num_samples, self.seed)
        rows = np.stack([self.source.sample(int(i)) for i in ids])
        self.consumed_samples += self.global_batch_size
        batch = torch.from_numpy(rows)
        if self.device.type == "cuda":
            batch = batch.pin_memory().to(self.device, non_blocking=True)
        return batch[:, :-1], batch[:, 1:]

    @property
    def epoch(self) -> int:
        return self.consumed_samples // self.source.num_samples

    def state_dict(self) -> dict[str, Any]:
        # Global, rank-independent position: identical on every rank, so it is stored once
        # and stays valid if a resume uses a different number of ranks.
        return {
            "consumed_samples": self.consumed_samples,
            "seed": self.seed,
            "num_samples": self.source.num_samples,
            "global_batch_size": self.global_batch_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["num_samples"]) != self.source.num_samples or int(state["seed"]) != self.seed:
            raise ValueError(
                "checkpointed data position belongs to a different dataset or seed "
                f"(samples {state['num_samples']} vs {self.source.num_samples}, seed {state['seed']} vs {self.seed})"
            )
        self.consumed_samples = int(state["consumed_samples"])


def build_source(
    kind: str,
    *,
    path: str,
    dtype: str,
    seq_len: int,
    vocab_size: int,
    seed: int,
    synthetic_samples: int,
) -> TokenSource:
    if kind == "memmap":
        return MemmapTokenSource(path, seq_len, dtype)
    return SyntheticTokenSource(synthetic_samples, seq_len, vocab_size, seed)
