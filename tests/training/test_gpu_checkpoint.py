"""On a CUDA device: async checkpoints (pinned staging, side stream) commit every time, and a
run killed mid-way resumes to the same final parameters as an uninterrupted one.

Skipped where no CUDA device exists. Run on a GPU host with:

    python -m pytest tests/training/test_gpu_checkpoint.py -q -p no:cacheprovider
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.training import loglines
from tests.training.conftest import LaunchResult, launch
from training.metrics import START_FMT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

STEPS = 24
# One GPU, deterministic kernels (a resumed run must match bit for bit), checkpoints often.
GPU = [
    "training.deterministic=true",
    "checkpoint.fast_interval=3",
    "checkpoint.durable_interval=12",
]
START = loglines.line_pattern(START_FMT, world="1", rank="0")


def _run(out: Path, *extra: str, snapshot: str) -> LaunchResult:
    overrides = [*GPU, f"checkpoint.device_snapshot={snapshot}"]
    r = launch(out, *extra, nproc=1, steps=STEPS, overrides=overrides, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    return r


# Host staging (pinned buffers, side stream), and the copy in GPU memory first.
@pytest.mark.parametrize("snapshot", ["false", "true"])
def test_gpu_checkpoints_commit_and_resume_exactly(tmp_path: Path, snapshot: str) -> None:
    reference = _run(tmp_path / "reference", snapshot=snapshot)
    statuses = [c["status"] for c in loglines.find(loglines.CHECKPOINT, reference.stdout)]
    # Every checkpoint, async ones after the first included, committed (torch 2.11's
    # DefaultStager failed all but the first).
    assert statuses.count("committed") == statuses.count("started") == STEPS // 3
    assert "failed" not in statuses
    assert reference.summary["checkpoints_failed"] == 0
    # Each committed line carries the tier's speed: seconds to commit and bytes written.
    commits = loglines.find(loglines.COMMITTED, reference.stdout)
    assert len(commits) == STEPS // 3
    assert all(float(c["commit"]) > 0 and int(c["bytes"]) > 0 for c in commits)

    killed = _run(
        tmp_path / "killed", "--kill-rank", "0", "--kill-at-step", "17", snapshot=snapshot
    )
    starts = [(int(s["step"]), s["resumed"]) for s in loglines.find(START, killed.stdout)]
    # The kill waits for the in-flight checkpoint: step 15 (fast) is the newest.
    assert starts == [(0, "none"), (15, "fast")]
    assert killed.summary["restarts"] == 1
    assert killed.summary["recoveries"][0]["steps_lost"] == 1
    assert killed.summary["final_params_sha256"] == reference.summary["final_params_sha256"]
