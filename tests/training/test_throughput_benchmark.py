"""benchmarks/training_throughput.py on CPU: the trainer's overrides reach the measured run,
and its JSON line says what was measured, with what torch, on which device."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from training.model import flops_per_token
from training.presets import build_config

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "training_throughput.py"
# The tests share one benchmark run (a module fixture): on one worker.
pytestmark = pytest.mark.xdist_group("throughput_benchmark")


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--preset", "tiny", "--allow-cpu", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


SETS = ["parallel.activation_checkpoint=every:2", "training.loss_chunk_tokens=100"]


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    """One run's JSON line: 3 accumulated passes of the preset's default micro-batch per
    optimizer step, with trainer overrides."""
    result = _run(
        *("--warmup", "0", "--steps", "1", "--passes", "3"),
        *[a for s in SETS for a in ("--set", s)],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
    out: dict[str, Any] = json.loads(line)
    return out


def test_set_overrides_reach_the_run_and_the_json(measured: dict[str, Any]) -> None:
    out = measured
    assert out["set"] == SETS
    assert out["overrides"][-2:] == SETS  # applied last: they win over the harness's
    assert out["activation_checkpoint"] == "every:2" and out["loss_chunk_tokens"] == 100
    assert out["torch"] == torch.__version__ and out["device"] == "cpu" and out["cuda"] is None
    assert out["tokens_per_s_per_gpu"] > 0 and out["mfu"] is None
    assert out["mfu_embedding_counted"] is None and out["max_memory_reserved_gb"] is None
    assert out["mfu_basis"] == "bf16" and out["float8"] is False
    assert out["first_step_s"] > 0 and out["first_step_over_steady"] > 0
    # The forward/backward and update peaks are GPU figures: named, empty on CPU.
    assert out["forward_backward_peak_allocated_gb"] is None
    assert out["update_peak_allocated_gb"] is None
    tiny = build_config("tiny", SETS)
    assert out["model_flops_per_token"] == flops_per_token(tiny.model, tiny.training.seq_len)
    # The command reproduces the figure: the same flags and overrides.
    command = shlex.split(out["command"])
    assert command[1] == "benchmarks/training_throughput.py"
    assert command[command.index("--preset") + 1] == "tiny"
    assert [command[i + 1] for i, a in enumerate(command) if a == "--set"] == SETS


def test_passes_accumulate_into_one_optimizer_step(measured: dict[str, Any]) -> None:
    out = measured
    # Without --micro-batch: the tiny preset sets none, so 2 sequences a pass.
    assert out["micro_batch_per_gpu"] == 2 and out["passes_per_step"] == 3
    assert out["sequences_per_gpu_per_step"] == 6
    assert "training.global_batch_size=6" in out["overrides"]
    command = shlex.split(out["command"])
    assert command[command.index("--passes") + 1] == "3"
    assert command[command.index("--micro-batch") + 1] == "2"


def _refused(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    """The benchmark's main, run here (bad arguments end it before it takes a rank's
    environment): its error lines, once its exit code is 2."""
    from benchmarks.training_throughput import main

    rank_env = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    before = {name: os.environ.get(name) for name in rank_env}
    assert main(["--preset", "tiny", "--allow-cpu", *args]) == 2
    assert {name: os.environ.get(name) for name in rank_env} == before
    return capsys.readouterr().err.strip().splitlines()


def test_a_bad_override_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert _refused(capsys, "--set", "parallel.activation_checkpoint=sometimes") == [
        "error: parallel.activation_checkpoint must be none, all, every:K or first:N "
        "(K, N >= 1), got 'sometimes'"
    ]


def test_passes_below_one_are_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert _refused(capsys, "--passes", "0") == ["error: --passes must be at least 1, got 0"]


def test_h100_variants_get_their_own_peaks() -> None:
    from benchmarks.gpu import peak_bf16

    assert peak_bf16("NVIDIA H100 80GB HBM3") == 989e12  # SXM
    assert peak_bf16("NVIDIA H100 PCIe") == 756e12
    assert peak_bf16("NVIDIA H100 NVL") == 835e12
    assert peak_bf16("NVIDIA H200") == 989e12
    assert peak_bf16("cpu") is None


@pytest.mark.slow
def test_compiled_code_is_kept_where_the_job_environment_says(tmp_path: Path) -> None:
    # HPTRAIN_COMPILE_CACHE_DIR (parallel.compile_cache_dir): Inductor's caches land there,
    # where a restarted process on the node finds them.
    cache = tmp_path / "compile-cache"
    result = _run(
        *("--warmup", "0", "--steps", "1", "--set", "parallel.compile=true"),
        *("--set", "model.n_layers=1"),  # one block: what is compiled, not how much, is checked
        # Inductor compiles in this process: no pool of compile workers, each importing torch.
        env={"HPTRAIN_COMPILE_CACHE_DIR": str(cache), "TORCHINDUCTOR_COMPILE_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
    assert json.loads(line)["compile_cache_dir"] == str(cache)
    assert any(p.is_file() for p in cache.rglob("*")), "nothing compiled was kept there"
