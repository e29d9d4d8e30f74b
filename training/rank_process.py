"""How the local launcher starts a rank's process: forked from a server that has already
imported torch and the trainer (the default), or as a fresh interpreter (`exec`).

A fresh interpreter spends seconds importing torch before it trains (about 3 s of CPU on a
small machine, more than a short test run's steps), and every restart and every in-process
replacement pays it again. The fork server pays it once per launch: the standard library's
`multiprocessing` forkserver, preloaded with the trainer, forks each rank, which then takes
the rank's environment and command line and runs `training.train` as the fresh interpreter
would. torchrun offers the same choice for function entry points (its `start_method`).

The server imports, but never runs, torch: no thread, CUDA context or process group exists
when it forks, so a forked rank starts as clean as a fresh one.

Both kinds look the same to the launcher (`RankProcess`): a pid, `poll`/`wait` giving the
exit code (negative: killed by that signal), the rank's combined stdout and stderr as one
byte stream, each rank in its own session and killed with SIGKILL when its parent dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import typing
from multiprocessing.connection import Connection
from typing import IO, Final, Protocol

FORKSERVER: Final = "forkserver"
EXEC: Final = "exec"
START_METHODS: Final = (FORKSERVER, EXEC)
# What the server imports before it forks: everything a rank needs before its first step.
# torch._dynamo too: torch imports it lazily, at the first model build (an initialiser on the
# meta device) or optimizer step, seconds that a replacement rank would pay inside every
# in-process recovery. Preloading by name uses none of its API.
PRELOAD: Final = [
    "torch",
    "torch._dynamo",
    "torch.distributed",
    "training.train",
    "training.trainer",
]
_PR_SET_PDEATHSIG: Final = 1


class RankProcess(Protocol):
    pid: int
    stdout: IO[bytes]

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies, even by SIGKILL, so a killed launcher never
    leaves ranks behind (a forked rank's parent is the server, which exits with the launcher)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def signal_group(proc: RankProcess, sig: int) -> None:
    """`sig` to the rank's session (its own children included); to the rank alone while a
    just-forked rank has not yet made its session."""
    with contextlib.suppress(ProcessLookupError):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            os.kill(proc.pid, sig)


class ExecRank:
    """A rank as a fresh interpreter: `python -m training.train ARGV`."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self._popen = subprocess.Popen(
            [sys.executable, "-m", "training.train", *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self.pid = self._popen.pid
        self.stdout = typing.cast(IO[bytes], self._popen.stdout)

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self) -> int:
        return self._popen.wait()


class ForkedRank:
    """A rank forked from the launch's preloaded server."""

    def __init__(
        self,
        context: multiprocessing.context.ForkServerContext,
        argv: list[str],
        env: dict[str, str],
    ) -> None:
        read_end, write_end = os.pipe()
        # A Connection is handed to the server as a file descriptor (SCM_RIGHTS): the rank
        # writes its output straight into this pipe.
        output = Connection(write_end, readable=False)
        self._process = context.Process(target=run_forked, args=(argv, env, output))
        self._process.start()
        output.close()
        self.pid = typing.cast(int, self._process.pid)
        self.stdout: IO[bytes] = os.fdopen(read_end, "rb")

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self) -> int:
        self._process.join()
        return typing.cast(int, self._process.exitcode)


def run_forked(argv: list[str], env: dict[str, str], output: Connection) -> None:
    """The forked rank: takes its output pipe, session, environment and command line, then
    runs the trainer's entry point as `python -m training.train` would."""
    os.dup2(output.fileno(), 1)
    os.dup2(output.fileno(), 2)
    output.close()
    # As PYTHONUNBUFFERED does for a fresh interpreter: each line reaches the launcher as
    # it is written.
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(write_through=True)  # type: ignore[union-attr]
    os.setsid()
    _leave_the_server()
    die_with_parent()
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["training.train", *argv]
    from training.train import main

    sys.exit(main(argv))


def _leave_the_server() -> None:
    """Drops the server's keep-alive pipe every forked child inherits (so that a child may
    fork more), which would keep the server, and so this rank, alive after the launcher died.
    Without it the server exits with the launcher and the parent-death signal ends the rank."""
    # Private attributes of the standard library's server, the same since Python 3.4.
    server: typing.Any = multiprocessing.forkserver._forkserver
    if server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)
    server._forkserver_alive_fd = None
    server._forkserver_address = None


class RankStarter:
    """Starts the ranks of one launch by `method` (START_METHODS)."""

    def __init__(self, method: str) -> None:
        if method not in START_METHODS:
            raise ValueError(f"unknown start method {method!r} (choose from {START_METHODS})")
        self.method = method
        self._context: multiprocessing.context.ForkServerContext | None = None

    def start(self, argv: list[str], env: dict[str, str]) -> RankProcess:
        if self.method == EXEC:
            return ExecRank(argv, env)
        if self._context is None:
            self._context = multiprocessing.get_context(FORKSERVER)
            self._context.set_forkserver_preload(PRELOAD)
        return ForkedRank(self._context, argv, env)
