"""Bad command lines fail fast with one line on stderr and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.conftest import REPO


@pytest.mark.parametrize(
    "argv",
    [
        ["training.launch", "--out", "X", "--preset", "huge"],
        ["training.launch", "--out", "X", "--set", "training.stepz=4"],
        [
            "training.launch",
            "--out",
            "X",
            "--nproc",
            "2",
            "--kill-rank",
            "2",
            "--kill-at-step",
            "3",
        ],
        ["training.launch", "--out", "X", "--kill-rank", "1"],
        ["training.launch", "--out", "X", "--kill-during-checkpoint", "7"],
        ["training.launch", "--out", "X", "--nproc", "3"],
        ["training.launch", "--out", "X", "--steps", "notanumber"],
        ["training.launch", "--out", "X", "--sigterm-at-step", "400"],
        ["training.launch"],
        ["training.train", "--out", "X", "--set", "optim.lr=fast"],
        ["training.train", "--out", "X", "--preset", "nope"],
        # Every numeric field is range-checked before any arithmetic on it.
        ["training.train", "--out", "X", "--set", "model.n_heads=0"],
        ["training.train", "--out", "X", "--set", "model.multiple_of=0"],
        ["training.train", "--out", "X", "--set", "data.synthetic_samples=0"],
        ["training.train", "--out", "X", "--set", "fault.watchdog_s=nan"],
        ["training.train", "--out", "X", "--set", "parallel.dp_shard=0"],
        ["training.train", "--out", "X", "--set", "optim.lr=-0.1"],
        ["training.train", "--out", "X", "--set", "optim.lr=0"],
        ["training.train", "--out", "X", "--set", "optim.warmup_steps=-1"],
        ["training.train", "--out", "X", "--set", "optim.beta2=1"],
        ["training.train", "--out", "X", "--set", "optim.min_lr_ratio=inf"],
        ["training.train", "--out", "X", "--set", "training.grad_clip=0"],
        ["training.launch", "--out", "X", "--timeout-s", "nan"],
        ["training.launch", "--out", "X", "--watchdog-s", "inf"],
        ["training.launch", "--out", "X", "--nproc", "2", "--nodes", "3"],
        ["training.launch", "--out", "X", "--set", "model.n_heads=0"],
        ["training.launch", "--out", "X", "--corrupt-newest"],
    ],
)
def test_bad_cli_input(argv: list[str], tmp_path: Path) -> None:
    argv = [a.replace("X", str(tmp_path / "out")) for a in argv]
    proc = subprocess.run(
        [sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert not (tmp_path / "out").exists()  # nothing started


@pytest.mark.parametrize(
    "module, option, key",
    [
        ("training.train", "--out", None),
        ("training.train", "checkpoint.durable_dir", "checkpoint.durable_dir"),
        ("training.launch", "--out", None),
        ("training.launch", "checkpoint.fast_dir", "checkpoint.fast_dir"),
    ],
)
def test_unwritable_directories_fail_before_anything_starts(
    module: str, option: str, key: str | None, tmp_path: Path
) -> None:
    # A path under a regular file cannot be created, whoever runs the test (root included).
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    bad = blocker / "sub"
    out = bad if key is None else tmp_path / "run"
    argv = [sys.executable, "-m", module, "--out", str(out)]
    if key is not None:
        argv += ["--set", f"{key}={bad}"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0] == f"error: cannot write to {option} {bad}: Not a directory"
    assert not (tmp_path / "run" / "logs").exists()  # no rank was started
