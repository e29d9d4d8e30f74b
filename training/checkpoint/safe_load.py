"""Reading a checkpoint without running code from it.

DCP keeps two things as pickles: the `.metadata` file (`FileSystemReader.read_metadata` is a
plain `pickle.load`) and every non-tensor value of the state dict (`DefaultLoadPlanner.
load_bytes` is `torch.load(..., weights_only=False)`), in torch 2.13 and in the image's 2.11
alike (torch/distributed/checkpoint/filesystem.py, default_planner.py). A pickle may name any
importable callable, so a checkpoint someone else could write would run their code inside
the resuming job, with its pod identity. Here:

- the metadata goes through an unpickler that builds only DCP's own metadata classes, torch
  sizes, dtypes and layouts (the complete list of what DCP's writer puts there), and refuses
  anything else in one line;
- non-tensor values load with `torch.load(weights_only=True)`: primitives, containers and
  tensors only. The trainer's own non-tensor state is primitives and JSON text.
"""

from __future__ import annotations

import io
import pickle
from typing import Any, Final

import torch
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

_DCP_METADATA_MODULE: Final = "torch.distributed.checkpoint.metadata"
# Every global DCP's FileSystemWriter pickles into `.metadata` (found by unpickling real
# checkpoints through a recording `find_class`): nothing here runs code when built.
METADATA_GLOBALS: Final = frozenset(
    {
        (_DCP_METADATA_MODULE, "Metadata"),
        (_DCP_METADATA_MODULE, "MetadataIndex"),
        (_DCP_METADATA_MODULE, "StorageMeta"),
        (_DCP_METADATA_MODULE, "TensorProperties"),
        (_DCP_METADATA_MODULE, "TensorStorageMetadata"),
        (_DCP_METADATA_MODULE, "BytesStorageMetadata"),
        (_DCP_METADATA_MODULE, "ChunkStorageMetadata"),
        (_DCP_METADATA_MODULE, "_MEM_FORMAT_ENCODING"),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch.serialization", "_get_layout"),
        ("torch", "Size"),
        # The checkpoint id DCP records (storage_meta.checkpoint_id).
        ("pathlib", "PosixPath"),
    }
)


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint file names something other than checkpoint data: it is not loaded."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in METADATA_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise UnsafeCheckpointError(
            f"DCP metadata names {module}.{name}, which is not checkpoint metadata: refusing to "
            "load it (a pickle that names other objects can run code)"
        )


def load_metadata(stream: Any) -> Metadata:
    """DCP metadata from `stream`, built from METADATA_GLOBALS only; raises
    UnsafeCheckpointError for anything else, ValueError when it is not DCP metadata."""
    metadata = _MetadataUnpickler(stream).load()
    if not isinstance(metadata, Metadata):
        raise ValueError(f"DCP metadata holds a {type(metadata).__name__}, not Metadata")
    return metadata


class SafeFileSystemReader(FileSystemReader):
    """FileSystemReader whose metadata load cannot run code (see load_metadata)."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        # What FileSystemReader.read_metadata does, with the restricted unpickler.
        with self.fs.create_stream(self._get_metadata_path(kwargs.get("rank")), "rb") as stream:
            metadata = load_metadata(stream)
        storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """DefaultLoadPlanner whose non-tensor values load with weights_only=True."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        try:
            loaded = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as e:
            raise UnsafeCheckpointError(
                f"{read_item.dest_index.fqn} holds objects other than tensors and plain data: "
                "refusing to load it (a pickle that names other objects can run code)"
            ) from e
        # What DefaultLoadPlanner.load_bytes does with the value it loads.
        super().load_bytes(read_item, _saved(loaded))


def _saved(value: Any) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return buffer
