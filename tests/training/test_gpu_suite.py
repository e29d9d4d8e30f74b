"""benchmarks/gpu_suite.py: refuses without a GPU in one line, lists the commands the
benchmarks README shows, and runs its whole harness on CPU (the tiny preset) with a figure
line per check that says where it was measured."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
README = REPO / "benchmarks" / "README.md"


def _suite(*args: str) -> subprocess.CompletedProcess[str]:
    from benchmarks.gpu_suite import STOP_GRACE_S, SUITE_BUDGET_S

    return subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_suite", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        # Past the suite's own promise (its budget, then a stopped check's SIGTERM and
        # SIGKILL graces): on a loaded machine the suite reports what it could not finish
        # rather than being killed with its report.
        timeout=SUITE_BUDGET_S + 2 * STOP_GRACE_S + 60,
        check=False,
    )


def _suite_here(
    capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, subprocess.CompletedProcess[str]]:
    """The suite's main in this process (where what it checks is no process's behaviour):
    its exit code and what it printed."""
    from benchmarks.gpu_suite import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, subprocess.CompletedProcess(args, code, out, err)


def test_without_a_gpu_it_refuses_in_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No GPU visible, whatever the machine has: the suite must not start anything.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, result = _suite_here(capsys)
    assert code == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "error: the GPU suite needs a CUDA GPU and this machine has none visible "
        "(torch.cuda.is_available() is False); run `make gpu-suite` on a GPU host"
    ]


def test_the_readme_lists_the_commands_the_suite_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, result = _suite_here(capsys, "--list")
    assert code == 0, result.stderr
    block = re.search(
        r"<!-- gpu-suite-commands -->\n```\n(.*?)\n```\n<!-- /gpu-suite-commands -->",
        README.read_text(),
        flags=re.DOTALL,
    )
    assert block, "benchmarks/README.md has no gpu-suite-commands block"
    assert block.group(1).splitlines() == result.stdout.strip().splitlines()
    # Every GPU check the project has is among them.
    commands = result.stdout
    # As shipped: the passes a GPU of a p5 node runs (256 / 8 GPUs / micro-batch 4), and 1.
    one_pass, shipped = commands.splitlines()[:2]
    assert one_pass.endswith("--preset 1b --warmup 3 --steps 5 --passes 1")
    assert shipped.endswith("--preset 1b --warmup 3 --steps 5 --passes 8")
    assert "benchmarks/float8_training.py layers" in commands
    assert "benchmarks/float8_training.py loss --steps 300" in commands
    assert "--passes 8 --set training.float8=true\n" in commands
    assert "benchmarks/training_checkpoint_gpu.py --preset 1b" in commands
    assert "-m pytest tests/training/test_gpu_checkpoint.py" in commands
    for choice in ("none", "all"):
        assert (
            "--preset 8b --warmup 2 --steps 3 --set model.n_layers=4 "
            f"--set parallel.activation_checkpoint={choice}\n"
        ) in commands
    assert "--nproc_per_node 8 benchmarks/training_throughput.py --preset 1b" in commands
    assert "--set parallel.tp=8\n" in commands


@pytest.mark.slow
def test_the_whole_harness_runs_on_cpu() -> None:
    result = _suite("--allow-cpu")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines: list[dict[str, Any]] = [json.loads(ln) for ln in result.stdout.splitlines()]
    *figures, summary = lines
    for f in figures:
        assert f["suite"] == "gpu" and f["device"] == "cpu" and f["gpus"] == 0
        assert f["torch"] == torch.__version__ and f["met"] is None  # not judged on CPU
        assert f.get("reason") is None, f  # every check ran to the end
    checks = {f["check"] for f in figures}
    assert {
        "throughput_1b",
        "throughput_1b_one_pass",
        "compile_restart",
        "float8_loss",
        "checkpoint_cost",
        "gpu_checkpoint_test",
        "memory_8b_4_layers_none",
        "memory_8b_4_layers_all",
        "memory_8b_4_layers",
        "tensor_parallel_1b",
        "throughput_8b_node",
    } <= checks
    by_name = {(f["check"], f["figure"]): f for f in figures}
    assert by_name[("checkpoint_cost", "async_checkpoints_committed")]["value"] == "4/4"
    assert by_name[("throughput_1b", "mfu")]["target"].startswith(">= 0.55 (1b as shipped")
    assert by_name[("throughput_1b_one_pass", "mfu")]["passes_per_step"] == 1
    assert by_name[("compile_restart", "first_step_over_steady")]["value"] > 0
    assert by_name[("float8_loss", "relative_difference")]["value"] is not None
    assert by_name[("throughput_1b", "tokens_per_s_per_gpu")]["value"] > 0
    assert by_name[("tensor_parallel_1b", "completed")]["skipped"] == (
        "needs 2 or more GPUs on the node, found 0"
    )
    assert summary["figure"] == "summary"
    assert summary["missed"] == [] and summary["not_run"] == []


def test_a_budget_too_small_starts_nothing_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    # No check gets half its time allowance from a 1-second budget: none starts, each says
    # why, and the summary lists them as not run.
    code, result = _suite_here(capsys, "--allow-cpu", "--budget-s", "1")
    assert code == 0, result.stderr[-3000:]
    *figures, summary = [json.loads(ln) for ln in result.stdout.splitlines()]
    not_started = [f for f in figures if f.get("reason")]
    assert {f["reason"] for f in not_started} == {"not started: the suite's budget was spent"}
    assert summary["missed"] == []
    assert summary["not_run"] == [f["check"] for f in not_started]
    assert "throughput_1b" in summary["not_run"] and "gpu_checkpoint_test" in summary["not_run"]


def _stopped_command(tmp_path: Path, child: str, grace_s: float) -> tuple[Any, Path]:
    """Runs a shell that starts `child` (a shell script) in the background and waits, past
    a 2-second allowance: (the run, the file holding the child's PID). Shells start in
    milliseconds, so the child is running well before the stop."""
    from benchmarks.gpu_suite import Suite

    (tmp_path / "child.sh").write_text(child)
    pid_file = tmp_path / "child.pid"
    parent = f"sh {tmp_path / 'child.sh'} >/dev/null 2>&1 &\necho $! > {pid_file}\nwait\n"
    suite = Suite(common={}, budget_s=grace_s + 60, list_only=False, stop_grace_s=grace_s)
    run = suite.run(["sh", "-c", parent], allowance_s=2)
    assert run is not None and run.returncode is None  # stopped, not finished
    return run, pid_file


def test_a_command_past_its_allowance_is_stopped_with_its_children(tmp_path: Path) -> None:
    # The child reports the SIGTERM the whole group gets (its grace to save and exit).
    marker = tmp_path / "child.terminated"
    child = f"trap 'echo TERM > {marker}; exit 0' TERM\nsleep 120 &\nwait\n"
    _, pid_file = _stopped_command(tmp_path, child, grace_s=60)
    assert marker.read_text() == "TERM\n"
    assert _ended(int(pid_file.read_text()))


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    # It holds no end of the output pipe, so the leader's exit alone ends the wait for output.
    child = "trap '' TERM\nexec sleep 120\n"
    _, pid_file = _stopped_command(tmp_path, child, grace_s=1)
    assert _ended(int(pid_file.read_text()))


def _ended(pid: int) -> bool:
    """The process has ended: no such process, or a zombie whose exit status nobody has
    collected (its parent was stopped first; whether PID 1 reaps orphans varies)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_as_shipped_is_the_presets_passes_on_a_p5_node() -> None:
    from benchmarks.gpu_suite import shipped_passes
    from config.instance_types import lookup
    from training.presets import build_config

    cfg = build_config("1b")
    gpus = lookup("ml.p5.48xlarge").accelerator_count
    assert shipped_passes("1b") == cfg.training.global_batch_size // gpus // 4 == 8
    # Derived, not typed: a preset with another batch gets its own count.
    assert shipped_passes("8b") == 512 // gpus // build_config("8b").training.micro_batch_size


def test_a_stopped_suite_stops_its_command_and_removes_its_directory(tmp_path: Path) -> None:
    # The suite, stopped with SIGTERM while a command runs: the command ends, and nothing
    # the suite handed out (its scratch directory, the commands' TMPDIR) is left.
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.gpu_suite", "--allow-cpu"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("hptrain-gpu-suite-*/tmp/*")) and time.monotonic() < deadline:
        time.sleep(0.2)  # until the first command has written into its TMPDIR
    assert list(tmp_path.glob("hptrain-gpu-suite-*/tmp/*")), "the first command wrote nothing"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) != 0
    assert list(tmp_path.iterdir()) == []
