"""training/checkpoint/format.py one function at a time: names, manifest, commit, listing,
pruning, and every reason validate_checkpoint refuses a checkpoint, word for word (the
manager logs the reason and falls back to an older checkpoint, so a wrong reason misleads the
person reading why a resume went back)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.training.test_checkpoint_unit import make_checkpoint
from training.checkpoint.format import (
    COMMITTED,
    DCP_METADATA,
    MANIFEST,
    MANIFEST_VERSION,
    CheckpointRef,
    build_manifest,
    clean_stale,
    files_written_by,
    list_committed,
    prune,
    read_manifest,
    remove_checkpoint,
    sha256_file,
    step_dir_name,
    tmp_dir_name,
    validate_checkpoint,
)

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _edit_manifest(path: Path, **changes: Any) -> None:
    manifest = json.loads((path / MANIFEST).read_text())
    manifest.update(changes)
    (path / MANIFEST).write_text(json.dumps(manifest))


def test_directory_names() -> None:
    assert step_dir_name(20) == "step_00000020"
    assert tmp_dir_name(20, "ab12") == "step_00000020.tmp-ab12"
    ref = CheckpointRef("durable", 20, Path("/x/step_00000020"))
    assert ref.name == "durable/step_00000020"


def test_sha256_of_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    assert sha256_file(tmp_path / "f") == hashlib.sha256(b"abc").hexdigest()


def test_each_rank_lists_the_files_it_wrote(tmp_path: Path) -> None:
    for name, data in (
        ("__0_0.distcp", b"zero"),
        ("__1_0.distcp", b"one!!"),
        ("__1_1.distcp", b"x"),
        (DCP_METADATA, b"meta"),
        ("notes.txt", b"n"),
        ("x__1_0.distcp", b"n"),
    ):
        (tmp_path / name).write_bytes(data)
    assert files_written_by(tmp_path, 1) == {
        "__1_0.distcp": {"rank": 1, "size": 5, "sha256": hashlib.sha256(b"one!!").hexdigest()},
        "__1_1.distcp": {"rank": 1, "size": 1, "sha256": hashlib.sha256(b"x").hexdigest()},
    }
    assert sorted(files_written_by(tmp_path, 0)) == [DCP_METADATA, "__0_0.distcp"]
    assert files_written_by(tmp_path, 2) == {}


def test_the_manifest_merges_every_ranks_files() -> None:
    a = {"__0_0.distcp": {"rank": 0}}
    b = {"__1_0.distcp": {"rank": 1}}
    manifest = build_manifest(8, "fast", 2, [a, b], run={"model": "m"}, backend=None)
    created = manifest.pop("created_unix")
    assert isinstance(created, float) and created > 1.7e9
    assert manifest == {
        "version": MANIFEST_VERSION,
        "step": 8,
        "tier": "fast",
        "world_size": 2,
        "files": {**a, **b},
        "run": {"model": "m"},
    }
    assert MANIFEST_VERSION == 2
    bare = build_manifest(8, "fast", 1, [], backend="managed")
    assert "run" not in bare and bare["backend"] == "managed" and bare["files"] == {}


def test_read_manifest_refuses_what_is_not_an_object(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text("[1]")
    with pytest.raises(ValueError, match="manifest is not a JSON object"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST).write_text('{"step": 3}')
    assert read_manifest(tmp_path) == {"step": 3}


def test_a_commit_writes_the_step_in_the_marker(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 12)
    assert (path / COMMITTED).read_text() == "12\n"
    # The manifest is sorted, indented JSON: the same content gives the same bytes, and a
    # person reads it with cat.
    text = (path / MANIFEST).read_text()
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True)
    assert text.startswith('{\n "created_unix": ')
    assert read_manifest(path)["step"] == 12
    assert not list(tmp_path.glob("*.tmp-*"))


def test_listing_is_newest_first_and_needs_the_marker(tmp_path: Path) -> None:
    for step in (4, 12, 8):
        make_checkpoint(tmp_path, step)
    (tmp_path / "step_00000016").mkdir()
    (tmp_path / "step_00000020").write_text("a file, not a directory")
    (tmp_path / "step_00000024" / COMMITTED).mkdir(parents=True)  # marker is not a file
    (tmp_path / "step_0000028").mkdir()
    refs = list_committed(tmp_path, "durable")
    assert [(r.tier, r.step, r.path.name) for r in refs] == [
        ("durable", 12, "step_00000012"),
        ("durable", 8, "step_00000008"),
        ("durable", 4, "step_00000004"),
    ]
    assert list_committed(tmp_path / "absent", "durable") == []


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    for step in (4, 8):
        make_checkpoint(tmp_path, step)
    assert prune(tmp_path, "fast", keep=2) == []
    assert prune(tmp_path, "fast", keep=0) == [8, 4]
    assert list(tmp_path.iterdir()) == []


def test_remove_checkpoint_of_a_path_already_gone_is_quiet(tmp_path: Path) -> None:
    remove_checkpoint(tmp_path / "step_00000004")
    assert list(tmp_path.iterdir()) == []


def test_clean_stale_removes_only_temporary_and_trash_directories(tmp_path: Path) -> None:
    for name in (
        "step_00000004.tmp-a1",
        ".trash-step_00000004-ff",
        "step_00000004",
        "step_00000004.tmp-",
        "xstep_00000004.tmp-a1",
        "step_00000004.tmp-a1.old",
    ):
        (tmp_path / name).mkdir()
    (tmp_path / "step_00000008.tmp-b2").write_text("a file")
    assert sorted(clean_stale(tmp_path)) == [".trash-step_00000004-ff", "step_00000004.tmp-a1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step_00000004",
        "step_00000004.tmp-",
        "step_00000004.tmp-a1.old",
        "step_00000008.tmp-b2",
        "xstep_00000004.tmp-a1",
    ]
    assert clean_stale(tmp_path / "absent") == []


# --------------------------------------------------------------------------- validation


def test_a_sound_checkpoint_validates(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    assert validate_checkpoint(path, 0) == (True, "ok")
    assert validate_checkpoint(path, 0, verify_checksums=False) == (
        True,
        "ok (sizes only: checksums not verified)",
    )
    assert validate_checkpoint(path, 0, reads={"__0_0.distcp"}) == (True, "ok")
    assert validate_checkpoint(path, 5, reads=set()) == (True, "ok")


def test_a_directory_not_named_like_a_step_is_refused(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    renamed = path.rename(tmp_path / "step_8")
    assert validate_checkpoint(renamed, 0) == (
        False,
        "not a committed checkpoint directory name",
    )


def test_a_missing_marker_is_refused(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    (path / COMMITTED).unlink()
    assert validate_checkpoint(path, 0) == (False, "COMMITTED marker missing")


def test_a_manifest_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    (path / MANIFEST).write_text("[]")
    assert validate_checkpoint(path, 0) == (
        False,
        "manifest unreadable: manifest is not a JSON object",
    )


@pytest.mark.parametrize(
    "changes", [{"version": 3}, {"version": 0}, {"version": None}, {"step": 9}, {"step": None}]
)
def test_a_manifest_of_another_version_or_step_is_refused(
    tmp_path: Path, changes: dict[str, Any]
) -> None:
    path = make_checkpoint(tmp_path, 8)
    _edit_manifest(path, **changes)
    assert validate_checkpoint(path, 0) == (False, "manifest does not match the directory")


def test_a_version_1_manifest_validates(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    _edit_manifest(path, version=1)
    assert validate_checkpoint(path, 0) == (True, "ok")


def test_a_library_backend_vouches_for_its_own_data(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    _edit_manifest(path, backend="managed", files={})
    assert validate_checkpoint(path, 0) == (
        True,
        "ok (managed backend; the library validates its own data)",
    )


def test_a_manifest_without_the_dcp_metadata_is_refused(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    manifest = read_manifest(path)
    del manifest["files"][DCP_METADATA]
    _edit_manifest(path, files=manifest["files"])
    assert validate_checkpoint(path, 0) == (False, "manifest lists no DCP metadata")
    _edit_manifest(path, files=None)
    del manifest["files"]
    (path / MANIFEST).write_text(json.dumps(manifest))
    assert validate_checkpoint(path, 0) == (False, "manifest lists no DCP metadata")


def test_a_rank_beyond_the_writing_world_is_refused(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    assert validate_checkpoint(path, 1) == (
        False,
        "rank 1 did not exist when this checkpoint was written",
    )
    _edit_manifest(path, world_size=None)
    manifest = read_manifest(path)
    del manifest["world_size"]
    (path / MANIFEST).write_text(json.dumps(manifest))
    assert validate_checkpoint(path, 0) == (
        False,
        "rank 0 did not exist when this checkpoint was written",
    )


def test_a_rank_that_wrote_no_shard_is_refused(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    _edit_manifest(path, world_size=2)
    assert validate_checkpoint(path, 1) == (False, "manifest lists no shard written by rank 1")
    # Rank 0's only file being the metadata is no shard either.
    manifest = read_manifest(path)
    manifest["files"]["__0_0.distcp"]["rank"] = 1
    (path / MANIFEST).write_text(json.dumps(manifest))
    assert validate_checkpoint(path, 0) == (False, "manifest lists no shard written by rank 0")


def test_a_file_read_but_not_in_the_manifest_is_refused(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    assert validate_checkpoint(path, 0, reads={"__0_0.distcp", "__3_0.distcp"}) == (
        False,
        "__3_0.distcp (read by rank 0) is not in the manifest",
    )


def test_the_files_a_rank_reads_are_verified_not_the_files_it_wrote(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    shard = path / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-1] + bytes([shard.read_bytes()[-1] ^ 1]))
    assert validate_checkpoint(path, 0) == (False, "__0_0.distcp checksum mismatch")
    assert validate_checkpoint(path, 0, reads={"__0_0.distcp"}) == (
        False,
        "__0_0.distcp checksum mismatch",
    )
    # A rank that reads only the metadata does not look at the damaged shard.
    assert validate_checkpoint(path, 0, reads=set()) == (True, "ok")


def test_size_and_presence_are_checked_before_checksums(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, 8)
    shard = path / "__0_0.distcp"
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:100])
    assert validate_checkpoint(path, 0, verify_checksums=False) == (
        False,
        f"__0_0.distcp size 100 != manifest {size}",
    )
    shard.unlink()
    assert validate_checkpoint(path, 0) == (False, "__0_0.distcp missing")


def test_a_checkpoint_without_its_marker_is_still_removed(tmp_path: Path) -> None:
    # A removal killed after dropping the marker leaves such a directory; the next one
    # finishes the job.
    path = make_checkpoint(tmp_path, 4)
    (path / COMMITTED).unlink()
    remove_checkpoint(path)
    assert list(tmp_path.iterdir()) == []


def _unremovable_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleting files inside a directory fails (a file system that refuses, a racing
    cleanup); the marker itself can still go."""
    real = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path).endswith(COMMITTED):
            real(path, *args, **kwargs)
            return
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "unlink", unlink)


def test_a_removal_that_cannot_finish_never_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_checkpoint(tmp_path, 4)
    _unremovable_files(monkeypatch)
    remove_checkpoint(path)  # leaves trash behind, for clean_stale at the next start
    assert list_committed(tmp_path, "fast") == []
    (leftover,) = tmp_path.iterdir()
    assert leftover.name.startswith(".trash-step_00000004-")


def test_a_cleanup_that_cannot_finish_never_fails_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = tmp_path / "step_00000004.tmp-a1"
    stale.mkdir()
    (stale / "__0_0.distcp").write_bytes(b"x")
    _unremovable_files(monkeypatch)
    assert clean_stale(tmp_path) == ["step_00000004.tmp-a1"]
