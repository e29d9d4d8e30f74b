"""Goodput under repeated rank kills, restart-only against in-process recovery, in one run:
4 CPU ranks (gloo) as 2 HSDP replicas x 2 shards, through the local launcher.

goodput = productive step time / wall time, where productive step time sums the step times
of the steps that survive into the final model (carried in checkpoint state, so work redone
after a rollback counts once) and wall time runs from the launcher start to the end of the
final attempt: start-up, every restart and recovery, checkpoint blocking and the final save
and export are all inside it. Faults: the launcher SIGKILLs a random rank every
--kill-every-s seconds (chaos mode) until --faults kills have happened. Restart-only
(fault.recovery=restart) restarts every rank from the newest checkpoint; in-process
(fault.recovery=in_process) replaces the lost rank, which receives its shard from its
replica, while the others keep their processes.

Prints one JSON line: each mode's goodput and recoveries, and the ratio. What the runs write
is removed when the benchmark ends, also when it is stopped by SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.scratch import scratch_dir  # noqa: E402 - after the path set-up

MODES = ("restart", "in_process")
OVERRIDES = [
    # A model whose step is long against Python overheads, with checkpoint intervals in the
    # proportion one would use on GPUs (fast every ~10 s of training, durable every ~100 s).
    "model.dim=128",
    "model.n_layers=4",
    "model.n_heads=8",
    "model.n_kv_heads=4",
    "training.seq_len=128",
    "training.global_batch_size=16",
    "checkpoint.fast_interval=25",
    "checkpoint.durable_interval=250",
    "parallel.dp_replicate=2",
    "parallel.dp_shard=2",
    # A survivor blocked in a collective on a live peer sees a loss only when that peer's
    # groups close; when a checkpoint commit is in flight they outlive its abandon and the
    # collective's timeout is what ends the wait (5 s, as the end-to-end tests use).
    "fault.recovery_collective_s=5",
    "fault.recovery_silence_s=5",
]


def _run(mode: str, args: argparse.Namespace, base: Path) -> dict[str, Any]:
    from training import launch

    out = base / mode
    cmd = launch.command(
        out,
        "--max-restarts",
        str(args.faults),
        "--chaos-kill-every-s",
        str(args.kill_every_s),
        "--chaos-seed",
        "3",
        "--timeout-s",
        str(args.timeout_s),
        nproc=4,
        steps=args.steps,
        overrides=[*OVERRIDES, f"fault.recovery={mode}"],
    )
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=args.timeout_s + 60,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    s = json.loads((out / "summary.json").read_text())
    recoveries = s.get("recoveries") or []
    phases: dict[str, float] = {}
    for r in recoveries:
        for phase, seconds in (r.get("phases_s") or {}).items():
            phases[phase] = round(phases.get(phase, 0.0) + seconds, 2)
    wall = s.get("wall_time_s", 0.0)
    recovery_total = sum(r.get("recovery_s") or 0.0 for r in recoveries)
    start_up = _start_up_s(out, s)
    return {
        "launcher_exit_code": proc.returncode,
        "steps": s.get("steps"),
        "faults_injected": sum(len(a["chaos_kills"]) for a in s["launcher"]["attempts"]),
        "recoveries": [f"{r['kind']}/{r['state_source']}" for r in recoveries],
        "recovery_s": [round(r["recovery_s"], 2) for r in recoveries if r.get("recovery_s")],
        "steps_lost_total": s.get("steps_lost_total"),
        "goodput": round(s["goodput"], 4) if s.get("goodput") is not None else None,
        "productive_step_time_s": round(s.get("productive_step_time_s", 0.0), 2),
        "wall_time_s": round(wall, 2),
        # Where the wall time that is not productive went: recoveries by phase, the start-up
        # (launcher start to the end of the first step, whose own time is productive), and
        # the rest (checkpoint blocking, steps redone, per-step bookkeeping, final save).
        "recovery_phases_s": phases,
        "recovery_s_total": round(recovery_total, 2),
        "start_up_s": round(start_up, 2) if start_up is not None else None,
        "other_overhead_s": round(
            wall - s.get("productive_step_time_s", 0.0) - recovery_total - (start_up or 0.0), 2
        ),
    }


def _start_up_s(out: Path, summary: dict[str, Any]) -> float | None:
    """Seconds from the launcher's first attempt to the end of the job's first step (the run
    ledger's first attempt record)."""
    try:
        first = json.loads((out / "attempts" / "attempt_0000.json").read_text())
        started = summary["launcher"]["attempts"][0]["started_unix"]
        return float(first["first_step_unix"]) - float(started)
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--faults", type=int, default=3)
    ap.add_argument("--kill-every-s", type=float, default=180.0)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--timeout-s", type=float, default=1800.0)
    args = ap.parse_args()

    with scratch_dir("goodput-bench-", Path(tempfile.gettempdir())) as base:
        runs = {mode: _run(mode, args, base) for mode in MODES}
    goodputs = [runs[mode]["goodput"] for mode in MODES]
    result = {
        "benchmark": "training_goodput",
        "kill_every_s": args.kill_every_s,
        **runs,
        "goodput_ratio_in_process_to_restart": round(goodputs[1] / goodputs[0], 4)
        if None not in goodputs
        else None,
        "config_overrides": OVERRIDES,
    }
    print(json.dumps(result))
    return 0 if all(r["launcher_exit_code"] == 0 for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
