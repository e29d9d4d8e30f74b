"""The one atomic, durable file write used across training."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from training import fileio


@pytest.mark.parametrize(("indent", "sort_keys"), [(None, False), (1, False), (1, True), (2, True)])
def test_json_bytes_are_json_dumps(tmp_path: Path, indent: int | None, sort_keys: bool) -> None:
    data = {"b": [1, 2.5, None], "a": {"z": "é", "y": True}}
    path = tmp_path / "x.json"
    fileio.write_json_atomic(path, data, indent=indent, sort_keys=sort_keys)
    assert path.read_bytes() == json.dumps(data, indent=indent, sort_keys=sort_keys).encode()
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_replaces_whole_file_with_default_permissions(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text("x" * 1000)
    fileio.write_json_atomic(path, {"a": 1})
    assert path.read_text() == '{"a": 1}'
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_replace_durably_renames_over_the_target(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(b"old")
    tmp = fileio.part_path(path)
    assert tmp.name == "model.pt.part"
    tmp.write_bytes(b"new")
    fileio.replace_durably(tmp, path)
    assert path.read_bytes() == b"new" and not tmp.exists()


def test_fsync_dir_is_best_effort(tmp_path: Path) -> None:
    fileio.fsync_dir(tmp_path)
    fileio.fsync_dir(tmp_path / "missing")  # no error
