"""Manifest validation, atomic commit, keep-last-k and resume selection, without processes."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp

from tests.training.conftest import local_checkpoints
from training.checkpoint.config import CheckpointConfig, TierConfig
from training.checkpoint.format import (
    COMMITTED,
    DCP_METADATA,
    MANIFEST,
    build_manifest,
    clean_stale,
    commit_dir,
    files_written_by,
    list_committed,
    prune,
    step_dir_name,
    validate_checkpoint,
)
from training.checkpoint.manager import CheckpointManager, candidate_order
from training.config import OptimConfig
from training.config_parsing import ConfigError
from training.data import ResumableLoader, build_source
from training.optim import build_optimizer
from training.trainer import TrainState

# Single-process DCP calls here run without a process group on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def make_checkpoint(
    root: Path, step: int, tier: str = "fast", value: float = 1.0, commit: bool = True
) -> Path:
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
        (
            lambda p: (p / "__0_0.distcp").write_bytes((p / "__0_0.distcp").read_bytes()[:100]),
            "__0_0.distcp size 100 != manifest",
        ),
        (lambda p: (p / "__0_0.distcp").unlink(), "missing"),
        (lambda p: (p / MANIFEST).unlink(), "manifest unreadable"),
        (lambda p: (p / MANIFEST).write_text("{not json"), "manifest unreadable"),
        (lambda p: _flip_byte(p / DCP_METADATA, 10), "checksum mismatch"),
        (lambda p: (p / COMMITTED).unlink(), "COMMITTED"),
    ],
)
def test_damaged_checkpoints_are_rejected(
    tmp_path: Path, damage: Callable[[Path], object], reason: str
) -> None:
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
    assert not ok and why == "rank 1 did not exist when this checkpoint was written"


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
    cfg = CheckpointConfig()
    rank0 = [(12, "fast"), (8, "fast"), (10, "durable")]
    assert candidate_order([rank0, rank0], cfg) == [(12, "fast"), (10, "durable"), (8, "fast")]
    # A step only one rank lists (e.g. a node-local tier after a node was replaced) is still
    # tried; the per-candidate validation on every rank then rejects it.
    assert candidate_order([rank0, [(16, "fast")]], cfg)[0] == (16, "fast")
    # Same step in both tiers: the fast copy is tried first, the durable one next.
    both = [(20, "durable"), (20, "fast"), (16, "fast")]
    assert candidate_order([both], cfg) == [(20, "fast"), (20, "durable"), (16, "fast")]
    assert candidate_order([[], []], cfg) == []
    # The order of the tiers decides, not their names.
    swapped = CheckpointConfig(tiers=cfg.tiers[::-1])
    assert candidate_order([both], swapped) == [(20, "durable"), (20, "fast"), (16, "fast")]


def _manager(
    tmp_path: Path, app_state: dict[str, Any], cfg: CheckpointConfig | None = None
) -> CheckpointManager:
    cfg = cfg or local_checkpoints(tmp_path)
    return CheckpointManager(
        cfg, tmp_path, app_state, rank=0, world_size=1, local_rank=0, device=torch.device("cpu")
    )


def test_newest_valid_checkpoint_across_tiers_is_chosen(tmp_path: Path, world_of_one: None) -> None:
    fast, durable = tmp_path / "fast", tmp_path / "durable"
    for step in (4, 8, 12):
        make_checkpoint(fast, step, "fast", value=float(step))
    make_checkpoint(durable, 10, "durable", value=10.0)
    _flip_byte(fast / step_dir_name(12) / "__0_0.distcp")  # newest is corrupt
    state = {"w": torch.zeros(64, 64), "step": 0}
    manager = _manager(tmp_path, state)
    try:
        ref = manager.resume()  # the selection the trainer runs
    finally:
        manager.close()
        manager.destroy_group()
    assert ref is not None and (ref.step, ref.tier) == (10, "durable")
    assert state["step"] == 10 and torch.equal(state["w"], torch.full((64, 64), 10.0))


def test_rng_state_round_trips_through_train_state(tmp_path: Path, world_of_one: None) -> None:
    model = torch.nn.Linear(4, 4)
    _, sched = build_optimizer(model, OptimConfig(), 10)
    source = build_source(
        "synthetic", path="", dtype="uint16", seq_len=8, vocab_size=32, seed=1, synthetic_samples=16
    )
    loader = ResumableLoader(source, 2, 0, 1, 1, torch.device("cpu"))
    ts = TrainState(sched, loader, world_size=1)
    torch.manual_seed(5), np.random.seed(5), random.seed(5)
    saved = ts.state_dict()
    expected = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(99), np.random.seed(99), random.seed(99)
    restored = TrainState(sched, loader, world_size=1)
    restored.load_state_dict(saved)
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert (
        torch.equal(got[0], expected[0])
        and np.array_equal(got[1], expected[1])
        and got[2] == expected[2]
    )


def test_listing_ignores_foreign_entries(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 4)
    (tmp_path / "step_00000099").mkdir()  # no marker
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / ".trash-step_00000001-ab").mkdir()
    assert [r.step for r in list_committed(tmp_path, "durable")] == [4]
    assert clean_stale(tmp_path) == [".trash-step_00000001-ab"]


def test_blocking_time_is_counted_once_per_wait(tmp_path: Path, world_of_one: None) -> None:
    state = {"w": torch.zeros(256, 256), "step": 0}
    committed: list[float] = []
    manager = _manager(tmp_path, state)
    manager.on_committed = lambda step, tier, blocking: committed.append(blocking)
    try:
        manager.save(4, "fast")
        manager.save(8, "fast")  # waits for step 4 first: that wait is step 4's blocking time
        manager.wait()  # the final wait counts too
    finally:
        manager.close()
        manager.destroy_group()
    assert len(committed) == 2
    assert manager.blocking_total_s == pytest.approx(sum(committed), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(
    "saved, restored",
    [
        (bytes([1, 2]), [1, 2]),  # this rank's device
        (b"", None),  # written without CUDA
    ],
)
def test_cuda_rng_state_restores_this_ranks_device(
    monkeypatch: pytest.MonkeyPatch, saved: bytes, restored: list[int] | None
) -> None:
    # As on a GPU host: the state set is recorded instead of reaching a device.
    from training import trainer

    state = trainer._local_rng_state()
    calls: list[list[int]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda t: calls.append(t.tolist()))
    state["cuda"] = base64.b64encode(saved).decode()
    trainer._set_local_rng_state(state)
    assert calls == ([restored] if restored is not None else [])


def test_rng_state_is_json_text(tmp_path: Path, world_of_one: None) -> None:
    # JSON, so a resume reads it without unpickling (training/checkpoint/safe_load.py).
    model = torch.nn.Linear(4, 4)
    _, sched = build_optimizer(model, OptimConfig(), 10)
    source = build_source(
        "synthetic", path="", dtype="uint16", seq_len=8, vocab_size=32, seed=1, synthetic_samples=16
    )
    loader = ResumableLoader(source, 2, 0, 1, 1, torch.device("cpu"))
    rng = TrainState(sched, loader, world_size=1).state_dict()["rng"]
    assert isinstance(rng, str)
    assert set(json.loads(rng)[0]) == {"torch", "cuda", "numpy", "python"}


def test_storage_kinds_are_classes_registered_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from training.checkpoint import managed
    from training.checkpoint.tiers import DirectoryTier, ManagedStorageTier, open_tiers

    def tiers(*specs: TierConfig) -> CheckpointConfig:
        return CheckpointConfig(tiers=specs, sigterm_tier=specs[-1].name)

    monkeypatch.setattr(managed, "AVAILABLE", False)
    opened = open_tiers(CheckpointConfig(), tmp_path, world_size=1)  # fast: "auto"
    assert list(opened) == ["fast", "durable"]
    assert all(type(t) is DirectoryTier for t in opened.values())
    assert opened["fast"].root == tmp_path / "ckpt" / "fast"
    with pytest.raises(RuntimeError, match=r"checkpoint\.fast_storage=managed but"):
        open_tiers(tiers(TierConfig("fast", storage="managed")), tmp_path, world_size=1)
    with pytest.raises(
        ConfigError, match=r"checkpoint\.tape_storage must be one of auto, local, managed, got 'x'"
    ):
        open_tiers(tiers(TierConfig("tape", storage="x")), tmp_path, world_size=1)
    monkeypatch.setattr(managed, "AVAILABLE", True)
    monkeypatch.setattr(managed, "SageMakerCheckpointConfig", lambda **kw: kw, raising=False)
    opened = open_tiers(CheckpointConfig(), tmp_path, world_size=1)
    assert type(opened["fast"]) is ManagedStorageTier and opened["fast"].backend is not None
    with pytest.raises(ConfigError, match="at most one checkpoint tier can use managed storage"):
        two = (TierConfig("a", storage="managed"), TierConfig("b", storage="auto"))
        open_tiers(tiers(*two), tmp_path, world_size=1)
