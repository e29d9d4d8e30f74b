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
    outcome, _ = launcher._supervise(deadline=math.inf)
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
