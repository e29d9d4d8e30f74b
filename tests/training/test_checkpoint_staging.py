"""Staging the checkpoint state: the failure seen on GPU (torch 2.11) and the stager that
replaced DefaultStager; planning without stepping the optimizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint._state_dict_stager import StateDictStager
from torch.distributed.checkpoint.staging import DefaultStager
from torch.distributed.tensor import DTensor

from tests.training import appstate
from tests.training.conftest import local_checkpoints
from training.checkpoint.manager import CheckpointManager
from training.checkpoint.staging import StateStager, iter_tensors
from training.run_identity import RunIdentity


def _stage_like_torch_2_11(self: DefaultStager, state_dict: Any, **kwargs: Any) -> Any:
    """torch 2.11's DefaultStager._stage on a host without CUDA (staging.py): stage, then
    close the StateDictStager "to release the reference cycle", which empties its deepcopy
    dispatch table (and its buffer cache)."""
    staged = self._state_dict_stager.stage(state_dict, non_blocking=False)
    self._state_dict_stager.close()
    return staged


def test_torch_stager_fails_on_the_second_stage_once_closed(world_of_one: None) -> None:
    # The root cause, on the trainer's own state: after close() the dispatch table is
    # empty, so the top-level dict is copied through __reduce_ex__, whose args hold the class
    # `dict`; copying a class indexes _deepcopy_dispatch[type], which is gone.
    app = appstate.build()
    stager = StateDictStager(pin_memory=False)
    stager.stage(appstate.state_dict(app))  # the first checkpoint stages fine
    stager.close()  # torch 2.11: DefaultStager._stage does this after every stage
    with pytest.raises(KeyError) as raised:
        stager.stage(appstate.state_dict(app))
    assert raised.value.args == (type,)  # "KeyError: <class 'type'>", as in the GPU run


def _manager(tmp_path: Path, app: appstate.AppState, **kwargs: Any) -> CheckpointManager:
    cfg = local_checkpoints(tmp_path)
    return CheckpointManager(
        cfg,
        tmp_path,
        app.stateful,
        rank=0,
        world_size=1,
        local_rank=0,
        device=torch.device("cpu"),
        identity=RunIdentity.of(app.cfg, 1),
        **kwargs,
    )


def test_every_checkpoint_commits_where_torch_closes_its_stager(
    tmp_path: Path, world_of_one: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With torch 2.11's staging every async checkpoint after the first failed (6 of 8 in the
    # GPU run); the trainer's staging must not depend on DefaultStager's lifecycle.
    monkeypatch.setattr(DefaultStager, "_stage", _stage_like_torch_2_11)
    app = appstate.build()
    manager = _manager(tmp_path, app)
    try:
        manager.prepare_staging()
        for _ in range(3):
            app.step()
            manager.save(app.train.step, "fast")
            manager.wait_for_staging()
        manager.wait()
    finally:
        manager.close()
        manager.destroy_group()
    assert (manager.committed, manager.failed) == (3, 0)
    assert manager.last_committed_step == {"fast": 3}


def test_staged_tensors_share_one_arena_but_each_has_storage_of_its_own_size(
    world_of_one: None,
) -> None:
    # DCP's writer clones a tensor whose storage is larger than itself (torch.save would
    # write the whole storage): views of one arena would be copied again at every write.
    app = appstate.build()
    stager = StateStager(torch.device("cpu"))
    try:
        stager.allocate(appstate.state_dict(app)).result()
        staged = stager.stage(appstate.state_dict(app))[1].result()
        assert stager._arena is not None
        start = stager._arena.data_ptr()
        for _, tensor in iter_tensors(staged):
            local = tensor._local_tensor if isinstance(tensor, DTensor) else tensor
            assert local.untyped_storage().nbytes() == local.nbytes
            assert start <= local.data_ptr() < start + stager.arena_bytes
    finally:
        stager.close()


def test_stager_reuses_its_buffers_and_copies_the_state_as_of_the_stage(
    world_of_one: None,
) -> None:
    app = appstate.build()
    stager = StateStager(torch.device("cpu"))
    try:
        seconds = stager.allocate(appstate.state_dict(app)).result()
        assert seconds >= 0 and stager.arena_bytes > 0
        first = stager.stage(appstate.state_dict(app))[1].result()
        ptrs = {p: t.data_ptr() for p, t in iter_tensors(first)}
        before = {k: v._local_tensor.clone() for k, v in first["model_optim"]["model"].items()}
        app.step()
        second = stager.stage(appstate.state_dict(app))[1].result()
    finally:
        stager.close()
    # The same buffers (allocated once, up front), now holding the newer state.
    assert {p: t.data_ptr() for p, t in iter_tensors(second)} == ptrs
    assert stager.allocated_on_demand == 0
    live = app.model.state_dict()
    for name, staged in second["model_optim"]["model"].items():
        assert isinstance(staged, DTensor) and staged.placements == live[name].placements
        assert staged._local_tensor.device.type == "cpu"
        assert torch.equal(staged._local_tensor, live[name]._local_tensor)
    assert any(
        not torch.equal(before[n], second["model_optim"]["model"][n]._local_tensor) for n in before
    )
    # Non-tensor state is a snapshot, not a reference to the live objects.
    assert second["train"]["step"] == 1 and second["train"]["data"] is not app.loader.state_dict()


def test_state_dict_does_not_step_the_optimizer(world_of_one: None) -> None:
    lazy = appstate.build(materialize=False)
    appstate.state_dict(lazy)  # what planning a load (or a save) calls
    # torch's get_state_dict creates lazy AdamW state with a zero-lr step: counters at 1.
    assert set(lazy.adam_steps()) == {1.0}
    app = appstate.build()
    assert set(app.adam_steps()) == {0.0}
    appstate.state_dict(app)
    assert set(app.adam_steps()) == {0.0}


def test_materialized_optimizer_trains_exactly_like_a_lazy_one(world_of_one: None) -> None:
    lazy, eager = appstate.build(materialize=False), appstate.build()
    for _ in range(3):
        lazy.step()
        eager.step()
    a, b = lazy.params(), eager.params()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert lazy.adam_steps() == eager.adam_steps()
