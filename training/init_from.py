"""``training.init_from``: start from a Hugging Face Llama checkpoint instead of random weights.

The checkpoint is a directory (local, FSx, or ``s3://bucket/prefix``) holding safetensors
shards and ``model.safetensors.index.json`` (or one ``model.safetensors``), and optionally
``config.json``. Each rank reads only the part of each tensor that its shard of the parameter
holds: the parameter's placements (FSDP's Shard(0), HSDP's Replicate x Shard) give its region
of the full tensor, and the reader fetches that region (``safe_open(...).get_slice`` on a
file system, one ranged GET per tensor on S3). Query and key rows are read in whole heads,
since the rotate-half order is undone per head (training/hf_llama.py).

Any shape that differs from the model's is refused in one line naming the tensor and both
shapes, before a weight is changed. Under tensor parallelism FSDP shards a dimension the
tensor-parallel split already shards (a strided shard, private torch API): such a parameter is
refused in one line, and the way round is to load at parallel.tp=1 and resume the checkpoint
it writes at any layout (DCP reshards).

Not DCP's HuggingFaceStorageReader (torch.distributed.checkpoint, in torch 2.11 and 2.13):
it loads each tensor under its own name into the matching state-dict entry, whereas here the
names differ and the query/key rows must be reordered per head before a shard is cut.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard

from training import s3
from training.config import ModelConfig
from training.config_parsing import ConfigError
from training.hf_llama import (
    CONFIG_FILE,
    INDEX_FILE,
    SINGLE_FILE,
    config_mismatches,
    from_hf_rows,
    hf_tensor,
)


class InitFromError(ConfigError):
    """A checkpoint the model cannot start from; the message is one line."""


# safetensors dtype names -> torch dtypes (the ones Llama checkpoints use).
_DTYPES = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F64": torch.float64,
}


def _join(location: str, name: str) -> str:
    return f"{location.rstrip('/')}/{name}" if s3.is_s3(location) else os.path.join(location, name)


def _read_text(path: str) -> str | None:
    if s3.is_s3(path):
        bucket, key = s3.split_url(path)
        try:
            return s3.read_object(bucket, key).decode()
        except s3.client().exceptions.NoSuchKey:
            return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


class _S3Safetensors:
    """One safetensors object on S3: the header once, then each tensor's rows by range."""

    def __init__(self, url: str) -> None:
        self.bucket, self.key = s3.split_url(url)
        (size,) = np.frombuffer(s3.read_range(self.bucket, self.key, 0, 8), dtype="<u8")
        header = json.loads(s3.read_range(self.bucket, self.key, 8, 8 + int(size)))
        header.pop("__metadata__", None)
        self.header: dict[str, Any] = header
        self.data_start = 8 + int(size)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.header[name]["shape"])

    def read(self, name: str, region: tuple[slice, ...]) -> tuple[torch.Tensor, int]:
        entry = self.header[name]
        dtype = _DTYPES[entry["dtype"]]
        shape = tuple(entry["shape"])
        begin = self.data_start + int(entry["data_offsets"][0])
        # Rows are contiguous in row-major order: fetch the rows, cut the columns here.
        rows = region[0] if shape else slice(0, 1)
        row_bytes = math.prod(shape[1:]) * dtype.itemsize
        start, stop, _ = rows.indices(shape[0] if shape else 1)
        raw = s3.read_range(
            self.bucket, self.key, begin + start * row_bytes, begin + stop * row_bytes
        )
        t = torch.frombuffer(bytearray(raw), dtype=dtype).reshape((stop - start, *shape[1:]))
        out = t[(slice(None), *region[1:])]
        return out, t.numel()


class HfCheckpoint:
    """The tensors of a Hugging Face checkpoint, read region by region; counts what it reads."""

    def __init__(self, location: str, stack: ExitStack) -> None:
        self.location = location
        self._stack = stack
        # Open files by name: safe_open handles, or _S3Safetensors headers.
        self._files: dict[str, Any] = {}
        index = _read_text(_join(location, INDEX_FILE))
        if index is not None:
            self.weight_map: dict[str, str] = json.loads(index)["weight_map"]
        else:
            single = _join(location, SINGLE_FILE)
            if not s3.is_s3(location) and not os.path.exists(single):
                raise InitFromError(
                    f"training.init_from={location}: neither {INDEX_FILE} nor {SINGLE_FILE} "
                    "found there (a Hugging Face safetensors checkpoint directory)"
                )
            self.weight_map = {}
            self._open(SINGLE_FILE)
            self.weight_map = dict.fromkeys(self._files[SINGLE_FILE].keys(), SINGLE_FILE)
        text = _read_text(_join(location, CONFIG_FILE))
        self.config: dict[str, Any] = json.loads(text) if text else {}
        self.elements_read = 0

    def _open(self, file: str) -> Any:
        files = self._files
        if file not in files:
            path = _join(self.location, file)
            if s3.is_s3(path):
                files[file] = _S3Safetensors(path)
            else:
                from safetensors import safe_open

                files[file] = self._stack.enter_context(safe_open(path, framework="pt"))
        return files[file]

    def __contains__(self, name: str) -> bool:
        return name in self.weight_map

    def shape(self, name: str) -> tuple[int, ...]:
        f = self._open(self.weight_map[name])
        if isinstance(f, _S3Safetensors):
            return f.shape(name)
        return tuple(f.get_slice(name).get_shape())

    def read(self, name: str, region: tuple[slice, ...]) -> torch.Tensor:
        f = self._open(self.weight_map[name])
        if isinstance(f, _S3Safetensors):
            t, fetched = f.read(name, region)
        else:
            t = f.get_slice(name)[region]
            fetched = t.numel()
        self.elements_read += fetched
        return t


@contextmanager
def open_checkpoint(location: str) -> Iterator[HfCheckpoint]:
    with ExitStack() as stack:
        yield HfCheckpoint(location, stack)


def local_region(param: torch.Tensor) -> tuple[slice, ...]:
    """The region of the full tensor that this rank's shard of `param` holds.

    Plain Shard and Replicate placements, applied in mesh-dimension order, each Shard(d)
    splitting the current extent of dim d as torch.chunk does (DTensor's even sharding).
    """
    shape = list(param.shape)
    start = [0] * len(shape)
    if not isinstance(param, DTensor):
        return tuple(slice(0, n) for n in shape)
    coord = param.device_mesh.get_coordinate()
    if coord is None:  # this rank is outside the mesh: it holds nothing
        return tuple(slice(0, 0) for _ in shape)
    for mesh_dim, placement in enumerate(param.placements):
        if isinstance(placement, Replicate):
            continue
        if type(placement) is not Shard:
            raise InitFromError(
                f"training.init_from: placement {placement} of a parameter is not supported "
                "(plain Shard and Replicate are; tensor parallelism under FSDP shards one "
                "dimension twice); load with parallel.tp=1 and resume the checkpoint it writes "
                "at any parallel.tp (checkpoints reshard)"
            )
        d, n = placement.dim, param.device_mesh.size(mesh_dim)
        chunk = -(-shape[d] // n)
        offset = min(coord[mesh_dim] * chunk, shape[d])
        start[d] += offset
        shape[d] = max(0, min(chunk, shape[d] - offset))
    return tuple(slice(s, s + n) for s, n in zip(start, shape, strict=True))


def _read_param(
    ckpt: HfCheckpoint, hf_name: str, heads: int | None, region: tuple[slice, ...]
) -> torch.Tensor:
    if heads is None:
        return ckpt.read(hf_name, region)
    # Rows in whole heads, un-permuted, then the rows this shard holds.
    rows = region[0]
    head_dim = ckpt.shape(hf_name)[0] // heads
    first, last = rows.start // head_dim, -(-rows.stop // head_dim)
    block = ckpt.read(hf_name, (slice(first * head_dim, last * head_dim), *region[1:]))
    block = from_hf_rows(block, last - first) if last > first else block
    base = first * head_dim
    return block[rows.start - base : rows.stop - base]


@dataclass(frozen=True)
class LoadReport:
    elements_read: int
    elements_total: int


@torch.no_grad()
def load_pretrained(model: nn.Module, location: str, cfg: ModelConfig) -> LoadReport:
    """Copies the checkpoint at `location` into `model` (sharded or not), this rank's part only."""
    with open_checkpoint(location) as ckpt:
        problems = config_mismatches(ckpt.config, cfg)
        if problems:
            raise InitFromError(
                f"training.init_from={location}: config.json differs from the model: "
                + "; ".join(problems)
            )
        plan: list[tuple[torch.Tensor, str, int | None]] = []
        total = 0
        for name, param in model.named_parameters():
            t = hf_tensor(name, cfg)
            hf_name = t.name
            if (
                hf_name not in ckpt
                and name == "output.weight"
                and ckpt.config.get("tie_word_embeddings")
            ):
                hf_name = "model.embed_tokens.weight"
            if hf_name not in ckpt:
                raise InitFromError(
                    f"training.init_from={location}: tensor {hf_name} (for {name}) is not in "
                    "the checkpoint"
                )
            have, want = ckpt.shape(hf_name), tuple(param.shape)
            if have != want:
                hint = (
                    f"; set model.vocab_size={have[0]}"
                    if hf_name in ("model.embed_tokens.weight", "lm_head.weight")
                    and have[1:] == want[1:]
                    else ""
                )
                raise InitFromError(
                    f"training.init_from={location}: {hf_name} has shape {list(have)} in the "
                    f"checkpoint, the model's {name} has {list(want)}{hint}"
                )
            plan.append((param, hf_name, t.permuted_heads))
            total += math.prod(want)
        for target, hf_name, heads in plan:
            region = local_region(target)
            local = target.to_local() if isinstance(target, DTensor) else target
            if local.numel() == 0:
                continue
            value = _read_param(ckpt, hf_name, heads, region)
            local.copy_(value.to(local.dtype).reshape(local.shape))
        return LoadReport(ckpt.elements_read, total)
