"""Goodput over a run with injected faults, 2 CPU ranks (gloo) through the local launcher.

goodput = productive step time / wall time, where productive step time sums the step times
of the steps that survive into the final model (carried in checkpoint state, so work redone
after a rollback counts once) and wall time runs from the launcher start to the end of the
final attempt: start-up, every restart and recovery, checkpoint blocking and the final save
and export are all inside it. Faults: the launcher SIGKILLs a random rank a fixed time into
each attempt (chaos mode) until --faults kills have happened.

Prints one JSON line. Target: goodput >= 0.90.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--faults", type=int, default=2)
    ap.add_argument("--kill-every-s", type=float, default=100.0)
    ap.add_argument("--steps", type=int, default=1000)
    args = ap.parse_args()

    from training import launch

    out = Path(tempfile.mkdtemp(prefix="goodput-bench-"))
    overrides = [
        # A model whose step (~0.3 s on 2 CPU cores) is long against Python overheads, with
        # checkpoint intervals in the proportion one would use on GPUs (fast every ~8 s of
        # training, durable every ~80 s).
        "model.dim=128",
        "model.n_layers=4",
        "model.n_heads=8",
        "model.n_kv_heads=4",
        "training.seq_len=128",
        "training.global_batch_size=16",
        "checkpoint.fast_interval=25",
        "checkpoint.durable_interval=250",
    ]
    cmd = launch.command(
        out,
        "--max-restarts",
        str(args.faults),
        "--chaos-kill-every-s",
        str(args.kill_every_s),
        "--chaos-seed",
        "3",
        "--timeout-s",
        "1500",
        steps=args.steps,
        overrides=overrides,
    )
    try:
        proc = subprocess.run(
            cmd,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=1560,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
        s = json.loads((out / "summary.json").read_text())
        kills = sum(1 for a in s["launcher"]["attempts"] if a.get("chaos_kill"))
        result = {
            "benchmark": "training_goodput",
            "launcher_exit_code": proc.returncode,
            "steps": s.get("steps"),
            "faults_injected": kills,
            "restarts": s.get("restarts"),
            "goodput": round(s["goodput"], 4) if s.get("goodput") is not None else None,
            "target_goodput": 0.90,
            "target_met": s.get("goodput") is not None and s["goodput"] >= 0.90,
            "productive_step_time_s": round(s.get("productive_step_time_s", 0.0), 2),
            "wall_time_s": round(s.get("wall_time_s", 0.0), 2),
            "checkpoint_blocking_s_total": round(s.get("checkpoint_blocking_s_total", 0.0), 3),
            "checkpoints_committed": s.get("checkpoints_committed"),
            "steps_lost_total": s.get("steps_lost_total"),
            "goodput_definition": s.get("goodput_definition"),
            "config_overrides": overrides,
        }
        print(json.dumps(result))
        return 0 if proc.returncode == 0 else 1
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
