"""A local launcher that replaces a dead rank instead of restarting the group.

It hosts the job's store (which must outlive every rank, as an elastic agent's does), starts
one process per rank, and when one dies starts a replacement with the same rank, up to
`max_replacements`; the others keep running. Ranks that exit FALLBACK_EXIT_CODE end the
attempt with outcome "fallback": the caller restarts every rank from a checkpoint tier.
Every wait is bounded by `timeout_s`, after which every rank is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from torch._C._distributed_c10d import TCPStore

from training.recovery import ENV_ROLE, ENV_STORE, ENV_TEST_FAULTS, FALLBACK_EXIT_CODE


@dataclass
class SupervisedRun:
    """`outcome`: "ok", "fallback", "failed" (replacements exhausted, or another exit code) or
    "timeout"; `pids[r]`: every process that held rank r, in order; `exit_codes[r]` likewise."""

    outcome: str
    pids: dict[int, list[int]] = field(default_factory=dict)
    exit_codes: dict[int, list[int | None]] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Supervisor:
    def __init__(
        self,
        argv: list[str],
        world_size: int,
        log_dir: Path,
        *,
        max_replacements: int,
        timeout_s: float,
        test_faults: str = "",
    ) -> None:
        self.argv, self.world_size, self.log_dir = argv, world_size, log_dir
        self.max_replacements, self.timeout_s = max_replacements, timeout_s
        self.test_faults = test_faults
        self.port = _free_port()
        self.store = TCPStore(
            "127.0.0.1",
            self.port,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=timeout_s),
        )
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.run_record = SupervisedRun("ok")

    def _spawn(self, rank: int, role: str) -> None:
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(self.world_size),
            PYTHONUNBUFFERED="1",
        )
        env[ENV_STORE] = f"127.0.0.1:{self.port}"
        env[ENV_ROLE] = role
        env.pop(ENV_TEST_FAULTS, None)
        if role == "initial" and self.test_faults:
            env[ENV_TEST_FAULTS] = self.test_faults
        self.log_dir.mkdir(parents=True, exist_ok=True)
        count = len(self.run_record.pids.get(rank, []))
        with open(self.log_dir / f"rank{rank}_{count}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, *self.argv],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[rank] = proc
        self.run_record.pids.setdefault(rank, []).append(proc.pid)

    def run(self) -> SupervisedRun:
        deadline = time.monotonic() + self.timeout_s
        for rank in range(self.world_size):
            self._spawn(rank, "initial")
        replacements = 0
        try:
            while self.procs:
                if time.monotonic() > deadline:
                    self.run_record.outcome = "timeout"
                    return self.run_record
                for rank, proc in list(self.procs.items()):
                    code = proc.poll()
                    if code is None:
                        continue
                    self.run_record.exit_codes.setdefault(rank, []).append(code)
                    del self.procs[rank]
                    if code == 0:
                        continue
                    if code == FALLBACK_EXIT_CODE:
                        self.run_record.outcome = "fallback"
                    elif self.run_record.outcome == "ok" and replacements < self.max_replacements:
                        replacements += 1
                        self._spawn(rank, "replacement")
                    elif self.run_record.outcome == "ok":
                        self.run_record.outcome = "failed"
                        return self.run_record
                time.sleep(0.05)
            return self.run_record
        finally:
            self._kill_all()

    def _kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
