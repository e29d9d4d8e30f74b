"""Node-local deduplication of save plans, written against DCP's public planner types."""

from __future__ import annotations

import pickle
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

from training.checkpoint.planning import (
    NodeLocalSavePlanner,
    RecordingWriter,
    dedup_save_plans,
    files_read_by,
    node_metadata,
)


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


def test_each_item_goes_to_the_lightest_plan_in_first_seen_order() -> None:
    a, b, c, d = (_tensor_item(n, s) for n, s in (("a", 100), ("b", 60), ("c", 30), ("d", 20)))
    # a -> 0 (100); b -> 1 (60); c -> 1 (90); d -> 1 (90 < 100: 110)
    out = dedup_save_plans([SavePlan(items=[a, b, c, d]), SavePlan(items=[a, b, c, d])])
    assert _names(out) == [["a"], ["b", "c", "d"]]
    # An item only one plan holds stays there, whatever the sizes.
    out = dedup_save_plans([SavePlan(items=[a]), SavePlan(items=[b, a]), SavePlan(items=[c])])
    assert _names(out) == [["a"], ["b"], ["c"]]
    # Ties go to the first plan that holds the item.
    out = dedup_save_plans([SavePlan(items=[c]), SavePlan(items=[_bytes_item("x"), c])])
    assert _names(out) == [["c"], ["x"]]


def test_items_without_a_size_count_one() -> None:
    # Three byte items alternate between two plans: each weighs 1, so after x (plan 0) and
    # y (plan 1), z goes back to plan 0; a weight of 0 would pile every one onto plan 0.
    x, y, z = (_bytes_item(n) for n in "xyz")
    out = dedup_save_plans([SavePlan(items=[x, y, z]), SavePlan(items=[x, y, z])])
    assert _names(out) == [["x", "z"], ["y"]]
    # Against a 4-byte tensor: three byte items weigh 3 < 4, so the third still joins them;
    # at 2 each it would tie at 4 and go to the first plan.
    items = [_tensor_item("t", 1), *(_bytes_item(f"b{i}") for i in (1, 2, 3))]
    out = dedup_save_plans([SavePlan(items=list(items)), SavePlan(items=list(items))])
    assert _names(out) == [["t"], ["b1", "b2", "b3"]]


def test_node_local_plans_keep_one_copy_per_node() -> None:
    items = [_tensor_item("a", 100), _tensor_item("b", 10), _bytes_item("c")]
    plans = [SavePlan(items=list(items), planner_data={}) for _ in range(5)]
    planner = NodeLocalSavePlanner(node_of_rank=[0, 0, 1, 1, 2])
    out, metadata = planner.create_global_plan(plans)
    assert _names(out) == [["a"], ["b", "c"], ["a"], ["b", "c"], ["a", "b", "c"]]
    assert planner.global_plan == out
    assert set(metadata.state_dict_metadata) == {"a", "b", "c"}
    assert _names(plans) == [["a", "b", "c"]] * 5


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_the_writer_records_where_each_item_went(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    seen: list[Path] = []
    writer = RecordingWriter(tmp_path / "ckpt", before_write=seen.append)
    assert writer.results is None
    dcp.save({"w": torch.arange(8.0), "x": torch.ones(3)}, storage_writer=writer, no_dist=True)
    assert seen == [tmp_path / "ckpt"]
    assert writer.dir == tmp_path / "ckpt"
    # Every file is fsynced before the commit renames the directory.
    assert writer.sync_files is True
    assert writer.results is not None
    assert [(r.index.fqn, r.storage_data.relative_path) for r in writer.results] == [
        ("w", "__0_0.distcp"),
        ("x", "__0_0.distcp"),
    ]
    assert files_read_by(tmp_path / "ckpt", {"w": torch.zeros(8)}) == {"__0_0.distcp"}
    assert files_read_by(tmp_path / "ckpt", {}) == set()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_failed_write_leaves_no_results(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    def disk_full(path: Path) -> None:
        raise OSError(28, "No space left on device")

    writer = RecordingWriter(tmp_path / "ckpt", before_write=disk_full)
    with pytest.raises(CheckpointException, match="No space left"):
        dcp.save({"w": torch.arange(8.0)}, storage_writer=writer, no_dist=True)
    assert writer.results is None


def test_node_metadata_points_items_at_this_nodes_copies() -> None:
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata
    from torch.distributed.checkpoint.storage import WriteResult

    a, b = MetadataIndex("a", torch.Size([0])), MetadataIndex("b", torch.Size([0]))
    metadata = Metadata(
        state_dict_metadata={}, storage_data={a: _StorageInfo("__0_0.distcp", 0, 4)}
    )
    results = [
        [WriteResult(index=a, size_in_bytes=4, storage_data=_StorageInfo("__2_0.distcp", 8, 4))],
        [WriteResult(index=b, size_in_bytes=2, storage_data=_StorageInfo("__3_0.distcp", 0, 2))],
    ]
    restored = pickle.loads(node_metadata(metadata, results))  # noqa: S301 - bytes made here
    assert restored.storage_data == {
        a: _StorageInfo("__2_0.distcp", 8, 4),
        b: _StorageInfo("__3_0.distcp", 0, 2),
    }
    # The global metadata is left as it was.
    assert metadata.storage_data == {a: _StorageInfo("__0_0.distcp", 0, 4)}


def test_a_write_whose_future_fails_leaves_no_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DCP reports a storage error through the returned future; the writer must not keep the
    # results of an earlier write as if this one had them.
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    failed: torch.futures.Future[list[object]] = torch.futures.Future()
    failed.set_exception(OSError(28, "No space left on device"))
    monkeypatch.setattr(FileSystemWriter, "write_data", lambda self, plan, planner: failed)
    writer = RecordingWriter(tmp_path / "ckpt")
    writer.results = []
    returned = writer.write_data(SavePlan(items=[]), planner=None)  # type: ignore[arg-type]
    assert returned is failed
    assert writer.results is None
