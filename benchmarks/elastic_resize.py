"""Elastic resize: time from the new world's start to its first training step, on CPU ranks
(gloo) through the local launcher, as HyperPod's elastic training runs it: a scaling event
(SIGUSR1) makes the running world save and exit, and the job's workers start again at the
new size and resume through DCP's resharding load and the global data position.

One launch per world size (default 4, 2, 4 ranks, 8 steps each). Per resize, one JSON line:

* resize_to_first_step_s  = first step at the new size - the launcher's start of the new
  world's processes (process start, imports, process-group init, model build, checkpoint
  validation and resharded load, first step);
* start_to_trainer_ready_s / ready_to_first_step_s: the same, split where rank 0's run
  ledger opens (after the process group and model exist);
* event_to_exit_s: from the scaling event to the old world's exit (finish the step, save the
  durable checkpoint, commit, exit).

Figures only: nothing here asserts a time (tests/training/test_elastic.py checks behaviour).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", default="4,2,4", help="world size of each launch, in order")
    ap.add_argument("--steps-per-world", type=int, default=8)
    ap.add_argument("--preset", default="tiny")
    args = ap.parse_args()

    import torch

    from training import launch
    from training.metrics import read_records

    worlds = [int(w) for w in args.worlds.split(",")]
    total = args.steps_per_world * len(worlds)
    out = Path(tempfile.mkdtemp(prefix="elastic-bench-"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    code = 0
    try:
        launches = []
        for i, world in enumerate(worlds):
            stop = args.steps_per_world * (i + 1)
            event = ["--scale-event-at-step", str(stop)] if stop < total else []
            cmd = launch.command(
                out / "run",
                *event,
                "--max-restarts",
                "0",
                nproc=world,
                preset=args.preset,
                steps=total,
                overrides=[
                    "checkpoint.fast_storage=local",
                    "training.cpu_threads=1",
                    f"checkpoint.durable_interval={args.steps_per_world}",
                ],
            )
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-2000:])
                code = 1
                break
            summary = json.loads((out / "run" / "summary.json").read_text())
            launches.append((world, summary["launcher"]["attempts"][0]))
        records = {r.attempt: r for r in read_records(out / "run")}
        for (old_world, old), (world, new) in itertools.pairwise(launches):
            rec, prev = records[new["job_attempt"]], records[old["job_attempt"]]
            if rec.first_step_unix is None:
                continue
            scale_event = next((f for f in prev.faults if f["kind"] == "scale_event"), None)
            figure = {
                "benchmark": "elastic_resize",
                "device": "cpu",
                "cpu": platform.processor() or platform.machine(),
                "torch": torch.__version__,
                "preset": args.preset,
                "resize": f"{old_world}->{world}",
                "resumed_step": rec.resumed_step,
                "resize_to_first_step_s": round(rec.first_step_unix - new["started_unix"], 3),
                "start_to_trainer_ready_s": round(rec.started_unix - new["started_unix"], 3),
                "ready_to_first_step_s": round(rec.first_step_unix - rec.started_unix, 3),
                "event_to_exit_s": round(old["ended_unix"] - scale_event["unix"], 3)
                if scale_event
                else None,
            }
            print(json.dumps(figure))
        return code
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
