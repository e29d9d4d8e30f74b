"""Tokenize text into the trainer's token shards (training/data.py, MemmapTokenSource).

    python -m training.prepare_data --tokenizer tokenizer.json --out /fsx/data/tokens \\
        corpus/*.jsonl [--text-field text] [--workers 8]

Inputs: JSON lines (``.jsonl``/``.json``: one document per line, its `--text-field`) or plain
text (any other suffix: one document per file). Each input file becomes one shard,
``<out>/<index>-<name>.bin``: the documents' tokens, each followed by the end-of-text token,
as raw little-endian uint16 (vocabularies up to 65,536 tokens) or uint32, which is what
``data.dtype`` tells the trainer. Files are tokenized in parallel, one process each.

Resumable: a shard is written under a temporary name, renamed when complete and then entered
in ``<out>/manifest.json`` (its input, size, documents and tokens); a rerun skips the shards
the manifest lists, so an interrupted run continues where it stopped. A rerun with another
tokenizer or dtype into the same directory is refused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.cli import USAGE_EXIT_CODE, OneLineErrorParser
from training.fileio import writable_problem

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
JSON_SUFFIXES = (".jsonl", ".json")
# End-of-text tokens of common tokenizers, tried in order when --eos-token is not given
# (GPT-2/Llama 3, Llama 3 base, Llama 2 / Mistral).
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>")
# Documents tokenized per call (encode_batch parallelises inside a worker too).
ENCODE_BATCH = 256
UINT16_VOCAB = 2**16


class PrepareError(ValueError):
    """Bad input; the message is one line."""


@dataclass(frozen=True)
class Job:
    index: int
    source: Path
    shard: str


@dataclass(frozen=True)
class Done:
    index: int
    source: str
    shard: str
    documents: int
    tokens: int
    bytes: int


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= UINT16_VOCAB else "uint32"


def shard_name(index: int, source: Path) -> str:
    return f"{index:05d}-{source.stem}.bin"


def documents(path: Path, text_field: str) -> Iterator[str]:
    """The documents of one input file, in order; a file that holds none is refused (it would
    be a shard of one end-of-text token, or of nothing)."""
    count = 0
    try:
        for text in _documents(path, text_field):
            count += 1
            yield text
    except UnicodeDecodeError as e:
        raise PrepareError(
            f"input {path}: not UTF-8 text (byte {e.start}: {e.reason}); give text or JSON lines"
        ) from None
    if count == 0:
        raise PrepareError(f"input {path} holds no document: remove it from the inputs")


def _documents(path: Path, text_field: str) -> Iterator[str]:
    if path.suffix not in JSON_SUFFIXES:
        whole = path.read_text(encoding="utf-8")
        if whole.strip():
            yield whole
        return
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise PrepareError(f"{path}:{number}: not JSON ({e.msg})") from None
            text = record.get(text_field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise PrepareError(
                    f"{path}:{number}: no string field {text_field!r} (--text-field)"
                )
            yield text


# Per worker process: the tokenizer, loaded once (set by _init_worker).
_worker: dict[str, Any] = {}


def _init_worker(tokenizer_path: str, eos_id: int, dtype: str, text_field: str) -> None:
    from tokenizers import Tokenizer

    _worker.update(
        tokenizer=Tokenizer.from_file(tokenizer_path),
        eos=eos_id,
        dtype=np.dtype(dtype).newbyteorder("<"),
        text_field=text_field,
    )


def tokenize_file(job: Job, out: Path) -> Done:
    """Writes one shard (worker process); returns what it holds."""
    tok, eos, dtype = _worker["tokenizer"], _worker["eos"], _worker["dtype"]
    final = out / job.shard
    part = final.with_name(final.name + ".part")
    docs = tokens = 0
    with open(part, "wb") as f:
        batch: list[str] = []

        def flush() -> int:
            written = 0
            for enc in tok.encode_batch(batch, add_special_tokens=False):
                ids = np.asarray([*enc.ids, eos], dtype=dtype)
                ids.tofile(f)
                written += len(ids)
            batch.clear()
            return written

        for text in documents(job.source, _worker["text_field"]):
            batch.append(text)
            docs += 1
            if len(batch) >= ENCODE_BATCH:
                tokens += flush()
        tokens += flush()
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, final)
    return Done(job.index, str(job.source), job.shard, docs, tokens, final.stat().st_size)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    tmp = out / (MANIFEST + ".part")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, out / MANIFEST)


def load_manifest(out: Path, tokenizer_sha: str, dtype: str, vocab_size: int) -> dict[str, Any]:
    """The manifest of `out`, new or the one an earlier run of the same tokenizer left. It
    names the dtype and the vocabulary the trainer's data source checks its settings against
    (training/data.py)."""
    path = out / MANIFEST
    if not path.exists():
        return {
            "version": MANIFEST_VERSION,
            "tokenizer_sha256": tokenizer_sha,
            "dtype": dtype,
            "vocab_size": vocab_size,
            "shards": {},
        }
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
        manifest["shards"].items()
    except (ValueError, TypeError, KeyError, AttributeError):
        raise PrepareError(
            f"--out {out}: its {MANIFEST} is not one this tool wrote; use a new --out directory"
        ) from None
    manifest.setdefault("vocab_size", vocab_size)
    if manifest.get("tokenizer_sha256") != tokenizer_sha or manifest.get("dtype") != dtype:
        raise PrepareError(
            f"{out} holds shards of another tokenizer or dtype ({MANIFEST}); "
            "use a new --out directory"
        )
    return manifest


def resolve_eos(tokenizer_path: Path, eos_token: str | None) -> tuple[int, int]:
    """(end-of-text id, vocabulary size) of the tokenizer."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(tokenizer_path))
    except Exception as e:  # noqa: BLE001 - the library raises a bare Exception
        raise PrepareError(
            f"--tokenizer {tokenizer_path} is not a Hugging Face tokenizer.json "
            f"({str(e).splitlines()[0][:120]}); give the tokenizer.json of the model"
        ) from None
    vocab = tok.get_vocab_size(with_added_tokens=True)
    names = (eos_token,) if eos_token else EOS_CANDIDATES
    for name in names:
        token_id = tok.token_to_id(name)
        if token_id is not None:
            return token_id, vocab
    if eos_token:
        raise PrepareError(f"--eos-token {eos_token!r} is not in the tokenizer's vocabulary")
    raise PrepareError(
        f"the tokenizer has none of {', '.join(EOS_CANDIDATES)}; name its end-of-text token "
        "with --eos-token"
    )


def prepare(
    inputs: list[Path],
    out: Path,
    tokenizer: Path,
    *,
    text_field: str = "text",
    eos_token: str | None = None,
    workers: int = 1,
    progress: bool = True,
) -> dict[str, int]:
    """Tokenizes `inputs` into shards in `out`; returns the totals (documents, tokens, shards,
    skipped)."""
    from tqdm import tqdm

    for path in inputs:
        if not path.is_file():
            raise PrepareError(f"input {path} is not a file")
        if path.stat().st_size == 0:
            raise PrepareError(f"input {path} is empty: remove it from the inputs")
    eos_id, vocab = resolve_eos(tokenizer, eos_token)
    dtype = token_dtype(vocab)
    problem = writable_problem(out)
    if problem is not None:
        raise PrepareError(
            f"--out {out}: cannot write there ({problem}); name a writable directory"
        )
    manifest = load_manifest(out, _sha256(tokenizer), dtype, vocab)
    shards: dict[str, Any] = manifest["shards"]
    jobs = [Job(i, p, shard_name(i, p)) for i, p in enumerate(inputs)]
    todo = [
        j
        for j in jobs
        if not (
            j.shard in shards
            and (out / j.shard).exists()
            and (out / j.shard).stat().st_size == shards[j.shard]["bytes"]
        )
    ]
    skipped = len(jobs) - len(todo)
    init = (str(tokenizer), eos_id, dtype, text_field)
    with (
        ProcessPoolExecutor(max(1, workers), initializer=_init_worker, initargs=init) as pool,
        tqdm(total=len(jobs), initial=skipped, unit="file", disable=not progress) as bar,
    ):
        futures = [pool.submit(tokenize_file, j, out) for j in todo]
        for fut in as_completed(futures):
            done = fut.result()
            shards[done.shard] = {
                "source": done.source,
                "documents": done.documents,
                "tokens": done.tokens,
                "bytes": done.bytes,
            }
            _write_manifest(out, manifest)
            bar.update()
    current = [shards[j.shard] for j in jobs]
    return {
        "documents": sum(s["documents"] for s in current),
        "tokens": sum(s["tokens"] for s in current),
        "shards": len(current),
        "skipped": skipped,
        "dtype_bits": np.dtype(dtype).itemsize * 8,
    }


def _naming_option(error: OSError, args: argparse.Namespace) -> str:
    """An OSError as one line naming the option its file came from, not a raw [Errno ...]."""
    name = Path(error.filename) if error.filename else None
    if name is None:
        option = "--out"
    elif name == args.tokenizer:
        option = "--tokenizer"
    elif name in args.inputs:
        option = "input"
    else:
        option = "--out"
    return f"{option} {name or args.out}: {error.strerror or error}"


def main(argv: list[str] | None = None) -> int:
    p = OneLineErrorParser(
        prog="python -m training.prepare_data",
        description="tokenize text or JSON lines into the trainer's token shards",
    )
    p.add_argument("inputs", nargs="+", type=Path, help="input files (.jsonl/.json or text)")
    p.add_argument("--tokenizer", type=Path, required=True, help="Hugging Face tokenizer.json")
    p.add_argument("--out", type=Path, required=True, help="output directory of *.bin shards")
    p.add_argument("--text-field", default="text", help="JSON lines: the document's field")
    p.add_argument("--eos-token", default=None, help="end-of-text token (default: detected)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error("--workers must be >= 1")
    if not args.tokenizer.is_file():
        p.error(f"--tokenizer {args.tokenizer} is not a file")
    try:
        totals = prepare(
            args.inputs,
            args.out,
            args.tokenizer,
            text_field=args.text_field,
            eos_token=args.eos_token,
            workers=args.workers,
            progress=not args.no_progress,
        )
    except PrepareError as e:
        sys.stderr.write(f"error: {str(e).splitlines()[0]}\n")
        return USAGE_EXIT_CODE
    except OSError as e:
        sys.stderr.write(f"error: {_naming_option(e, args)}\n")
        return USAGE_EXIT_CODE
    dtype = f"uint{totals['dtype_bits']}"
    print(
        f"prepared documents={totals['documents']} tokens={totals['tokens']} "
        f"shards={totals['shards']} skipped={totals['skipped']} dtype={dtype} out={args.out} "
        f"(train with --set data.source=memmap --set data.path={args.out} "
        f"--set data.dtype={dtype})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
