"""The loader's background prefetch, sample trace, data-parallel slice and source choice,
unit by unit: each test pins one promise the training step relies on."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.training.conftest import S3Server
from training.data import (
    SAMPLE_TRACE_ENV,
    DataError,
    MemmapTokenSource,
    ResumableLoader,
    S3TokenSource,
    SampleTrace,
    SyntheticTokenSource,
    build_source,
    global_sample_ids,
    write_token_shard,
)

SEQ = 8
SAMPLES = 512
SEED = 3


class RecordingSource(SyntheticTokenSource):
    """Synthetic samples that record each read, failing at one sample id while told to."""

    def __init__(self) -> None:
        super().__init__(SAMPLES, SEQ, 1000, seed=5)
        self.reads: list[int] = []
        self.fail_at: int | None = None
        self.lock = threading.Lock()

    def sample(self, idx: int) -> np.ndarray:
        if idx == self.fail_at:
            raise OSError(f"sample {idx} unreadable")
        with self.lock:
            self.reads.append(idx)
        return super().sample(idx)


def inline_batch(position: int, dp_rank: int = 0, dp_size: int = 1) -> torch.Tensor:
    """The rows a loader without prefetch reads for the batch at `position`."""
    loader = ResumableLoader(RecordingSource(), 8, dp_rank, dp_size, seed=SEED)
    return loader.read_batch(position)


def step_rows(loader: ResumableLoader) -> torch.Tensor:
    """One next_batch, as the (seq_len + 1)-token rows it was cut from."""
    inputs, labels = loader.next_batch()
    return torch.cat([inputs, labels[:, -1:]], dim=1)


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "data-prefetch"]


def wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Polls `condition` until it holds or `seconds` pass (the assertion follows it)."""
    pause = threading.Event()
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        pause.wait(0.01)


def ids_of(position: int, batch: int = 8) -> list[int]:
    return global_sample_ids(np.arange(position, position + batch), SAMPLES, SEED).tolist()


# --------------------------------------------------------------------------- prefetch


def test_a_steady_prefetch_reads_each_batch_once_in_order() -> None:
    source = RecordingSource()
    loader = ResumableLoader(source, 8, 0, 1, seed=SEED, prefetch_batches=2)
    try:
        for position in range(0, 48, 8):
            assert torch.equal(step_rows(loader), inline_batch(position)), position
    finally:
        loader.close()
    # The thread reads the batches in order, each once: no restart re-reads one.
    assert source.reads[:48] == [i for p in range(0, 48, 8) for i in ids_of(p)]
    assert max(Counter(source.reads).values()) == 1


def test_an_inline_loader_starts_no_thread() -> None:
    before = len(prefetch_threads())
    loader = ResumableLoader(RecordingSource(), 8, 0, 1, seed=SEED)
    assert torch.equal(step_rows(loader), inline_batch(0))
    assert len(prefetch_threads()) == before == 0


def test_one_batch_of_prefetch_reads_in_a_thread() -> None:
    loader = ResumableLoader(RecordingSource(), 8, 0, 1, seed=SEED, prefetch_batches=1)
    try:
        assert torch.equal(step_rows(loader), inline_batch(0))
        assert [t.daemon for t in prefetch_threads()] == [True]
    finally:
        loader.close()
    assert prefetch_threads() == []


def test_moving_the_position_restarts_the_read_ahead_there() -> None:
    loader = ResumableLoader(RecordingSource(), 8, 0, 1, seed=SEED, prefetch_batches=3)
    try:
        step_rows(loader)
        step_rows(loader)
        loader.consumed_samples = 200
        assert torch.equal(step_rows(loader), inline_batch(200))
        assert torch.equal(step_rows(loader), inline_batch(208))
        assert loader.state_dict()["consumed_samples"] == 216
        assert len(prefetch_threads()) == 1
    finally:
        loader.close()


def test_a_resume_stops_the_read_ahead_and_keeps_the_loaded_position() -> None:
    loader = ResumableLoader(RecordingSource(), 8, 0, 1, seed=SEED, prefetch_batches=3)
    try:
        step_rows(loader)
        state = loader.state_dict()
        step_rows(loader)
        step_rows(loader)
        loader.load_state_dict(state)
        # The old thread's batches belong to the old position: it is gone, and nothing it
        # read moved the position.
        assert prefetch_threads() == []
        assert loader.state_dict()["consumed_samples"] == 8
        assert torch.equal(step_rows(loader), inline_batch(8))
    finally:
        loader.close()


def test_close_then_next_batch_starts_a_new_thread_at_the_position() -> None:
    loader = ResumableLoader(RecordingSource(), 8, 0, 1, seed=SEED, prefetch_batches=2)
    try:
        step_rows(loader)
        loader.close()
        assert prefetch_threads() == []
        loader.close()  # twice is harmless
        assert torch.equal(step_rows(loader), inline_batch(8))
        assert len(prefetch_threads()) == 1
    finally:
        loader.close()
    assert prefetch_threads() == []


def test_the_read_ahead_is_bounded_by_prefetch_batches() -> None:
    source = RecordingSource()
    loader = ResumableLoader(source, 8, 0, 1, seed=SEED, prefetch_batches=2)
    try:
        step_rows(loader)
        prefetcher = loader._prefetcher
        assert prefetcher is not None and prefetcher._queue.maxsize == 2
        # One batch taken, two queued, one read and waiting for room: then the thread waits.
        wait_until(lambda: len(source.reads) >= 8 * 4 and prefetcher._queue.full())
        assert prefetcher._queue.full()
        threading.Event().wait(0.5)  # five of the thread's put retries
        assert len(source.reads) == 8 * 4
        # Room for one more: the waiting batch goes in and exactly one more is read.
        step_rows(loader)
        wait_until(lambda: len(source.reads) >= 8 * 5 and prefetcher._queue.full())
        threading.Event().wait(0.5)
        assert len(source.reads) == 8 * 5
        assert source.reads == [i for p in range(0, 40, 8) for i in ids_of(p)]
    finally:
        loader.close()


def test_a_read_error_reaches_the_step_ends_the_thread_and_a_retry_reads_again() -> None:
    source = RecordingSource()
    source.fail_at = ids_of(16)[0]
    loader = ResumableLoader(source, 8, 0, 1, seed=SEED, prefetch_batches=2)
    try:
        step_rows(loader)
        step_rows(loader)
        prefetcher = loader._prefetcher
        assert prefetcher is not None
        with pytest.raises(OSError, match=rf"^sample {source.fail_at} unreadable$"):
            loader.next_batch()
        assert loader.state_dict()["consumed_samples"] == 16
        # The thread stopped at the failure: nothing past the failed batch was read.
        prefetcher._thread.join(10)
        assert not prefetcher._thread.is_alive()
        assert loader._prefetcher is None
        assert source.reads == [i for p in (0, 8) for i in ids_of(p)]
        # The sample is readable again: the retry gets the batch, not a wait on the old queue.
        source.fail_at = None
        assert torch.equal(step_rows(loader), inline_batch(16))
        assert loader.state_dict()["consumed_samples"] == 24
    finally:
        loader.close()


# --------------------------------------------------------------------------- read_batch


def test_read_batch_is_this_ranks_rows_of_the_batch_at_the_position() -> None:
    source = RecordingSource()
    loader = ResumableLoader(source, 8, 1, 2, seed=SEED)
    loader.consumed_samples = 64
    batch = loader.read_batch(24)
    want = [source.sample(i).tolist() for i in ids_of(28, 4)]
    assert batch.tolist() == want
    assert batch.dtype == torch.int64 and batch.shape == (4, SEQ + 1)
    assert loader.local_indices(24).tolist() == [28, 29, 30, 31]
    assert loader.local_indices().tolist() == [68, 69, 70, 71]
    assert loader.consumed_samples == 64


def test_read_batch_fetches_a_whole_batch_in_one_call_where_the_source_can() -> None:
    class BatchSource(RecordingSource):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[list[int]] = []

        def samples(self, ids: list[int]) -> list[np.ndarray]:
            self.calls.append(ids)
            return [SyntheticTokenSource.sample(self, i) for i in ids]

    source = BatchSource()
    batch = ResumableLoader(source, 8, 0, 2, seed=SEED).read_batch(8)
    assert source.calls == [ids_of(8, 4)]
    assert all(type(i) is int for i in source.calls[0])
    assert source.reads == []
    assert batch.tolist() == [SyntheticTokenSource.sample(source, i).tolist() for i in ids_of(8, 4)]


def test_a_cpu_loader_does_not_pin_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # Recorded in place of the real pinning, as in the CUDA test of test_data.py.
    pinned: list[torch.Tensor] = []

    def pin_memory(self: torch.Tensor) -> torch.Tensor:
        pinned.append(self)
        return self

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    loader = ResumableLoader(RecordingSource(), 8, 0, 1, seed=SEED)
    assert torch.equal(loader.read_batch(0), inline_batch(0))
    cuda = ResumableLoader(RecordingSource(), 8, 0, 1, seed=SEED, device=torch.device("cuda"))
    assert len(pinned) == 0
    cuda.read_batch(0)
    assert len(pinned) == 1


# --------------------------------------------------------------------------- SampleTrace


def test_a_sample_trace_file_is_named_by_world_size_and_rank(tmp_path: Path) -> None:
    trace = SampleTrace(tmp_path / "a" / "b", world_size=4, rank=3)
    assert trace.path == tmp_path / "a" / "b" / "world4_rank3.jsonl"
    assert (tmp_path / "a" / "b").is_dir()
    SampleTrace(tmp_path / "a" / "b", world_size=4, rank=3)  # an existing directory is fine


def test_each_batch_appends_one_json_line_of_its_position_and_indices(tmp_path: Path) -> None:
    (tmp_path / "world4_rank3.jsonl").write_text('{"earlier": "attempt"}\n')
    loader = ResumableLoader(RecordingSource(), 8, 1, 2, seed=SEED, prefetch_batches=1)
    loader.trace = SampleTrace(tmp_path, world_size=4, rank=3)
    try:
        step_rows(loader)
        step_rows(loader)
    finally:
        loader.close()
    lines = (tmp_path / "world4_rank3.jsonl").read_text().splitlines()
    assert lines[0] == '{"earlier": "attempt"}'
    assert [json.loads(line) for line in lines[1:]] == [
        {"world": 4, "rank": 3, "dp_rank": 1, "position": 0, "indices": [4, 5, 6, 7]},
        {"world": 4, "rank": 3, "dp_rank": 1, "position": 8, "indices": [12, 13, 14, 15]},
    ]


def test_the_sample_trace_is_on_only_where_its_variable_names_a_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert SAMPLE_TRACE_ENV == "HPTRAIN_SAMPLE_TRACE"
    monkeypatch.delenv(SAMPLE_TRACE_ENV, raising=False)
    assert SampleTrace.from_env(2, 1) is None
    monkeypatch.setenv(SAMPLE_TRACE_ENV, "")
    assert SampleTrace.from_env(2, 1) is None
    monkeypatch.setenv(SAMPLE_TRACE_ENV, str(tmp_path / "trace"))
    trace = SampleTrace.from_env(2, 1)
    assert trace is not None
    assert trace.path == tmp_path / "trace" / "world2_rank1.jsonl"
    assert (trace.world_size, trace.rank) == (2, 1)


# --------------------------------------------------------------------------- sources


@pytest.fixture(scope="module")
def wide_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """uint32 tokens above 65535 (a uint16 read would split them): two shards, an empty one
    and a file that is not a shard."""
    root = tmp_path_factory.mktemp("wide")
    rng = np.random.default_rng(2)
    write_token_shard(str(root / "0.bin"), rng.integers(70_000, 90_000, 5 * 4 + 1), "uint32")
    write_token_shard(str(root / "1.bin"), rng.integers(70_000, 90_000, 3 * 4 + 2), "uint32")
    (root / "2.bin").write_bytes(b"")  # an empty shard holds no sample (and no -1)
    (root / "README.txt").write_text("not tokens " * 40)
    return root


def test_build_source_reads_s3_urls_with_the_given_dtype_and_seq_len(
    wide_shards: Path, s3_server: S3Server
) -> None:
    url = s3_server.upload_dir(wide_shards, "wide/train")
    source = build_source(
        "s3", path=url, dtype="uint32", seq_len=4, vocab_size=90_000, seed=1, synthetic_samples=7
    )
    assert isinstance(source, S3TokenSource)
    assert source.vocab_size == 90_000
    local = MemmapTokenSource(str(wide_shards), 4, "uint32")
    assert (source.num_samples, source.seq_len) == (local.num_samples, 4) == (8, 4)
    assert source.keys == ["wide/train/0.bin", "wide/train/1.bin"]
    assert [source.sample(i).tolist() for i in range(8)] == [
        local.sample(i).tolist() for i in range(8)
    ]
    assert [r.tolist() for r in source.samples([7, 0, 5])] == [
        local.sample(i).tolist() for i in (7, 0, 5)
    ]
    assert source.sample(5).dtype == np.int64
    for outside in (-1, 8):
        with pytest.raises(IndexError, match=rf"^{outside}$"):
            source.sample(outside)
    # The batch's GETs run on the source's own named pool (named in thread dumps).
    assert any(t.name.startswith("s3-data_") for t in threading.enumerate())


def test_s3_shards_all_too_short_are_refused_by_name(s3_server: S3Server, tmp_path: Path) -> None:
    write_token_shard(str(tmp_path / "a.bin"), np.arange(4), "uint32")
    url = s3_server.upload_dir(tmp_path, "short/train")
    with pytest.raises(
        DataError,
        match=rf"^token shards at {url} are shorter than one sample of 5 tokens "
        r"\(training.seq_len \+ 1\): add data or lower training.seq_len$",
    ):
        S3TokenSource(url, 4, "uint32")


def test_build_source_passes_every_setting_to_the_synthetic_source() -> None:
    source = build_source(
        "synthetic", path="", dtype="uint16", seq_len=6, vocab_size=40, seed=9, synthetic_samples=5
    )
    assert isinstance(source, SyntheticTokenSource)
    assert (source.num_samples, source.seq_len, source.vocab_size, source.seed) == (5, 6, 40, 9)
