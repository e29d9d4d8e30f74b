"""In-process recovery end to end on CPU (gloo): 4 ranks as 2 replicas x 2 shards of the tiny
model, with the trainer's model, HSDP sharding, optimizer, schedule and data, run by the
supervisor that replaces a dead rank (training/recovery/supervisor.py). The runs have no
checkpoint tier at all, so a run that recovers read its state from a peer or nowhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training.recovery import record
from training.recovery.supervisor import SupervisedRun, Supervisor

pytestmark = pytest.mark.slow

WORLD = 4
STEPS = 5
# Mesh [[0, 1], [2, 3]]: replica groups {0, 2} and {1, 3}; ranks 1 and 3 hold the same shard.
OVERRIDES = ("training.steps=5", "parallel.dp_replicate=2", "parallel.dp_shard=2")


def _run(out: Path, faults: dict[str, Any] | None = None) -> SupervisedRun:
    argv = ["-m", "training.recovery.worker", "--out", str(out)]
    argv += ["--collective-s", "5", "--vote-s", "30", "--rendezvous-s", "40"]
    for o in OVERRIDES:
        argv += ["--set", o]
    supervisor = Supervisor(
        argv,
        WORLD,
        out / "logs",
        max_replacements=3,
        timeout_s=240,
        test_faults=json.dumps(faults) if faults else "",
    )
    return supervisor.run()


def _rank_results(out: Path) -> dict[int, dict[str, Any]]:
    return {
        int(p.stem.removeprefix("rank")): json.loads(p.read_text()) for p in out.glob("rank*.json")
    }


def _logs(out: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted((out / "logs").glob("*.log")))


@pytest.fixture(scope="module")
def unbroken_digest(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("unbroken")
    result = _run(out)
    assert result.outcome == "ok", _logs(out)
    digest = _rank_results(out)[0]["final_params_sha256"]
    assert isinstance(digest, str)
    return digest


def test_a_killed_rank_is_replaced_from_its_peer_and_the_run_is_bit_exact(
    tmp_path: Path, unbroken_digest: str
) -> None:
    result = _run(tmp_path, {"kill": [[1, 3]]})
    assert result.outcome == "ok", _logs(tmp_path)
    ranks = _rank_results(tmp_path)
    assert ranks[0]["final_params_sha256"] == unbroken_digest
    # The survivors kept their processes; rank 1 is a new one.
    for rank in (0, 2, 3):
        assert result.pids[rank] == [ranks[rank]["pid"]]
        assert ranks[rank]["role"] == "initial"
    assert len(result.pids[1]) == 2 and ranks[1]["role"] == "replacement"
    (rec,) = record.read(tmp_path)
    assert (rec.kind, rec.state_source, rec.replaced_ranks) == ("in_process", "peer", [1])
    # The kill came between backward and update of step 3: step 2 was the boundary.
    assert (rec.failed_step, rec.resumed_step) == (3, 2)
    assert set(rec.phases_s) == set(record.PHASES)
    assert all(ranks[r]["steps"] == STEPS for r in range(WORLD))


def test_a_shard_lost_on_every_replica_falls_back_with_one_line(tmp_path: Path) -> None:
    # Ranks 1 and 3 are both replicas of one shard.
    result = _run(tmp_path, {"kill": [[1, 3], [3, 3]]})
    assert result.outcome == "fallback", _logs(tmp_path)
    lines = [ln for ln in _logs(tmp_path).splitlines() if ln.startswith("error: ")]
    assert lines and all("no intact peer" in ln for ln in lines)
    assert record.read(tmp_path) == []


def test_a_kill_during_the_state_transfer_recovers_or_falls_back_never_restarts_from_zero(
    tmp_path: Path, unbroken_digest: str
) -> None:
    # Rank 2 dies as generation 1 starts its transfer; rank 0 still holds their shard.
    result = _run(tmp_path, {"kill": [[1, 3]], "kill_in_transfer": [2, 1]})
    assert result.outcome in ("ok", "fallback"), _logs(tmp_path)
    if result.outcome == "fallback":
        assert "falling back to a checkpoint tier" in _logs(tmp_path)
        return
    ranks = _rank_results(tmp_path)
    assert ranks[0]["final_params_sha256"] == unbroken_digest
    assert result.pids[0] == [ranks[0]["pid"]] and result.pids[3] == [ranks[3]["pid"]]
    recs = record.read(tmp_path)
    assert recs and all(r.kind == "in_process" and r.resumed_step == 2 for r in recs)
    assert sorted(recs[-1].replaced_ranks) == [1, 2]
