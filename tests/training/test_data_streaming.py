"""Token shards streamed from S3 (moto's server on localhost), and the loader's background
prefetch: the same batches, in the same order, with the saved position still exact."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from tests.training.conftest import S3Server, launch
from training.config_parsing import ConfigError
from training.data import (
    MemmapTokenSource,
    ResumableLoader,
    S3TokenSource,
    SyntheticTokenSource,
    write_token_shard,
)
from training.presets import build_config

SEQ = 16


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three shards of different lengths (one too short for a sample), uint16."""
    root = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(0)
    for i, n in enumerate((SEQ * 20 + 1, SEQ * 7 + 5, SEQ - 3)):
        write_token_shard(str(root / f"{i:03d}.bin"), rng.integers(0, 1000, n))
    return root


def test_the_s3_source_reads_what_the_memmap_source_reads(
    shards: Path, s3_server: S3Server
) -> None:
    url = s3_server.upload_dir(shards, "tokens/a")
    remote = S3TokenSource(url, SEQ, "uint16")
    local = MemmapTokenSource(str(shards), SEQ, "uint16")
    assert remote.num_samples == local.num_samples == 20 + 7
    for i in range(remote.num_samples):
        assert np.array_equal(remote.sample(i), local.sample(i)), i
    ids = [26, 0, 19, 20]
    assert [r.tolist() for r in remote.samples(ids)] == [local.sample(i).tolist() for i in ids]


def test_an_empty_s3_prefix_is_named(s3_server: S3Server) -> None:
    with pytest.raises(FileNotFoundError, match=r"^no token shards \(\*\.bin\) found at s3://"):
        S3TokenSource(s3_server.url("nothing/here"), SEQ, "uint16")


class CountingSource(SyntheticTokenSource):
    """Synthetic samples that record each read, optionally failing at one index."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__(512, SEQ, 1000, seed=5)
        self.reads: list[int] = []
        self.fail_at = fail_at
        self.lock = threading.Lock()

    def sample(self, idx: int) -> np.ndarray:
        if idx == self.fail_at:
            raise OSError(f"sample {idx} unreadable")
        with self.lock:
            self.reads.append(idx)
        return super().sample(idx)


def batches(loader: ResumableLoader, n: int) -> list[list[list[int]]]:
    out = []
    for _ in range(n):
        inputs, labels = loader.next_batch()
        out.append(inputs.tolist() + labels[:, -1:].tolist())
    return out


def test_prefetching_yields_the_batches_reading_inline_yields() -> None:
    inline = ResumableLoader(CountingSource(), 8, 1, 2, seed=3)
    ahead = ResumableLoader(CountingSource(), 8, 1, 2, seed=3, prefetch_batches=3)
    try:
        # 80 batches of 8: across the first epoch boundary (512 samples).
        assert batches(ahead, 80) == batches(inline, 80)
    finally:
        ahead.close()


def test_read_ahead_batches_do_not_move_the_saved_position() -> None:
    source = CountingSource()
    loader = ResumableLoader(source, 8, 0, 1, seed=3, prefetch_batches=3)
    try:
        batches(loader, 2)
        # The thread fills its queue (3) and holds one more batch waiting to be queued.
        deadline = threading.Event()
        for _ in range(200):
            if len(source.reads) >= 8 * 5:
                break
            deadline.wait(0.01)
        assert len(source.reads) >= 8 * 5
        assert loader.state_dict()["consumed_samples"] == 16
    finally:
        loader.close()


def test_a_resume_on_another_world_size_continues_the_same_sample_order() -> None:
    one = ResumableLoader(CountingSource(), 8, 0, 1, seed=3, prefetch_batches=2)
    try:
        batches(one, 3)
        state = one.state_dict()
        expected = batches(one, 2)
    finally:
        one.close()
    halves = [
        ResumableLoader(CountingSource(), 8, r, 2, seed=3, prefetch_batches=2) for r in (0, 1)
    ]
    try:
        for h in halves:
            h.load_state_dict(state)
        got = [
            [*a[:4], *b[:4], *a[4:], *b[4:]]
            for a, b in zip(*(batches(h, 2) for h in halves), strict=True)
        ]
    finally:
        for h in halves:
            h.close()
    assert got == expected


def test_loading_a_state_discards_the_batches_read_ahead() -> None:
    loader = ResumableLoader(CountingSource(), 8, 0, 1, seed=3, prefetch_batches=4)
    try:
        first = batches(loader, 1)
        state_after_first = loader.state_dict()
        second = batches(loader, 1)
        batches(loader, 3)
        loader.load_state_dict(state_after_first)
        assert batches(loader, 1) == second
        assert first != second
    finally:
        loader.close()


def test_a_read_error_surfaces_in_the_step_that_needs_the_batch() -> None:
    source = CountingSource()
    # The sample id that the third batch (global indices 16..23) reads first.
    from training.data import global_sample_ids

    source.fail_at = int(global_sample_ids(np.arange(16, 17), 512, 3)[0])
    loader = ResumableLoader(source, 8, 0, 1, seed=3, prefetch_batches=2)
    try:
        batches(loader, 2)
        with pytest.raises(OSError, match=f"sample {source.fail_at} unreadable"):
            loader.next_batch()
        assert loader.state_dict()["consumed_samples"] == 16
    finally:
        loader.close()


def test_close_stops_the_prefetch_thread() -> None:
    loader = ResumableLoader(CountingSource(), 8, 0, 1, seed=3, prefetch_batches=1)
    batches(loader, 1)
    assert any(t.name == "data-prefetch" for t in threading.enumerate())
    loader.close()
    assert not any(t.name == "data-prefetch" for t in threading.enumerate())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["data.source=s3", "data.path=/fsx/tokens"],
            "data.path must be s3://bucket/prefix when data.source=s3",
        ),
        (["data.source=s3"], "data.path is required when data.source=s3"),
        (["data.source=tape", "data.path=x"], "data.source must be one of synthetic, memmap, s3"),
        (["data.prefetch_batches=-1"], "data.prefetch_batches must be >= 0, got -1"),
        (
            ["data.source=memmap", "data.path=/fsx/t", "eval.batches=2"],
            "eval.batches needs data.eval_path (held-out shards) when data.source=memmap",
        ),
        (
            ["data.source=s3", "data.path=s3://b/t", "data.eval_path=/fsx/e"],
            "data.eval_path must be s3://bucket/prefix when data.source=s3",
        ),
    ],
)
def test_data_settings_are_checked(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_config("tiny", overrides)
    assert str(e.value) == message


@pytest.mark.slow
def test_training_from_s3_ends_where_training_from_fsx_does(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """The same shards, on a file system and on S3, prefetched: bit-identical final weights.
    One rank of one thread each: the loader shards a source's samples over ranks the same way
    whatever it reads from."""
    seq = build_config("tiny").training.seq_len
    rng = np.random.default_rng(1)
    shards = tmp_path / "shards"
    shards.mkdir()
    for i in range(2):
        write_token_shard(str(shards / f"{i}.bin"), rng.integers(0, 1024, seq * 40 + 1))
    url = s3_server.upload_dir(shards, "tokens/train")
    runs = {}
    for name, source, path in (("fsx", "memmap", str(shards)), ("s3", "s3", url)):
        result = launch(
            tmp_path / name,
            steps=6,
            nproc=1,
            overrides=[f"data.source={source}", f"data.path={path}", "training.cpu_threads=1"],
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        runs[name] = result.summary["final_params_sha256"]
    assert runs["s3"] == runs["fsx"]


def test_the_prefetch_benchmark_prints_both_modes_side_by_side(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """benchmarks/data_prefetch.py runs and reports what it measured (figures, not asserts)."""
    import json

    from benchmarks.data_prefetch import main

    argv = ["--steps", "3", "--seq-len", "8", "--read-ms", "1", "--compute-ms", "2"]
    assert main(argv) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["read_ms_per_batch"] == 8.0
    assert figures["prefetch_batches"] == 2
    for key in ("inline_step_ms_median", "prefetch_step_ms_median", "speedup_median"):
        assert figures[key] > 0
