"""``training.init_from``: start from a Hugging Face Llama checkpoint instead of random weights.

The checkpoint is a directory (local, FSx, or ``s3://bucket/prefix``) holding safetensors
shards and ``model.safetensors.index.json`` (or one ``model.safetensors``), and optionally
``config.json``. Each rank reads only the part of each tensor that its shard of the parameter
holds: the parameter's placements (FSDP's Shard(0), HSDP's Replicate x Shard) give its region
of the full tensor, and the reader fetches that region (``safe_open(...).get_slice`` on a
file system, one ranged GET per tensor on S3). Query and key rows are read in whole heads,
since the rotate-half order is undone per head (training/hf_llama.py).

Before a weight is changed, config.json (required) is compared with the model: layers,
heads, key/value heads, head dim (derived from hidden_size / num_attention_heads where a
Llama-2-era config has none), widths, vocabulary and tied embeddings, since heads and tying do
not show in the tensor shapes; then every tensor's shape, and every tensor of the checkpoint
must have a place in the model (a checkpoint with more layers is refused, not cut). Each
mismatch is one line naming the field and the setting that fixes it. Only files the index
names inside the checkpoint's own directory or prefix are read, and on S3 every byte range
taken from a file's header is checked against the object's size first. Under tensor parallelism FSDP shards a dimension the
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
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard

from training import fileio, s3
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
# safetensors' own bound on a header (its MAX_HEADER_SIZE): a larger length is refused before
# it is requested.
MAX_HEADER_BYTES = 100_000_000
# Tensors some checkpoints carry that the model derives instead (older Llama conversions).
_DERIVED_SUFFIXES = ("rotary_emb.inv_freq",)
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.")


def _join(location: str, name: str) -> str:
    return f"{location.rstrip('/')}/{name}" if s3.is_s3(location) else os.path.join(location, name)


def _read_text(path: str) -> str | None:
    """The text of `path`, None where it does not exist; one line where it cannot be read."""
    try:
        if s3.is_s3(path):
            return s3.read_object(*s3.split_url(path)).decode()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except Exception as e:
        code = s3.error_code(e)
        if code in ("NoSuchKey", "404"):
            return None
        unreadable = (PermissionError, IsADirectoryError, NotADirectoryError, UnicodeDecodeError)
        if not isinstance(e, unreadable) and not s3.is_missing(e):
            raise  # the network: another attempt may succeed
        raise InitFromError(
            f"training.init_from: cannot read {path} ({code or getattr(e, 'strerror', None) or e}"
            "); give a checkpoint directory this job may read"
        ) from None


def _exists(path: str) -> bool:
    if not s3.is_s3(path):
        return os.path.exists(path)
    try:
        s3.object_size(*s3.split_url(path))
    except Exception as e:
        if s3.is_missing(e):
            return False
        raise
    return True


def _corrupt(where: str, why: object) -> InitFromError:
    return InitFromError(
        f"training.init_from: {where} is not a readable safetensors file ({why}); replace it "
        "with an intact copy of the checkpoint"
    )


class _S3Safetensors:
    """One safetensors object on S3: the header once, then each tensor's rows by range. Every
    offset comes from the object itself, so each is checked against the object's size before
    it is requested."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.bucket, self.key = s3.split_url(url)
        size = s3.object_size(self.bucket, self.key)
        if size < 8:
            raise _corrupt(url, f"{size} bytes, shorter than a header length")
        (length,) = np.frombuffer(s3.read_range(self.bucket, self.key, 0, 8), dtype="<u8")
        if int(length) > min(MAX_HEADER_BYTES, size - 8):
            raise _corrupt(url, f"header length {int(length)} in an object of {size} bytes")
        try:
            header = json.loads(s3.read_range(self.bucket, self.key, 8, 8 + int(length)))
        except ValueError as e:
            raise _corrupt(url, f"header is not JSON: {e}") from None
        if not isinstance(header, dict):
            raise _corrupt(url, "header is not a JSON object")
        header.pop("__metadata__", None)
        self.header: dict[str, Any] = header
        self.data_start = 8 + int(length)
        self.data_size = size - self.data_start

    def keys(self) -> list[str]:
        return list(self.header)

    def entry(self, name: str) -> tuple[torch.dtype, tuple[int, ...], int]:
        """(dtype, shape, offset of its first byte) of tensor `name`, its bytes checked to lie
        inside the object and to be exactly its shape's."""
        entry = self.header.get(name)
        try:
            dtype = _DTYPES[entry["dtype"]]  # type: ignore[index]
            shape = tuple(int(n) for n in entry["shape"])  # type: ignore[index]
            begin, end = (int(n) for n in entry["data_offsets"])  # type: ignore[index]
        except (KeyError, TypeError, ValueError):
            raise _corrupt(self.url, f"no usable entry for {name}") from None
        nbytes = math.prod(shape) * dtype.itemsize
        if min(shape, default=0) < 0 or not 0 <= begin <= end <= self.data_size:
            raise _corrupt(self.url, f"{name}'s bytes [{begin}, {end}) lie outside its data")
        if end - begin != nbytes:
            raise _corrupt(self.url, f"{name} holds {end - begin} bytes, its shape needs {nbytes}")
        return dtype, shape, self.data_start + begin

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entry(name)[1]

    def read(self, name: str, region: tuple[slice, ...]) -> tuple[torch.Tensor, int]:
        dtype, shape, begin = self.entry(name)
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


def _weight_map(location: str, text: str) -> dict[str, str]:
    """The index's tensor -> file map, every file a plain name in the checkpoint's directory."""
    where = f"training.init_from={location}: {INDEX_FILE}"
    try:
        weight_map = json.loads(text)["weight_map"]
    except (ValueError, KeyError, TypeError):
        raise InitFromError(f"{where} holds no weight_map (is it a Hugging Face index?)") from None
    if not isinstance(weight_map, dict):
        raise InitFromError(f"{where}: weight_map is not a JSON object")
    for tensor, file in weight_map.items():
        if not fileio.is_plain_file_name(file):
            raise InitFromError(
                f"{where} maps {tensor} to {file!r}, which is not a file name in that directory "
                "(paths, absolute or with '..', are refused): name the shard files only"
            )
    return weight_map


class HfCheckpoint:
    """The tensors of a Hugging Face checkpoint, read region by region; counts what it reads.
    Reads only the files its index names inside its own directory (or S3 prefix)."""

    def __init__(self, location: str, stack: ExitStack) -> None:
        self.location = location
        self._stack = stack
        # Open files by name: safe_open handles, or _S3Safetensors headers.
        self._files: dict[str, Any] = {}
        index = _read_text(_join(location, INDEX_FILE))
        if index is not None:
            self.weight_map: dict[str, str] = _weight_map(location, index)
        else:
            if not _exists(_join(location, SINGLE_FILE)):
                raise InitFromError(
                    f"training.init_from={location}: neither {INDEX_FILE} nor {SINGLE_FILE} "
                    "found there (a Hugging Face safetensors checkpoint directory)"
                )
            self.weight_map = {}
            self.weight_map = dict.fromkeys(self._open(SINGLE_FILE).keys(), SINGLE_FILE)
        text = _read_text(_join(location, CONFIG_FILE))
        if text is None:
            raise InitFromError(
                f"training.init_from={location}: no {CONFIG_FILE} there, so its architecture "
                "(layers, heads, head dim, tied embeddings) cannot be checked; put the "
                f"checkpoint's {CONFIG_FILE} next to its weights"
            )
        try:
            config = json.loads(text)
        except ValueError as e:
            config = f"not JSON ({e})"
        if not isinstance(config, dict):
            raise InitFromError(
                f"training.init_from={location}: {CONFIG_FILE} is {config!s:.80}, not a "
                "Hugging Face model config"
            )
        self.config: dict[str, Any] = config
        self.elements_read = 0

    def _open(self, file: str) -> Any:
        files = self._files
        if file not in files:
            with self._reading(file):
                files[file] = self._open_file(file)
        return files[file]

    def _open_file(self, file: str) -> Any:
        path = _join(self.location, file)
        if s3.is_s3(path):
            return _S3Safetensors(path)
        from safetensors import safe_open

        # A link may not lead the read out of the checkpoint's directory.
        root = os.path.realpath(self.location)
        if os.path.dirname(os.path.realpath(path)) != root:
            raise InitFromError(
                f"training.init_from={self.location}: {file} links outside the checkpoint's "
                "directory; copy the file there instead"
            )
        return self._stack.enter_context(safe_open(path, framework="pt"))

    @contextmanager
    def _reading(self, file: str) -> Iterator[None]:
        """A file that cannot be read the same way on every attempt (corrupt, truncated,
        missing, not allowed) as one line naming it; other errors (the network) propagate."""
        from safetensors import SafetensorError

        deterministic = (SafetensorError, ValueError, FileNotFoundError, PermissionError)
        try:
            yield
        except InitFromError:
            raise
        except Exception as e:
            if isinstance(e, deterministic) or s3.is_missing(e):
                raise _corrupt(_join(self.location, file), str(e).splitlines()[0]) from None
            raise

    def __contains__(self, name: str) -> bool:
        return name in self.weight_map

    def shape(self, name: str) -> tuple[int, ...]:
        file = self.weight_map[name]
        f = self._open(file)
        with self._reading(file):
            if isinstance(f, _S3Safetensors):
                return f.shape(name)
            return tuple(f.get_slice(name).get_shape())

    def read(self, name: str, region: tuple[slice, ...]) -> torch.Tensor:
        file = self.weight_map[name]
        f = self._open(file)
        with self._reading(file):
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


def _check_config(ckpt: HfCheckpoint, cfg: ModelConfig) -> None:
    try:
        problems = config_mismatches(ckpt.config, cfg)
    except (TypeError, ValueError) as e:
        problems = [f"a setting does not parse ({e})"]
    if problems:
        raise InitFromError(
            f"training.init_from={ckpt.location}: {CONFIG_FILE} differs from the model: "
            + "; ".join(problems)
        )


def _plan(
    ckpt: HfCheckpoint, model: nn.Module, cfg: ModelConfig
) -> list[tuple[torch.Tensor, str, int | None]]:
    """(parameter, checkpoint tensor, permuted heads) for every parameter, each shape checked,
    and every tensor of the checkpoint given a place."""
    where = f"training.init_from={ckpt.location}"
    plan: list[tuple[torch.Tensor, str, int | None]] = []
    for name, param in model.named_parameters():
        t = hf_tensor(name, cfg)
        if t.name not in ckpt:
            raise InitFromError(f"{where}: tensor {t.name} (for {name}) is not in the checkpoint")
        have, want = ckpt.shape(t.name), tuple(param.shape)
        if have != want:
            hint = (
                f"; set model.vocab_size={have[0]}"
                if t.name in ("model.embed_tokens.weight", "lm_head.weight")
                and have[1:] == want[1:]
                else ""
            )
            raise InitFromError(
                f"{where}: {t.name} has shape {list(have)} in the checkpoint, the model's "
                f"{name} has {list(want)}{hint}"
            )
        plan.append((param, t.name, t.permuted_heads))
    used = {hf_name for _, hf_name, _ in plan}
    extra = sorted(
        n for n in ckpt.weight_map if n not in used and not n.endswith(_DERIVED_SUFFIXES)
    )
    if extra:
        layers = [int(m[1]) for m in map(_LAYER_RE.match, ckpt.weight_map) if m]
        fix = (
            f"set model.n_layers={max(layers) + 1}"
            if layers and max(layers) >= cfg.n_layers
            else "the checkpoint is not a LlamaForCausalLM of this model's architecture"
        )
        raise InitFromError(
            f"{where}: {len(extra)} tensors of the checkpoint have no place in the model "
            f"(first {extra[0]}): {fix}"
        )
    return plan


@torch.no_grad()
def load_pretrained(model: nn.Module, location: str, cfg: ModelConfig) -> LoadReport:
    """Copies the checkpoint at `location` into `model` (sharded or not), this rank's part only,
    once its architecture and every tensor's shape are known to be the model's."""
    with open_checkpoint(location) as ckpt:
        _check_config(ckpt, cfg)
        plan = _plan(ckpt, model, cfg)
        total = sum(math.prod(param.shape) for param, _, _ in plan)
        for target, hf_name, heads in plan:
            region = local_region(target)
            local = target.to_local() if isinstance(target, DTensor) else target
            if local.numel() == 0:
                continue
            value = _read_param(ckpt, hf_name, heads, region)
            local.copy_(value.to(local.dtype).reshape(local.shape))
        return LoadReport(ckpt.elements_read, total)
