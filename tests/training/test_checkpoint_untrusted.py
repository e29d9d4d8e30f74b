"""A checkpoint that someone else wrote cannot run code in the job that resumes from it.

Each test plants a pickle whose `__reduce__` would create a marker file in one place a resume
reads (the DCP metadata, a non-tensor value of the state, the manifest), re-signs the
manifest's sizes and checksums as a writer with access would, and shows that the resume
refuses the checkpoint in one line and that the marker never appears.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.stateful import Stateful

from tests.training import appstate
from tests.training.conftest import local_checkpoints
from training.checkpoint.format import (
    DCP_METADATA,
    MANIFEST,
    files_written_by,
    read_manifest,
    step_dir_name,
)
from training.checkpoint.manager import CheckpointManager, IncompatibleCheckpointError
from training.checkpoint.safe_load import SafeFileSystemReader, UnsafeCheckpointError, load_metadata
from training.run_identity import RunIdentity

CPU = torch.device("cpu")


class Payload:
    """Unpickling it creates `marker`: code of the checkpoint's writer running."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def _manager(tmp_path: Path, app: appstate.AppState) -> CheckpointManager:
    return CheckpointManager(
        local_checkpoints(tmp_path),
        tmp_path,
        app.stateful,
        rank=0,
        world_size=1,
        local_rank=0,
        device=CPU,
        identity=RunIdentity.of(app.cfg, 1),
    )


def _checkpoint(tmp_path: Path) -> tuple[appstate.AppState, Path]:
    """A committed checkpoint of the trainer's real state, step 1 of the fast tier."""
    app = appstate.build()
    manager = _manager(tmp_path, app)
    try:
        app.step()
        manager.save(1, "fast")
        manager.wait()
    finally:
        manager.close()
        manager.destroy_group()
    return app, tmp_path / "fast" / step_dir_name(1)


def _resign(path: Path) -> None:
    """Sizes and checksums of every file there now (one rank's), as a writer who can change
    the files would."""
    manifest = read_manifest(path)
    manifest["files"] = files_written_by(path, 0)
    (path / MANIFEST).write_text(json.dumps(manifest))


def _resume_refuses(tmp_path: Path) -> str:
    manager = _manager(tmp_path, appstate.build())
    try:
        with pytest.raises(IncompatibleCheckpointError) as raised:
            manager.resume()
    finally:
        manager.close()
        manager.destroy_group()
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_planted_dcp_metadata_is_refused_and_never_runs(tmp_path: Path, world_of_one: None) -> None:
    _, path = _checkpoint(tmp_path)
    marker = tmp_path / "ran"
    (path / DCP_METADATA).write_bytes(pickle.dumps(Payload(marker)))
    _resign(path)
    message = _resume_refuses(tmp_path)
    assert "fast/step_00000001" in message and "pathlib.Path.touch" in message
    assert not marker.exists()


class _PlantedTrainState(Stateful):
    """The train state with a payload in place of its RNG streams (a non-tensor value)."""

    def __init__(self, state: dict[str, Any], payload: Payload) -> None:
        self.state, self.payload = state, payload

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state, rng=self.payload)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        raise AssertionError("only saved")


def test_planted_non_tensor_state_is_refused_and_never_runs(
    tmp_path: Path, world_of_one: None
) -> None:
    app, path = _checkpoint(tmp_path)
    marker = tmp_path / "ran"
    planted = dict(app.stateful, train=_PlantedTrainState(app.train.state_dict(), Payload(marker)))
    for shard in path.glob("*.distcp"):
        shard.unlink()
    dcp.save(planted, storage_writer=FileSystemWriter(str(path), overwrite=True))
    _resign(path)
    message = _resume_refuses(tmp_path)
    assert "fast/step_00000001: load failed:" in message
    assert "train.rng holds objects other than tensors and plain data" in message
    assert not marker.exists()


def test_planted_manifest_is_refused_and_never_runs(tmp_path: Path, world_of_one: None) -> None:
    _, path = _checkpoint(tmp_path)
    marker = tmp_path / "ran"
    (path / MANIFEST).write_bytes(pickle.dumps(Payload(marker)))
    message = _resume_refuses(tmp_path)
    assert "fast/step_00000001: manifest unreadable" in message
    assert not marker.exists()


def test_planted_rng_in_the_old_pickled_format_is_not_unpickled(
    tmp_path: Path, world_of_one: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Checkpoints written before the RNG streams were JSON hold them as a pickle (bytes).
    app = appstate.build()
    marker = tmp_path / "ran"
    state = dict(app.train.state_dict(), rng=pickle.dumps(Payload(marker)))
    app.train.load_state_dict(state)
    assert not marker.exists()
    assert "RNG streams in the old pickled format: not restored" in capsys.readouterr().err


def test_real_dcp_metadata_loads_through_the_restricted_unpickler(
    tmp_path: Path, world_of_one: None
) -> None:
    # Every global DCP writes for the trainer's real state is on the allowed list.
    _, path = _checkpoint(tmp_path)
    metadata = SafeFileSystemReader(str(path)).read_metadata()
    assert "train.rng" in metadata.state_dict_metadata


def test_metadata_naming_another_global_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(UnsafeCheckpointError, match=r"names pathlib\.Path\.touch"):
        load_metadata(io.BytesIO(pickle.dumps(Payload(marker))))
    assert not marker.exists()


def test_metadata_that_is_not_dcp_metadata_is_refused() -> None:
    with pytest.raises(ValueError, match="holds a dict, not Metadata"):
        load_metadata(io.BytesIO(pickle.dumps({"a": 1})))
