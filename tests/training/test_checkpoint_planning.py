"""Node-local deduplication of save plans, written against DCP's public planner types."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    MetadataIndex,
    TensorProperties,
)
from torch.distributed.checkpoint.planner import SavePlan, TensorWriteData, WriteItem, WriteItemType

from training.checkpoint.planning import RecordingWriter, dedup_save_plans


def _tensor_item(name: str, numel: int) -> WriteItem:
    size = torch.Size([numel])
    chunk = ChunkStorageMetadata(offsets=torch.Size([0]), sizes=size)
    data = TensorWriteData(chunk=chunk, properties=TensorProperties(dtype=torch.float32), size=size)
    return WriteItem(
        index=MetadataIndex(name, torch.Size([0])), type=WriteItemType.TENSOR, tensor_data=data
    )


def _bytes_item(name: str) -> WriteItem:
    return WriteItem(index=MetadataIndex(name), type=WriteItemType.BYTE_IO)


def _random_plans(seed: int) -> list[SavePlan]:
    rng = random.Random(seed)
    pool = [_tensor_item(f"t{i}", rng.randint(1, 1000)) for i in range(30)]
    pool += [_bytes_item(f"b{i}") for i in range(5)]
    return [
        SavePlan(items=rng.sample(pool, rng.randint(0, len(pool))))
        for _ in range(rng.randint(1, 5))
    ]


def _names(plans: list[SavePlan]) -> list[list[str]]:
    return [[item.index.fqn for item in plan.items] for plan in plans]


def test_every_item_is_kept_once_and_the_inputs_are_unchanged() -> None:
    for seed in range(20):
        plans = _random_plans(seed)
        before = _names(plans)
        out = dedup_save_plans(plans)
        assert _names(plans) == before
        kept = [name for plan in _names(out) for name in plan]
        assert sorted(kept) == sorted({name for plan in before for name in plan})
        for plan_in, plan_out in zip(before, _names(out), strict=True):
            assert set(plan_out) <= set(plan_in)


def test_the_load_is_balanced_by_tensor_size() -> None:
    big, small = _tensor_item("big", 1000), _tensor_item("small", 10)
    out = dedup_save_plans([SavePlan(items=[big, small]), SavePlan(items=[big, small])])
    assert _names(out) == [["big"], ["small"]]


def test_same_result_as_torchs_private_dedup() -> None:
    # The trainer no longer imports this private module; where the installed torch still has
    # it, the two agree on every plan set.
    private = pytest.importorskip("torch.distributed.checkpoint._dedup_save_plans")
    for seed in range(50):
        plans = _random_plans(seed)
        assert _names(dedup_save_plans(plans)) == _names(private.dedup_save_plans(plans))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_the_writer_never_touches_a_cuda_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on a GPU host: DCP's writer picks its overlapping loader, which synchronizes the
    # writing thread's current CUDA stream, whenever CUDA is available and copy-ahead is on.
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import filesystem
    from torch.distributed.checkpoint.api import CheckpointException

    def no_overlapping_loader(*args: object, **kwargs: object) -> None:
        raise AssertionError("the overlapping loader synchronizes a CUDA stream")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(filesystem, "_OverlappingCpuLoader", no_overlapping_loader)
    writer = RecordingWriter(tmp_path / "ckpt")
    dcp.save({"w": torch.arange(8.0)}, storage_writer=writer, no_dist=True)
    assert writer.results and (tmp_path / "ckpt" / ".metadata").is_file()
    # The same save with DCP's default copy-ahead reaches the loader the writer avoids.
    with pytest.raises(CheckpointException, match="overlapping loader"):
        dcp.save(
            {"w": torch.arange(8.0)},
            storage_writer=filesystem.FileSystemWriter(str(tmp_path / "default")),
            no_dist=True,
        )
