"""Tensor parallelism end to end on CPU (gloo) through the local launcher: TP=2 trains the
model TP=1 trains, and a checkpoint written under one (tp x dp) layout resumes under another.

Tolerances (fp32): tensor parallelism splits each matmul's reduction over ranks and sums the
parts in another order, so results differ from TP=1 in the last bits, and ten Adam steps
carry that forward. Losses must agree to LOSS_TOL (the step line prints 4 decimals, so this
is a couple of units in the last printed digit) and the final parameters to PARAM_TOL
(element-wise, absolute). A wrong split (heads, a missing reduction, a doubled gradient)
moves the loss by far more from the first step on.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.training.conftest import LaunchResult, launch, read_sample_trace, step_losses
from training.data import SAMPLE_TRACE_ENV

# The module's runs are shared: keep its tests on one xdist worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tensor_parallel")]

LOSS_TOL = 2e-4
PARAM_TOL = 1e-4
STEPS = 10
# One thread per rank: four ranks on a small machine, and a fixed reduction split.
THREADS = "training.cpu_threads=1"


def _ok(r: LaunchResult) -> None:
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def _final_params(r: LaunchResult) -> dict[str, torch.Tensor]:
    params: dict[str, torch.Tensor] = torch.load(r.out / "final" / "model.pt")
    return params


@pytest.fixture(scope="module")
def tp1_run(tmp_path_factory: pytest.TempPathFactory) -> LaunchResult:
    r = launch(tmp_path_factory.mktemp("tp1"), steps=STEPS, overrides=[THREADS, "parallel.tp=1"])
    _ok(r)
    return r


def test_tp2_trains_the_model_tp1_trains(tp1_run: LaunchResult, tmp_path: Path) -> None:
    trace = tmp_path / "samples"
    # A chunked loss asked for gives way to the vocabulary-parallel one, and rank 0 says so.
    tp2 = launch(
        tmp_path / "run",
        steps=STEPS,
        overrides=[THREADS, "parallel.tp=2", "training.loss_chunk_tokens=16"],
        env={SAMPLE_TRACE_ENV: str(trace)},
    )
    _ok(tp2)
    notice = (
        "hptrain: parallel.tp=2: the loss is vocabulary-parallel; "
        "training.loss_chunk_tokens=16 applies without tensor parallelism only"
    )
    assert tp2.stdout.splitlines().count(notice) == 1
    want, got = step_losses(tp1_run), step_losses(tp2)
    assert sorted(got) == list(range(1, STEPS + 1))
    for step, loss in want.items():
        assert got[step] == pytest.approx(loss, abs=LOSS_TOL), step
    assert got[STEPS] < got[1]  # it trained
    params_tp1, params_tp2 = _final_params(tp1_run), _final_params(tp2)
    assert params_tp2.keys() == params_tp1.keys()
    for name, p in params_tp1.items():
        # The export is the full tensor: the TP shards were put back together.
        assert params_tp2[name].shape == p.shape, name
        torch.testing.assert_close(params_tp2[name], p, rtol=0, atol=PARAM_TOL, msg=name)
    # One tensor-parallel group of two ranks: both read the whole batch, the same samples.
    reads = read_sample_trace(trace)
    by_rank = {rank: [r["indices"] for r in reads if r["rank"] == rank] for rank in (0, 1)}
    assert len(by_rank[0]) == STEPS and by_rank[0] == by_rank[1]
    assert {r["dp_rank"] for r in reads} == {0}
    assert by_rank[0][0] == list(range(8))  # tiny's global batch of 8, one data-parallel rank


def test_tp_config_the_world_cannot_split_is_refused_before_training(tmp_path: Path) -> None:
    r = launch(tmp_path, steps=2, nproc=2, overrides=["parallel.tp=4"])
    assert r.returncode == 2
    assert "parallel.tp=4 must divide model.n_heads=4 and the key/value heads (2)" in r.stderr


@pytest.fixture(scope="module")
def reference_4_ranks(tmp_path_factory: pytest.TempPathFactory) -> LaunchResult:
    """tp=2 x dp=2 for 8 steps without a break."""
    r = launch(
        tmp_path_factory.mktemp("tp2dp2"),
        steps=8,
        nproc=4,
        overrides=[THREADS, "parallel.tp=2"],
        timeout=240,
    )
    _ok(r)
    return r


def _resume_from(run: LaunchResult, tier: str, step: int, out: Path) -> Path:
    """A run directory holding only `run`'s checkpoint of `step`: a job resumes from it."""
    name = f"step_{step:08d}"
    shutil.copytree(run.out / "ckpt" / tier / name, out / "ckpt" / tier / name)
    return out


@pytest.fixture(scope="module")
def resumed_at_tp1(
    reference_4_ranks: LaunchResult, tmp_path_factory: pytest.TempPathFactory
) -> LaunchResult:
    """The reference's step-4 checkpoint (tp=2 x dp=2) resumed at tp=1 x dp=4 to step 8,
    with a checkpoint at step 6 (under this layout) for the way back."""
    out = _resume_from(reference_4_ranks, "fast", 4, tmp_path_factory.mktemp("tp2to1"))
    r = launch(
        out,
        steps=8,
        nproc=4,
        overrides=[THREADS, "parallel.tp=1", "checkpoint.fast_interval=2"],
        timeout=240,
    )
    _ok(r)
    return r


def _assert_resumed(r: LaunchResult, reference: LaunchResult, change: str, step: int) -> None:
    # DCP resharded every parameter and optimizer moment from one layout to the other.
    assert f"parallel.tp {change} (allowed" in r.stdout
    losses, want = step_losses(r), step_losses(reference)
    assert sorted(losses) == list(range(step + 1, 9))  # resumed at the checkpoint of `step`
    for s, loss in losses.items():
        assert loss == pytest.approx(want[s], abs=LOSS_TOL), s


def test_a_checkpoint_written_at_tp2_resumes_at_tp1(
    resumed_at_tp1: LaunchResult, reference_4_ranks: LaunchResult
) -> None:
    _assert_resumed(resumed_at_tp1, reference_4_ranks, "2 -> 1", 4)


def test_a_checkpoint_written_at_tp1_resumes_at_tp2(
    resumed_at_tp1: LaunchResult, reference_4_ranks: LaunchResult, tmp_path: Path
) -> None:
    out = _resume_from(resumed_at_tp1, "fast", 6, tmp_path)
    r = launch(out, steps=8, nproc=4, overrides=[THREADS, "parallel.tp=2"], timeout=240)
    _ok(r)
    _assert_resumed(r, reference_4_ranks, "1 -> 2", 6)


def test_hsdp_with_tensor_parallelism_trains_the_same_model(
    reference_4_ranks: LaunchResult, tmp_path: Path
) -> None:
    # A (dp_replicate=2, dp_shard=1, tp=2) mesh: HSDP over the data-parallel sub-mesh, TP
    # inside. Step 6's loss follows the updates of steps 1-5, all in the 5-step warm-up, whose
    # learning rates do not depend on training.steps: the 8-step reference's losses apply.
    r = launch(
        tmp_path,
        steps=6,
        nproc=4,
        overrides=[THREADS, "parallel.tp=2", "parallel.dp_replicate=2"],
        timeout=240,
    )
    _ok(r)
    got, want = step_losses(r), step_losses(reference_4_ranks)
    assert sorted(got) == list(range(1, 7))
    for step, loss in got.items():
        assert loss == pytest.approx(want[step], abs=LOSS_TOL), step
