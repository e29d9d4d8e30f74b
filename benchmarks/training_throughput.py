"""Training throughput per GPU and MFU for the `1b` preset (FSDP2, bf16, synthetic tokens).

    python benchmarks/training_throughput.py                      # one GPU
    torchrun --nproc_per_node 8 benchmarks/training_throughput.py  # one node
    torchrun --nproc_per_node 8 benchmarks/training_throughput.py --set parallel.tp=2  # TP pairs
    python benchmarks/training_throughput.py --set parallel.activation_checkpoint=every:2 \
        --set training.loss_chunk_tokens=0                       # any trainer override

The preset's own settings are measured unless ``--set section.field=value`` (repeatable, the
trainer's own parser: training.presets.build_config) or a flag changes them; ``--micro-batch``
defaults to the preset's ``training.micro_batch_size``. The JSON line it prints names the
overrides, the command that reproduces it, the torch version and the device.

Without CUDA it prints a JSON line with a `skipped` reason (``--allow-cpu`` runs the same code
path on CPU, e.g. with ``--preset tiny``, as a smoke test; MFU is then null).

MFU = achieved model FLOP/s per GPU / peak dense bf16 FLOP/s of the GPU, with model FLOPs per
token = 6 * parameters outside the input embedding + 12 * layers * dim * seq_len (causal
attention counted in full), as torchtitan and the PaLM appendix count them
(training.model.flops_per_token). Activation recomputation is not counted as useful work.
``mfu_embedding_counted`` also counts 6 * vocab * dim for the embedding lookup, as this
benchmark did before: figures recorded then compare with it.

``--passes N`` measures N accumulated passes per optimizer step (the presets run many: the
1b preset's 256 sequences are 8 passes of 4 on each GPU of an 8-GPU node, 64 on one GPU); the
default, 1, steps the optimizer after every pass. Memory is the peak after warm-up (compile
and the first steps excluded): allocated by tensors, and reserved by the caching allocator
(what runs out first). One more step after the timed ones takes the peak apart
(benchmarks.gpu.step_memory_split): forward and backward alone (``activation_peak_gb`` above
what their start holds), and the update after them.

``first_step_s`` is the first step's time (compile, or loading compiled code from the cache
``parallel.compile_cache_dir`` names), ``first_step_over_steady`` that over the median step.
With ``training.float8=true`` the MFU is bf16-equivalent: the same model FLOPs over the dense
bf16 peak (``mfu_basis``). SIGTERM and Ctrl-C end it through its cleanup: nothing it wrote is
left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scratch import scratch_dir

if TYPE_CHECKING:
    from training.trainer import Trainer


def _timed_steps(trainer: Trainer, warmup: int, steps: int, cuda: bool) -> list[float]:
    """Seconds of each of `warmup` + `steps` optimizer steps; the peak memory statistics are
    reset after the warm-up (compile and first-step peaks excluded)."""
    import torch

    times = []
    for i in range(warmup + steps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        trainer.train_step()  # ends with a loss all-reduce + .item(): the step is complete
        times.append(time.perf_counter() - t0)
        if i == warmup - 1 and cuda:
            torch.cuda.reset_peak_memory_stats()
    return times


def _command(args: argparse.Namespace, micro: int, cuda: bool) -> list[str]:
    """The command line that reproduces the figure."""
    command = ["python", "benchmarks/training_throughput.py", "--preset", args.preset]
    command += ["--micro-batch", str(micro), "--passes", str(args.passes)]
    command += ["--warmup", str(args.warmup)]
    command += ["--steps", str(args.steps)]
    if not cuda:
        command.append("--allow-cpu")
    if args.seq_len:
        command += ["--seq-len", str(args.seq_len)]
    if args.no_compile:
        command.append("--no-compile")
    for override in args.overrides:
        command += ["--set", override]
    return command


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="1b")
    ap.add_argument(
        "--micro-batch",
        type=int,
        default=None,
        help="sequences per GPU per step (default: the preset's training.micro_batch_size, else 2)",
    )
    ap.add_argument(
        "--passes",
        type=int,
        default=1,
        help="accumulated passes per optimizer step (default 1)",
    )
    ap.add_argument("--seq-len", type=int, default=None, help="default: the preset's")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--allow-cpu", action="store_true")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="a trainer config override, as training.train takes it (repeatable; applied last)",
    )
    args = ap.parse_args(argv)

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

    from benchmarks.gpu import peak_bf16, peak_memory_gb, step_memory_split
    from training.config_parsing import ConfigError
    from training.environment import COMPILE_CACHE_DIR_ENV
    from training.model import count_params, flops_per_token
    from training.parallel import configure_cpu_threads, ensure_single_process_env, init_distributed
    from training.presets import build_config
    from training.trainer import Trainer

    # Bad arguments are refused before the process takes a rank's environment.
    try:
        # The preset as the overrides leave it decides the default micro-batch.
        preset_cfg = build_config(args.preset, args.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    micro = args.micro_batch or preset_cfg.training.micro_batch_size or 2
    if args.passes < 1:
        print(f"error: --passes must be at least 1, got {args.passes}", file=sys.stderr)
        return 2
    ensure_single_process_env()
    world = int(os.environ["WORLD_SIZE"])
    # Per data-parallel rank: a tensor-parallel group (parallel.tp > 1) runs one share.
    replicas = preset_cfg.data_parallel_size(world)
    # What is measured: the benchmark's run shape, then the flags, then --set (which wins).
    measured = [
        f"training.global_batch_size={micro * replicas * args.passes}",
        f"training.micro_batch_size={micro}",
    ]
    if args.seq_len:
        measured.append(f"training.seq_len={args.seq_len}")
    if args.no_compile:
        measured.append("parallel.compile=false")
    measured += args.overrides
    # SIGTERM or Ctrl-C end the run through SystemExit: the directory is removed.
    with scratch_dir("throughput-bench-", Path(tempfile.gettempdir())) as tmp:
        harness = [
            "data.source=synthetic",
            "data.synthetic_samples=100000",
            # The timed steps and step_memory_split's.
            f"training.steps={args.warmup + args.steps + 1}",
            "checkpoint.fast_interval=0",
            "checkpoint.durable_interval=0",
            "checkpoint.fast_backend=local",
            "fault.watchdog_s=0",
            f"checkpoint.fast_dir={tmp / 'fast'}",
            f"checkpoint.durable_dir={tmp / 'durable'}",
        ]
        # A job's compile cache, as the trainer reads it from the job environment.
        if cache := os.environ.get(COMPILE_CACHE_DIR_ENV):
            harness.append(f"parallel.compile_cache_dir={cache}")
        try:
            cfg = build_config(args.preset, harness + measured)
            cfg.check_world(world)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        info = init_distributed()
        configure_cpu_threads(0, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
        try:
            trainer = Trainer(cfg, tmp / "run", info)
            cuda = info.device.type == "cuda"
            times = _timed_steps(trainer, args.warmup, args.steps, cuda)
            memory = peak_memory_gb(cuda)  # the timed steps', before the split resets it
            memory.update(step_memory_split(trainer))
            m, t = cfg.model, cfg.training
            first_s, step_s = times[0], statistics.median(times[args.warmup :])
            per_replica = t.global_batch_size // replicas
            # Every GPU's share of the step's tokens (under TP a group of GPUs shares a batch).
            tokens_per_gpu_s = t.global_batch_size * t.seq_len / world / step_s
            flops = flops_per_token(m, t.seq_len)
            flops_with_embedding = flops_per_token(m, t.seq_len, count_embedding=True)
            name = torch.cuda.get_device_name() if cuda else "cpu"
            peak = peak_bf16(name)
            result = {
                "benchmark": "training_throughput",
                "preset": args.preset,
                "device": name,
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "world_size": world,
                # --set as given, and every override the measured config differs from the
                # preset by (the harness's synthetic data and disabled checkpoints aside).
                "set": args.overrides,
                "overrides": measured,
                "command": shlex.join(_command(args, micro, cuda)),
                "params": count_params(m),
                "seq_len": t.seq_len,
                "micro_batch_per_gpu": micro,
                # Per data-parallel rank: per GPU without tensor parallelism.
                "sequences_per_gpu_per_step": per_replica,
                "tp": cfg.parallel.tp,
                "passes_per_step": cfg.micro_batches(world)[1],
                "compile": cfg.parallel.compile,
                "compile_cache_dir": cfg.parallel.compile_cache_dir or None,
                "float8": cfg.training.float8,
                "activation_checkpoint": cfg.parallel.activation_checkpoint,
                "loss_chunk_tokens": cfg.chunked_loss_tokens(),
                "first_step_s": round(first_s, 4),
                "first_step_over_steady": round(first_s / step_s, 2),
                "step_time_s_median": round(step_s, 4),
                "tokens_per_s_per_gpu": round(tokens_per_gpu_s, 1),
                "model_flops_per_token": flops,
                "model_tflops_per_gpu": round(tokens_per_gpu_s * flops / 1e12, 2),
                "mfu": round(tokens_per_gpu_s * flops / peak, 4) if peak else None,
                # FP8 matmuls run faster than that peak; the MFU stays on the bf16 scale.
                "mfu_basis": "bf16-equivalent" if cfg.training.float8 else "bf16",
                "mfu_embedding_counted": round(tokens_per_gpu_s * flops_with_embedding / peak, 4)
                if peak
                else None,
                "peak_bf16_tflops": peak / 1e12 if peak else None,
                **memory,
            }
            trainer.checkpointer.close()
            if info.is_main:
                print(json.dumps(result))
        finally:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
