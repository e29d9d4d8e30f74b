"""In-process recovery end to end on CPU (gloo) through the launcher (training.launch): 4
ranks as 2 replicas x 2 shards of the tiny model, with checkpoint tiers configured. Mesh
[[0, 1], [2, 3]]: replica groups {0, 2} and {1, 3}; ranks 1 and 3 hold the same shard.

Every process notes each file it opens for reading under a tier (HPTRAIN_TRACE_TIER_READS,
training/faults.py), so "nothing was read from a tier" is observed, not inferred."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.training.conftest import LaunchResult, launch
from training.metrics_export import RECOVERY_PHASES
from training.recovery import FALLBACK_EXIT_CODE

pytestmark = pytest.mark.slow

STEPS = 6
MESH = ["parallel.dp_replicate=2", "parallel.dp_shard=2"]
# Fast checkpoints every 2 steps, durable every 4: a kill at step 3 finds step 2 in the fast
# tier. Short bounds: a lost peer is seen in seconds.
TIERS = ["checkpoint.fast_interval=2", "checkpoint.durable_interval=4"]
IN_PROCESS = [
    "fault.recovery=in_process",
    "fault.recovery_collective_s=5",
    "fault.recovery_silence_s=5",
    "fault.recovery_rendezvous_s=60",
]


def _run(out: Path, *faults: str, in_process: bool = True) -> tuple[LaunchResult, list[str]]:
    """The launch's result and every tier file any of its processes opened for reading."""
    reads = out / "tier-reads"
    reads.mkdir(parents=True)
    result = launch(
        out / "run",
        *faults,
        steps=STEPS,
        nproc=4,
        overrides=MESH + TIERS + (IN_PROCESS if in_process else []),
        timeout=280,
        env={"HPTRAIN_TRACE_TIER_READS": str(reads)},
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    return result, sorted(line for p in reads.iterdir() for line in p.read_text().splitlines())


@pytest.fixture(scope="module")
def unbroken_digest(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final parameters of a run without faults or in-process recovery."""
    result, _ = _run(tmp_path_factory.mktemp("unbroken"), in_process=False)
    digest = result.summary["final_params_sha256"]
    assert isinstance(digest, str)
    return digest


def _attempts(result: LaunchResult) -> list[dict[str, Any]]:
    attempts: list[dict[str, Any]] = result.summary["launcher"]["attempts"]
    return attempts


def test_a_killed_rank_is_replaced_from_its_peer_and_the_run_is_bit_exact(
    tmp_path: Path, unbroken_digest: str
) -> None:
    result, reads = _run(tmp_path, "--kill-rank", "1", "--kill-at-step", "3")
    s = result.summary
    assert s["final_params_sha256"] == unbroken_digest
    # One attempt: the survivors kept their processes; rank 1 is a new one.
    (attempt,) = _attempts(result)
    assert [len(pids) for pids in attempt["pids"]] == [1, 2, 1, 1]
    assert [(r["rank"], r["exit_code"]) for r in attempt["replacements"]] == [(1, -9)]
    assert s["restarts"] == 0
    (recovery,) = s["recoveries"]
    assert (recovery["kind"], recovery["state_source"]) == ("in_process", "peer")
    assert recovery["replaced_ranks"] == [1]
    # The kill came between backward and update of step 3: step 2 was the boundary.
    assert (recovery["resumed_step"], recovery["steps_lost"]) == (2, 0)
    assert set(recovery["phases_s"]) == set(RECOVERY_PHASES)
    # The run has tiers, and wrote to them; no process read a file from one.
    assert s["checkpoints_committed"] > 0
    assert reads == []


def test_a_shard_lost_on_every_replica_falls_back_to_a_tier_and_stays_bit_exact(
    tmp_path: Path, unbroken_digest: str
) -> None:
    result, reads = _run(tmp_path, "--kill-rank", "1", "--kill-rank", "3", "--kill-at-step", "3")
    s = result.summary
    assert s["final_params_sha256"] == unbroken_digest
    first, second = _attempts(result)
    assert first["exit_codes"] == [FALLBACK_EXIT_CODE] * 4
    # The restart started every rank afresh.
    assert all(len(pids) == 1 for pids in second["pids"])
    errors = [
        ln for ln in result.stderr.splitlines() + result.stdout.splitlines() if "error:" in ln
    ]
    assert errors and all("no intact peer" in ln for ln in errors)
    (recovery,) = s["recoveries"]
    assert (recovery["kind"], recovery["state_source"], recovery["resumed_step"]) == (
        "restart",
        "fast",
        2,
    )
    # The restart read its state from the fast tier.
    assert reads and all("/ckpt/fast/step_00000002/" in path for path in reads)


def test_a_kill_during_the_state_transfer_recovers_or_falls_back_and_stays_bit_exact(
    tmp_path: Path, unbroken_digest: str
) -> None:
    # Rank 2 dies as the first recovery starts its transfer; rank 0 still holds their shard.
    result, _ = _run(tmp_path, "--kill-rank", "1", "--kill-at-step", "3", "--kill-in-transfer", "2")
    s = result.summary
    assert s["final_params_sha256"] == unbroken_digest
    kinds = [(r["kind"], r["state_source"]) for r in s["recoveries"]]
    assert kinds in ([("in_process", "peer")], [("restart", "fast")]), kinds
    if kinds == [("in_process", "peer")]:
        assert sorted(s["recoveries"][0]["replaced_ranks"]) == [1, 2]
        (attempt,) = _attempts(result)
        assert [len(pids) for pids in attempt["pids"]] == [1, 2, 2, 1]
    else:
        assert "falling back to a checkpoint tier" in result.stdout + result.stderr


def test_in_process_recovery_without_a_replica_dimension_is_one_line(tmp_path: Path) -> None:
    result = launch(
        tmp_path, steps=STEPS, nproc=4, overrides=["fault.recovery=in_process"], timeout=60
    )
    assert result.returncode == 2
    (line,) = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert re.search(r"fault\.recovery=in_process needs parallel\.dp_replicate >= 2", line)
