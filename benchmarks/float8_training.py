"""FP8 training (training.float8) against bf16 on one GPU, both in one run:

    python benchmarks/float8_training.py layers [--repeats 20]   # speed of 8b's decoder layer
    python benchmarks/float8_training.py loss [--steps 300]      # the loss curve, trainer path

``layers``: one decoder block of the `8b` preset (dim 4096, MLP 14336, 32 query and 8 key/value
heads) on 8b's 8,192-token sequence, compiled, forward and backward, once with bf16 linears
and once with the linears training.float8 converts (torchao Float8Linear, dynamic tensorwise
scaling); prints both times, the speedup and each one's TFLOP/s counted as bf16 work (the
same FLOPs, so the FP8 figure is bf16-equivalent).

``loss``: the trainer itself (FSDP2, FP8 weight all-gathers, scales precomputed after each
optimizer step) on the `1b` preset's width with 2 layers, a 32,768-token vocabulary and
1,024-token sequences, synthetic tokens, `--steps` steps with bf16 and then with FP8 from the
same initial weights and data; prints both curves' mean loss over the last `--tail` steps and
whether they agree within LOSS_TOLERANCE.

One JSON line each, with the device, torch and CUDA. Without a GPU of compute capability 8.9
or later it prints a JSON line with a `skipped` reason and exits 0 (``--allow-cpu`` runs the
`loss` harness on CPU with emulated FP8, a smoke test).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scratch import scratch_dir

# FP8 against bf16: mean loss over the last steps within this fraction of bf16's. torchao and
# torchtitan report tensorwise FP8 loss curves within about 1% of bf16 on Llama 3 8B; early in
# training the curve is steep, so a few steps' lag reads larger: 3% leaves room for that.
LOSS_TOLERANCE = 0.03
# The loss model: 1b's width (its linears are the ones FP8 converts), few layers, a small
# vocabulary so the decoder, not the output projection, does most of the work.
LOSS_MODEL = ["model.n_layers=2", "model.vocab_size=32768", "training.seq_len=1024"]
# The CPU smoke test's: 1b's MLP width on a narrow model of 2 layers (its w1 and w3 convert),
# short sequences: a fraction of a second a step on CPU.
SMOKE_MODEL = [
    "model.n_layers=2",
    "model.dim=64",
    "model.n_heads=4",
    "model.n_kv_heads=2",
    "model.ffn_hidden=2048",
    "model.vocab_size=256",
    "training.seq_len=32",
]


def _common(torch: Any) -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def _time_block(block: Any, x: Any, cos: Any, sin: Any, repeats: int) -> float:
    """Median milliseconds of one forward and backward of `block` (after 3 warm-up runs)."""
    import torch

    grad = torch.ones_like(x)
    times = []
    for i in range(repeats + 3):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        block(x, cos, sin).backward(grad)
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end))
    return float(statistics.median(times))


def layers(repeats: int) -> dict[str, Any]:
    import copy

    import torch

    from training import float8
    from training.model import Block, rope_tables
    from training.presets import build_config

    cfg = build_config("8b")
    m, seq = cfg.model, cfg.training.seq_len
    device = torch.device("cuda")
    torch.manual_seed(0)
    with device:
        bf16 = Block(m).to(torch.bfloat16)
    fp8 = copy.deepcopy(bf16)
    converted = float8.convert(fp8)
    cos, sin = rope_tables(m.dim // m.n_heads, seq, m.rope_theta, device)
    x = torch.randn(1, seq, m.dim, device=device, dtype=torch.bfloat16, requires_grad=True)
    ms = {
        name: _time_block(torch.compile(block), x, cos, sin, repeats)
        for name, block in (("bf16", bf16), ("float8", fp8))
    }
    params = sum(p.numel() for p in bf16.parameters())
    # Forward and backward: 6 FLOPs a parameter a token, and causal attention counted in full
    # (training.model.flops_per_token, per layer).
    flops = seq * (6 * params + 12 * m.dim * seq)
    return {
        "benchmark": "float8_layers",
        "layer": f"8b decoder block, {seq} tokens",
        "converted": converted,
        "bf16_ms": round(ms["bf16"], 3),
        "float8_ms": round(ms["float8"], 3),
        "speedup": round(ms["bf16"] / ms["float8"], 3),
        "bf16_tflops": round(flops / ms["bf16"] / 1e9, 1),
        "float8_tflops_bf16_equivalent": round(flops / ms["float8"] / 1e9, 1),
    }


def _losses(overrides: list[str], steps: int, out: Path, info: Any) -> list[float]:
    """Every step's loss of the trainer run `overrides` configure."""
    from training.presets import build_config
    from training.trainer import Trainer

    cfg = build_config("1b", overrides)
    trainer = Trainer(cfg, out, info)
    losses: list[float] = []
    forward_backward = trainer.forward_backward

    def record(inputs: Any, labels: Any) -> Any:
        loss = forward_backward(inputs, labels)
        losses.append(float(loss.item()))
        return loss

    trainer.forward_backward = record  # type: ignore[method-assign]
    for _ in range(steps):
        trainer.train_step()
    trainer.checkpointer.close()
    return losses


def loss(steps: int, tail: int, emulate: bool) -> dict[str, Any]:
    import torch.distributed as dist

    from training import float8
    from training.parallel import configure_cpu_threads, ensure_single_process_env, init_distributed

    ensure_single_process_env()
    info = init_distributed()
    configure_cpu_threads(0, 1)
    curves: dict[str, list[float]] = {}
    try:
        with scratch_dir("float8-loss-", Path(tempfile.gettempdir())) as tmp:
            harness = [
                *(SMOKE_MODEL if emulate else LOSS_MODEL),
                "data.source=synthetic",
                "data.synthetic_samples=100000",
                "training.global_batch_size=4",
                "training.micro_batch_size=4",
                f"training.steps={steps}",
                "optim.warmup_steps=20",
                "parallel.compile=false",
                "checkpoint.fast_interval=0",
                "checkpoint.durable_interval=0",
                "checkpoint.fast_backend=local",
                "fault.watchdog_s=0",
                f"checkpoint.fast_dir={tmp / 'fast'}",
                f"checkpoint.durable_dir={tmp / 'durable'}",
            ]
            if emulate:
                # CPU smoke test: the trainer's FP8 path with emulated casts (high-precision
                # matmuls), the CPU not refused. For this process only, never in a job.
                real_convert = float8.convert
                setattr(float8, "require_support", lambda _device: None)  # noqa: B010
                setattr(float8, "convert", lambda model: real_convert(model, emulate=True))  # noqa: B010
            for name, extra in (("bf16", []), ("float8", ["training.float8=true"])):
                curves[name] = _losses(harness + extra, steps, tmp / name, info)
    finally:
        dist.destroy_process_group()
    bf16, fp8 = (statistics.fmean(curves[n][-tail:]) for n in ("bf16", "float8"))
    difference = abs(fp8 - bf16) / bf16
    return {
        "benchmark": "float8_loss",
        "model": "1b, " + ", ".join(SMOKE_MODEL if emulate else LOSS_MODEL),
        "steps": steps,
        "tail_steps": tail,
        "bf16_first_loss": round(curves["bf16"][0], 4),
        "bf16_tail_loss": round(bf16, 4),
        "float8_tail_loss": round(fp8, 4),
        "relative_difference": round(difference, 4),
        "tolerance": LOSS_TOLERANCE,
        "within_tolerance": difference <= LOSS_TOLERANCE,
        "emulated": emulate,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["layers", "loss"])
    ap.add_argument("--repeats", type=int, default=20, help="layers: timed runs")
    ap.add_argument("--steps", type=int, default=300, help="loss: optimizer steps per curve")
    ap.add_argument("--tail", type=int, default=50, help="loss: last steps averaged")
    ap.add_argument("--allow-cpu", action="store_true", help="loss on CPU, FP8 emulated")
    args = ap.parse_args()

    import torch

    from training import float8

    common = _common(torch)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    reason = float8.unsupported_reason(device)
    emulate = reason is not None and args.allow_cpu and args.what == "loss"
    if reason is not None and not emulate:
        print(json.dumps({"benchmark": f"float8_{args.what}", "skipped": reason, **common}))
        return 0
    tail = min(args.tail, args.steps)
    result = layers(args.repeats) if args.what == "layers" else loss(args.steps, tail, emulate)
    print(json.dumps({**result, **common}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
