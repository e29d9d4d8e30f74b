"""Checkpoint blocking time: async tiered save vs a synchronous DCP save of the same state.

Single process (gloo, world size 1) on CPU, a Llama-style model whose parameters plus AdamW
moments are ~1.3 GB. Both paths write the same state to the same kind of directory:

* sync:  ``dcp.save`` of the full state (the time training would stand still);
* async: the trainer's CheckpointManager as used in training: the save call plus any wait
  for the background staging copy before the next optimizer update. The copy overlaps
  the next step's forward/backward, which is really executed here.

Prints one JSON line; blocking_ratio = async_blocking_s / sync_blocking_s (target <= 0.05).
Everything it writes is removed on exit, also when stopped by SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scratch import scratch_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--dir",
        default=None,
        help="where checkpoints are written (default: the temp dir); a directory made there "
        "is removed at the end",
    )
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from training.model import count_params
    from training.parallel import configure_cpu_threads, ensure_single_process_env, init_distributed
    from training.presets import build_config
    from training.trainer import Trainer

    # SIGTERM or Ctrl-C end the run through SystemExit: the directory is removed.
    with scratch_dir("ckpt-bench-", Path(args.dir or tempfile.gettempdir())) as base:
        out = base / "run"
        cfg = build_config(
            "tiny",
            [
                f"model.dim={args.dim}",
                f"model.n_layers={args.layers}",
                "model.n_heads=16",
                "model.n_kv_heads=4",
                "model.vocab_size=8192",
                "training.seq_len=128",
                "training.global_batch_size=1",
                "checkpoint.fast_interval=0",
                "checkpoint.durable_interval=0",
                "fault.watchdog_s=0",
                f"checkpoint.fast_dir={base / 'fast'}",
                f"checkpoint.durable_dir={base / 'durable'}",
            ],
        )
        ensure_single_process_env()
        info = init_distributed()
        configure_cpu_threads(0, 1)
        try:
            trainer = Trainer(cfg, out, info)
            ckpt = trainer.checkpointer
            ckpt.prepare_staging()  # as Trainer.run: staging buffers, allocated in the background
            trainer.train_step()
            state_bytes = sum(
                t.numel() * t.element_size()
                for t in list(trainer.model.parameters())
                + [
                    v
                    for s in trainer.optimizer.state.values()
                    for v in s.values()
                    if torch.is_tensor(v)
                ]
            )

            baseline_steps = []
            for _ in range(2):
                t0 = time.perf_counter()
                trainer.train_step()
                baseline_steps.append(time.perf_counter() - t0)

            sync_s: list[float] = []
            async_s: list[float] = []
            staging_wait_s: list[float] = []
            async_call_s: list[float] = []
            step_during: list[float] = []
            staging_copy: list[float] = []
            for i in range(args.repeats):
                target = base / f"sync_{i}"
                t0 = time.perf_counter()
                # The tier's own writer: a synchronous save as the manager makes one.
                writer = ckpt.tiers["fast"].writer(0, target, lambda path: None)
                dcp_save(ckpt.app_state, storage_writer=writer, process_group=ckpt.pg)
                sync_s.append(time.perf_counter() - t0)
                shutil.rmtree(target)

                step = trainer.state.step
                before = ckpt.blocking_total_s
                t0 = time.perf_counter()
                ckpt.save(step, "fast")
                async_call_s.append(time.perf_counter() - t0)
                t1 = time.perf_counter()
                trainer.train_step()  # waits for staging right before its optimizer update
                step_during.append(time.perf_counter() - t1)
                async_s.append(ckpt.blocking_total_s - before)
                staging_wait_s.append(max(async_s[-1] - async_call_s[-1], 0.0))
                ckpt.wait()  # upload + commit finish in the background; not blocking in training
                staging_copy.append(ckpt.last_staging_s or 0.0)

            sync_commit_t0 = time.perf_counter()
            ckpt.save(trainer.state.step, "durable", sync=True)
            sync_committed_s = time.perf_counter() - sync_commit_t0
            ckpt.close()
            committed = sorted(p.name for p in (base / "fast").iterdir())
            result = {
                "benchmark": "training_checkpoint_blocking",
                "params": count_params(cfg.model),
                "state_gb": round(state_bytes / 1e9, 3),
                "repeats": args.repeats,
                "sync_blocking_s": round(statistics.median(sync_s), 3),
                "async_blocking_s": round(statistics.median(async_s), 4),
                "async_call_s": round(statistics.median(async_call_s), 4),
                "async_staging_wait_s": round(statistics.median(staging_wait_s), 4),
                "blocking_ratio": round(statistics.median(async_s) / statistics.median(sync_s), 4),
                "target_ratio": 0.05,
                # Duration of the background copy itself: what training would block for if the
                # next step were shorter than the copy (no overlap at all).
                "staging_copy_s": round(statistics.median(staging_copy), 3),
                "blocking_ratio_without_overlap": round(
                    (statistics.median(async_call_s) + statistics.median(staging_copy))
                    / statistics.median(sync_s),
                    4,
                ),
                "sync_with_manifest_commit_s": round(sync_committed_s, 3),
                "step_time_s_baseline": round(statistics.median(baseline_steps), 3),
                "step_time_s_while_async_checkpoint": round(statistics.median(step_during), 3),
                "async_checkpoints_committed": len(committed),
                "storage": "local disk directory, fsync on, the tier's writer for both paths",
                "cpu_threads": torch.get_num_threads(),
            }
            result["target_met"] = result["blocking_ratio"] <= 0.05
            print(json.dumps(result))
        finally:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
