"""Checkpoint failures and resume decisions, in one process with the trainer's real state:
a full disk, corrupt checkpoints, another world size or config, a deliberate fresh start."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp

from tests.training import appstate
from tests.training.conftest import local_checkpoints
from training.checkpoint.config import CheckpointConfig, TierConfig
from training.checkpoint.format import (
    MANIFEST,
    list_committed,
    read_manifest,
    step_dir_name,
)
from training.checkpoint.manager import CheckpointManager, IncompatibleCheckpointError
from training.faults import FaultInjector, FaultPlan
from training.optim import apply_config
from training.run_identity import RunIdentity, compare

CPU = torch.device("cpu")


def _manager(
    tmp_path: Path,
    app: appstate.AppState,
    *,
    world_size: int = 1,
    identity: RunIdentity | None = None,
    async_mode: str = "thread",
    verify_checksums: bool = True,
    checkpoints: CheckpointConfig | None = None,
    **kwargs: Any,
) -> CheckpointManager:
    cfg = checkpoints or local_checkpoints(
        tmp_path, async_mode=async_mode, verify_checksums=verify_checksums
    )
    return CheckpointManager(
        cfg,
        tmp_path,
        app.stateful,
        rank=0,
        world_size=1,
        local_rank=0,
        device=CPU,
        identity=identity or RunIdentity.of(app.cfg, world_size),
        **kwargs,
    )


def _run(manager: CheckpointManager, app: appstate.AppState, saves: list[tuple[int, str]]) -> None:
    """Trains up to each step of `saves` and checkpoints it there, as the trainer does."""
    try:
        manager.prepare_staging()
        for step, tier in saves:
            while app.train.step < step:
                manager.wait_for_staging()
                app.step()
            manager.save(step, tier)
        manager.wait()
    finally:
        manager.close()
        manager.destroy_group()


def _tmp_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if ".tmp-" in p.name)


@pytest.mark.parametrize("async_mode", ["thread", "sync"])
def test_disk_full_cleans_up_and_the_next_checkpoint_commits(
    tmp_path: Path, world_of_one: None, async_mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    app = appstate.build()
    faults = FaultInjector(FaultPlan(disk_full_at_checkpoint=2), 0, lambda fault: None)
    manager = _manager(tmp_path, app, async_mode=async_mode, before_write=faults.checkpoint_writing)
    _run(manager, app, [(1, "fast"), (2, "fast"), (3, "fast")])
    assert (manager.committed, manager.failed) == (2, 1)
    assert "No space left on device (injected)" in (manager.last_error or "")
    assert [r.step for r in list_committed(tmp_path / "fast", "fast")] == [3, 1]
    assert _tmp_dirs(tmp_path / "fast") == []  # the partial write was removed at once
    err = capsys.readouterr().err
    assert "checkpoint step 2 tier fast failed: " in err and "Traceback" not in err


def test_a_tier_is_one_config_entry(tmp_path: Path, world_of_one: None) -> None:
    """A third tier declared in the config alone is saved on its interval, kept per its keep
    count and resumed from by the code that serves the default two."""
    fast, durable = CheckpointConfig().tiers
    tiers = (
        replace(fast, interval=2, keep=2),
        TierConfig("nearline", interval=3, keep=1),
        replace(durable, interval=12),
    )
    cfg = local_checkpoints(tmp_path, tiers)
    saves = [(step, tier) for step in range(1, 10) if (tier := cfg.tier_due(step))]
    # Step 6 is due in both fast and nearline: the later tier in the list covers the earlier.
    assert saves == [
        (2, "fast"),
        (3, "nearline"),
        (4, "fast"),
        (6, "nearline"),
        (8, "fast"),
        (9, "nearline"),
    ]
    app = appstate.build()
    _run(_manager(tmp_path, app, checkpoints=cfg), app, saves)
    assert [r.step for r in list_committed(tmp_path / "nearline", "nearline")] == [9]
    assert [r.step for r in list_committed(tmp_path / "fast", "fast")] == [8, 4]
    assert read_manifest(tmp_path / "nearline" / step_dir_name(9))["tier"] == "nearline"
    fresh = appstate.build()
    manager = _manager(tmp_path, fresh, checkpoints=cfg)
    try:
        ref = manager.resume()
    finally:
        manager.close()
        manager.destroy_group()
    assert ref is not None and (ref.step, ref.tier) == (9, "nearline")
    assert fresh.train.step == 9 and _equal(fresh.params(), app.params())


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _write_as_before_tiers_were_data(root: Path, step: int, app: appstate.AppState) -> None:
    """A checkpoint laid out as the code with two hard-coded tiers wrote it, spelled out here
    rather than by the format module: <tier root>/step_NNNNNNNN/ holding the DCP files, a
    version-2 manifest.json listing them and a COMMITTED marker with the step."""
    path = root / f"step_{step:08d}"
    dcp.save(appstate.state_dict(app), checkpoint_id=str(path))
    files = {
        p.name: {
            "rank": 0,
            "size": p.stat().st_size,
            "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
        }
        for p in sorted(path.iterdir())
    }
    manifest = {
        "version": 2,
        "step": step,
        "tier": root.name,
        "world_size": 1,
        "created_unix": 0.0,
        "files": files,
        "run": RunIdentity.of(app.cfg, 1).to_json(),
    }
    (path / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    (path / "COMMITTED").write_text(f"{step}\n")


def test_checkpoints_written_before_tiers_were_data_still_load(
    tmp_path: Path, world_of_one: None
) -> None:
    # The run directory's default tier roots, ckpt/fast and ckpt/durable, as they were.
    app = appstate.build()
    app.step()
    _write_as_before_tiers_were_data(tmp_path / "ckpt" / "fast", 1, app)
    app.step()
    _write_as_before_tiers_were_data(tmp_path / "ckpt" / "durable", 2, app)
    _write_as_before_tiers_were_data(tmp_path / "ckpt" / "fast", 2, app)
    # The default tiers, read through the key jobs rendered before tiers were data.
    fresh = appstate.build(["checkpoint.fast_backend=local"])
    manager = _manager(tmp_path, fresh, checkpoints=fresh.cfg.checkpoint)
    try:
        ref = manager.resume()
    finally:
        manager.close()
        manager.destroy_group()
    # Step 2 is in both tiers: the fast one, first in the list, is read.
    assert ref is not None and (ref.step, ref.tier) == (2, "fast")
    assert ref.path == tmp_path / "ckpt" / "fast" / "step_00000002"
    assert fresh.train.step == 2 and _equal(fresh.params(), app.params())


def _corrupt(path: Path) -> None:
    shard = path / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))


def test_all_checkpoints_corrupt_stops_naming_each(tmp_path: Path, world_of_one: None) -> None:
    app = appstate.build()
    _run(_manager(tmp_path, app), app, [(1, "fast"), (2, "durable")])
    for tier, step in (("fast", 1), ("durable", 2)):
        _corrupt(tmp_path / tier / step_dir_name(step))
    fresh = appstate.build()
    manager = _manager(tmp_path, fresh)
    try:
        with pytest.raises(IncompatibleCheckpointError) as raised:
            manager.resume()
    finally:
        manager.close()
        manager.destroy_group()
    msg = str(raised.value)
    assert "\n" not in msg and "refusing to start from scratch" in msg and "--start-fresh" in msg
    assert "durable/step_00000002: __0_0.distcp checksum mismatch" in msg
    assert "fast/step_00000001: __0_0.distcp checksum mismatch" in msg
    # Nothing was removed: a human decides.
    assert list_committed(tmp_path / "fast", "fast") and list_committed(
        tmp_path / "durable", "durable"
    )
    assert set(fresh.adam_steps()) == {0.0}  # and planning did not step the optimizer


def test_start_fresh_discards_old_checkpoints(tmp_path: Path, world_of_one: None) -> None:
    app = appstate.build()
    _run(_manager(tmp_path, app), app, [(1, "fast"), (2, "durable")])
    manager = _manager(tmp_path, appstate.build(), start_fresh=True)
    try:
        assert manager.resume() is None
    finally:
        manager.close()
        manager.destroy_group()
    assert list_committed(tmp_path / "fast", "fast") == []
    assert list_committed(tmp_path / "durable", "durable") == []


def test_checksums_off_loads_but_says_so(
    tmp_path: Path, world_of_one: None, capsys: pytest.CaptureFixture[str]
) -> None:
    app = appstate.build()
    _run(_manager(tmp_path, app), app, [(1, "durable")])
    manager = _manager(tmp_path, appstate.build(), verify_checksums=False)
    try:
        ref = manager.resume()
    finally:
        manager.close()
        manager.destroy_group()
    assert ref is not None and ref.step == 1
    assert "loaded without checksum verification" in capsys.readouterr().err


def test_every_manifest_carries_the_run_identity(tmp_path: Path, world_of_one: None) -> None:
    app = appstate.build()
    _run(_manager(tmp_path, app), app, [(1, "fast")])
    run = read_manifest(tmp_path / "fast" / step_dir_name(1))["run"]
    assert run["preset"] == "tiny" and run["world_size"] == 1
    assert run["config_digest"] == RunIdentity.of(app.cfg, 1).config_digest
    assert run["config"]["model"]["dim"] == 32 and "checkpoint" not in run["config"]


def _resume_with(
    tmp_path: Path, overrides: list[str], world_size: int = 1
) -> tuple[CheckpointManager, appstate.AppState, Any]:
    app = appstate.build(overrides)
    manager = _manager(tmp_path, app, world_size=world_size)
    try:
        ref = manager.resume()
    finally:
        manager.close()
        manager.destroy_group()
    return manager, app, ref


def test_resume_refuses_a_different_model(tmp_path: Path, world_of_one: None) -> None:
    app = appstate.build()
    _run(_manager(tmp_path, app), app, [(2, "durable")])
    with pytest.raises(IncompatibleCheckpointError) as raised:
        _resume_with(tmp_path, ["model.n_layers=3"])
    assert "durable/step_00000002: model.n_layers 2 -> 3 (not allowed: a different model)" in str(
        raised.value
    )


def test_resume_refuses_a_target_below_the_checkpoint(tmp_path: Path, world_of_one: None) -> None:
    app = appstate.build()
    _run(_manager(tmp_path, app), app, [(3, "durable")])
    with pytest.raises(IncompatibleCheckpointError) as raised:
        _resume_with(tmp_path, ["training.steps=2"])
    assert "durable/step_00000003 is beyond training.steps=2" in str(raised.value)


def test_resume_allows_a_longer_run_and_applies_a_new_lr(
    tmp_path: Path, world_of_one: None, capsys: pytest.CaptureFixture[str]
) -> None:
    app = appstate.build()
    _run(_manager(tmp_path, app), app, [(3, "durable")])
    manager, resumed, ref = _resume_with(tmp_path, ["training.steps=80", "optim.lr=0.001"])
    assert ref is not None and resumed.train.step == 3
    assert {c.key for c in manager.resumed_changes} == {"training.steps", "optim.lr"}
    assert all(c.allowed for c in manager.resumed_changes)
    err = capsys.readouterr().err
    assert "training.steps 40 -> 80 (allowed: the schedule is recomputed" in err
    # The loaded param groups carry the old lr; the trainer then applies the config.
    apply_config(resumed.optimizer, resumed.scheduler, resumed.cfg.optim)
    expected = 0.001 * resumed.scheduler.lr_lambdas[0](3)
    assert [g["lr"] for g in resumed.optimizer.param_groups] == [expected, expected]


def test_resume_with_unchanged_config_keeps_the_loaded_hyperparameters(
    tmp_path: Path, world_of_one: None
) -> None:
    app = appstate.build()
    _run(_manager(tmp_path, app), app, [(3, "durable")])
    _, resumed, _ = _resume_with(tmp_path, [])
    before = [dict(g, params=None) for g in resumed.optimizer.param_groups]
    apply_config(resumed.optimizer, resumed.scheduler, resumed.cfg.optim)
    assert [dict(g, params=None) for g in resumed.optimizer.param_groups] == before
    assert [dict(g, params=None) for g in app.optimizer.param_groups] == before


def test_another_world_size_is_allowed_and_noted() -> None:
    cfg = appstate.build_config_only()
    changes = compare(RunIdentity.of(cfg, 2), RunIdentity.of(cfg, 4))
    assert [(c.key, c.allowed) for c in changes] == [("world_size", True)]
    assert "resharded by DCP" in str(changes[0])


def test_a_version_1_manifest_without_identity_still_loads(
    tmp_path: Path, world_of_one: None
) -> None:
    app = appstate.build()
    _run(_manager(tmp_path, app), app, [(2, "durable")])
    path = tmp_path / "durable" / step_dir_name(2) / MANIFEST
    manifest = json.loads(path.read_text())
    del manifest["run"]
    manifest["version"] = 1
    path.write_text(json.dumps(manifest))
    _, resumed, ref = _resume_with(tmp_path, [])
    assert ref is not None and resumed.train.step == 2


@pytest.mark.parametrize(
    "override, allowed",
    [
        ("model.dim=48", False),
        ("data.seed=7", False),
        ("data.synthetic_samples=999", False),
        ("training.seq_len=32", False),
        ("training.seed=1", False),
        ("training.steps=400", True),
        ("training.global_batch_size=16", True),
        ("optim.weight_decay=0.0", True),
        ("parallel.mixed_precision=fp32", True),
        ("data.path=/elsewhere", True),
        # Operational sections are not part of the identity at all.
        ("checkpoint.fast_interval=7", None),
        ("fault.watchdog_s=5", None),
    ],
)
def test_identity_rules(override: str, allowed: bool | None) -> None:
    saved = RunIdentity.of(appstate.build_config_only(), 2)
    now = RunIdentity.of(appstate.build_config_only([override]), 2)
    changes = compare(saved, now)
    if allowed is None:
        assert changes == [] and now.config_digest == saved.config_digest
    else:
        assert [(c.key, c.allowed) for c in changes] == [(override.split("=")[0], allowed)]


def test_managed_namespace_defaults_to_one_per_run_directory(tmp_path: Path) -> None:
    from training.checkpoint.tiers import default_namespace

    assert default_namespace(tmp_path / "a") == default_namespace(tmp_path / "a")
    assert default_namespace(tmp_path / "a") != default_namespace(tmp_path / "b")


@pytest.fixture
def managed_library(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool, str]]:
    """The managed tier's library (not installed here), reduced to what the tier sets: each
    writer's (step, save_to_s3, S3 path) is recorded."""
    import dataclasses

    from training.checkpoint import managed

    @dataclasses.dataclass
    class Config:  # the fields of SageMakerCheckpointConfig this project sets
        namespace: str
        world_size: int
        s3_tier_base_path: str = ""
        save_to_s3: bool = False

    written: list[tuple[int, bool, str]] = []

    def writer(*, checkpoint_config: Config, step: int) -> Config:
        written.append((step, checkpoint_config.save_to_s3, checkpoint_config.s3_tier_base_path))
        return checkpoint_config

    monkeypatch.setattr(managed, "SageMakerCheckpointConfig", Config, raising=False)
    monkeypatch.setattr(managed, "SageMakerTieredStorageWriter", writer, raising=False)
    return written


@pytest.mark.parametrize(
    "preset, overrides",
    [
        ("tiny", []),  # S3 every durable interval (20), fast every 5
        ("1b", []),  # 500 and 50
        ("tiny", ["checkpoint.managed_s3_interval=10"]),  # every other durable step
        ("tiny", ["checkpoint.managed_s3_interval=12"]),  # not a multiple of fast_interval
    ],
)
def test_managed_tier_sends_one_checkpoint_a_window_to_s3(
    managed_library: list[tuple[int, bool, str]],
    tmp_path: Path,
    preset: str,
    overrides: list[str],
) -> None:
    # The library writes S3 only when the loop sets save_to_s3. Multiples of the S3 interval
    # are often durable steps, which the durable tier takes (tier_due), so the first managed
    # checkpoint at or after each multiple goes: one per window, none skipped.
    from training.checkpoint import managed
    from training.checkpoint.config import FAST
    from training.presets import build_config

    cfg = build_config(preset, ["checkpoint.managed_s3_path=s3://bucket/ckpt", *overrides])
    c = cfg.checkpoint
    tier = managed.ManagedTier(2, "ns", c.managed_s3_path, c.s3_interval())
    windows = 4
    for step in range(1, windows * c.s3_interval() + 1):
        if c.tier_due(step) == FAST:
            tier.writer(step)
    to_s3 = [step for step, s3, _ in managed_library if s3]
    assert [step // c.s3_interval() for step in to_s3] == list(range(1, windows))
    assert all(path == "s3://bucket/ckpt" for _, _, path in managed_library)
    assert tier.config.save_to_s3 is False  # each writer gets its own copy of the config


def test_managed_tier_without_s3_path_never_asks_for_s3(
    managed_library: list[tuple[int, bool, str]],
) -> None:
    from training.checkpoint import managed

    tier = managed.ManagedTier(2, "ns", "", s3_interval=10)
    for step in (5, 10, 15, 25):
        tier.writer(step)
    assert managed_library == [(5, False, ""), (10, False, ""), (15, False, ""), (25, False, "")]
