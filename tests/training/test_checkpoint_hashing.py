"""The fast tier's writer: files hashed while they are written, several threads, no
read-back, and the committed log line with the tier's speed."""

from __future__ import annotations

import hashlib
import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.checkpoint.planner import SavePlan, WriteItem, WriteItemType
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.checkpoint.storage import WriteResult

from tests.training import appstate, loglines
from tests.training.conftest import local_checkpoints
from training.checkpoint import format as ckpt_format
from training.checkpoint.format import (
    MANIFEST,
    files_written_by,
    read_manifest,
    sha256_file,
    step_dir_name,
    validate_checkpoint,
)
from training.checkpoint.hashing import (
    MAX_WRITE_THREADS,
    PARALLEL_HASH_BYTES,
    FileDigest,
    HashingFileSystem,
    HashingStream,
    write_threads,
)
from training.checkpoint.manager import CheckpointManager
from training.checkpoint.planning import RecordingWriter
from training.checkpoint.safe_load import SafeFileSystemReader, SafeLoadPlanner
from training.checkpoint.tiers import DirectoryTier, open_tiers


def _chunks() -> list[bytes]:
    # Small writes (hashed inline) and large ones (hashed beside the write), interleaved.
    return [b"head", bytes(range(256)) * (PARALLEL_HASH_BYTES // 128), b"", b"tail" * 999]


@pytest.mark.parametrize("parallel", [False, True])
def test_a_stream_hashes_exactly_the_bytes_of_its_file(tmp_path: Path, parallel: bool) -> None:
    fs = HashingFileSystem()
    path = tmp_path / "f.distcp"
    with ThreadPoolExecutor(1) as pool:
        fs.pool = pool if parallel else None
        with fs.create_stream(path, "wb") as stream:
            for chunk in _chunks():
                assert stream.write(chunk) == len(chunk)
            assert stream.tell() == sum(map(len, _chunks()))
            stream.close()  # DCP closes the stream inside the block
    data = path.read_bytes()
    assert fs.digests == {path.name: FileDigest(len(data), hashlib.sha256(data).hexdigest())}


def test_a_stream_cannot_seek_back_over_what_it_hashed(tmp_path: Path) -> None:
    with open(tmp_path / "f", "wb") as f:
        stream = HashingStream(f)
        stream.write(b"abc")
        assert not stream.seekable()
        with pytest.raises(io.UnsupportedOperation):
            stream.seek(0)


def test_a_write_that_fails_records_no_digest(tmp_path: Path) -> None:
    fs = HashingFileSystem()
    with pytest.raises(OSError), fs.create_stream(tmp_path / "f", "wb") as stream:
        stream.write(b"partial")
        raise OSError("disk full")
    assert fs.digests == {}


def test_a_renamed_file_keeps_its_digest(tmp_path: Path) -> None:
    # DCP writes .metadata.tmp and renames it to .metadata.
    fs = HashingFileSystem()
    with fs.create_stream(tmp_path / ".metadata.tmp", "wb") as stream:
        stream.write(b"meta")
    fs.rename(tmp_path / ".metadata.tmp", tmp_path / ".metadata")
    assert fs.digests == {".metadata": FileDigest(4, hashlib.sha256(b"meta").hexdigest())}


def test_reading_goes_through_unhashed(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"xyz")
    fs = HashingFileSystem()
    with fs.create_stream(tmp_path / "f", "rb") as stream:
        assert stream.read() == b"xyz"
    assert fs.digests == {}


def test_write_threads_share_the_cpus_between_local_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)))
    assert write_threads(1) == MAX_WRITE_THREADS
    assert write_threads(4) == 4
    assert write_threads(32) == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert write_threads() == 2


def _state() -> dict[str, Any]:
    gen = torch.Generator().manual_seed(0)
    tensors = {f"w{i}": torch.randn(1000 * (i + 1), generator=gen) for i in range(5)}
    return {"model": tensors, "train": {"step": 7, "note": "plain data"}}


def test_the_writer_hashes_every_file_it_writes_in_threads(
    tmp_path: Path, world_of_one: None
) -> None:
    crc_before = torch.serialization.get_crc32_options()
    writer = RecordingWriter(tmp_path / "ckpt", thread_count=3)
    dcp_save(_state(), storage_writer=writer)
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert files == [".metadata", "__0_0.distcp", "__0_1.distcp", "__0_2.distcp"]
    for name in files:
        path = tmp_path / "ckpt" / name
        assert writer.digests[name] == FileDigest(path.stat().st_size, sha256_file(path))
    assert torch.serialization.get_crc32_options() == crc_before
    # Written without torch.save's CRC, it loads the same.
    loaded = {"model": {k: torch.zeros_like(v) for k, v in _state()["model"].items()}}
    loaded["train"] = {"step": 0, "note": ""}
    dcp_load(
        loaded,
        storage_reader=SafeFileSystemReader(str(tmp_path / "ckpt")),
        planner=SafeLoadPlanner(),
    )
    assert loaded["train"] == {"step": 7, "note": "plain data"}
    for name, tensor in _state()["model"].items():
        assert torch.equal(loaded["model"][name], tensor)


def test_the_zip_crc_setting_is_restored_when_a_write_fails(
    tmp_path: Path, world_of_one: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    crc_during_write: list[bool] = []

    def full_disk(self: HashingStream, data: Any) -> int:
        crc_during_write.append(torch.serialization.get_crc32_options())
        raise OSError("No space left on device")

    monkeypatch.setattr(HashingStream, "write", full_disk)
    writer = RecordingWriter(tmp_path / "ckpt", thread_count=1)
    with pytest.raises(CheckpointException, match="No space left"):
        dcp_save(_state(), storage_writer=writer)
    assert crc_during_write == [False]
    assert torch.serialization.get_crc32_options()
    assert writer.fs.failed is not None and "No space left" in writer.fs.failed


@pytest.mark.parametrize("failing", ["__0_0.distcp", "__0_1.distcp"])
def test_a_write_thread_that_fails_fails_the_checkpoint(
    tmp_path: Path, world_of_one: None, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    # Whichever thread writes the failing file (DCP's own or the other), the save fails: the
    # other thread's exception would otherwise only be printed, its items left out.
    real_write = HashingStream.write

    def fail_one_file(self: HashingStream, data: Any) -> int:
        if Path(self._raw.name).name == failing:  # type: ignore[attr-defined]
            raise OSError("Input/output error")
        return real_write(self, data)

    monkeypatch.setattr(HashingStream, "write", fail_one_file)
    writer = RecordingWriter(tmp_path / "ckpt", thread_count=2)
    with pytest.raises(CheckpointException, match="Input/output error"):
        dcp_save(_state(), storage_writer=writer)
    assert failing not in writer.digests


def test_items_left_out_of_the_results_fail_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a rank that writes no metadata, nothing else would notice (DCP's other write
    # threads only print their exception).
    items = [WriteItem(MetadataIndex(fqn), WriteItemType.BYTE_IO) for fqn in ("a", "b")]
    partial: torch.futures.Future[list[WriteResult]] = torch.futures.Future()
    partial.set_result([WriteResult(MetadataIndex("a"), 1, None)])
    monkeypatch.setattr(FileSystemWriter, "write_data", lambda self, plan, planner: partial)
    writer = RecordingWriter(tmp_path / "ckpt", thread_count=2)
    with pytest.raises(OSError, match=r"1 items not written \(b, \.\.\.\)"):
        writer.write_data(SavePlan(items), DefaultSavePlanner())
    assert writer.results is None


def test_the_manifest_takes_the_digests_written_not_a_read_back(tmp_path: Path) -> None:
    (tmp_path / "__0_0.distcp").write_bytes(b"shard")
    (tmp_path / "__0_1.distcp").write_bytes(b"other shard")
    recorded = {
        "__0_0.distcp": FileDigest(5, "a" * 64),  # taken as is: nothing is read back
        "__0_1.distcp": FileDigest(3, "b" * 64),  # the size on disk differs: hashed again
    }
    entries = files_written_by(tmp_path, 0, recorded)
    assert entries["__0_0.distcp"] == {"rank": 0, "size": 5, "sha256": "a" * 64}
    assert entries["__0_1.distcp"]["sha256"] == hashlib.sha256(b"other shard").hexdigest()


def test_a_directory_tier_writes_with_the_configured_threads(tmp_path: Path) -> None:
    cfg = local_checkpoints(tmp_path, write_threads=3)
    tier = open_tiers(cfg, tmp_path, world_size=1)["fast"]
    assert isinstance(tier, DirectoryTier)
    assert tier.writer(1, tmp_path / "x", lambda path: None).thread_count == 3


def _manager(tmp_path: Path, app: appstate.AppState, **settings: Any) -> CheckpointManager:
    return CheckpointManager(
        local_checkpoints(tmp_path, write_threads=2, **settings),
        tmp_path,
        app.stateful,
        rank=0,
        world_size=1,
        local_rank=0,
        device=torch.device("cpu"),
    )


def test_a_commit_reads_no_file_back_and_logs_its_speed(
    tmp_path: Path,
    world_of_one: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    read_back: list[Path] = []
    real_sha256_file = ckpt_format.sha256_file
    monkeypatch.setattr(
        ckpt_format, "sha256_file", lambda p: read_back.append(p) or real_sha256_file(p)
    )
    app = appstate.build()
    manager = _manager(tmp_path, app)
    try:
        app.step()
        manager.save(1, "fast")
        manager.wait()
    finally:
        manager.close()
        manager.destroy_group()
    assert read_back == []
    path = tmp_path / "fast" / step_dir_name(1)
    manifest = read_manifest(path)
    for name, entry in manifest["files"].items():
        assert entry["sha256"] == real_sha256_file(path / name)
    [line] = loglines.find(loglines.COMMITTED, capsys.readouterr().out)
    assert (line["step"], line["tier"], line["status"]) == ("1", "fast", "committed")
    assert int(line["bytes"]) == sum(e["size"] for e in manifest["files"].values())
    assert float(line["commit"]) > 0
    assert manager.last_commit is not None
    assert manager.last_commit[1] == int(line["bytes"])
    assert validate_checkpoint(path, 0) == (True, "ok")


def test_a_file_changed_after_its_commit_is_refused(tmp_path: Path, world_of_one: None) -> None:
    app = appstate.build()
    manager = _manager(tmp_path, app)
    try:
        manager.save(1, "fast", sync=True)
    finally:
        manager.close()
        manager.destroy_group()
    path = tmp_path / "fast" / step_dir_name(1)
    shard = max(path.glob("*.distcp"), key=lambda p: p.stat().st_size)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1  # same size, one bit
    shard.write_bytes(bytes(data))
    assert validate_checkpoint(path, 0) == (False, f"{shard.name} checksum mismatch")
    (path / MANIFEST).unlink()
    assert validate_checkpoint(path, 0)[0] is False
