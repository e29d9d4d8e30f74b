"""Step time with the data loader's background prefetch vs reading inline, slow source.

A synthetic token source that takes ``--read-ms`` per sample (a remote store's latency, read
one sample after another) feeds a step that takes ``--compute-ms`` of device time, during
which the host only waits (as it waits for a GPU). Inline, each step pays read + compute;
with prefetch the next batches are read while the step computes, so a step costs about
max(read, compute). Both loaders run in one process, one after the other, on the same
batches (the prefetched ones are checked equal to the inline ones).

Prints one JSON line: per-step median and mean for each mode, and the speed-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=8, help="samples per step")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--read-ms", type=float, default=3.0, help="latency of one sample's read")
    ap.add_argument("--compute-ms", type=float, default=40.0, help="device time of one step")
    ap.add_argument("--prefetch", type=int, default=2, help="batches read ahead")
    args = ap.parse_args(argv)

    import numpy as np

    from training.data import ResumableLoader, SyntheticTokenSource

    class SlowSource(SyntheticTokenSource):
        def sample(self, idx: int) -> np.ndarray:
            time.sleep(args.read_ms / 1000)
            return super().sample(idx)

    def run(prefetch: int) -> tuple[list[float], list[list[int]]]:
        source = SlowSource(100_000, args.seq_len, 32_000, seed=1)
        loader = ResumableLoader(source, args.batch, 0, 1, seed=2, prefetch_batches=prefetch)
        times: list[float] = []
        firsts: list[list[int]] = []
        try:
            for _ in range(args.steps):
                t0 = time.perf_counter()
                inputs, _labels = loader.next_batch()
                time.sleep(args.compute_ms / 1000)  # the device computes; the host waits
                times.append(time.perf_counter() - t0)
                firsts.append(inputs[:, 0].tolist())
        finally:
            loader.close()
        return times, firsts

    inline, inline_batches = run(0)
    ahead, ahead_batches = run(args.prefetch)
    if inline_batches != ahead_batches:
        sys.stderr.write("error: prefetched batches differ from inline ones\n")
        return 1
    # The first step of the prefetching run waits for the first read: steady state after it.
    steady = ahead[1:] or ahead
    figures = {
        "benchmark": "data_prefetch",
        "steps": args.steps,
        "batch": args.batch,
        "read_ms_per_sample": args.read_ms,
        "read_ms_per_batch": args.read_ms * args.batch,
        "compute_ms_per_step": args.compute_ms,
        "prefetch_batches": args.prefetch,
        "inline_step_ms_median": round(statistics.median(inline) * 1000, 2),
        "inline_step_ms_mean": round(statistics.mean(inline) * 1000, 2),
        "prefetch_step_ms_median": round(statistics.median(steady) * 1000, 2),
        "prefetch_step_ms_mean": round(statistics.mean(steady) * 1000, 2),
        "prefetch_first_step_ms": round(ahead[0] * 1000, 2),
        "speedup_median": round(statistics.median(inline) / statistics.median(steady), 2),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
