"""Hashing while writing: each checkpoint file's digest comes from the bytes as DCP writes
them, so a commit never reads a file back, and several threads write (and hash) at once.

The digest stays sha256: with the CPU's SHA extensions (x86 SHA-NI, Arm SHA2) hashlib's
OpenSSL sha256 runs at about 1 GB/s per core, faster than blake2b (about 0.3 GB/s in
hashlib) or md5, and every manifest written so far, and validate_checkpoint, keep reading
it. It reads the buffers DCP writes, on a second thread while the writing thread writes them
(hashlib and file writes release the GIL), so a file takes the longer of the two rather than
their sum; N write threads write and hash N files at once (FileSystemWriter thread_count,
one file per thread).

DCP writes each tensor with torch.save, which computes a zip CRC32 of every record: a
second single-threaded pass over the same bytes. The manifest's sha256 covers those bytes and
is verified before any load (format.validate_checkpoint), so checkpoint writes turn it off
(files without it load the same; torch.serialization.set_crc32_options).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch.distributed.checkpoint.filesystem import FileSystem

# Writes at least this large are hashed on another thread while they are written; a
# smaller one (a record header) is not worth the hand-over.
PARALLEL_HASH_BYTES = 1 << 20
# More threads than this gain nothing on one rank's memory bandwidth (a 4 GiB dcp.save to
# /dev/shm on an H200 host: 0.9 GB/s with 1 thread, 5.2 GB/s with 8).
MAX_WRITE_THREADS = 8


@dataclass(frozen=True)
class FileDigest:
    size: int
    sha256: str


class HashingStream(io.IOBase):
    """A write-only, append-only stream that hashes every byte it passes to `raw`.

    With `pool`, a large write is hashed on a pool thread while this thread writes it (both
    release the GIL), and returns once both are done: the caller's buffer is not reused
    while it is read, and the updates stay in order. No seek: the digest is of the bytes in
    the order written, which is the file only when nothing is overwritten."""

    def __init__(self, raw: BinaryIO, pool: Executor | None = None) -> None:
        super().__init__()
        self._raw = raw
        self._pool = pool
        self._hash = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, data: Any) -> int:
        view = memoryview(data)
        if self._pool is None or view.nbytes < PARALLEL_HASH_BYTES:
            self._hash.update(view)
            written = self._raw.write(view)
        else:
            try:
                hashed = self._pool.submit(self._hash.update, view)
            except RuntimeError:  # the pool was shut down: a write of a failed checkpoint
                hashed = _done(self._hash.update, view)
            try:
                written = self._raw.write(view)
            finally:
                hashed.result()
        if written != view.nbytes:  # a buffered file writes all or raises
            raise OSError(f"short write: {written} of {view.nbytes} bytes")
        self.size += written
        return written

    def tell(self) -> int:
        return self._raw.tell()

    def fileno(self) -> int:
        return self._raw.fileno()

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()  # flushes
        finally:
            self._raw.close()

    def digest(self) -> FileDigest:
        return FileDigest(self.size, self._hash.hexdigest())


class HashingFileSystem(FileSystem):
    """DCP's file system with every file it writes hashed on the way (`digests`, by name);
    `pool` hashes large writes beside the write (HashingStream).

    Once a write fails no new file is started (`failed`): DCP does not wait for its other
    write threads when one fails, so they stop at their next file instead of writing into
    a checkpoint that is being discarded."""

    def __init__(self, pool: Executor | None = None) -> None:
        super().__init__()
        self.digests: dict[str, FileDigest] = {}
        self.pool = pool
        self.failed: str | None = None
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[io.IOBase]:
        if mode != "wb":
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        if self.failed is not None:
            raise OSError(f"{Path(path).name} not started: {self.failed}")
        try:
            with Path(path).open("wb") as f:
                stream = HashingStream(f, self.pool)
                yield stream
        except BaseException as e:
            self.failed = f"writing {Path(path).name} failed: {e!r}"
            raise
        # Only a file whose whole write returned is recorded.
        with self._lock:
            self.digests[Path(path).name] = stream.digest()

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        # DCP writes .metadata as .metadata.tmp, then renames it.
        super().rename(path, new_path)
        with self._lock:
            digest = self.digests.pop(Path(path).name, None)
            if digest is not None:
                self.digests[Path(new_path).name] = digest


def _done(fn: Any, *args: Any) -> Future[None]:
    """`fn(*args)` run here, as a completed future."""
    future: Future[None] = Future()
    fn(*args)
    future.set_result(None)
    return future


def write_threads(local_ranks: int | None = None) -> int:
    """Write threads per rank: this node's CPUs shared by its ranks, 1 to MAX_WRITE_THREADS."""
    if local_ranks is None:
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_WRITE_THREADS, (cpus or 1) // max(1, local_ranks)))


@contextlib.contextmanager
def without_zip_crc32() -> Iterator[None]:
    """torch.save computes no zip CRC32 inside (the sha256 covers the bytes; see the module
    docstring). Process-wide while it lasts; a torch.save elsewhere meanwhile only skips
    its CRC, and its file loads the same."""
    before = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(before)
