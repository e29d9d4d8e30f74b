"""Atomic, durable file writes: the one way training code replaces a file.

A file is written next to its final name (``<name>.part``), flushed and fsynced, renamed over
the final name (atomic on POSIX), then the directory is fsynced so the rename itself survives
a crash. Readers therefore see the old file or the whole new one, never a torn one.

Standard library only: the launcher imports this without torch.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


def is_plain_file_name(name: object) -> bool:
    """A file name with no directory part: not absolute, no separator, not `.` or `..`. A
    name read from a file someone else wrote (an index, a manifest) must be one before it is
    joined to the directory it claims to describe."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and not any(c in name for c in "/\\\0")
    )


def part_path(path: Path) -> Path:
    """Where a new version of `path` is written before it replaces `path`."""
    return path.with_name(path.name + ".part")


def fsync_dir(path: Path) -> None:
    """Best effort: makes a rename durable where the filesystem supports directory fsync
    (some, like tmpfs variants and FUSE, refuse it; a commit marker still orders writes)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_durably(path: Path, data: bytes) -> None:
    """Writes `data` to `path` in place and fsyncs it (no rename: for files inside a
    directory that is itself committed later)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def replace_durably(tmp: Path, path: Path) -> None:
    """Fsyncs the finished file `tmp`, renames it over `path`, then fsyncs the directory."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replaces `path` with `data` atomically. `durable=False` skips the fsyncs: the file
    then survives a killed process (the page cache keeps it) but not a lost node, which is
    the right trade for a small file rewritten every step on shared storage."""
    tmp = part_path(path)
    if durable:
        write_bytes_durably(tmp, data)
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def write_json_atomic(
    path: Path,
    data: Any,
    *,
    indent: int | None = None,
    sort_keys: bool = False,
    durable: bool = True,
) -> None:
    """Replaces `path` with ``json.dumps(data, indent=indent, sort_keys=sort_keys)``."""
    text = json.dumps(data, indent=indent, sort_keys=sort_keys)
    write_bytes_atomic(path, text.encode(), durable=durable)


def writable_problem(path: Path) -> str | None:
    """Why `path` cannot serve as an output directory, or None: creates it (and its parents)
    if missing, then creates and removes a probe file in it."""
    probe = path / f".hptrain-probe-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        return e.strerror or str(e)
    return None
