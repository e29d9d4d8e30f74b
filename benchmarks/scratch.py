"""Scratch directories for benchmarks that write checkpoints: removed on exit, also when the
run is stopped by SIGTERM or SIGINT.

A stopped benchmark once left 51 GB in ``/dev/shm``, a tmpfs that counts against the
machine's memory, and the next run was killed by the kernel's OOM killer. SIGKILL cannot be
caught: a harness that kills (benchmarks/gpu_suite.py) removes what it handed out itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

SHM = Path("/dev/shm")


def fast_tier_base(needed_bytes: int) -> Path:
    """The fast tier's usual home, node-local memory (/dev/shm), when it can hold
    `needed_bytes` (a container's is often 64 MB); else the temp dir."""
    if SHM.is_dir() and os.access(SHM, os.W_OK) and shutil.disk_usage(SHM).free >= needed_bytes:
        return SHM
    return Path(tempfile.gettempdir())


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def scratch_dir(prefix: str, base: Path, keep: bool = False) -> Iterator[Path]:
    """A new directory under `base`, removed when the block ends however it ends, unless
    `keep`. Inside the block SIGTERM and SIGINT end the run through SystemExit (exit code
    128 + the signal); during the removal they are ignored, so a second stop cannot cut it
    short (main thread only)."""
    stopped_by: list[int] = []

    def exit_on(signum: int, _frame: FrameType | None) -> None:
        # SystemExit unwinds the stack, so every `finally` (and the removal below) runs.
        stopped_by.append(signum)
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, exit_on) for sig in _STOP_SIGNALS}
    try:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        try:
            yield path
        except BaseException:
            if stopped_by:
                # The stop may land inside a library's write (torch.save's zip writer), whose
                # own cleanup then fails with another error: the run still ended by the signal.
                raise SystemExit(128 + stopped_by[0]) from None
            raise
        finally:
            for sig in _STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
            if not keep:
                shutil.rmtree(path, ignore_errors=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def removing_new(prefix: str) -> Iterator[None]:
    """Removes the directories named `prefix*` that appear in /dev/shm or the temp dir while
    the block runs: what a benchmark killed with SIGKILL could not remove itself."""

    def present() -> set[Path]:
        return {p for base in (SHM, Path(tempfile.gettempdir())) for p in base.glob(f"{prefix}*")}

    before = present()
    try:
        yield
    finally:
        for path in present() - before:
            shutil.rmtree(path, ignore_errors=True)
