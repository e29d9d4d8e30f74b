"""training.prepare_data: text and JSON lines -> token shards the trainer reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.training.conftest import REPO
from training.data import MemmapTokenSource, ResumableLoader
from training.prepare_data import MANIFEST, main

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a journey of a thousand miles begins with a single step",
    "all that glitters is not gold",
    "the early bird catches the worm",
    "actions speak louder than words",
] * 8
EOS = "<|endoftext|>"


def train_tokenizer(path: Path, *special: str) -> Path:
    """A byte-level BPE tokenizer trained on the corpus."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=[EOS, *special])
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.fixture
def inputs(tmp_path: Path) -> list[Path]:
    """Two JSON lines files and one text file."""
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.txt"
    a.write_text(
        "".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(CORPUS[:20]))
    )
    b.write_text("\n".join(json.dumps({"text": t}) for t in CORPUS[20:]) + "\n\n")
    c.write_text("one plain text document\nover two lines")
    return [a, b, c]


def expected_tokens(tokenizer: Path, docs: list[str]) -> list[int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    eos = tok.token_to_id(EOS)
    assert eos is not None
    return [i for d in docs for i in [*tok.encode(d, add_special_tokens=False).ids, eos]]


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "training.prepare_data", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def test_shards_hold_each_documents_tokens_and_an_end_of_text(
    tokenizer: Path, inputs: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "tokens"
    proc = run(*inputs, "--tokenizer", tokenizer, "--out", out, "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    total = len(expected_tokens(tokenizer, [*CORPUS, "one plain text document\nover two lines"]))
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith(
        f"prepared documents=41 tokens={total} shards=3 skipped=0 dtype=uint16 out={out} "
    )
    assert "--set data.source=memmap" in summary
    a = np.fromfile(out / "00000-a.bin", dtype="<u2")
    assert a.tolist() == expected_tokens(tokenizer, CORPUS[:20])
    c = np.fromfile(out / "00002-c.bin", dtype="<u2")
    assert c.tolist() == expected_tokens(tokenizer, ["one plain text document\nover two lines"])
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["shards"]["00001-b.bin"]["documents"] == 20
    assert manifest["dtype"] == "uint16"


def test_the_trainer_reads_the_shards(tokenizer: Path, inputs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "tokens"
    assert (
        main(
            [
                *map(str, inputs),
                "--tokenizer",
                str(tokenizer),
                "--out",
                str(out),
                "--workers",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    stream = np.concatenate([np.fromfile(p, dtype="<u2") for p in sorted(out.glob("*.bin"))])
    seq = 8
    source = MemmapTokenSource(str(out), seq, "uint16")
    # Each shard's windows: consecutive samples share one boundary token.
    a = np.fromfile(out / "00000-a.bin", dtype="<u2")
    assert source.sample(1).tolist() == a[seq : 2 * seq + 1].tolist()
    inputs_, labels = ResumableLoader(source, 4, 0, 1, seed=3).next_batch()
    assert inputs_.shape == (4, seq)
    assert set(inputs_.flatten().tolist()) <= set(stream.tolist())
    assert labels.max().item() < 300


def test_a_rerun_skips_finished_shards_and_redoes_the_rest(
    tokenizer: Path, inputs: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "tokens"
    args = [*map(str, inputs), "--tokenizer", str(tokenizer), "--out", str(out), "--no-progress"]
    assert main(args) == 0
    before = (out / "00001-b.bin").read_bytes()
    # An interrupted run: the last shard was never entered in the manifest.
    manifest = json.loads((out / MANIFEST).read_text())
    del manifest["shards"]["00001-b.bin"]
    (out / MANIFEST).write_text(json.dumps(manifest))
    (out / "00001-b.bin").write_bytes(b"\x00\x01")
    a_mtime = (out / "00000-a.bin").stat().st_mtime_ns
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr
    assert " shards=3 skipped=2 " in proc.stdout
    assert (out / "00001-b.bin").read_bytes() == before
    assert (out / "00000-a.bin").stat().st_mtime_ns == a_mtime


def test_another_tokenizer_into_the_same_directory_is_refused(
    tokenizer: Path, inputs: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "tokens"
    assert (
        main([str(inputs[0]), "--tokenizer", str(tokenizer), "--out", str(out), "--no-progress"])
        == 0
    )
    other = train_tokenizer(tmp_path / "other.json", "<pad>")
    proc = run(inputs[0], "--tokenizer", other, "--out", out)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"error: {out} holds shards of another tokenizer or dtype (manifest.json); use a new --out directory"
    )


def test_a_json_line_without_the_text_field_is_named(tokenizer: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "no text"}\n')
    proc = run(bad, "--tokenizer", tokenizer, "--out", tmp_path / "o", "--no-progress")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {bad}:2: no string field 'text' (--text-field)"


def test_a_tokenizer_without_an_end_of_text_token_asks_for_one(
    tokenizer: Path, inputs: list[Path], tmp_path: Path
) -> None:
    proc = run(inputs[0], "--tokenizer", tokenizer, "--out", tmp_path / "o", "--eos-token", "<eos>")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --eos-token '<eos>' is not in the tokenizer's vocabulary"


def test_a_file_that_is_not_a_tokenizer_is_one_line(inputs: list[Path], tmp_path: Path) -> None:
    fake = tmp_path / "tokenizer.json"
    fake.write_text("this is not a tokenizer")
    proc = run(inputs[0], "--tokenizer", fake, "--out", tmp_path / "o")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: --tokenizer {fake} is not a Hugging Face tokenizer.json (")
    assert line.endswith("); give the tokenizer.json of the model")


@pytest.mark.parametrize(
    ("name", "content"),
    [("empty.jsonl", ""), ("blank.jsonl", "\n\n  \n"), ("blank.txt", " \n\t\n")],
)
def test_an_input_without_documents_is_refused(
    tokenizer: Path, tmp_path: Path, name: str, content: str
) -> None:
    """It would be a shard of one end-of-text token, or of nothing, without a word."""
    source = tmp_path / name
    source.write_text(content)
    proc = run(source, "--tokenizer", tokenizer, "--out", tmp_path / "o", "--no-progress")
    assert proc.returncode == 2
    expected = "is empty" if not content else "holds no document"
    assert proc.stderr.strip() == (f"error: input {source} {expected}: remove it from the inputs")
    assert not list((tmp_path / "o").glob("*.bin"))


def test_an_input_that_is_not_text_names_the_file(tokenizer: Path, tmp_path: Path) -> None:
    source = tmp_path / "image.txt"
    source.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    proc = run(source, "--tokenizer", tokenizer, "--out", tmp_path / "o", "--no-progress")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: input {source}: not UTF-8 text (byte 0: invalid start byte); give text or "
        "JSON lines"
    )


def test_an_out_that_cannot_be_written_names_the_option(
    tokenizer: Path, inputs: list[Path], tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run(inputs[0], "--tokenizer", tokenizer, "--out", blocker / "tokens")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: --out {blocker / 'tokens'}: cannot write there (")
    assert "[Errno" not in line


def test_an_out_holding_a_foreign_manifest_is_refused(
    tokenizer: Path, inputs: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "tokens"
    out.mkdir()
    (out / MANIFEST).write_text("[]")
    proc = run(inputs[0], "--tokenizer", tokenizer, "--out", out)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: --out {out}: its manifest.json is not one this tool wrote; use a new --out "
        "directory"
    )


def test_the_manifest_names_the_vocabulary_the_trainer_checks(
    tokenizer: Path, inputs: list[Path], tmp_path: Path
) -> None:
    from training.data import DataError

    out = tmp_path / "tokens"
    argv = [str(inputs[0]), "--tokenizer", str(tokenizer), "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    from tokenizers import Tokenizer

    vocab = json.loads((out / MANIFEST).read_text())["vocab_size"]
    assert vocab == Tokenizer.from_file(str(tokenizer)).get_vocab_size(with_added_tokens=True)
    MemmapTokenSource(str(out), 8, "uint16", vocab)
    with pytest.raises(DataError, match=rf"set model.vocab_size={vocab}$"):
        MemmapTokenSource(str(out), 8, "uint16", vocab - 1)
