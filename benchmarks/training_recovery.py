"""Recovery from a rank kill: time from the SIGKILL to the first new training step, and steps
lost per fault, measured on 2 CPU ranks (gloo) through the local launcher.

The launcher's chaos mode SIGKILLs a random rank a fixed time into each attempt (an external
kill at an arbitrary point of a step or a checkpoint, as a node loss would be). Per fault:

* recovery_s  = first step of the next attempt - kill time (detection, group teardown,
  process start, process-group init, checkpoint validation and load, first step);
* steps_lost  = last step reached before the kill - step resumed from.

Prints one JSON line. Target: steps_lost <= one fast-tier interval. What the run writes is
removed when the benchmark ends, also when it is stopped by SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.scratch import scratch_dir  # noqa: E402 - after the path set-up


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--faults", type=int, default=3)
    ap.add_argument("--kill-every-s", type=float, default=14.0)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--fast-interval", type=int, default=10)
    args = ap.parse_args()

    with scratch_dir("recovery-bench-", Path(tempfile.gettempdir())) as out:
        result, code = _measure(args, out)
    print(json.dumps(result))
    return code


def _measure(args: argparse.Namespace, out: Path) -> tuple[dict[str, Any], int]:
    from training import launch
    from training.metrics import read_records

    cmd = launch.command(
        out,
        "--max-restarts",
        str(args.faults),
        "--chaos-kill-every-s",
        str(args.kill_every_s),
        "--chaos-seed",
        "7",
        "--timeout-s",
        "900",
        steps=args.steps,
        overrides=[
            f"checkpoint.fast_interval={args.fast_interval}",
            "checkpoint.durable_interval=100",
        ],
    )
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=960,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    summary = json.loads((out / "summary.json").read_text())
    records = {r.attempt: r for r in read_records(out)}
    attempts = summary["launcher"]["attempts"]
    faults = []
    for a in attempts:
        kill = (a.get("chaos_kills") or [None])[0]
        # Ledger records are numbered like the launcher's job-wide attempts.
        nxt = records.get(a["job_attempt"] + 1)
        prev = records.get(a["job_attempt"])
        if not kill or nxt is None or prev is None or nxt.first_step_unix is None:
            continue
        faults.append(
            {
                "killed_rank": kill["rank"],
                "killed_at_step": prev.last_step,
                "resumed_step": nxt.resumed_step,
                "resumed_from": nxt.resumed_from,
                "steps_lost": prev.last_step - nxt.resumed_step,
                "recovery_s": round(nxt.first_step_unix - kill["unix"], 3),
                "detect_and_teardown_s": round(a["ended_unix"] - kill["unix"], 3),
                "restart_to_trainer_ready_s": round(nxt.started_unix - a["ended_unix"], 3),
                "trainer_ready_to_first_step_s": round(nxt.first_step_unix - nxt.started_unix, 3),
            }
        )
    lost = [f["steps_lost"] for f in faults]
    rec = [f["recovery_s"] for f in faults]
    result = {
        "benchmark": "training_recovery",
        "launcher_exit_code": proc.returncode,
        "completed_steps": summary.get("steps"),
        "faults": len(faults),
        "fast_interval_steps": args.fast_interval,
        "recovery_s_mean": round(statistics.mean(rec), 3) if rec else None,
        "recovery_s_max": round(max(rec), 3) if rec else None,
        "steps_lost_mean": round(statistics.mean(lost), 2) if lost else None,
        "steps_lost_max": max(lost) if lost else None,
        "target_steps_lost_max": args.fast_interval,
        "target_met": bool(lost) and max(lost) <= args.fast_interval,
        "per_fault": faults,
    }
    return result, 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
