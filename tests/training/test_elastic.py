"""Elastic resize end to end on CPU (gloo): 2 ranks train, a scaling event (SIGUSR1, as
HyperPod's elastic agent sends it) stops them with a checkpoint, 4 ranks resume, another event,
2 ranks resume and finish. Each launch is one world size, as the training operator restarts
the job's workers at a new size.

Checked against the shared fault-free run at a fixed size of 2 ranks (same steps, so the same
schedule): no sample is read twice or skipped (the ranks' sample traces cover the job's sample
positions exactly once), the global batch stays 8 with the per-rank share and accumulation
adjusted, each resize is logged once, and the losses stay within LOSS_TOL (fp32: the
reference takes each rank's 4 sequences in one pass, here 2 ranks accumulate two passes of 2
and 4 ranks reduce over more ranks, so sums run in another order; the step line has 4
decimals).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.training import loglines
from tests.training.conftest import STEPS, LaunchResult, launch, read_sample_trace, step_losses
from training.data import SAMPLE_TRACE_ENV
from training.metrics import RESIZE_FMT

# The module's resized run is shared: keep its tests on one xdist worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("elastic")]

LOSS_TOL = 2e-3
BATCH = 8
# World size and the step of the scaling event that ends each launch (None: to the end).
# Most steps at 2 ranks: four ranks on a small machine are the slow part.
SIZES = ((2, 8), (4, 16), (2, None))
# Two sequences per pass: 4 ranks run one pass of 2, 2 ranks two passes of 2.
OVERRIDES = ["training.cpu_threads=1", "training.micro_batch_size=2"]
RESIZE = loglines.line_pattern(RESIZE_FMT)


def _ok(r: LaunchResult) -> None:
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


@dataclass(frozen=True)
class Resized:
    runs: list[LaunchResult]
    # Each launch's summary.json as it left it (the next launch rewrites the file).
    summaries: list[dict[str, Any]]
    trace: Path


@pytest.fixture(scope="module")
def resized(tmp_path_factory: pytest.TempPathFactory) -> Resized:
    """2 ranks to step 8, 4 ranks to step 16, 2 ranks to the end; a scaling event ends each
    of the first two."""
    out = tmp_path_factory.mktemp("elastic")
    trace = out / "samples"
    runs: list[LaunchResult] = []
    summaries: list[dict[str, Any]] = []
    for nproc, event in SIZES:
        extra = ["--scale-event-at-step", str(event)] if event else []
        r = launch(
            out / "run",
            *extra,
            steps=STEPS,
            nproc=nproc,
            overrides=OVERRIDES,
            env={SAMPLE_TRACE_ENV: str(trace)},
            timeout=240,
        )
        _ok(r)
        runs.append(r)
        summaries.append(r.summary)
    return Resized(runs, summaries, trace)


def test_a_scaling_event_saves_and_exits_cleanly_on_every_rank(resized: Resized) -> None:
    runs, summaries = resized.runs, resized.summaries
    for r, summary, (nproc, stop) in zip(runs, summaries, SIZES[:2], strict=False):
        assert summary["launcher"]["attempts"][0]["exit_codes"] == [0] * nproc
        # Only rank 0 got the signal: the step's stop flag carried it to the others.
        assert max(step_losses(r)) == stop
        assert summary["exit_reason"] == "scale_event" and summary["steps"] == stop
        statuses = loglines.checkpoint_statuses(r.stdout, step=str(stop), tier="durable")
        assert statuses == ["started", "committed"]
    assert summaries[2]["exit_reason"] == "completed" and summaries[2]["steps"] == STEPS
    assert summaries[2]["restarts"] == 2  # the job's: two resizes


def test_each_resize_is_logged_once_with_the_same_global_batch(resized: Resized) -> None:
    runs = resized.runs
    assert loglines.find(RESIZE, runs[0].stdout) == []
    expected = [
        ("2", "4", "2", "4", "8", "64", "2x1"),
        ("4", "2", "4", "2", "16", "128", "2x2"),
    ]
    for r, want in zip(runs[1:], expected, strict=True):
        lines = loglines.find(RESIZE, r.stdout)
        assert len(lines) == 1, r.stdout[-3000:]
        (line,) = lines
        assert line["batch"] == str(BATCH)
        fields = ("old_world", "world", "old_dp", "dp", "step", "position")
        got = (*(line[k] for k in fields), f"{line['micro']}x{line['passes']}")
        assert got == want
    starts = loglines.find(loglines.START, "".join(r.stdout for r in runs))
    assert {s["batch"] for s in starts} == {str(BATCH)}


def test_no_sample_is_repeated_or_skipped(resized: Resized) -> None:
    reads = read_sample_trace(resized.trace)
    # One record per rank and step: 2 x 8 + 4 x 8 + 2 x (STEPS - 16).
    assert len(reads) == 2 * 8 + 4 * 8 + 2 * (STEPS - 16)
    every = sorted(i for r in reads for i in r["indices"])
    assert every == list(range(STEPS * BATCH))
    # Each step's ranks read exactly the global batch at the job's position, each rank its
    # data-parallel share, whatever the world size.
    for r in reads:
        share = BATCH // r["world"]
        start = r["position"] + r["dp_rank"] * share
        assert r["indices"] == list(range(start, start + share)), r


def test_the_loss_curve_follows_the_fixed_size_run(
    resized: Resized, reference_run: LaunchResult
) -> None:
    want = step_losses(reference_run)
    got: dict[int, float] = {}
    for r in resized.runs:
        got.update(step_losses(r))
    assert sorted(got) == list(range(1, STEPS + 1))
    for step, loss in want.items():
        assert got[step] == pytest.approx(loss, abs=LOSS_TOL), step
    assert got[STEPS] < got[1]
