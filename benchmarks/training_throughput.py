"""Training throughput per GPU and MFU for the `1b` preset (FSDP2, bf16, synthetic tokens).

    python benchmarks/training_throughput.py                      # one GPU
    torchrun --nproc_per_node 8 benchmarks/training_throughput.py  # one node

Without CUDA it prints a JSON line with a `skipped` reason (``--allow-cpu`` runs the same code
path on CPU, e.g. with ``--preset tiny``, as a smoke test; MFU is then null).

MFU = achieved model FLOP/s per GPU / peak dense bf16 FLOP/s of the GPU, with model FLOPs per
token = 6 * parameters + 12 * layers * dim * seq_len (causal attention counted in full, as in
the PaLM appendix). Activation recomputation is not counted as useful work.
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

# Dense bf16 peak per GPU (FLOP/s), by substring of the device name.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="1b")
    ap.add_argument("--micro-batch", type=int, default=2, help="sequences per GPU per step")
    ap.add_argument("--seq-len", type=int, default=None, help="default: the preset's")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--allow-cpu", action="store_true")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print(
            json.dumps(
                {
                    "benchmark": "training_throughput",
                    "preset": args.preset,
                    "skipped": "no CUDA device available",
                }
            )
        )
        return 0

    import torch.distributed as dist

    from training.config import build_config
    from training.model import count_params
    from training.parallel import configure_cpu_threads, ensure_single_process_env, init_distributed
    from training.trainer import Trainer

    ensure_single_process_env()
    world = int(os.environ["WORLD_SIZE"])
    tmp = Path(tempfile.mkdtemp(prefix="throughput-bench-"))
    overrides = [
        "data.source=synthetic",
        "data.synthetic_samples=100000",
        f"training.global_batch_size={args.micro_batch * world}",
        f"training.steps={args.warmup + args.steps}",
        "checkpoint.fast_interval=0",
        "checkpoint.durable_interval=0",
        "fault.watchdog_s=0",
        f"checkpoint.fast_dir={tmp / 'fast'}",
        f"checkpoint.durable_dir={tmp / 'durable'}",
    ]
    if args.seq_len:
        overrides.append(f"training.seq_len={args.seq_len}")
    if args.no_compile:
        overrides.append("parallel.compile=false")
    cfg = build_config(args.preset, overrides)
    info = init_distributed()
    configure_cpu_threads(0, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    try:
        trainer = Trainer(cfg, tmp / "run", info)
        times = []
        for i in range(args.warmup + args.steps):
            if info.device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            trainer.train_step()  # ends with a loss all-reduce + .item(): the step is complete
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        m, t = cfg.model, cfg.training
        step_s = statistics.median(times)
        tokens_per_gpu_s = args.micro_batch * t.seq_len / step_s
        flops_per_token = 6 * count_params(m) + 12 * m.n_layers * m.dim * t.seq_len
        peak = None
        name = torch.cuda.get_device_name() if info.device.type == "cuda" else "cpu"
        for key, value in PEAK_BF16.items():
            if key in name:
                peak = value
        result = {
            "benchmark": "training_throughput",
            "preset": args.preset,
            "device": name,
            "world_size": world,
            "params": count_params(m),
            "seq_len": t.seq_len,
            "micro_batch_per_gpu": args.micro_batch,
            "compile": cfg.parallel.compile,
            "activation_checkpoint": cfg.parallel.activation_checkpoint,
            "step_time_s_median": round(step_s, 4),
            "tokens_per_s_per_gpu": round(tokens_per_gpu_s, 1),
            "model_tflops_per_gpu": round(tokens_per_gpu_s * flops_per_token / 1e12, 2),
            "mfu": round(tokens_per_gpu_s * flops_per_token / peak, 4) if peak else None,
            "peak_bf16_tflops": peak / 1e12 if peak else None,
            "max_memory_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2)
            if info.device.type == "cuda"
            else None,
        }
        trainer.checkpointer.close()
        if info.is_main:
            print(json.dumps(result))
    finally:
        dist.destroy_process_group()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
