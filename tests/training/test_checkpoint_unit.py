"""Manifest validation, atomic commit, keep-last-k and resume selection, without processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from training.checkpoint import (
    COMMITTED,
    DCP_METADATA,
    MANIFEST,
    build_manifest,
    candidate_order,
    clean_stale,
    commit_dir,
    files_written_by,
    list_committed,
    prune,
    step_dir_name,
    validate_checkpoint,
)

# Single-process DCP calls here run without a process group on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def make_checkpoint(root: Path, step: int, tier: str = "fast", value: float = 1.0, commit: bool = True) -> Path:
    """A real single-process DCP checkpoint, committed the way the manager commits one."""
    tmp = root / f"{step_dir_name(step)}.tmp-abc123"
    state = {"w": torch.full((64, 64), value), "step": step}
    dcp.save(state, checkpoint_id=str(tmp), no_dist=True)
    final = root / step_dir_name(step)
    if commit:
        commit_dir(tmp, final, build_manifest(step, tier, 1, [files_written_by(tmp, 0)]))
        return final
    return tmp


def test_committed_checkpoint_validates_and_loads(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8, value=3.0)
    ok, why = validate_checkpoint(path, rank=0)
    assert ok, why
    manifest = json.loads((path / MANIFEST).read_text())
    assert set(manifest["files"]) == {DCP_METADATA, "__0_0.distcp"}
    assert (path / COMMITTED).is_file()
    target = {"w": torch.zeros(64, 64), "step": 0}
    dcp.load(target, checkpoint_id=str(path), no_dist=True)
    assert torch.equal(target["w"], torch.full((64, 64), 3.0)) and target["step"] == 8


def test_uncommitted_checkpoint_is_invisible(tmp_path: Path) -> None:
    tmp = make_checkpoint(tmp_path, 4, commit=False)
    # It is a complete, loadable DCP checkpoint, which is exactly why it must not be listed.
    dcp.load({"w": torch.zeros(64, 64), "step": 0}, checkpoint_id=str(tmp), no_dist=True)
    assert list_committed(tmp_path, "fast") == []
    assert validate_checkpoint(tmp, 0)[0] is False
    assert clean_stale(tmp_path) == [tmp.name]
    assert not tmp.exists()


def _flip_byte(p: Path, offset: int | None = None) -> None:
    data = bytearray(p.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0xFF
    p.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda p: _flip_byte(p / "__0_0.distcp"), "checksum mismatch"),
        (lambda p: (p / "__0_0.distcp").write_bytes((p / "__0_0.distcp").read_bytes()[:100]), "size"),
        (lambda p: (p / "__0_0.distcp").unlink(), "missing"),
        (lambda p: (p / MANIFEST).unlink(), "manifest unreadable"),
        (lambda p: (p / MANIFEST).write_text("{not json"), "manifest unreadable"),
        (lambda p: _flip_byte(p / DCP_METADATA, 10), "checksum mismatch"),
        (lambda p: (p / COMMITTED).unlink(), "COMMITTED"),
    ],
)
def test_damaged_checkpoints_are_rejected(tmp_path: Path, damage, reason: str) -> None:  # type: ignore[no-untyped-def]
    path = make_checkpoint(tmp_path, 12)
    damage(path)
    ok, why = validate_checkpoint(path, rank=0)
    assert not ok and reason in why


def test_garbage_metadata_caught_without_checksums(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 12)
    meta = path / DCP_METADATA
    size = meta.stat().st_size
    meta.write_bytes(b"\x00" * size)  # same size: only the DCP metadata load can notice
    ok, why = validate_checkpoint(path, 0, verify_checksums=True)
    assert not ok and why == ".metadata checksum mismatch"
    ok, why = validate_checkpoint(path, 0, verify_checksums=False)
    assert not ok and "DCP metadata does not load" in why


def test_rank_checks_only_its_own_shards(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 4)
    # A rank that did not exist in a world of one cannot take its shards from here.
    ok, why = validate_checkpoint(path, rank=1)
    assert not ok and "rank 1" in why


def test_keep_last_k(tmp_path: Path) -> None:
    for step in (4, 8, 12, 16, 20):
        make_checkpoint(tmp_path, step)
    assert prune(tmp_path, "fast", keep=2) == [12, 8, 4]
    assert [r.step for r in list_committed(tmp_path, "fast")] == [20, 16]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000016", "step_00000020"]


def test_commit_replaces_same_step(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 8, value=1.0)
    path = make_checkpoint(tmp_path, 8, value=2.0)
    target = {"w": torch.zeros(64, 64), "step": 0}
    dcp.load(target, checkpoint_id=str(path), no_dist=True)
    assert target["w"][0, 0].item() == 2.0
    assert [r.step for r in list_committed(tmp_path, "fast")] == [8]


def test_candidates_newest_across_tiers() -> None:
    rank0 = [(12, "fast"), (8, "fast"), (10, "durable")]
    assert candidate_order([rank0, rank0]) == [(12, "fast"), (10, "durable"), (8, "fast")]
    # A step only one rank lists (e.g. a node-local tier after a node was replaced) is still
    # tried; the per-candidate validation on every rank then rejects it.
    assert candidate_order([rank0, [(16, "fast")]])[0] == (16, "fast")
    # Same step in both tiers: the fast copy is tried first, the durable one next.
    both = [(20, "durable"), (20, "fast"), (16, "fast")]
    assert candidate_order([both]) == [(20, "fast"), (20, "durable"), (16, "fast")]
    assert candidate_order([[], []]) == []


def test_newest_valid_checkpoint_across_tiers_is_chosen(tmp_path: Path) -> None:
    fast, durable = tmp_path / "fast", tmp_path / "durable"
    for step in (4, 8, 12):
        make_checkpoint(fast, step, "fast")
    make_checkpoint(durable, 10, "durable")
    _flip_byte(fast / step_dir_name(12) / "__0_0.distcp")  # newest is corrupt
    listed = [(r.step, r.tier) for root, tier in ((fast, "fast"), (durable, "durable")) for r in list_committed(root, tier)]
    chosen = next(
        (step, tier) for step, tier in candidate_order([listed])
        if validate_checkpoint((fast if tier == "fast" else durable) / step_dir_name(step), 0)[0]
    )
    assert chosen == (10, "durable")


def test_listing_ignores_foreign_entries(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 4)
    (tmp_path / "step_00000099").mkdir()  # no marker
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / ".trash-step_00000001-ab").mkdir()
    assert [r.step for r in list_committed(tmp_path, "durable")] == [4]
    assert clean_stale(tmp_path) == [".trash-step_00000001-ab"]
