"""Token shards the model cannot train on are refused in one line naming the shard and the
setting, as bad input (DataError, a ConfigError: exit code 2, no restart), not as an
IndexError deep in the forward pass or a memmap traceback."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.training.conftest import S3Server, launch
from training.data import DataError, MemmapTokenSource, ResumableLoader, build_source
from training.data import write_token_shard as write
from training.prepare_data import MANIFEST

SEQ = 4


def memmap(path: Path, dtype: str = "uint16", vocab: int | None = 100) -> MemmapTokenSource:
    return MemmapTokenSource(str(path), SEQ, dtype, vocab)


def test_a_token_past_the_vocabulary_names_the_shard_and_the_setting(tmp_path: Path) -> None:
    tokens = np.arange(3 * SEQ + 1) % 50
    tokens[6] = 100  # sample 1 is tokens 4..8
    write(str(tmp_path / "a.bin"), tokens)
    source = memmap(tmp_path, vocab=100)
    assert source.sample(0).tolist() == tokens[:5].tolist()
    with pytest.raises(DataError) as caught:
        source.sample(1)
    assert str(caught.value) == (
        f"{tmp_path / 'a.bin'}: token id 100 in sample 1 is >= model.vocab_size=100; set "
        "model.vocab_size to the tokenizer's vocabulary (at least 101)"
    )
    # One more token in the vocabulary and the same sample is fine.
    assert memmap(tmp_path, vocab=101).sample(1).max() == 100


def test_the_refusal_reaches_the_step_through_the_prefetch_thread(tmp_path: Path) -> None:
    write(str(tmp_path / "a.bin"), np.full(8 * SEQ + 1, 7))
    loader = ResumableLoader(memmap(tmp_path, vocab=7), 2, 0, 1, seed=0, prefetch_batches=2)
    try:
        with pytest.raises(DataError, match=r"token id 7 in sample .* >= model\.vocab_size=7;"):
            loader.next_batch()
    finally:
        loader.close()


def test_the_source_the_trainer_builds_checks_the_models_vocabulary(tmp_path: Path) -> None:
    write(str(tmp_path / "a.bin"), np.full(2 * SEQ + 1, 64))
    common = {"path": str(tmp_path), "dtype": "uint16", "seq_len": SEQ, "seed": 0}
    source = build_source("memmap", vocab_size=64, synthetic_samples=1, **common)
    with pytest.raises(DataError, match=r"token id 64 in sample 0 is >= model.vocab_size=64"):
        source.sample(0)


def test_uint32_on_shards_prepare_data_wrote_as_uint16_is_refused_at_open(tmp_path: Path) -> None:
    write(str(tmp_path / "a.bin"), np.arange(4 * SEQ), "uint16")  # an even size, too
    (tmp_path / MANIFEST).write_text(json.dumps({"dtype": "uint16", "shards": {}}))
    with pytest.raises(DataError) as caught:
        memmap(tmp_path, "uint32")
    assert str(caught.value) == (
        f"data.dtype=uint32 but the shards at {tmp_path} are uint16 (manifest.json)"
    )


def test_uint32_on_an_odd_number_of_uint16_tokens_is_refused_at_open(tmp_path: Path) -> None:
    write(str(tmp_path / "a.bin"), np.arange(3 * SEQ + 1), "uint16")
    with pytest.raises(DataError) as caught:
        memmap(tmp_path, "uint32")
    assert str(caught.value) == (
        f"data.dtype=uint32 but a shard at {tmp_path} holds {2 * (3 * SEQ + 1)} bytes, not a "
        "whole number of uint32 tokens"
    )


def test_uint32_on_uint16_tokens_without_a_manifest_names_the_dtype_at_the_first_read(
    tmp_path: Path,
) -> None:
    write(str(tmp_path / "a.bin"), np.arange(1, 4 * SEQ + 3), "uint16")  # pairs read as one
    source = memmap(tmp_path, "uint32", vocab=1000)
    with pytest.raises(DataError, match=r"\(or data.dtype=uint16, if the shards hold uint16"):
        source.sample(0)


def test_shards_of_a_larger_tokenizer_are_refused_at_open(tmp_path: Path) -> None:
    write(str(tmp_path / "a.bin"), np.arange(2 * SEQ + 1))
    (tmp_path / MANIFEST).write_text(json.dumps({"dtype": "uint16", "vocab_size": 32000}))
    with pytest.raises(DataError) as caught:
        memmap(tmp_path, vocab=1024)
    assert str(caught.value) == (
        f"the shards at {tmp_path} come from a tokenizer of 32000 tokens (manifest.json), more "
        "than model.vocab_size=1024; set model.vocab_size=32000"
    )


def test_shards_too_short_for_one_sample_are_bad_input(tmp_path: Path) -> None:
    write(str(tmp_path / "a.bin"), np.arange(SEQ))
    with pytest.raises(DataError, match=r"add data or lower training.seq_len$"):
        memmap(tmp_path)


def test_s3_shards_are_checked_the_same_way(s3_server: S3Server, tmp_path: Path) -> None:
    write(str(tmp_path / "a.bin"), np.arange(2 * SEQ + 1) + 10)  # 10 .. 18
    (tmp_path / MANIFEST).write_text(json.dumps({"dtype": "uint16", "vocab_size": 18}))
    url = s3_server.upload_dir(tmp_path, "checked/train")
    common = {"path": url, "seq_len": SEQ, "seed": 0, "synthetic_samples": 1}
    with pytest.raises(DataError, match=r"manifest.json\), more than model.vocab_size=16;"):
        build_source("s3", dtype="uint16", vocab_size=16, **common)
    with pytest.raises(DataError, match=r"are uint16 \(manifest.json\)$"):
        build_source("s3", dtype="uint32", vocab_size=18, **common)
    source = build_source("s3", dtype="uint16", vocab_size=18, **common)
    assert source.sample(0).tolist() == [10, 11, 12, 13, 14]
    with pytest.raises(DataError) as caught:
        source.sample(1)
    assert str(caught.value) == (
        f"{url}/a.bin: token id 18 in sample 1 is >= model.vocab_size=18; set model.vocab_size "
        "to the tokenizer's vocabulary (at least 19)"
    )


@pytest.mark.slow
def test_tokens_past_the_vocabulary_stop_the_job_without_a_retry(tmp_path: Path) -> None:
    data = tmp_path / "tokens"
    data.mkdir()
    write(str(data / "a.bin"), np.full(4096, 5000), "uint16")  # tiny's vocabulary is 1024
    # One rank: how the launcher stops a group of several on one rank's bad input is the
    # fault-tolerance tests'; here, that this error is bad input.
    r = launch(
        tmp_path / "run",
        "--max-restarts",
        "3",
        steps=2,
        nproc=1,
        overrides=["data.source=memmap", f"data.path={data}", "data.dtype=uint16"],
    )
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-3000:]
    launcher = r.summary["launcher"]
    assert (launcher["restarts"], launcher["attempts"][0]["outcome"]) == (0, "bad_input")
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: rank ")
    assert f"{data / 'a.bin'}: token id 5000 in sample " in line
    assert line.endswith(
        ">= model.vocab_size=1024; set model.vocab_size to the tokenizer's "
        "vocabulary (at least 5001)"
    )


def test_a_shard_that_cannot_be_read_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(str(tmp_path / "a.bin"), np.arange(2 * SEQ + 1))

    def denied(path: str, **_: object) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(np, "memmap", denied)
    with pytest.raises(DataError) as caught:
        memmap(tmp_path)
    assert str(caught.value) == f"cannot read token shard {tmp_path / 'a.bin'} (Permission denied)"
