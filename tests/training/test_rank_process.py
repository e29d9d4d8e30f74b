"""training/rank_process.py: a rank forked from the preloaded server behaves as a fresh
interpreter does for the launcher: its environment and command line, its output on one
stream, its exit code (negative when killed), its own session, and no life after its
launcher."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from training.rank_process import EXEC, FORKSERVER, START_METHODS, RankStarter, signal_group

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _waiting_rank_env() -> dict[str, str]:
    """Rank 0 of a world of 2 whose peer never comes: it waits at the rendezvous."""
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
    }


def _gone(pid: int, within_s: float) -> bool:
    """Whether process `pid` is gone (or a zombie) within `within_s`: a bound on a hang,
    not a speed."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("method", START_METHODS)
def test_a_rank_takes_its_environment_and_command_line_and_its_output_reaches_the_launcher(
    method: str, tmp_path: Path
) -> None:
    # The run directory comes from the environment and cannot be written: the trainer says
    # so in one line, naming the environment's path, and exits 2 (bad input).
    blocked = tmp_path / "file"
    blocked.write_text("")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HPTRAIN_RUN_DIR": str(blocked / "run")}
    rank = RankStarter(method).start(["--preset", "tiny"], env)
    output = rank.stdout.read().decode()
    assert rank.wait() == 2
    assert rank.returncode == 2
    assert output.startswith(f"error: cannot write to --out {blocked / 'run'}: "), output


@pytest.mark.slow
@pytest.mark.parametrize("method", START_METHODS)
def test_a_rank_has_its_own_session_and_a_signal_ends_it_with_that_signal(
    method: str, tmp_path: Path
) -> None:
    rank = RankStarter(method).start(
        ["--preset", "tiny", "--out", str(tmp_path)], _waiting_rank_env()
    )
    assert rank.poll() is None
    # Its own session once started (a forked rank makes it first thing).
    deadline = time.monotonic() + 60
    while os.getpgid(rank.pid) != rank.pid and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.getpgid(rank.pid) == rank.pid
    signal_group(rank, signal.SIGKILL)
    assert rank.wait() == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.parametrize("method", START_METHODS)
def test_a_rank_does_not_outlive_a_launcher_killed_with_sigkill(
    method: str, tmp_path: Path
) -> None:
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from training.rank_process import RankStarter\n"
            "from tests.training.test_rank_process import _waiting_rank_env\n"
            f"rank = RankStarter({method!r}).start(['--preset', 'tiny', '--out', {str(tmp_path)!r}],"
            " _waiting_rank_env())\n"
            "print(rank.pid, flush=True)\n"
            "rank.wait()\n",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert launcher.stdout is not None
    rank_pid = int(launcher.stdout.readline())
    assert not _gone(rank_pid, within_s=1)
    launcher.kill()
    launcher.wait()
    assert _gone(rank_pid, within_s=60), f"rank {rank_pid} outlived its launcher"


def test_an_unknown_start_method_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown start method 'spawn'"):
        RankStarter("spawn")
    assert (FORKSERVER, EXEC) == START_METHODS
