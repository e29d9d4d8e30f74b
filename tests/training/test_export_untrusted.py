"""training.export_hf reads a checkpoint as resume does: no code runs from it, a damaged one
is refused, and the config it writes is true of the tensors it writes. Every refusal is one
line and exit code 2."""

from __future__ import annotations

import dataclasses
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from tests.training import appstate
from tests.training.test_checkpoint_untrusted import Payload, _checkpoint, _resign
from training.checkpoint.format import DCP_METADATA, MANIFEST, SHARD_RE, read_manifest
from training.checkpoint.safe_load import SafeFileSystemReader
from training.cli import USAGE_EXIT_CODE
from training.export_hf import main
from training.hf_llama import CONFIG_FILE
from training.model import Transformer
from training.presets import build_config


@pytest.fixture
def committed(tmp_path: Path, world_of_one: None) -> tuple[appstate.AppState, Path]:
    """A committed checkpoint of the trainer's real state (tiny preset), and that state."""
    return _checkpoint(tmp_path / "run")


def export(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, list[str]]:
    """The exit code and stderr lines of `python -m training.export_hf ARGS`."""
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err.splitlines()


def refused(capsys: pytest.CaptureFixture[str], *args: str | Path) -> str:
    code, lines = export(capsys, *args)
    assert code == USAGE_EXIT_CODE, lines
    (line,) = lines
    assert line.startswith("error: ")
    return line


def shard(path: Path) -> Path:
    return next(p for p in sorted(path.iterdir()) if SHARD_RE.match(p.name))


def test_an_intact_checkpoint_exports_its_weights(
    committed: tuple[appstate.AppState, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.torch import load_file

    app, path = committed
    code, lines = export(capsys, path, tmp_path / "hf", "--dtype", "fp32")
    assert (code, lines) == (0, [])
    exported: dict[str, torch.Tensor] = {}
    for f in (tmp_path / "hf").glob("*.safetensors"):
        exported.update(load_file(f))
    params = app.params()
    assert torch.equal(exported["model.norm.weight"], params["norm.weight"])
    assert torch.equal(exported["model.embed_tokens.weight"], params["tok_embeddings.weight"])
    assert (
        json.loads((tmp_path / "hf" / CONFIG_FILE).read_text())["hidden_size"] == app.cfg.model.dim
    )


def test_planted_dcp_metadata_never_runs(
    committed: tuple[appstate.AppState, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = committed
    marker = tmp_path / "ran"
    (path / DCP_METADATA).write_bytes(pickle.dumps(Payload(marker)))
    _resign(path)
    line = refused(capsys, path, tmp_path / "hf")
    assert "DCP metadata does not load" in line and "pathlib.Path.touch" in line
    assert not marker.exists()
    assert not (tmp_path / "hf" / CONFIG_FILE).exists()


def test_a_shard_with_flipped_bytes_is_refused(
    committed: tuple[appstate.AppState, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = committed
    target = shard(path)
    data = bytearray(target.read_bytes())
    data[100:164] = bytes(b ^ 0xFF for b in data[100:164])  # same size, other weights
    target.write_bytes(bytes(data))
    line = refused(capsys, path, tmp_path / "hf")
    assert line == (
        f"error: checkpoint {path} is not intact: {target.name} checksum mismatch; export "
        "another one"
    )


def test_a_truncated_shard_is_refused(
    committed: tuple[appstate.AppState, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = committed
    target = shard(path)
    size = target.stat().st_size
    target.write_bytes(target.read_bytes()[: size // 2])
    line = refused(capsys, path, tmp_path / "hf")
    assert f"is not intact: {target.name} size {size // 2} != manifest {size}" in line


def test_metadata_pointing_a_tensor_outside_the_checkpoint_is_refused(
    committed: tuple[appstate.AppState, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Built from allowed classes only, signed in the manifest: the name alone is refused."""
    _, path = committed
    outside = tmp_path / "elsewhere.distcp"
    shutil.copy(shard(path), outside)
    metadata = SafeFileSystemReader(str(path)).read_metadata()
    storage = {
        index: dataclasses.replace(info, relative_path=str(outside))
        for index, info in metadata.storage_data.items()
    }
    (path / DCP_METADATA).write_bytes(
        pickle.dumps(dataclasses.replace(metadata, storage_data=storage))
    )
    _resign(path)
    manifest = read_manifest(path)
    manifest["files"][str(outside)] = dict(manifest["files"][shard(path).name])
    (path / MANIFEST).write_text(json.dumps(manifest))
    line = refused(capsys, path, tmp_path / "hf")
    assert str(outside) in line and "not intact" in line


def test_a_set_that_contradicts_the_checkpoint_is_refused(
    committed: tuple[appstate.AppState, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app, path = committed
    line = refused(capsys, path, tmp_path / "hf", "--set", "model.dim=128")
    assert line == (
        f"error: --set model.dim=128: checkpoint {path} was trained with "
        f"model.dim={app.cfg.model.dim} (its manifest); drop the --set"
    )
    # One that repeats the checkpoint's value is no contradiction.
    code, _ = export(capsys, path, tmp_path / "hf", "--set", f"model.dim={app.cfg.model.dim}")
    assert code == 0


def test_a_preset_for_a_checkpoint_directory_is_refused(
    committed: tuple[appstate.AppState, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = committed
    line = refused(capsys, path, tmp_path / "hf", "--preset", "1b")
    assert "--preset 1b: checkpoint" in line and "drop --preset (it is for model.pt)" in line


# ---- the final export, model.pt ----------------------------------------------------------


@pytest.fixture
def model_pt(tmp_path: Path) -> Path:
    path = tmp_path / "final" / "model.pt"
    path.parent.mkdir()
    model = Transformer(build_config("tiny").model, max_seq_len=8)
    torch.save(model.state_dict(), path)
    return path


def test_a_model_file_exports_with_its_preset(
    model_pt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert export(capsys, model_pt, tmp_path / "hf")[0] == 0


def test_a_set_that_does_not_match_the_model_file_is_refused(
    model_pt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dim = build_config("tiny").model.dim
    line = refused(capsys, model_pt, tmp_path / "hf", "--set", "model.dim=128")
    assert f"tok_embeddings.weight has shape [1024, {dim}], the model of --preset/--set has " in (
        line
    )
    assert line.endswith("give the --preset and --set the run trained with")
    assert not (tmp_path / "hf" / CONFIG_FILE).exists()


@pytest.mark.parametrize(
    "content",
    [
        lambda data: data[: len(data) // 2],
        lambda data: b"",
        lambda data: b"plain text, not a model",
        lambda data: pickle.dumps(Payload(Path("/nonexistent/ran"))),
    ],
    ids=["truncated", "empty", "foreign", "pickle"],
)
def test_a_damaged_or_foreign_model_file_is_one_line(
    model_pt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: object
) -> None:
    model_pt.write_bytes(content(model_pt.read_bytes()))  # type: ignore[operator]
    line = refused(capsys, model_pt, tmp_path / "hf")
    assert line.startswith(f"error: {model_pt} is not a model state the trainer saved (")


def test_a_model_file_holding_something_else_is_refused(
    model_pt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.save([torch.zeros(2)], model_pt)
    assert "holds a list, not the trainer's model state" in refused(
        capsys, model_pt, tmp_path / "o"
    )
    torch.save({"tok_embeddings.weight": torch.zeros(2), "other": 3}, model_pt)
    assert "'other' is not a parameter of the model" in refused(capsys, model_pt, tmp_path / "o")


def test_an_output_that_cannot_be_written_names_the_option(
    model_pt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exit_:
        main([str(model_pt), str(blocker / "hf")])
    assert exit_.value.code == USAGE_EXIT_CODE
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: out {blocker / 'hf'}: cannot write there (")
