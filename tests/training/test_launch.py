"""The local launcher's supervision of one attempt, with stand-in rank processes: which exits
take the group down and which the launcher waits out."""

from __future__ import annotations

import math
import signal
import subprocess
from pathlib import Path
from typing import cast

import pytest

from training.cli import UNSAVED_EXIT_CODE
from training.launch import Launcher
from training.launch_options import parse_args


class _Rank:
    """A rank as the launcher polls it: running for `running_polls` polls, then exited."""

    pid = -1

    def __init__(self, code: int, running_polls: int) -> None:
        self.code, self.running_polls = code, running_polls
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.running_polls > 0:
            self.running_polls -= 1
            return None
        self.returncode = self.code
        return self.code


def _supervise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ranks: list[_Rank]
) -> tuple[str, list[int]]:
    """The attempt's outcome and the signals sent to the whole group."""
    args, cfg, train_argv = parse_args(["--out", str(tmp_path), "--nproc", str(len(ranks))])
    launcher = Launcher(args, cfg, train_argv)
    launcher.procs = cast(list[subprocess.Popen[bytes]], ranks)
    group_signals: list[int] = []
    monkeypatch.setattr(launcher, "_kill_group", group_signals.append)
    outcome, _ = launcher._supervise(math.inf, lambda _rank: False)
    return outcome, group_signals


def test_the_peers_of_a_rank_whose_final_save_failed_exit_on_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rank 0 is out first; rank 1 is past the final barrier too, still on its way out.
    ranks = [_Rank(UNSAVED_EXIT_CODE, 0), _Rank(UNSAVED_EXIT_CODE, 3)]
    outcome, group_signals = _supervise(tmp_path, monkeypatch, ranks)
    assert group_signals == []
    assert [r.returncode for r in ranks] == [UNSAVED_EXIT_CODE, UNSAVED_EXIT_CODE]
    assert outcome == "failed"


def test_ranks_that_all_end_in_order_are_a_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranks = [_Rank(0, 0), _Rank(0, 2)]
    assert _supervise(tmp_path, monkeypatch, ranks) == ("ok", [])


@pytest.mark.parametrize("code", [1, 3, 4, -9])
def test_a_crashed_rank_takes_its_group_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    # The peer would run on forever: stuck in a collective with the rank that is gone.
    ranks = [_Rank(0, 10**9), _Rank(code, 1)]
    assert _supervise(tmp_path, monkeypatch, ranks) == ("failed", [signal.SIGKILL])


IN_PROCESS = [
    "--set",
    "fault.recovery=in_process",
    "--set",
    "parallel.dp_replicate=2",
    "--max-restarts",
    "1",
]


def _in_process_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Launcher, list[tuple[int, str]]]:
    """A launcher of 2 ranks under in-process recovery whose spawns are stand-ins that run
    on, and the (rank, role) of each spawn."""
    args, cfg, train_argv = parse_args(["--out", str(tmp_path), "--nproc", "2", *IN_PROCESS])
    launcher = Launcher(args, cfg, train_argv)
    spawned: list[tuple[int, str]] = []

    def spawn(rank: int, port: int, attempt: int, role: str = "initial") -> _Rank:
        spawned.append((rank, role))
        return _Rank(0, 3)

    monkeypatch.setattr(launcher, "_spawn", spawn)
    monkeypatch.setattr(launcher, "_start_pump", lambda proc, log: None)
    monkeypatch.setattr(launcher, "_kill_group", lambda sig: None)
    launcher.pids = [[100], [101]]
    return launcher, spawned


def _ranks(*ranks: _Rank) -> list[subprocess.Popen[bytes]]:
    return cast(list[subprocess.Popen[bytes]], list(ranks))


def test_in_process_a_lost_rank_is_replaced_and_its_peer_runs_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher, spawned = _in_process_launcher(tmp_path, monkeypatch)
    peer = _Rank(0, 6)
    launcher.procs = _ranks(peer, _Rank(-9, 1))
    with open(tmp_path / "log", "w") as log:
        outcome, _ = launcher._supervise(math.inf, lambda rank: launcher._replace(rank, 0, 0, log))
    assert outcome == "ok"
    assert spawned == [(1, "replacement")]
    assert launcher.procs[0] is cast(subprocess.Popen[bytes], peer)
    assert [(r["rank"], r["exit_code"]) for r in launcher.replacements] == [(1, -9)]


@pytest.mark.parametrize("code", [2, 6])
def test_in_process_bad_input_or_a_fallback_is_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    # 2: a replacement would fail the same way; 6: the recovery gave way to a tier restart.
    launcher, spawned = _in_process_launcher(tmp_path, monkeypatch)
    launcher.procs = _ranks(_Rank(0, 10**9), _Rank(code, 0))
    launcher.procs[1].poll()
    with open(tmp_path / "log", "w") as log:
        assert launcher._replace(1, 0, 0, log) is False
    assert spawned == []


def test_in_process_replacements_are_bounded_by_max_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher, spawned = _in_process_launcher(tmp_path, monkeypatch)
    launcher.procs = _ranks(_Rank(-9, 0), _Rank(-9, 0))
    for proc in launcher.procs:
        proc.poll()
    with open(tmp_path / "log", "w") as log:
        assert launcher._replace(0, 0, 0, log) is True
        assert launcher._replace(1, 0, 0, log) is False  # --max-restarts 1
    assert spawned == [(0, "replacement")]
