"""Deterministic, resumable token data pipeline.

Sample order is a pure function of (seed, epoch, global sample index): global index ``g``
falls in epoch ``g // N`` at position ``g % N``, and a keyed Feistel permutation maps the
position to a sample id. The permutation needs O(1) memory, so it scales to billions of
samples without materialising an index array. The only state is the number of samples
consumed by the whole job, so a resume continues mid-epoch without repeating or skipping a
sample, at any world size, and each data-parallel rank reads only its own slice of every
global batch (the ranks of one tensor-parallel group read the same slice).
"""

from __future__ import annotations

import bisect
import glob
import json
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from training.config_parsing import ConfigError

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


class TokenSource(Protocol):
    num_samples: int
    seq_len: int

    def sample(self, idx: int) -> np.ndarray:
        """Returns seq_len + 1 tokens (inputs plus the shifted label) as int64."""
        ...


class DataError(ConfigError):
    """Token shards this model cannot train on: every attempt would fail the same way. The
    message is one line naming the shard and the setting that fixes it."""


def shard_layout_problem(where: str, sizes: list[int], dtype: str, manifest: Any) -> str | None:
    """Why shards of these byte `sizes` are not `dtype` tokens, or None. `manifest`: the
    directory's prepare_data manifest (a dict), which names the dtype it wrote."""
    written = manifest.get("dtype") if isinstance(manifest, dict) else None
    if written is not None and written != dtype:
        return f"data.dtype={dtype} but the shards at {where} are {written} (manifest.json)"
    itemsize = np.dtype(dtype).itemsize
    odd = [n for n in sizes if n % itemsize]
    if odd:
        return (
            f"data.dtype={dtype} but a shard at {where} holds {odd[0]} bytes, not a whole "
            f"number of {dtype} tokens"
        )
    return None


def vocabulary_problem(where: str, manifest: Any, vocab_size: int | None) -> str | None:
    """Why the tokenizer that wrote the shards (its manifest) does not fit the model's
    vocabulary, or None."""
    written = manifest.get("vocab_size") if isinstance(manifest, dict) else None
    if vocab_size is None or not isinstance(written, int) or written <= vocab_size:
        return None
    return (
        f"the shards at {where} come from a tokenizer of {written} tokens (manifest.json), "
        f"more than model.vocab_size={vocab_size}; set model.vocab_size={written}"
    )


def check_tokens(window: np.ndarray, vocab_size: int | None, shard: str, idx: int) -> None:
    """Every token of a sample is an embedding row: one past the vocabulary would fail deep in
    the model's forward pass, on every attempt. A max over one window costs microseconds."""
    if vocab_size is None or not window.size:
        return
    top = int(window.max())
    if top >= vocab_size:
        hint = " (or data.dtype=uint16, if the shards hold uint16 tokens)" if top >= 2**16 else ""
        raise DataError(
            f"{shard}: token id {top} in sample {idx} is >= model.vocab_size={vocab_size}; set "
            f"model.vocab_size to the tokenizer's vocabulary (at least {top + 1}){hint}"
        )


def _refuse(problem: str | None) -> None:
    if problem is not None:
        raise DataError(problem)


def _local_manifest(path: str) -> Any:
    """prepare_data's manifest of the shards at `path` (a directory or a glob), or None."""
    from training.prepare_data import MANIFEST

    directory = path if os.path.isdir(path) else os.path.dirname(path)
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


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

    def __init__(self, path: str, seq_len: int, dtype: str, vocab_size: int | None = None) -> None:
        files = (
            sorted(glob.glob(os.path.join(path, "*.bin")))
            if os.path.isdir(path)
            else sorted(glob.glob(path))
        )
        if not files:
            raise FileNotFoundError(f"no token shards (*.bin) found at {path}")
        manifest = _local_manifest(path)
        _refuse(shard_layout_problem(path, [os.path.getsize(f) for f in files], dtype, manifest))
        _refuse(vocabulary_problem(path, manifest, vocab_size))
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.files = files
        self._maps: list[np.memmap] = []
        self._names: list[str] = []
        self._starts: list[int] = []
        total = 0
        for f in files:
            if os.path.getsize(f) == 0:
                continue  # too short for a sample like any other, but mmap refuses it
            try:
                m = np.memmap(f, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
            except PermissionError as e:
                raise DataError(f"cannot read token shard {f} ({e.strerror})") from None
            n = _shard_samples(len(m), seq_len)
            if n == 0:
                continue
            self._maps.append(m)
            self._names.append(f)
            self._starts.append(total)
            total += n
        if total == 0:
            raise DataError(
                f"token shards at {path} are shorter than one sample of {seq_len + 1} tokens "
                "(training.seq_len + 1): add data or lower training.seq_len"
            )
        self.num_samples = total

    def sample(self, idx: int) -> np.ndarray:
        if not 0 <= idx < self.num_samples:
            raise IndexError(idx)
        shard = bisect.bisect_right(self._starts, idx) - 1
        off = (idx - self._starts[shard]) * self.seq_len
        window = np.asarray(self._maps[shard][off : off + self.seq_len + 1], dtype=np.int64)
        check_tokens(window, self.vocab_size, self._names[shard], idx - self._starts[shard])
        return window


def _shard_samples(tokens: int, seq_len: int) -> int:
    """Samples in a shard of `tokens` tokens (windows of seq_len + 1 sharing one token)."""
    return (tokens - 1) // seq_len if tokens > seq_len else 0


class S3TokenSource:
    """The same shards as MemmapTokenSource, as objects under an S3 prefix, read by range.

    A sample is one ranged GET of (seq_len + 1) tokens; `samples` fetches a batch's windows
    concurrently (S3 serves parallel GETs well, one at a time is latency-bound). The object
    listing happens once, at start: the shards must not change during a run.
    """

    def __init__(
        self,
        url: str,
        seq_len: int,
        dtype: str,
        concurrency: int = 16,
        vocab_size: int | None = None,
    ) -> None:
        from training import s3

        self._s3 = s3
        self.bucket, prefix = s3.split_url(url)
        listing = s3.list_objects(self.bucket, prefix)
        objects = [(k, n) for k, n in listing if k.endswith(".bin")]
        if not objects:
            raise FileNotFoundError(f"no token shards (*.bin) found at {url}")
        manifest = self._manifest(prefix, {k for k, _ in listing})
        _refuse(shard_layout_problem(url, [n for _, n in objects], dtype, manifest))
        _refuse(vocabulary_problem(url, manifest, vocab_size))
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.keys: list[str] = []
        self._starts: list[int] = []
        total = 0
        for key, size in objects:
            n = _shard_samples(size // self.dtype.itemsize, seq_len)
            if n:
                self.keys.append(key)
                self._starts.append(total)
                total += n
        if total == 0:
            raise DataError(
                f"token shards at {url} are shorter than one sample of {seq_len + 1} tokens "
                "(training.seq_len + 1): add data or lower training.seq_len"
            )
        self.num_samples = total
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="s3-data")

    def _manifest(self, prefix: str, keys: set[str]) -> Any:
        """prepare_data's manifest beside the shards, when it was uploaded with them."""
        from training.prepare_data import MANIFEST

        key = f"{prefix.rstrip('/')}/{MANIFEST}" if prefix else MANIFEST
        if key not in keys:
            return None
        try:
            return json.loads(self._s3.read_object(self.bucket, key))
        except ValueError:
            return None

    def sample(self, idx: int) -> np.ndarray:
        if not 0 <= idx < self.num_samples:
            raise IndexError(idx)
        shard = bisect.bisect_right(self._starts, idx) - 1
        start = (idx - self._starts[shard]) * self.seq_len * self.dtype.itemsize
        stop = start + (self.seq_len + 1) * self.dtype.itemsize
        raw = self._s3.read_range(self.bucket, self.keys[shard], start, stop)
        window = np.frombuffer(raw, dtype=self.dtype).astype(np.int64)
        name = f"s3://{self.bucket}/{self.keys[shard]}"
        check_tokens(window, self.vocab_size, name, idx - self._starts[shard])
        return window

    def samples(self, ids: list[int]) -> list[np.ndarray]:
        return list(self._pool.map(self.sample, ids))


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


# Names a directory where each rank appends the sample indices it reads (SampleTrace): a test
# hook, like the launcher's HPTRAIN_FAULTS, off unless set.
SAMPLE_TRACE_ENV = "HPTRAIN_SAMPLE_TRACE"


class SampleTrace:
    """One JSON line per batch a rank reads: its world size, rank, data-parallel rank, the
    job's sample position before the batch and the global sample indices read. Tests check
    with it that a resize repeats and skips nothing; one file per (world size, rank)."""

    def __init__(self, directory: Path, world_size: int, rank: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"world{world_size}_rank{rank}.jsonl"
        self.world_size, self.rank = world_size, rank

    @classmethod
    def from_env(cls, world_size: int, rank: int) -> SampleTrace | None:
        raw = os.environ.get(SAMPLE_TRACE_ENV, "")
        return cls(Path(raw), world_size, rank) if raw else None

    def record(self, dp_rank: int, position: int, indices: np.ndarray) -> None:
        line = {
            "world": self.world_size,
            "rank": self.rank,
            "dp_rank": dp_rank,
            "position": position,
            "indices": [int(i) for i in indices],
        }
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


class ResumableLoader:
    """Yields this data-parallel rank's slice of each global batch; DCP-Stateful through
    state_dict(). `dp_rank` / `dp_size` count data-parallel ranks, not the world: under
    tensor parallelism every rank of a group passes the group's data-parallel rank."""

    def __init__(
        self,
        source: TokenSource,
        global_batch_size: int,
        dp_rank: int,
        dp_size: int,
        seed: int,
        device: torch.device | None = None,
        prefetch_batches: int = 0,
    ) -> None:
        if global_batch_size % dp_size:
            raise ValueError("global batch size must be divisible by the data-parallel size")
        self.source = source
        self.global_batch_size = global_batch_size
        self.local_batch_size = global_batch_size // dp_size
        self.dp_rank = dp_rank
        self.seed = seed
        self.device = device or torch.device("cpu")
        self.consumed_samples = 0
        self.trace: SampleTrace | None = None
        # Batches read ahead by a background thread (0 = read inline, in the step).
        self.prefetch_batches = prefetch_batches
        self._prefetcher: _Prefetcher | None = None

    def local_indices(self, position: int | None = None) -> np.ndarray:
        """Global sample indices this rank reads for the batch at `position` (default: the
        next step's)."""
        start = (self.consumed_samples if position is None else position) + (
            self.dp_rank * self.local_batch_size
        )
        return np.arange(start, start + self.local_batch_size, dtype=np.int64)

    def read_batch(self, position: int) -> torch.Tensor:
        """This rank's rows of the global batch that starts at global sample `position`
        (seq_len + 1 tokens each), on the host (pinned when the loader feeds a GPU)."""
        indices = self.local_indices(position)
        ids = [int(i) for i in global_sample_ids(indices, self.source.num_samples, self.seed)]
        many = getattr(self.source, "samples", None)
        rows = many(ids) if many is not None else [self.source.sample(i) for i in ids]
        batch = torch.from_numpy(np.stack(rows))
        return batch.pin_memory() if self.device.type == "cuda" else batch

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        position = self.consumed_samples
        if self.trace is not None:
            self.trace.record(self.dp_rank, position, self.local_indices(position))
        if self.prefetch_batches > 0:
            batch = self._prefetched(position)
        else:
            batch = self.read_batch(position)
        # Only a batch handed to the step counts as consumed: prefetched ones do not move
        # the saved position.
        self.consumed_samples = position + self.global_batch_size
        batch = batch.to(self.device, non_blocking=True)
        return batch[:, :-1], batch[:, 1:]

    def _prefetched(self, position: int) -> torch.Tensor:
        if self._prefetcher is None or self._prefetcher.next_position != position:
            self.close()
            self._prefetcher = _Prefetcher(self, position, self.prefetch_batches)
        try:
            return self._prefetcher.get()
        except BaseException:
            # The thread ended at the failed read: a retry starts a new one there, not a
            # wait on a queue nothing fills.
            self.close()
            raise

    def close(self) -> None:
        """Stops the prefetch thread (a later next_batch starts another)."""
        if self._prefetcher is not None:
            self._prefetcher.stop()
            self._prefetcher = None

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
        # Read-ahead batches belong to the old position.
        self.close()


class _Prefetcher:
    """A thread reading the batches at `position`, `position + global batch`, ... into a
    bounded queue. It holds no state of its own that is saved: the loader's position is the
    next batch the step takes, and a loader moved elsewhere (a resume) starts a new one."""

    def __init__(self, loader: ResumableLoader, position: int, depth: int) -> None:
        self.next_position = position
        self._step = loader.global_batch_size
        self._queue: queue.Queue[tuple[int, torch.Tensor | BaseException]] = queue.Queue(depth)
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(loader, position), name="data-prefetch", daemon=True
        )
        self._thread.start()

    def _run(self, loader: ResumableLoader, position: int) -> None:
        while not self._stopped.is_set():
            item: torch.Tensor | BaseException
            try:
                item = loader.read_batch(position)
            except BaseException as e:  # noqa: BLE001 - handed to the step, which raises it
                item = e
            while not self._stopped.is_set():
                try:
                    self._queue.put((position, item), timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return
            position += self._step

    def get(self) -> torch.Tensor:
        position, item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        assert position == self.next_position  # noqa: S101 - one reader, in order
        self.next_position = position + self._step
        return item

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


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
        return MemmapTokenSource(path, seq_len, dtype, vocab_size)
    if kind == "s3":
        return S3TokenSource(path, seq_len, dtype, vocab_size=vocab_size)
    return SyntheticTokenSource(synthetic_samples, seq_len, vocab_size, seed)
