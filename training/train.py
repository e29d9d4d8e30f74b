"""Entry point: ``python -m training.train --preset tiny --out DIR [--set section.field=value ...]``.

Under the platform, `--out`, the checkpoint directories, the metrics port and the managed
tier's S3 path and namespace default to the job environment `hpctl job render` sets
(HPTRAIN_RUN_DIR, ...; training/environment.py, environment_overrides here).

Runs under torchrun, hyperpodrun (both export RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/...)
or alone as a world of one. Exit codes: 0 done or stopped by SIGTERM after saving, 1 error,
2 bad input (command line, config, an unwritable directory, checkpoints this job must not
continue from or train over), 3 watchdog, 4 SIGTERM grace period exceeded before the save,
5 the run ended (completed or SIGTERM) but its final checkpoint did not commit, 6 in-process
recovery gave way to a restart from a checkpoint tier (training/recovery).
"""

from __future__ import annotations

import copy
import os
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path

from training.cli import USAGE_EXIT_CODE, OneLineErrorParser
from training.config import IN_PROCESS, JobConfig, apply_override, output_dirs
from training.config_parsing import ConfigError
from training.environment import RUN_DIR_ENV, environment_keys
from training.fileio import writable_problem
from training.presets import PRESETS, build_config


def environment_overrides(cfg: JobConfig, environ: Mapping[str, str]) -> list[str]:
    """The ``--set`` assignments the platform variables in `environ` stand for, each checked
    against `cfg`; to be applied before the command line's own. A bad value raises
    ConfigError naming the variable."""
    assignments = []
    for name, key in environment_keys(cfg.checkpoint).items():
        value = environ.get(name)
        if not value:
            continue
        assignment = f"{key}={value}"
        trial = copy.deepcopy(cfg)
        try:
            apply_override(trial, assignment)
            trial.validate()
        except ConfigError as error:
            raise ConfigError(f"{name}={value!r} (job environment): {error}") from None
        assignments.append(assignment)
    return assignments


def parse_args(
    argv: list[str] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[JobConfig, Path, bool]:
    """The config, run directory and --start-fresh of a command line; `environ` (default
    os.environ) supplies the platform's job environment (training/environment.py)."""
    p = OneLineErrorParser(
        prog="python -m training.train", description="HyperPod training entry point"
    )
    p.add_argument("--preset", default="tiny", help=f"named config preset ({', '.join(PRESETS)})")
    p.add_argument(
        "--out",
        help=f"run directory (summary.json, attempts/, default checkpoint dirs); default "
        f"${RUN_DIR_ENV}",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one config value, e.g. --set training.steps=40 (repeatable)",
    )
    p.add_argument(
        "--start-fresh",
        action="store_true",
        help="discard existing checkpoints and train from step 0 (without it, checkpoints "
        "that exist but cannot be used stop the job)",
    )
    args = p.parse_args(argv)
    environ = os.environ if environ is None else environ
    out = args.out or environ.get(RUN_DIR_ENV)
    if not out:
        p.error(f"--out: missing; pass --out DIR or set {RUN_DIR_ENV}")
    try:
        # The platform's job environment first, so the command line overrides it.
        defaults = environment_overrides(build_config(args.preset), environ)
        cfg = build_config(args.preset, [*defaults, *args.overrides])
    except ConfigError as e:
        p.error(str(e))
    return cfg, Path(out), args.start_fresh


def main(argv: list[str] | None = None) -> int:
    cfg, out, start_fresh = parse_args(argv)
    # Before any process group: an unwritable directory is bad input, not a crash to retry.
    for option, path in output_dirs(cfg, out).items():
        problem = writable_problem(path)
        if problem is not None:
            sys.stderr.write(f"error: cannot write to {option} {path}: {problem}\n")
            return USAGE_EXIT_CODE
    # Heavy imports after argument checks: a typo fails in milliseconds.
    import torch.distributed as dist

    from training.checkpoint.manager import IncompatibleCheckpointError
    from training.parallel import (
        configure_cpu_threads,
        configure_determinism,
        ensure_single_process_env,
        init_distributed,
    )
    from training.recovery import FALLBACK_EXIT_CODE, world
    from training.recovery.coordination import RecoveryFallbackError
    from training.trainer import Trainer, install_signal_handlers

    ensure_single_process_env()
    try:
        cfg.check_world(int(os.environ["WORLD_SIZE"]))
    except ConfigError as e:
        sys.stderr.write(f"error: {e}\n")
        return USAGE_EXIT_CODE
    # Under in-process recovery the recovery forms the process groups, and forms them again.
    info = world.local_info() if cfg.fault.recovery == IN_PROCESS else init_distributed()
    configure_cpu_threads(cfg.training.cpu_threads, info.local_world_size)
    configure_determinism(cfg.training.deterministic)
    try:
        trainer = Trainer(cfg, out, info, start_fresh=start_fresh)
        install_signal_handlers(trainer)
        code = trainer.run()
        trainer.teardown()
    except (ConfigError, FileNotFoundError, IncompatibleCheckpointError) as e:
        # Bad input discovered once the world exists (a missing data path, checkpoints that
        # cannot be used or belong to another run): one line.
        sys.stderr.write(f"error: rank {info.rank}: {e}\n")
        sys.stderr.flush()
        os._exit(USAGE_EXIT_CODE)
    except RecoveryFallbackError as e:
        # In-process recovery cannot go on: the launcher restarts every rank from a tier.
        sys.stderr.write(f"error: rank {info.rank}: {e}\n")
        sys.stderr.flush()
        os._exit(FALLBACK_EXIT_CODE)
    except BaseException:  # noqa: BLE001 - any failure must end this rank, see below
        traceback.print_exc()
        sys.stderr.flush()
        # Peers may be blocked in a collective with this rank: do not wait for a clean
        # teardown, exit so the launcher restarts the group.
        os._exit(1)
    dist.destroy_process_group()
    # Nothing is left to run: exit now rather than through interpreter shutdown, whose
    # destructors of library threads have aborted the process after a successful run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
