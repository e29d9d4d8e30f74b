"""Local launcher that behaves like the training operator, for development and fault tests.

    python -m training.launch --nproc 2 --preset tiny --steps 40 --out DIR [fault options]

Starts one process per rank (gloo on CPU) with a torchrun-style environment, forked from a
server that has imported the trainer once (or a fresh interpreter each, --rank-start exec;
training/rank_process.py), restarts the whole group when any rank exits non-zero (up to
--max-restarts), and injects faults on the first attempt only, so the restarted run
proceeds. Each rank runs in its own session and dies with the launcher (a parent-death
signal), so a failed group is killed as a whole and
no process outlives the launcher. Exit code: 0 when the final attempt exits 0, 1 when
restarts are exhausted, 124 on --timeout-s, 2 on bad input (arguments, an unwritable
directory, or a rank that exited 2: restarting cannot help).

The command line is in training/launch_options.py, the run directory's layout in
training/launch_dirs.py. Attempts are numbered across launches of the same run directory (logs/attempt<N>_rank<R>.log,
attempts/attempt_<N>.json), so a relaunch keeps the logs of earlier ones; summary.json's
`restarts` counts the whole job's restarts, `launcher.restarts` this launch's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from training import fileio
from training.checkpoint.config import tier_key
from training.cli import UNSAVED_EXIT_CODE, USAGE_EXIT_CODE
from training.config import IN_PROCESS, JobConfig
from training.faults import ENV_VAR as FAULTS_ENV
from training.faults import FaultPlan
from training.launch_dirs import (
    checkpoint_listing,
    corrupt_newest,
    next_job_attempt,
    node_tier_dirs,
)
from training.launch_options import parse_args
from training.rank_process import RankProcess, RankStarter, signal_group
from training.recovery import ENV_ROLE, ENV_STORE, FALLBACK_EXIT_CODE, REPLACEMENT

# The role of a rank's first process; a replacement is started after a loss (in process).
INITIAL = "initial"

TIMEOUT_EXIT_CODE = 124
# Exit codes of a rank that ended in order: the trainer returns them only after the final
# barrier of every rank (training/train.py), so its peers are past that barrier and exit on
# their own. The launcher waits for them: killing one that is on its way out would turn its
# own 5 into -9 and lose its exit code.
ORDERLY_EXIT_CODES = (0, UNSAVED_EXIT_CODE)


@dataclass
class AttemptResult:
    attempt: int
    # Number across every launch of the run directory (log file names, run ledger).
    job_attempt: int
    exit_codes: list[int | None]
    outcome: str  # "ok", "failed", "timeout", "terminated", "bad_input"
    started_unix: float
    ended_unix: float
    checkpoints_after: dict[str, list[str]] = field(default_factory=dict)
    corrupted: str | None = None
    chaos_kills: list[dict[str, Any]] = field(default_factory=list)
    # Under in-process recovery: each rank's processes in order (a replacement after each
    # loss), and each loss (rank, exit code, time).
    pids: list[list[int]] = field(default_factory=list)
    replacements: list[dict[str, Any]] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pump(stream: Any, sink: TextIO, log: TextIO, lock: threading.Lock) -> None:
    """Copies a rank's output, unmodified, to the launcher's stdout and the rank's log file."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        with lock:
            sink.write(line)
            sink.flush()
        log.write(line)
        log.flush()
    stream.close()


class Launcher:
    def __init__(self, args: argparse.Namespace, cfg: JobConfig, train_argv: list[str]) -> None:
        self.args, self.cfg, self.train_argv = args, cfg, train_argv
        self.out = Path(args.out)
        self.job_start = time.time()
        self.procs: list[RankProcess] = []
        self.starter = RankStarter(args.rank_start)
        self.terminating = False
        self.lock = threading.Lock()
        self.chaos_rng = random.Random(args.chaos_seed)  # noqa: S311 - a reproducible fault schedule
        self.chaos_kills = 0
        # In-process recovery: a lost rank is replaced, the others keep running.
        self.in_process = cfg.fault.recovery == IN_PROCESS
        self.replacements_left = args.max_restarts
        self.store_address = ""
        self.pids: list[list[int]] = []
        self.replacements: list[dict[str, Any]] = []
        self._pumps: list[threading.Thread] = []
        # Attempts of earlier launches of this run directory: numbering continues after them.
        self.first_job_attempt = next_job_attempt(self.out)

    def _env(self, rank: int, port: int, attempt: int, role: str) -> dict[str, str]:
        env = dict(os.environ)
        per_node = self.args.nproc // self.args.nodes
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(self.args.nproc),
            LOCAL_RANK=str(rank % per_node),
            LOCAL_WORLD_SIZE=str(per_node),
            GROUP_RANK=str(rank // per_node),
            ROLE_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            TORCHELASTIC_RESTART_COUNT=str(attempt),
            # The run ledger numbers attempts like the logs, across launches.
            HPTRAIN_ATTEMPT=str(self.first_job_attempt + attempt),
            HPTRAIN_JOB_START_UNIX=repr(self.job_start),
            PYTHONUNBUFFERED="1",
        )
        env.pop(FAULTS_ENV, None)
        plan = self._fault_plan()
        if attempt == 0 and role == INITIAL and plan.any:
            env[FAULTS_ENV] = plan.to_env()
        env.pop(ENV_STORE, None)
        env.pop(ENV_ROLE, None)
        if self.in_process:
            env[ENV_STORE], env[ENV_ROLE] = self.store_address, role
        return env

    def _fault_plan(self) -> FaultPlan:
        a = self.args
        return FaultPlan(
            kill_ranks=tuple(a.kill_rank or ()),
            kill_at_step=a.kill_at_step,
            kill_during_checkpoint=a.kill_during_checkpoint,
            sigterm_at_step=a.sigterm_at_step,
            scale_event_at_step=a.scale_event_at_step,
            hang_rank=a.hang_rank,
            hang_at_step=a.hang_at_step,
            disk_full_at_checkpoint=a.disk_full_at_checkpoint,
            disk_full_from_step=a.disk_full_from_step,
            kill_in_transfer=a.kill_in_transfer,
            slow_data_ms=a.slow_data_ms,
        )

    def _kill_group(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                signal_group(p, sig)

    def _spawn(self, rank: int, port: int, attempt: int, role: str = INITIAL) -> RankProcess:
        cmd = list(self.train_argv)
        if attempt == 0 and role == INITIAL and self.args.start_fresh:
            # Restarts of this launch must resume what its first attempt wrote.
            cmd.append("--start-fresh")
        if self.args.nodes > 1:
            # Emulated nodes: each has its own per-node tiers, as /dev/shm per pod.
            node = rank // (self.args.nproc // self.args.nodes)
            for tier, path in node_tier_dirs(self.cfg, self.out, node).items():
                cmd += ["--set", f"{tier_key(tier, 'dir')}={path}"]
        return self.starter.start(cmd, self._env(rank, port, attempt, role))

    def forward_signal(self, signum: int, _frame: Any) -> None:
        """SIGTERM/SIGINT to the launcher: pass SIGTERM on (the ranks save and exit 0)."""
        self.terminating = True
        self._kill_group(signal.SIGTERM)

    def run_attempt(self, attempt: int, deadline: float) -> AttemptResult:
        port = _free_port()
        logs_dir = self.out / "logs"
        logs_dir.mkdir(parents=True, exist_ok=True)
        started = time.time()
        job_attempt = self.first_job_attempt + attempt
        with contextlib.ExitStack() as open_logs:
            log_files = [
                open_logs.enter_context(
                    open(logs_dir / f"attempt{job_attempt}_rank{rank}.log", "w")
                )
                for rank in range(self.args.nproc)
            ]
            # The store outlives every rank of the attempt: survivors and a replacement meet
            # there (in-process recovery).
            store = self._host_store() if self.in_process else None
            self.procs, self._pumps, self.replacements = [], [], []
            for rank in range(self.args.nproc):
                self.procs.append(self._spawn(rank, port, attempt))
            self.pids = [[p.pid] for p in self.procs]
            if self.terminating:
                # A SIGTERM that arrived while the ranks were being started reaches them too.
                self._kill_group(signal.SIGTERM)
            # Output pumps start after every fork: no other thread of ours runs while a child
            # is between fork and exec (preexec_fn).
            for p, log in zip(self.procs, log_files, strict=True):
                self._start_pump(p, log)
            outcome, chaos_kills = self._supervise(
                deadline, lambda rank: self._replace(rank, port, attempt, log_files[rank])
            )
            for p in self.procs:
                p.wait()
            for t in self._pumps:
                t.join(timeout=5)
            del store
        if outcome == "failed" and self._completed_in(started):
            # The run reached its target and wrote its summary; a rank that then died on
            # the way out (a crash in teardown) loses nothing, so do not train again.
            sys.stdout.write(
                f"HPTRAIN-LAUNCH attempt {attempt} completed (summary written) but exited with codes "
                f"{[p.returncode for p in self.procs]}; counted as success\n"
            )
            sys.stdout.flush()
            outcome = "ok"
        if self.terminating and outcome == "failed":
            outcome = "terminated"
        return AttemptResult(
            attempt,
            job_attempt,
            [p.returncode for p in self.procs],
            outcome,
            started,
            time.time(),
            chaos_kills=chaos_kills,
            pids=self.pids,
            replacements=self.replacements,
        )

    def _host_store(self) -> Any:
        """The attempt's key-value store, on a free port (torch imported only here)."""
        from datetime import timedelta

        # Re-exported from torch._C at run time; torch's stubs do not say so.
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        port = _free_port()
        self.store_address = f"127.0.0.1:{port}"
        timeout = timedelta(seconds=self.args.timeout_s)
        return TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timeout)

    def _start_pump(self, proc: RankProcess, log: TextIO) -> None:
        t = threading.Thread(
            target=_pump, args=(proc.stdout, sys.stdout, log, self.lock), daemon=True
        )
        t.start()
        self._pumps.append(t)

    def _replace(self, rank: int, port: int, attempt: int, log: TextIO) -> bool:
        """Starts a process in place of lost rank `rank` (in-process recovery); False when
        recovery is not in process, the replacements are spent, or the rank's exit code says
        a replacement cannot help (bad input, or the recovery fell back to a tier)."""
        code = self.procs[rank].returncode
        if (
            not self.in_process
            or self.terminating
            or self.replacements_left <= 0
            or code in (USAGE_EXIT_CODE, FALLBACK_EXIT_CODE)
        ):
            return False
        self.replacements_left -= 1
        self.replacements.append({"rank": rank, "exit_code": code, "unix": time.time()})
        sys.stdout.write(
            f"HPTRAIN-LAUNCH rank {rank} exited with code {code}; starting its replacement\n"
        )
        sys.stdout.flush()
        proc = self._spawn(rank, port, attempt, REPLACEMENT)
        self.procs[rank] = proc
        self.pids[rank].append(proc.pid)
        self._start_pump(proc, log)
        return True

    def _supervise(
        self, deadline: float, replace: Callable[[int], bool]
    ) -> tuple[str, list[dict[str, Any]]]:
        """Polls the ranks until every one has exited, one crashes that `replace` does not
        replace, or the deadline passes (in both cases the group is killed); fires the chaos
        kills. Returns the outcome and the chaos kills."""
        chaos_kills: list[dict[str, Any]] = []
        every = self.args.chaos_kill_every_s
        chaos_at = time.time() + every if every else None
        while True:
            if chaos_at is not None and time.time() >= chaos_at:
                kill = self._chaos_kill()
                if kill is not None:
                    chaos_kills.append(kill)
                    # A restart ends the attempt; in process, the next kill comes `every` later.
                    chaos_at = time.time() + every if self.in_process else None
            codes = [p.poll() for p in self.procs]
            crashed = [r for r, c in enumerate(codes) if c not in (None, *ORDERLY_EXIT_CODES)]
            if any(not replace(r) for r in crashed):
                # A rank crashed: the others are (or soon will be) stuck in a collective.
                self._kill_group(signal.SIGKILL)
                return "failed", chaos_kills
            if crashed:
                continue
            if None not in codes:
                return ("ok" if all(c == 0 for c in codes) else "failed"), chaos_kills
            if time.time() > deadline:
                self._kill_group(signal.SIGKILL)
                return "timeout", chaos_kills
            time.sleep(0.05)

    def _chaos_kill(self) -> dict[str, Any] | None:
        """Chaos mode: an external SIGKILL of a random rank, like a node loss; unlike the
        step-exact faults (FaultPlan) it fires on every attempt (and, in process, every
        --chaos-kill-every-s), at wall-clock times. None when the restarts are spent or the
        victim has already exited (tried again later)."""
        if self.chaos_kills >= self.args.max_restarts:
            return None
        victim = self.chaos_rng.randrange(self.args.nproc)
        if self.procs[victim].poll() is not None:
            return None
        os.kill(self.procs[victim].pid, signal.SIGKILL)
        self.chaos_kills += 1
        return {"rank": victim, "unix": time.time()}

    def _rank_error(self, job_attempt: int, rank: int) -> str:
        try:
            text = (self.out / "logs" / f"attempt{job_attempt}_rank{rank}.log").read_text()
        except OSError:
            text = ""
        lines = [ln for ln in text.splitlines() if ln.startswith("error: ")]
        return (
            lines[-1]
            if lines
            else f"error: rank {rank} exited with code {USAGE_EXIT_CODE} (bad input)"
        )

    def _completed_in(self, started: float) -> bool:
        """True when summary.json was written during this attempt and says the run completed."""
        path = self.out / "summary.json"
        try:
            if path.stat().st_mtime < started:
                return False
            s = json.loads(path.read_text())
        except (OSError, ValueError):
            return False
        target = self.cfg.training.steps
        return bool(
            s.get("exit_reason") == "completed"
            and s.get("steps") == target
            and s.get("target_steps") == target
            and s.get("final_checkpoint_committed", True)
        )

    def run(self) -> int:
        deadline = self.job_start + self.args.timeout_s
        attempts: list[AttemptResult] = []
        exit_code = 1
        corrupted_once = False
        for attempt in range(self.args.max_restarts + 1):
            if self.terminating:
                # SIGTERM arrived between attempts: do not start another one.
                sys.stdout.write(
                    f"HPTRAIN-LAUNCH terminated before attempt {attempt}; not restarting\n"
                )
                sys.stdout.flush()
                exit_code = 1
                break
            result = self.run_attempt(attempt, deadline)
            attempts.append(result)
            if result.outcome == "ok":
                exit_code = 0
                break
            if result.outcome in ("timeout", "terminated"):
                exit_code = TIMEOUT_EXIT_CODE if result.outcome == "timeout" else 1
                break
            if USAGE_EXIT_CODE in result.exit_codes:
                # Bad input (config, data path, incompatible checkpoints): a restart fails
                # the same way, so stop with the rank's one-line error.
                result.outcome = "bad_input"
                exit_code = USAGE_EXIT_CODE
                sys.stderr.write(
                    self._rank_error(result.job_attempt, result.exit_codes.index(USAGE_EXIT_CODE))
                    + "\n"
                )
                sys.stderr.flush()
                break
            result.checkpoints_after = checkpoint_listing(self.cfg, self.out, self.args.nodes)
            if self.args.corrupt_newest and not corrupted_once:
                result.corrupted = corrupt_newest(self.cfg, self.out, self.args.nodes)
                corrupted_once = True
            sys.stdout.write(
                f"HPTRAIN-LAUNCH attempt {attempt} failed with exit codes {result.exit_codes}; "
                f"{'restarting' if attempt < self.args.max_restarts else 'giving up'}\n"
            )
            sys.stdout.flush()
        self._finalise(attempts, exit_code)
        return exit_code

    def _finalise(self, attempts: list[AttemptResult], exit_code: int) -> None:
        launcher = {
            "attempts": [asdict(a) for a in attempts],
            "restarts": len(attempts) - 1,
            "exit_code": exit_code,
            "wall_time_s": time.time() - self.job_start,
            "faults": self._fault_plan().given(),
            "corrupt_newest": bool(self.args.corrupt_newest),
        }
        path = self.out / "summary.json"
        summary: dict[str, Any] = {}
        last_start = attempts[-1].started_unix if attempts else self.job_start
        try:
            # The trainer's summary: of the successful attempt, or of a last attempt that
            # ended but exited non-zero (e.g. its final checkpoint did not commit).
            if exit_code == 0 or path.stat().st_mtime >= last_start:
                summary = json.loads(path.read_text())
        except (OSError, ValueError):
            summary = {}
        if not summary:
            summary = {"exit_reason": "failed", "steps": None, "final_params_sha256": None}
        summary["launcher"] = launcher
        # The whole job's restarts: every attempt in this run directory but the first. The
        # trainer counts them from the run ledger; without its summary, the attempt numbers
        # say the same.
        summary.setdefault("restarts", self.first_job_attempt + len(attempts) - 1)
        fileio.write_json_atomic(path, summary, indent=2, sort_keys=True)


def command(
    out: Path,
    *options: str,
    nproc: int = 2,
    preset: str = "tiny",
    steps: int,
    overrides: Sequence[str] = (),
) -> list[str]:
    """The argv that runs this launcher (benchmarks and tests start it as a subprocess):
    `options` are further launcher flags (faults, restarts, --timeout-s), `overrides` are
    `--set key=value` config overrides."""
    argv = [sys.executable, "-m", "training.launch", "--nproc", str(nproc), "--preset", preset]
    argv += ["--steps", str(steps), "--out", str(out), *options]
    for override in overrides:
        argv += ["--set", override]
    return argv


def main(argv: list[str] | None = None) -> int:
    args, cfg, train_argv = parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    launcher = Launcher(args, cfg, train_argv)
    signal.signal(signal.SIGTERM, launcher.forward_signal)
    signal.signal(signal.SIGINT, launcher.forward_signal)
    code = launcher.run()
    summary = Path(args.out) / "summary.json"
    sys.stdout.write(f"HPTRAIN-LAUNCH done exit_code={code} summary={summary}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
