"""The agreements of in-process recovery (training/recovery), in one process: a real TCPStore,
ranks as threads, no process group."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch
import torch.distributed as dist

from training.recovery import record, transfer
from training.recovery.coordination import (
    Coordinator,
    Decision,
    Heartbeat,
    Member,
    RecoveryFallbackError,
    connect_store,
)

WORLD = 4


_SERVERS: list[dist.TCPStore] = []


def _coordinators(*, silence_s: float = 10.0, rendezvous_s: float = 10.0) -> list[Coordinator]:
    """One coordinator per rank, each with its own connection (a client blocks while it
    waits), all on one store server, as the ranks and the launcher are."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = dist.TCPStore(
        "127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10)
    )
    _SERVERS.append(server)  # kept alive for the module's tests
    return [
        Coordinator(
            connect_store(f"127.0.0.1:{port}", 10.0),
            "attempt0",
            r,
            WORLD,
            silence_s=silence_s,
            rendezvous_timeout_s=rendezvous_s,
        )
        for r in range(WORLD)
    ]


def _latest_port() -> int:
    """The port of the store server the last `_coordinators` call started."""
    return _SERVERS[-1].port


def _on_threads(fns: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(fns)

    def run(i: int) -> None:
        try:
            results[i] = fns[i]()
        except Exception as e:  # noqa: BLE001 - returned to the test to assert on
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return results


def test_a_step_commits_when_every_rank_votes_ok_and_all_see_the_same_losses() -> None:
    coords = _coordinators()
    decisions = _on_threads(
        [lambda c=c: c.decide(0, 1, ok=True, stop=c.rank == 2, loss=float(c.rank)) for c in coords]
    )
    assert all(isinstance(d, Decision) and d.commit for d in decisions)
    assert {d.losses for d in decisions} == {(0.0, 1.0, 2.0, 3.0)}
    # One rank's stop request reaches every rank with the step.
    assert all(d.stop for d in decisions)


def test_one_failed_rank_makes_every_rank_discard_the_step() -> None:
    coords = _coordinators()
    decisions = _on_threads(
        [lambda c=c: c.decide(0, 1, ok=c.rank != 1, stop=False, loss=0.0) for c in coords]
    )
    assert [d.commit for d in decisions] == [False] * WORLD


def test_a_rank_that_never_votes_and_never_beats_makes_the_others_discard_the_step() -> None:
    coords = _coordinators(silence_s=0.5)
    decisions = _on_threads(
        [lambda c=c: c.decide(0, 1, ok=True, stop=False, loss=0.0) for c in coords[:3]]
    )
    assert [d.commit for d in decisions] == [False] * 3


def test_a_slow_rank_whose_heartbeat_goes_on_is_waited_for() -> None:
    coords = _coordinators(silence_s=0.5)
    # Rank 3's step takes six times the silence allowed, but its heartbeat goes on.
    store = connect_store(f"127.0.0.1:{_latest_port()}", 10.0)
    beat = Heartbeat(store, "attempt0", 3, period_s=0.05)

    def slow_vote() -> Decision:
        time.sleep(3.0)
        return coords[3].decide(0, 1, ok=True, stop=False, loss=3.0)

    try:
        decisions = _on_threads(
            [lambda c=c: c.decide(0, 1, ok=True, stop=False, loss=0.0) for c in coords[:3]]
            + [slow_vote]
        )
    finally:
        beat.stop()
    assert [d.commit for d in decisions] == [True] * WORLD


def test_a_loss_announced_by_a_replacement_ends_the_vote_without_waiting_out_the_silence() -> None:
    # Rank 3 died before it voted; the silence allowed is longer than the threads are given.
    coords = _coordinators(silence_s=120.0)
    store = connect_store(f"127.0.0.1:{_latest_port()}", 10.0)
    beat = Heartbeat(store, "attempt0", 0, period_s=0.05)
    beat.watch(0, 1, coords[0].losses())
    try:
        decisions = _on_threads(
            [lambda c=c: c.decide(0, 1, ok=True, stop=False, loss=0.0) for c in coords[:3]]
            + [coords[3].announce_loss]
        )
    finally:
        beat.stop()
    assert [d.commit for d in decisions[:3]] == [False] * 3


def test_a_loss_announced_before_the_generation_formed_does_not_end_its_votes() -> None:
    coords = _coordinators()
    # The replacement announced its loss, then joined: the generation counts it.
    coords[1].announce_loss()
    store = connect_store(f"127.0.0.1:{_latest_port()}", 10.0)
    beat = Heartbeat(store, "attempt0", 0, period_s=0.05)
    beat.watch(1, 1, coords[0].losses())
    try:
        decisions = _on_threads(
            [lambda c=c: c.decide(1, 1, ok=True, stop=False, loss=0.0) for c in coords]
        )
    finally:
        beat.stop()
    assert [d.commit for d in decisions] == [True] * WORLD


def test_a_decision_once_written_is_the_one_every_rank_adopts() -> None:
    coords = _coordinators(silence_s=0.5)
    # Ranks 0-2 see rank 3 silent (abort); rank 3 votes last, after the decision exists: it
    # adopts it.
    first = _on_threads(
        [lambda c=c: c.decide(0, 1, ok=True, stop=False, loss=0.0) for c in coords[:3]]
    )
    last = coords[3].decide(0, 1, ok=True, stop=False, loss=0.0)
    assert [d.commit for d in first] == [False] * 3
    assert last.commit is False


def test_a_replacement_joins_the_generation_the_survivors_form() -> None:
    coords = _coordinators()
    survivor, replacement = coords[0], coords[1]
    assert survivor.current_generation() == 0
    # Generation 0 formed with the dead rank: the replacement must not join it.
    survivor.store.set("g0/formed", "1")
    assert replacement.generation_for_replacement() == 1
    # The survivors, arriving later, ask for the same successor and land in it too.
    assert survivor.next_generation(0) == 1
    # A replacement that finds the new generation still forming joins it.
    assert coords[2].generation_for_replacement() == 1


def test_rendezvous_returns_every_member_in_rank_order() -> None:
    coords = _coordinators()
    members = _on_threads(
        [lambda c=c: c.join(1, Member(c.rank, 100 + c.rank, c.rank != 2, 5)) for c in coords]
    )
    assert all(m == members[0] for m in members)
    assert [m.rank for m in members[0]] == [0, 1, 2, 3]
    assert [m.intact for m in members[0]] == [True, True, False, True]


def test_a_replacement_that_does_not_arrive_is_one_line_naming_the_rank_and_the_setting() -> None:
    coords = _coordinators(rendezvous_s=0.3)
    results = _on_threads([lambda c=c: c.join(1, Member(c.rank, 1, True, 5)) for c in coords[:3]])
    assert all(isinstance(r, RecoveryFallbackError) for r in results)
    message = str(results[0])
    assert "rank(s) [3]" in message and "fault.recovery_rendezvous_s" in message
    assert "\n" not in message


def _mesh(layout: list[list[int]], names: tuple[str, ...]) -> Any:
    return cast(Any, SimpleNamespace(mesh=torch.tensor(layout), mesh_dim_names=names))


def test_replica_groups_are_the_ranks_that_share_a_shard() -> None:
    mesh = _mesh([[0, 1], [2, 3]], ("dp_replicate", "dp_shard"))
    assert transfer.replica_groups(mesh) == [[0, 2], [1, 3]]
    assert transfer.replica_groups(_mesh([[0, 1, 2, 3]], ("dp_shard",))) == [[0], [1], [2], [3]]


def _members(intact: dict[int, bool], step: int = 7) -> list[Member]:
    return [Member(r, 1, ok, step if ok else -1) for r, ok in sorted(intact.items())]


def test_the_plan_sends_from_the_lowest_intact_replica_to_its_group_only() -> None:
    groups = [[0, 2], [1, 3]]
    members = _members({0: True, 1: False, 2: True, 3: True})
    # Shards within the replica group; the train state from the lowest intact rank to all.
    assert transfer.plan(members, groups, 1) == transfer.TransferPlan((1, 3), 3, 7, 0)
    assert transfer.plan(members, groups, 3) == transfer.TransferPlan((1, 3), 3, 7, 0)
    # The other group is whole: nothing to send there.
    assert transfer.plan(members, groups, 0) == transfer.TransferPlan((0, 2), None, 7, 0)
    lost_zero = _members({0: False, 1: True, 2: True, 3: True})
    assert transfer.plan(lost_zero, groups, 0) == transfer.TransferPlan((0, 2), 2, 7, 1)


def test_a_shard_lost_on_every_replica_falls_back_with_one_line() -> None:
    members = _members({0: True, 1: False, 2: True, 3: False})
    with pytest.raises(RecoveryFallbackError, match=r"ranks \[1, 3\].*no intact peer") as err:
        transfer.plan(members, [[0, 2], [1, 3]], 0)
    assert "\n" not in str(err.value)


def test_intact_ranks_at_different_steps_fall_back() -> None:
    members = [Member(0, 1, True, 7), Member(1, 1, True, 8)]
    with pytest.raises(RecoveryFallbackError, match=r"different steps \[7, 8\]"):
        transfer.plan(members, [[0, 1]], 0)


def test_state_tensors_cover_parameters_then_optimizer_state_and_copy_back() -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    tensors = transfer.state_tensors(optimizer)
    # weight, bias; then per parameter: exp_avg, exp_avg_sq, step.
    assert len(tensors) == 2 + 2 * 3
    snapshot = [t.clone() for t in tensors]
    # As FSDP does in forward and backward: another tensor registered on the module. The
    # shards are the optimizer's parameters, still.
    model.weight = torch.nn.Parameter(torch.zeros(2, 3))
    assert all(
        torch.equal(a, b) for a, b in zip(transfer.state_tensors(optimizer), snapshot, strict=True)
    )
    other = torch.nn.Linear(3, 2)
    other_opt = torch.optim.AdamW(other.parameters())
    other(torch.ones(1, 3)).sum().backward()
    other_opt.step()
    transfer.copy_into(transfer.state_tensors(other_opt), snapshot)
    for got, want in zip(transfer.state_tensors(other_opt), snapshot, strict=True):
        assert torch.equal(got, want)


def test_records_round_trip_and_join_the_restarts_in_the_summary(tmp_path: Path) -> None:
    rec = record.RecoveryRecord(
        kind="in_process",
        state_source="peer",
        attempt=1,
        generation=1,
        failed_step=3,
        resumed_step=2,
        replaced_ranks=[1],
        started_unix=1.0,
        phases_s={"detect": 0.5, "abort": 0.25, "rendezvous": 2.0, "state_transfer": 1.0},
    )
    record.append(tmp_path, rec)
    assert record.read(tmp_path) == [rec]
    restart = {"kind": "restart", "state_source": "fast", "attempt": 1, "steps_lost": 2}
    entries = record.summary_entries([restart], tmp_path)
    # The restart that began attempt 1 comes before attempt 1's in-process recovery.
    assert entries[0] is restart
    assert {k: entries[1][k] for k in ("kind", "state_source", "steps_lost", "recovery_s")} == {
        "kind": "in_process",
        "state_source": "peer",
        "steps_lost": 0,
        "recovery_s": 3.75,
    }
