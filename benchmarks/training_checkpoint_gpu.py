"""Cost of async fast-tier checkpoints while training the `1b` preset on one GPU.

    python benchmarks/training_checkpoint_gpu.py [--every 50] [--checkpoints 6] [--dir DIR]
        [--device-snapshot] [--micro-batch 2] [--no-compile] [--allocate-at start|checkpoints]

Trains with the trainer's own step and checkpoint code (Trainer.train_step, maybe_checkpoint,
CheckpointManager: staging buffers allocated at start in the background, pinned host memory,
a side stream; write and commit in the background; one checkpoint in flight), then makes a
synchronous DCP save of the same state to the same storage. Prints one JSON line:

* step_time_s_median: a training step without any checkpoint (after warm-up);
* extra time of a checkpoint: the wall time of the steps from the one that starts it to the
  one before the next checkpoint, less as many median steps (issue call, the wait for the
  staging copy before the optimizer update, slowdown of steps while it writes). The first
  checkpoint's window also covers the steps before it;
* staging_alloc_s: allocating (and pinning) the staging buffers. They start allocating where
  Trainer.run starts them, before the first step, so on a real run compile and the first
  steps hide it; the baseline is timed once they are done. ``--allocate-at checkpoints``
  starts them right before the checkpointed steps instead (the worst case: the first
  checkpoint then waits for whatever allocation is left);
* sync_save_s: ``dcp.save`` of the same state (the time training stands still without async);
* blocking_ratio = steady-state extra per checkpoint / sync_save_s;
* checkpoints committed vs attempted;
* commit_s: each checkpoint's start to its commit (the manager's figure, also on its
  ``status=committed`` line), commit_gb_s_per_rank = the bytes this rank wrote / commit_s
  (median), and whether the interval (``--every``, default the preset's fast interval) takes
  at least one commit (interval_fits).

Targets: every checkpoint commits; blocking_ratio <= 0.05; the first checkpoint costs no more
than 2 steps; a commit writes at least 4 GB/s per rank (commit_target_met). Without CUDA it
prints a JSON line with a `skipped` reason (``--allow-cpu`` runs the same code path on CPU,
e.g. with ``--preset tiny``, as a smoke test). Everything it writes is removed on exit, also
when stopped by SIGTERM or Ctrl-C (benchmarks/scratch.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scratch import fast_tier_base, scratch_dir

TARGET_RATIO = 0.05
TARGET_FIRST_STEPS = 2.0
# Per rank, bytes committed per second of a checkpoint (the recovery issue's target).
TARGET_COMMIT_GB_S = 4.0
# The directory it writes in (under /dev/shm or the temp dir, or --dir).
SCRATCH_PREFIX = "hptrain-ckpt-gpu-bench-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="1b")
    ap.add_argument("--micro-batch", type=int, default=2, help="sequences per step")
    ap.add_argument("--seq-len", type=int, default=None, help="default: the preset's")
    ap.add_argument(
        "--every", type=int, default=0, help="steps between fast checkpoints (0: the preset's)"
    )
    ap.add_argument("--checkpoints", type=int, default=6, help="fast checkpoints to make")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--baseline", type=int, default=10, help="steps timed without checkpoints")
    ap.add_argument("--sync-repeats", type=int, default=2)
    ap.add_argument(
        "--dir",
        default=None,
        help="where to write (default: /dev/shm when it has room, else the temp dir); a "
        "directory made there is removed at the end",
    )
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument(
        "--device-snapshot",
        action="store_true",
        help="checkpoint.device_snapshot=true: copy in GPU memory first, then to host",
    )
    ap.add_argument(
        "--allocate-at",
        choices=["start", "checkpoints"],
        default="start",
        help="when the staging buffers start allocating (default: before the first step, as "
        "Trainer.run does)",
    )
    ap.add_argument("--allow-cpu", action="store_true")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print(
            json.dumps(
                {
                    "benchmark": "training_checkpoint_gpu",
                    "preset": args.preset,
                    "skipped": "no CUDA device available",
                }
            )
        )
        return 0

    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from benchmarks.gpu import peak_memory_gb
    from training.checkpoint.staging import iter_tensors
    from training.model import count_params
    from training.parallel import configure_cpu_threads, ensure_single_process_env, init_distributed
    from training.presets import build_config
    from training.trainer import Trainer

    ensure_single_process_env()
    if int(os.environ["WORLD_SIZE"]) != 1:
        sys.stderr.write("error: training_checkpoint_gpu runs on one GPU (WORLD_SIZE=1)\n")
        return 2
    # Checkpointed state: fp32 parameters and AdamW's two moments, 12 bytes a parameter; at
    # most two copies at once (the one kept, and the one being written or the synchronous
    # save).
    preset = build_config(args.preset, [])
    needed = 2 * 12 * count_params(preset.model)
    every = args.every or preset.checkpoint.tier("fast").interval
    # SIGTERM or Ctrl-C end the run through SystemExit: the directory is removed.
    with scratch_dir(SCRATCH_PREFIX, Path(args.dir or fast_tier_base(needed))) as base:
        total = args.warmup + args.baseline + (args.checkpoints + 1) * every
        overrides = [
            "data.source=synthetic",
            "data.synthetic_samples=100000",
            f"training.global_batch_size={args.micro_batch}",
            f"training.steps={total + 1}",
            f"checkpoint.fast_interval={every}",
            "checkpoint.durable_interval=0",
            "checkpoint.fast_keep=1",
            "checkpoint.fast_backend=local",
            "fault.watchdog_s=0",
            f"checkpoint.fast_dir={base / 'fast'}",
            f"checkpoint.durable_dir={base / 'durable'}",
        ]
        if args.seq_len:
            overrides.append(f"training.seq_len={args.seq_len}")
        if args.no_compile:
            overrides.append("parallel.compile=false")
        if args.device_snapshot:
            overrides.append("checkpoint.device_snapshot=true")
        cfg = build_config(args.preset, overrides)
        info = init_distributed()
        configure_cpu_threads(0, 1)
        cuda = info.device.type == "cuda"
        try:
            trainer = Trainer(cfg, base / "run", info)
            ckpt = trainer.checkpointer

            commits: list[tuple[float, int]] = []  # (commit_s, bytes) of each checkpoint

            def step() -> float:
                t0 = time.perf_counter()
                trainer.train_step()  # ends with .item(): the step is complete
                reported = ckpt.committed
                trainer.maybe_checkpoint()
                seconds = time.perf_counter() - t0
                if ckpt.committed > reported and ckpt.last_commit is not None:
                    commits.append(ckpt.last_commit)
                return seconds

            # As Trainer.run: the buffers start allocating before the first step, in the background.
            allocation = ckpt.prepare_staging() if args.allocate_at == "start" else None
            # Warm-up and baseline: train_step alone, so no checkpoint is made.
            for _ in range(args.warmup):
                trainer.train_step()
            if allocation is not None:
                allocation.result()  # the baseline is timed without page faults or pinning beside it
            if cuda:
                torch.cuda.reset_peak_memory_stats()  # compile and first-step peaks excluded
            baseline = []
            for _ in range(args.baseline):
                t0 = time.perf_counter()
                trainer.train_step()
                baseline.append(time.perf_counter() - t0)
            step_s = statistics.median(baseline)

            # Checkpoints are due at steps every, 2*every, ... (C + 1) * every.
            n = args.checkpoints
            trainer.state.step = 0
            if allocation is None:
                allocation = ckpt.prepare_staging()
            times = [step() for _ in range((n + 1) * every)]  # times[i]: step i + 1
            reported = ckpt.committed
            ckpt.wait()
            if ckpt.committed > reported and ckpt.last_commit is not None:
                commits.append(ckpt.last_commit)
            attempted = n + 1

            def extra(first: int, last: int) -> float:
                """Wall time of steps first..last beyond as many median steps."""
                window = times[first - 1 : last]
                return sum(window) - step_s * len(window)

            # Checkpoint j's window: the step that starts it (j * every) to the one before the
            # next. The first one's also covers steps 1 to every - 1. The last
            # checkpoint is made and committed, its window is not timed.
            first_extra = extra(1, 2 * every - 1)
            per_checkpoint = [extra(j * every, (j + 1) * every - 1) for j in range(2, n + 1)]
            steady = statistics.median(per_checkpoint) if per_checkpoint else first_extra
            alloc_s = allocation.result() if allocation is not None else None

            sync_s: list[float] = []
            for i in range(args.sync_repeats):
                target = base / f"sync_{i}"
                if cuda:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                # The tier's own writer: the same threads and hashing as its checkpoints.
                writer = ckpt.tiers["fast"].writer(0, target, lambda path: None)
                dcp_save(ckpt.app_state, storage_writer=writer, process_group=ckpt.pg)
                sync_s.append(time.perf_counter() - t0)
                shutil.rmtree(target, ignore_errors=True)
            sync = statistics.median(sync_s)
            state_bytes = sum(
                t.numel() * t.element_size()
                for _, t in iter_tensors({k: v.state_dict() for k, v in ckpt.app_state.items()})
            )
            stager = ckpt._stager
            commit_s = [c[0] for c in commits]
            rates = [c[1] / c[0] / 1e9 for c in commits if c[0] > 0]
            commit_median = statistics.median(commit_s) if commit_s else None
            result = {
                "benchmark": "training_checkpoint_gpu",
                "preset": args.preset,
                "device": torch.cuda.get_device_name() if cuda else "cpu",
                "torch": torch.__version__,
                "params": count_params(cfg.model),
                "state_gb": round(state_bytes / 1e9, 2),
                "seq_len": cfg.training.seq_len,
                "micro_batch": args.micro_batch,
                "compile": cfg.parallel.compile,
                "every_steps": every,
                "allocate_at": args.allocate_at,
                "device_snapshot": cfg.checkpoint.device_snapshot,
                "storage": str(base),
                "step_time_s_median": round(step_s, 4),
                "first_checkpoint_extra_s": round(first_extra, 4),
                "first_checkpoint_extra_steps": round(first_extra / step_s, 2),
                "steady_checkpoint_extra_s": round(steady, 4),
                "checkpoint_extra_s": [round(e, 4) for e in per_checkpoint],
                "staging_copy_s_last": round(ckpt.last_staging_s or 0.0, 4),
                "staging_alloc_s": round(alloc_s, 3) if alloc_s is not None else None,
                "staging_pinned": bool(stager and stager.pinned),
                "staging_allocated_on_demand": stager.allocated_on_demand if stager else None,
                "sync_save_s": round(sync, 3),
                "blocking_ratio": round(steady / sync, 4),
                "blocking_ratio_first": round(first_extra / sync, 4),
                "checkpoints_attempted": attempted,
                "checkpoints_committed": ckpt.committed,
                "checkpoints_failed": ckpt.failed,
                "write_threads": getattr(ckpt.tiers["fast"], "write_threads", None),
                "commit_s": [round(c, 3) for c in commit_s],
                "commit_s_median": None if commit_median is None else round(commit_median, 3),
                "commit_bytes": commits[-1][1] if commits else None,
                "commit_gb_s_per_rank": round(statistics.median(rates), 3) if rates else None,
                "interval_s": round(every * step_s, 3),
                "interval_fits": None if commit_median is None else every * step_s >= commit_median,
                **peak_memory_gb(cuda),
            }
            result["target_met"] = bool(
                ckpt.committed == attempted
                and result["blocking_ratio"] <= TARGET_RATIO
                and first_extra / step_s <= TARGET_FIRST_STEPS
            )
            rate = result["commit_gb_s_per_rank"]
            result["commit_target_met"] = rate is not None and rate >= TARGET_COMMIT_GB_S
            ckpt.close()
            print(json.dumps(result))
        finally:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
