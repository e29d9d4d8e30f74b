"""benchmarks/training_checkpoint_gpu.py on CPU (tiny preset): the code path the GPU figures
come from runs end to end and its JSON line carries what the targets are judged on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "training_checkpoint_gpu.py"


@pytest.mark.parametrize("allocate_at", ["start", "checkpoints"])
def test_every_checkpoint_is_timed_and_committed(allocate_at: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--allow-cpu",
            "--preset",
            "tiny",
            "--every",
            "3",
            "--checkpoints",
            "3",
            "--warmup",
            "1",
            "--baseline",
            "3",
            "--sync-repeats",
            "1",
            "--allocate-at",
            allocate_at,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
    out = json.loads(line)
    assert out["allocate_at"] == allocate_at and out["device"] == "cpu"
    assert out["checkpoints_attempted"] == 4 == out["checkpoints_committed"]
    assert out["checkpoints_failed"] == 0
    # Checkpoints 2 and 3 give the steady state (the first and the last are not in it).
    assert len(out["checkpoint_extra_s"]) == 2
    assert out["staging_alloc_s"] >= 0 and out["staging_allocated_on_demand"] == 0
    assert out["sync_save_s"] > 0
    # (from unrounded figures: the printed ones are rounded)
    ratio = out["steady_checkpoint_extra_s"] / out["sync_save_s"]
    assert out["blocking_ratio"] == pytest.approx(ratio, rel=0.02, abs=1e-3)
    assert out["max_memory_allocated_gb"] is None and out["max_memory_reserved_gb"] is None
    assert isinstance(out["target_met"], bool)
    # Each checkpoint's commit, as the manager measured it: seconds, bytes, GB/s per rank.
    assert len(out["commit_s"]) == 4 and all(c > 0 for c in out["commit_s"])
    assert out["commit_bytes"] > 0 and out["commit_gb_s_per_rank"] > 0
    assert out["interval_s"] == pytest.approx(3 * out["step_time_s_median"], rel=0.01, abs=1e-3)
    assert isinstance(out["interval_fits"], bool) and isinstance(out["commit_target_met"], bool)
