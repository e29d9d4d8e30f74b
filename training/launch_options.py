"""The local launcher's command line (training.launch): its options, their checks against
each other and against the config they build, and the argv each rank's trainer gets.

Standard library only, as training.cli: a bad option fails before torch is imported.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from training import fileio
from training.cli import OneLineErrorParser
from training.config import IN_PROCESS, JobConfig
from training.config_parsing import ConfigError
from training.launch_dirs import node_output_dirs
from training.presets import PRESETS, build_config
from training.rank_process import FORKSERVER, START_METHODS

# Fault options that name a step (each must be >= 1 and at most the last step) and the
# check that applies only to the step at which rank 0 is killed mid-checkpoint.
_STEP_OPTIONS = (
    "kill_at_step",
    "sigterm_at_step",
    "scale_event_at_step",
    "hang_at_step",
    "disk_full_at_checkpoint",
    "disk_full_from_step",
)


def _option(name: str) -> str:
    """The command-line spelling of an argparse destination: kill_rank -> --kill-rank."""
    return f"--{name.replace('_', '-')}"


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """The world, the config and the bounds of the whole job."""
    p.add_argument("--nproc", type=int, default=2, help="number of ranks (processes)")
    p.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="emulate this many nodes: ranks split evenly, each node with its own LOCAL_RANK "
        "numbering and its own directory of each per-node tier (<tier dir>-node<k>)",
    )
    p.add_argument("--preset", default="tiny", help=f"config preset ({', '.join(PRESETS)})")
    p.add_argument("--steps", type=int, help="training steps (same as --set training.steps=N)")
    p.add_argument("--out", required=True, help="run directory; summary.json is written there")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="config override passed to every rank (repeatable)",
    )
    p.add_argument("--max-restarts", type=int, default=3, help="group restarts after a failure")
    p.add_argument(
        "--rank-start",
        choices=START_METHODS,
        default=FORKSERVER,
        help="how each rank's process starts: forked from a server that has imported the "
        "trainer once (default; restarts and replacements skip the torch import), or a fresh "
        "interpreter per rank (exec), as torchrun's default",
    )
    p.add_argument(
        "--timeout-s", type=float, default=1800.0, help="bound on the whole job, restarts included"
    )
    p.add_argument(
        "--start-fresh",
        action="store_true",
        help="discard existing checkpoints in the run's tiers and train from step 0 "
        "(first attempt only; restarts resume)",
    )
    p.add_argument(
        "--watchdog-s", type=float, help="watchdog timeout (same as --set fault.watchdog_s=S)"
    )


def _add_fault_options(p: argparse.ArgumentParser) -> None:
    """Faults injected on the first attempt (FaultPlan), and the chaos kill of every attempt."""
    p.add_argument(
        "--kill-rank",
        type=int,
        action="append",
        help="rank to SIGKILL (with --kill-at-step); repeat it to kill several at that step",
    )
    p.add_argument("--kill-at-step", type=int, help="step at which --kill-rank is killed")
    p.add_argument(
        "--kill-in-transfer",
        type=int,
        metavar="RANK",
        help="with fault.recovery=in_process: SIGKILL RANK as the first in-process recovery "
        "starts its state transfer (with --kill-rank)",
    )
    p.add_argument(
        "--slow-data-ms",
        type=int,
        metavar="MS",
        help="every rank waits MS milliseconds for each batch (a slow data source)",
    )
    p.add_argument(
        "--kill-during-checkpoint",
        type=int,
        metavar="STEP",
        help="SIGKILL rank 0 after the shards of checkpoint STEP are written, before its commit",
    )
    p.add_argument(
        "--corrupt-newest",
        action="store_true",
        help="corrupt the newest committed checkpoint before the first restart",
    )
    p.add_argument(
        "--sigterm-at-step", type=int, help="send SIGTERM to every rank during this step"
    )
    p.add_argument(
        "--scale-event-at-step",
        type=int,
        help="send SIGUSR1 (HyperPod's elastic scaling event) to rank 0 during this step",
    )
    p.add_argument(
        "--hang-rank", type=int, help="rank that stops making progress (with --hang-at-step)"
    )
    p.add_argument("--hang-at-step", type=int, help="step at which --hang-rank hangs")
    p.add_argument(
        "--disk-full-at-checkpoint",
        type=int,
        metavar="STEP",
        help="rank 0's write of checkpoint STEP fails with ENOSPC (that checkpoint only)",
    )
    p.add_argument(
        "--disk-full-from-step",
        type=int,
        metavar="STEP",
        help="every checkpoint write from STEP on fails with ENOSPC on rank 0, the final one too",
    )
    p.add_argument(
        "--chaos-kill-every-s",
        type=float,
        metavar="S",
        help="SIGKILL a random rank S seconds into every attempt (bounded by --max-restarts)",
    )
    p.add_argument("--chaos-seed", type=int, default=0, help="seed for the chaos victim choice")


def _check_numbers(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The launcher's own numbers, each in its range."""
    if args.nproc < 1:
        p.error("--nproc must be >= 1")
    if args.nodes < 1 or args.nproc % args.nodes:
        p.error("--nodes must be >= 1 and divide --nproc")
    if args.chaos_kill_every_s is not None and not (
        math.isfinite(args.chaos_kill_every_s) and args.chaos_kill_every_s > 0
    ):
        p.error("--chaos-kill-every-s must be a finite number > 0")
    if args.max_restarts < 0:
        p.error("--max-restarts must be >= 0")
    if not (math.isfinite(args.timeout_s) and args.timeout_s > 0):
        p.error("--timeout-s must be a finite number > 0")
    if args.watchdog_s is not None and not (
        math.isfinite(args.watchdog_s) and args.watchdog_s >= 0
    ):
        p.error("--watchdog-s must be a finite number >= 0")


def _check_faults(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fault options that go together are given together, name a rank and a step >= 1."""
    if (args.kill_rank is None) != (args.kill_at_step is None):
        p.error("--kill-rank and --kill-at-step go together")
    if (args.hang_rank is None) != (args.hang_at_step is None):
        p.error("--hang-rank and --hang-at-step go together")
    if args.kill_in_transfer is not None and args.kill_rank is None:
        p.error("--kill-in-transfer needs --kill-rank: a recovery to interrupt")
    named = [("kill_rank", r) for r in args.kill_rank or ()]
    named += [("hang_rank", args.hang_rank), ("kill_in_transfer", args.kill_in_transfer)]
    for name, r in named:
        if r is not None and not 0 <= r < args.nproc:
            p.error(f"{_option(name)} {r} is not a rank of --nproc {args.nproc}")
    for name in (*_STEP_OPTIONS, "kill_during_checkpoint", "slow_data_ms"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"{_option(name)} must be >= 1")
    restart_faults = (args.kill_rank, args.hang_rank, args.chaos_kill_every_s)
    if (
        args.corrupt_newest
        and all(f is None for f in restart_faults)
        and args.kill_during_checkpoint is None
    ):
        p.error(
            "--corrupt-newest acts before the first restart: give a kill, hang or chaos fault too"
        )


def _check_faults_fit(p: argparse.ArgumentParser, args: argparse.Namespace, cfg: JobConfig) -> None:
    """The fault options against the config: their steps exist, a hang has a watchdog."""
    if args.kill_in_transfer is not None and cfg.fault.recovery != IN_PROCESS:
        p.error("--kill-in-transfer needs --set fault.recovery=in_process")
    if args.hang_rank is not None and cfg.fault.watchdog_s <= 0:
        p.error("--hang-rank needs a watchdog (--watchdog-s > 0)")
    if args.kill_during_checkpoint is not None:
        s = args.kill_during_checkpoint
        if cfg.checkpoint.tier_due(s) is None or s >= cfg.training.steps:
            p.error(
                f"--kill-during-checkpoint {s} is not a periodic checkpoint step before the last step"
            )
    for name in _STEP_OPTIONS:
        v = getattr(args, name)
        if v is not None and v > cfg.training.steps:
            p.error(f"{_option(name)} {v} is beyond the last step {cfg.training.steps}")


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, JobConfig, list[str]]:
    """The launcher's options, the config every rank runs and the trainer's argv (without the
    per-node options `Launcher` adds). A bad option exits 2 with one line."""
    p = OneLineErrorParser(
        prog="python -m training.launch",
        description="local multi-process launcher with restarts and fault injection",
    )
    _add_run_options(p)
    _add_fault_options(p)
    args = p.parse_args(argv)
    _check_numbers(p, args)
    _check_faults(p, args)
    overrides = list(args.overrides)
    if args.steps is not None:
        overrides.append(f"training.steps={args.steps}")
    if args.watchdog_s is not None:
        overrides.append(f"fault.watchdog_s={args.watchdog_s}")
    try:
        cfg = build_config(args.preset, overrides)
        cfg.check_world(args.nproc)
    except ConfigError as e:
        p.error(str(e))
    _check_faults_fit(p, args, cfg)
    # Last: the checks above never create anything; this one creates the directories.
    for option, path in node_output_dirs(cfg, Path(args.out), args.nodes).items():
        problem = fileio.writable_problem(path)
        if problem is not None:
            p.error(f"cannot write to {option} {path}: {problem}")
    train_argv = ["--preset", args.preset, "--out", str(args.out)]
    for o in overrides:
        train_argv += ["--set", o]
    return args, cfg, train_argv
