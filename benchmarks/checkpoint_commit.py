"""Fast-tier commit throughput against a raw write of the same bytes to the same place (CPU).

    python benchmarks/checkpoint_commit.py [--gib 1] [--tensors 16] [--repeats 5]
        [--threads N] [--dir DIR] [--no-legacy]

One process, one rank (gloo), a state of --gib GiB of fp32 tensors. Each repeat runs, one
after the other in the same directory (``/dev/shm`` when it has room, else the temp dir):

* raw: the same bytes written by one thread into one file, fsync'd: what this machine writes
  to that place (``raw_parallel``: the same split over the commit's thread count, one file
  each, for reference);
* commit: the fast tier as the trainer runs it, CheckpointManager.save + wait: the staging
  copy, DCP's write with the tier's writer (one file per write thread, sha256 computed from
  the bytes beside their write, no zip CRC), the manifest, COMMITTED and the rename. Its
  seconds are the manager's own ``commit_s`` (the checkpoint's start to its commit, also on
  its log line);
* legacy (unless --no-legacy): the commit as it was before, for comparison: one write thread
  with torch.save's zip CRC, then every file read back and hashed.

Prints one JSON line, side by side: GiB/s of each, the fastest repeat (``*_gib_s``, the
least disturbed by other work on a shared machine, as timeit takes the minimum) and the
median (``*_gib_s_median``); CPU seconds per GiB of each (all threads, median: the work,
which other load barely changes); ``ratio`` = commit / raw of the fastest repeats and
``ratio_median`` of each repeat's pair; the 1-minute load average before and after; the
target (ratio >= 0.5) and whether it was met. Everything written is removed on exit, also
on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scratch import fast_tier_base, scratch_dir

TARGET_RATIO = 0.5
GIB = 2**30
WAYS = ("raw", "commit", "raw_parallel", "legacy_commit")


def _raw_write(directory: Path, chunks: list[memoryview], threads: int) -> float:
    """Seconds to write `chunks` into `threads` files (one thread each), fsync'd; the files
    are removed afterwards, untimed."""
    groups = [chunks[i::threads] for i in range(threads)]
    paths = [directory / f"raw-{i}" for i in range(threads)]

    def write(path: Path, group: list[memoryview]) -> None:
        with open(path, "wb") as f:
            for chunk in group:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())

    workers = [threading.Thread(target=write, args=a) for a in zip(paths, groups, strict=True)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - t0
    for p in paths:
        p.unlink()
    return seconds


def _legacy_commit(directory: Path, state: dict[str, Any]) -> float:
    """The commit before hashing while writing: one thread, zip CRC, files read back."""
    import shutil

    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from training.checkpoint.format import files_written_by

    path = directory / "legacy"
    t0 = time.perf_counter()
    writer = FileSystemWriter(str(path), sync_files=True, per_thread_copy_ahead=0)
    dcp_save(state, storage_writer=writer)
    files_written_by(path, 0)  # no digests: reads every file back
    seconds = time.perf_counter() - t0
    shutil.rmtree(path)
    return seconds


class _Tensors:
    """The state as the manager takes it (a Stateful)."""

    def __init__(self, tensors: dict[str, Any]) -> None:
        self.tensors = tensors

    def state_dict(self) -> dict[str, Any]:
        return self.tensors

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.tensors = state_dict


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _round(value: float) -> float | None:
    return None if value != value else round(value, 3)  # NaN: nothing measured


def _rate(nbytes: int, seconds: float) -> float | None:
    return _round(nbytes / seconds / GIB)


def _timed(run: Callable[[], float | None]) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of `run`; its own figure, if it returns one, is
    the wall time (the manager's commit_s)."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    own = run()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return (own if own is not None else wall), cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0, help="state size in GiB")
    ap.add_argument("--tensors", type=int, default=16, help="tensors the state is split into")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="write threads (0: the tier's own)")
    ap.add_argument("--dir", default=None, help="where to write (default: /dev/shm if room)")
    ap.add_argument("--no-legacy", action="store_true", help="skip the previous commit")
    args = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    from training.checkpoint.config import CheckpointConfig, TierConfig
    from training.checkpoint.hashing import write_threads
    from training.checkpoint.manager import CheckpointManager
    from training.parallel import ensure_single_process_env

    numel = int(args.gib * GIB / 4 / args.tensors)
    state = {f"t{i}": torch.randn(numel) for i in range(args.tensors)}
    nbytes = numel * 4 * args.tensors
    chunks = [t.numpy().data.cast("B") for t in state.values()]
    threads = args.threads or write_threads(1)
    # At most: two committed copies, one raw copy, one legacy copy.
    base = Path(args.dir) if args.dir else fast_tier_base(4 * nbytes)
    ensure_single_process_env()
    dist.init_process_group("gloo", rank=0, world_size=1)
    load_before = os.getloadavg()[0]
    # way -> (wall seconds, CPU seconds of the whole process) per repeat
    runs: dict[str, list[tuple[float, float]]] = {w: [] for w in WAYS}
    try:
        with scratch_dir("hptrain-commit-bench-", base) as work:
            cfg = CheckpointConfig(
                tiers=(TierConfig("fast", dir=str(work / "fast"), interval=0, keep=1),),
                sigterm_tier="fast",
                write_threads=threads,
            )
            manager = CheckpointManager(
                cfg,
                work,
                {"state": _Tensors(state)},
                rank=0,
                world_size=1,
                local_rank=0,
                device=torch.device("cpu"),
            )
            try:
                staged = manager.prepare_staging()
                if staged is not None:
                    staged.result()  # buffers allocated before anything is timed
                for step in range(1, args.repeats + 1):
                    runs["raw"].append(_timed(lambda: _raw_write(work, chunks, 1)))

                    def commit(step: int = step) -> float:
                        manager.save(step, "fast")
                        manager.wait()
                        if manager.last_commit is None:
                            raise RuntimeError(f"checkpoint {step} did not commit")
                        return manager.last_commit[0]

                    runs["commit"].append(_timed(commit))
                    runs["raw_parallel"].append(_timed(lambda: _raw_write(work, chunks, threads)))
                    if not args.no_legacy:
                        runs["legacy_commit"].append(_timed(lambda: _legacy_commit(work, state)))
            finally:
                manager.close()
                manager.destroy_group()
    finally:
        dist.destroy_process_group()

    result: dict[str, Any] = {
        "benchmark": "checkpoint_commit",
        "storage": str(base),
        "state_gib": round(nbytes / GIB, 3),
        "tensors": args.tensors,
        "write_threads": threads,
        "cpus": os.cpu_count(),
        "repeats": args.repeats,
        "digest": "sha256, computed from the bytes beside their write",
    }
    for way, measured in runs.items():
        walls = [wall for wall, _ in measured]
        result[f"{way}_gib_s"] = round(nbytes / min(walls) / GIB, 3) if walls else None
        result[f"{way}_gib_s_median"] = _rate(nbytes, _median(walls))
        result[f"{way}_cpu_s_per_gib"] = _round(_median([c for _, c in measured]) / (nbytes / GIB))
    result["commit_s_median"] = _round(_median([wall for wall, _ in runs["commit"]]))
    pairs = zip(runs["raw"], runs["commit"], strict=True)
    result["ratio"] = round(result["commit_gib_s"] / result["raw_gib_s"], 3)
    result["ratio_median"] = _round(_median([raw[0] / commit[0] for raw, commit in pairs]))
    result["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    result["target"] = f"ratio >= {TARGET_RATIO}"
    result["target_met"] = result["ratio"] >= TARGET_RATIO
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
