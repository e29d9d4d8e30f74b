"""Every GPU check and benchmark of the project in one command, within 8 minutes:

    make gpu-suite                          # = python -m benchmarks.gpu_suite
    python -m benchmarks.gpu_suite --list   # the commands it runs, without running them

On one H100 or H200 it runs, most important first: the `1b` preset's throughput and MFU as
shipped; the cost of async fast-tier checkpoints against a synchronous save; the CUDA
checkpoint test (async checkpoints commit, a killed run resumes bit for bit); the 8b shapes
with 4 layers against the memory plan; then the measured `1b` variants benchmarks/README.md
discusses. With 2 or more GPUs it adds the tensor-parallel throughput on the node, with 8 the
`8b` preset's settings. Each is a subprocess with its own time allowance; the suite stops
starting work at its 8-minute budget and reports what it did not run, so it always ends in
time.

Output: one JSON line per figure, each with the device, GPU count, torch and CUDA versions,
the check it came from, and its target and whether it was met where one is set:

* MFU >= 0.50 on `1b` as shipped, by the standard FLOP count (training.model.flops_per_token);
* every async checkpoint committed; blocking <= 5% of a synchronous save of the same state;
  the first checkpoint costs at most 2 steps; a commit writes >= 4 GB/s per rank (with its
  commit seconds, and whether the preset's fast interval takes a commit)
  (benchmarks/training_checkpoint_gpu.py);
* the CUDA checkpoint test passes (tests/training/test_gpu_checkpoint.py);
* 8b with 4 layers: peak memory allocated at most the plan's estimate (the plan errs high),
  and the memory activation checkpointing saves within 25% of the plan's figure.

A last line sums up: targets met, the figures that missed theirs (a check that failed or
overran its allowance misses), the checks the budget left unstarted. Exit code 0 when no
target was missed, 1 otherwise, 2 without a CUDA GPU (one line naming the missing GPU: run it
on a GPU host). ``--allow-cpu``
runs the same harness on CPU with the `tiny` preset, a smoke test of the suite itself: a
check whose CPU command another has run already (on `tiny`, settings and sizes that differ on a
GPU are often the same) reports that run instead of repeating it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.scratch import removing_new, scratch_dir  # noqa: E402
from benchmarks.training_checkpoint_gpu import (  # noqa: E402
    SCRATCH_PREFIX,
    TARGET_COMMIT_GB_S,
    TARGET_FIRST_STEPS,
    TARGET_RATIO,
)
from training.environment import COMPILE_CACHE_DIR_ENV  # noqa: E402

SUITE_BUDGET_S = 480.0
# The node the presets are sized for: "as shipped" runs the passes per optimizer step a GPU of
# it runs (config.instance_types holds its GPU count).
PRESET_NODE = "ml.p5.48xlarge"
# A command stopped at its allowance gets SIGTERM and this long to end its workers (torchrun
# passes it on to its ranks) before SIGKILL; kept out of the budget it may use.
STOP_GRACE_S = 15.0
TARGET_MFU = 0.55
# A restarted process's first step (compiled code loaded from the cache the process before
# it filled) against a steady step.
TARGET_FIRST_STEP_RATIO = 2.0
# The measured saving of activation checkpointing (8b, 4 layers: none - all) against the
# plan's: the plan's per-layer activation bytes are an eager estimate, compiled blocks save
# somewhat less (benchmarks/README.md).
MEMORY_SAVING_TOLERANCE = 0.25
PYTHON = sys.executable
THROUGHPUT = "benchmarks/training_throughput.py"
FLOAT8 = "benchmarks/float8_training.py"


@dataclass
class Run:
    """The outcome of one command."""

    argv: list[str]
    returncode: int | None  # None: stopped at its time allowance
    output: str
    elapsed_s: float

    def json_line(self) -> dict[str, Any] | None:
        """The benchmark's JSON line: the last stdout line that parses as an object."""
        for line in reversed(self.output.splitlines()):
            if line.startswith("{"):
                try:
                    parsed: dict[str, Any] = json.loads(line)
                except ValueError:
                    continue
                return parsed
        return None


def _live_members(group: int) -> list[int]:
    """The processes of process group `group` that have not ended. A zombie has: only its
    exit status is left, for a parent that may never collect it (an orphan's is PID 1)."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # After the command name, which may hold anything: state, parent, group, ...
            state, _parent, pgrp = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):  # it ended while we looked
            continue
        if int(pgrp) == group and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _group_ended(group: int, timeout_s: float) -> bool:
    """Waits until no process of `group` is left running (at most `timeout_s`); whether none
    is. Woken by the members' own exits (pidfds), not by polling."""
    deadline = time.monotonic() + timeout_s
    while members := _live_members(group):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        handles: list[int] = []
        for pid in members:
            with contextlib.suppress(ProcessLookupError):  # ended since the scan
                handles.append(os.pidfd_open(pid))
        if not handles:
            continue
        try:
            select.select(handles, [], [], left)
        finally:
            for handle in handles:
                os.close(handle)
    return True


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # every member ended in the meantime
        os.killpg(group, signum)


@dataclass
class Suite:
    """Runs commands within the suite's budget and prints figures."""

    common: dict[str, Any]
    budget_s: float
    list_only: bool
    # The CPU smoke test: figures are printed with their targets but not judged.
    smoke: bool = False
    stop_grace_s: float = STOP_GRACE_S
    # Added to every command's environment (the suite's scratch directories).
    env: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    figures: list[dict[str, Any]] = field(default_factory=list)
    # The smoke test's finished commands: a check whose CPU command another check has run
    # already reports that run (a repeat would measure nothing new on CPU).
    smoke_runs: dict[tuple[str, ...], Run] = field(default_factory=dict)

    def remaining_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def run(self, argv: list[str], allowance_s: float) -> Run | None:
        """Runs `argv` for at most `allowance_s` (less when the budget has less left); None
        when the budget cannot give it at least half its allowance (then it is not started).
        Each command runs in its own session (process group); a stop sends the group
        SIGTERM, then SIGKILL after `stop_grace_s`, so it ends the whole tree (torchrun ends
        its workers on SIGTERM; the local launcher's ranks die with the launcher)."""
        if self.list_only:
            print(shlex.join(["python", *argv[1:]]))
            return None
        if self.smoke and tuple(argv) in self.smoke_runs:
            return self.smoke_runs[tuple(argv)]
        limit = min(allowance_s, self.remaining_s() - self.stop_grace_s)
        if limit < allowance_s / 2:
            return None
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", **self.env)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=limit)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            output = self._stop(proc)
            code = None
        except BaseException:
            # The suite itself is stopped (SIGTERM, Ctrl-C): so is the command, before the
            # suite removes what it wrote.
            self._stop(proc)
            raise
        run = Run(argv, code, output, time.monotonic() - t0)
        if self.smoke:
            self.smoke_runs[tuple(argv)] = run
        return run

    def _stop(self, proc: subprocess.Popen[str]) -> str:
        """SIGTERM to the command's process group; SIGKILL to whatever of it has not ended
        within the grace. Returns once every member has ended, not only the leader: a worker
        that ignores SIGTERM and writes elsewhere than the pipe would otherwise outlive the
        stop, holding its GPU memory into the next check."""
        deadline = time.monotonic() + self.stop_grace_s
        _signal_group(proc.pid, signal.SIGTERM)
        output: str | None = None
        # On a timeout, what it wrote so far is kept for the next communicate().
        with contextlib.suppress(subprocess.TimeoutExpired):
            output, _ = proc.communicate(timeout=self.stop_grace_s)
        if not _group_ended(proc.pid, deadline - time.monotonic()):
            _signal_group(proc.pid, signal.SIGKILL)
            _group_ended(proc.pid, self.stop_grace_s)
        if output is None:
            output, _ = proc.communicate()
        return output

    def figure(
        self,
        check: str,
        name: str,
        value: Any,
        *,
        unit: str | None = None,
        target: str | None = None,
        met: bool | None = None,
        run: Run | None = None,
        **extra: Any,
    ) -> None:
        if self.list_only:
            return
        line = {
            "suite": "gpu",
            "check": check,
            "figure": name,
            "value": value,
            "unit": unit,
            "target": target,
            "met": None if self.smoke else met,
            **self.common,
            "elapsed_s": round(run.elapsed_s, 1) if run else None,
            **extra,
        }
        self.figures.append(line)
        print(json.dumps(line), flush=True)

    def not_done(
        self, check: str, run: Run | None, argv: list[str], *, exit_codes: tuple[int, ...] = (0,)
    ) -> bool:
        """One figure for a command that did not run, did not finish, or ended with an exit
        code outside `exit_codes`; True if so (and always when only listing commands)."""
        if self.list_only:
            return True
        command = shlex.join(argv)
        if run is None:
            reason = "not started: the suite's budget was spent"
        elif run.returncode is None:
            reason = "stopped at its time allowance"
        elif run.returncode not in exit_codes:
            tail = run.output.strip().splitlines()[-1:] or [""]
            reason = f"exit code {run.returncode}: {tail[0][:300]}"
        else:
            return False
        # Not started is not a failure (the budget ran out first): listed, not judged.
        met = None if run is None else False
        self.figure(check, "completed", False, met=met, reason=reason, run=run, command=command)
        return True


@dataclass(frozen=True)
class Target:
    """Where the suite runs: a GPU host, or the CPU smoke test (tiny preset, few steps)."""

    gpus: int
    cpu: bool

    def preset(self, preset: str) -> str:
        return "tiny" if self.cpu else preset

    def throughput(self, preset: str, *args: str, warmup: int = 5, steps: int = 10) -> list[str]:
        argv = [PYTHON, THROUGHPUT, "--preset", self.preset(preset)]
        argv += [
            "--warmup",
            str(1 if self.cpu else warmup),
            "--steps",
            str(2 if self.cpu else steps),
        ]
        return argv + (["--allow-cpu", *self._tiny(args)] if self.cpu else list(args))

    @staticmethod
    def _tiny(args: tuple[str, ...]) -> list[str]:
        """The flags that change what the tiny CPU run does. Sizes are the tiny run's own
        (the model's shape, the micro-batch), and a setting the tiny preset already has is
        its default run: checks that differ only in those run one command, once
        (Suite.run)."""
        from training.presets import build_config

        tiny = build_config("tiny")
        kept: list[str] = []
        for flag, value in zip(args[::2], args[1::2], strict=True):
            if flag == "--micro-batch" or (flag, value) == ("--passes", "1"):
                continue
            if flag == "--set" and (
                value.startswith("model.") or build_config("tiny", [value]) == tiny
            ):
                continue
            kept += [flag, value]
        return kept


def shipped_passes(preset: str) -> int:
    """Passes per optimizer step each GPU of a `PRESET_NODE` runs for `preset`: its global
    batch over the node's GPUs, in micro-batches (1b: 256 / 8 / 4 = 8)."""
    from config.instance_types import lookup
    from training.presets import build_config

    return build_config(preset).micro_batches(lookup(PRESET_NODE).accelerator_count)[1]


def _throughput_1b(suite: Suite, where: Target) -> None:
    """`1b` at one pass per optimizer step, then as shipped (`shipped_passes`). The first run
    fills the suite's compile cache; the second is a restarted process that finds it, so its
    first step against its steady step is what a restart costs."""
    one_pass = where.throughput("1b", "--passes", "1", warmup=3, steps=5)
    run = suite.run(one_pass, 90)
    if not suite.not_done("throughput_1b_one_pass", run, one_pass):
        assert run is not None
        _throughput_figures(suite, "throughput_1b_one_pass", run)
    passes = shipped_passes(where.preset("1b"))
    argv = where.throughput("1b", "--passes", str(passes), warmup=3, steps=5)
    run = suite.run(argv, 120)
    if suite.not_done("throughput_1b", run, argv):
        return
    assert run is not None
    out = run.json_line() or {}
    mfu = out.get("mfu")
    suite.figure(
        "throughput_1b",
        "mfu",
        mfu,
        target=f">= {TARGET_MFU} (1b as shipped: {passes} pass{'es' if passes > 1 else ''} a "
        "step, standard FLOP count)",
        met=None if mfu is None else mfu >= TARGET_MFU,
        run=run,
        command=out.get("command"),
        passes_per_step=out.get("passes_per_step"),
        one_pass_mfu=_figure_value(suite, "throughput_1b_one_pass", "mfu"),
    )
    suite.figure("throughput_1b", "tokens_per_s_per_gpu", out.get("tokens_per_s_per_gpu"), run=run)
    suite.figure(
        "throughput_1b",
        "max_memory_reserved_gb",
        out.get("max_memory_reserved_gb"),
        unit="GB",
        run=run,
    )
    ratio = out.get("first_step_over_steady")
    suite.figure(
        "compile_restart",
        "first_step_over_steady",
        ratio,
        target=f"<= {TARGET_FIRST_STEP_RATIO} (compiled code loaded from the cache)",
        met=None if ratio is None else ratio <= TARGET_FIRST_STEP_RATIO,
        run=run,
        first_step_s=out.get("first_step_s"),
        steady_step_s=out.get("step_time_s_median"),
        cold_first_step_s=_figure_value(suite, "throughput_1b_one_pass", "first_step_s"),
    )


def _figure_value(suite: Suite, check: str, name: str) -> Any:
    """The value of a figure printed before, or None."""
    found = [f["value"] for f in suite.figures if (f["check"], f["figure"]) == (check, name)]
    return found[-1] if found else None


def _checkpoint_cost(suite: Suite, where: Target) -> None:
    argv = [PYTHON, "benchmarks/training_checkpoint_gpu.py", "--preset", where.preset("1b")]
    argv += ["--checkpoints", "3", "--sync-repeats", "1"]
    if where.cpu:
        argv += ["--allow-cpu", "--every", "3", "--warmup", "1", "--baseline", "3"]
    # It removes its checkpoints itself, also on SIGTERM; not if the stop ends in SIGKILL.
    with removing_new(SCRATCH_PREFIX):
        run = suite.run(argv, 150)
    if suite.not_done("checkpoint_cost", run, argv):
        return
    assert run is not None
    out = run.json_line() or {}
    committed, attempted = out.get("checkpoints_committed"), out.get("checkpoints_attempted")
    suite.figure(
        "checkpoint_cost",
        "async_checkpoints_committed",
        f"{committed}/{attempted}",
        target="every async checkpoint committed",
        met=committed == attempted and out.get("checkpoints_failed") == 0,
        run=run,
    )
    ratio = out.get("blocking_ratio")
    suite.figure(
        "checkpoint_cost",
        "blocking_ratio",
        ratio,
        target=f"<= {TARGET_RATIO} of a synchronous save",
        met=None if ratio is None else ratio <= TARGET_RATIO,
        run=run,
        sync_save_s=out.get("sync_save_s"),
        steady_checkpoint_extra_s=out.get("steady_checkpoint_extra_s"),
    )
    first = out.get("first_checkpoint_extra_steps")
    suite.figure(
        "checkpoint_cost",
        "first_checkpoint_extra_steps",
        first,
        unit="steps",
        target=f"<= {TARGET_FIRST_STEPS}",
        met=None if first is None else first <= TARGET_FIRST_STEPS,
        run=run,
    )
    rate = out.get("commit_gb_s_per_rank")
    suite.figure(
        "checkpoint_cost",
        "commit_gb_s_per_rank",
        rate,
        unit="GB/s",
        target=f">= {TARGET_COMMIT_GB_S}",
        met=None if rate is None else rate >= TARGET_COMMIT_GB_S,
        run=run,
        commit_s_median=out.get("commit_s_median"),
        commit_bytes=out.get("commit_bytes"),
        write_threads=out.get("write_threads"),
        interval_s=out.get("interval_s"),
        interval_fits=out.get("interval_fits"),
    )


def _checkpoint_test(suite: Suite, where: Target) -> None:
    argv = [PYTHON, "-m", "pytest", "tests/training/test_gpu_checkpoint.py", "-q"]
    argv += ["-p", "no:cacheprovider"]
    run = suite.run(argv, 200)
    # pytest: 0 all passed, 1 some failed (counted below); anything else did not run them.
    if suite.not_done("gpu_checkpoint_test", run, argv, exit_codes=(0, 1)):
        return
    assert run is not None
    counts = {
        kind: int(m.group(1)) if (m := re.search(rf"(\d+) {kind}", run.output)) else 0
        for kind in ("passed", "failed", "skipped", "error")
    }
    suite.figure(
        "gpu_checkpoint_test",
        "tests_passed",
        counts["passed"],
        target="all pass (async checkpoints commit; a killed run resumes bit for bit)",
        met=None
        if where.cpu
        else counts["passed"] > 0 and counts["failed"] == counts["error"] == 0,
        run=run,
        failed=counts["failed"],
        skipped=counts["skipped"],
        errors=counts["error"],
    )


def _memory_8b_four_layers(suite: Suite, where: Target) -> None:
    """8b's width, heads, vocabulary and sequence with 4 of its 32 layers on one GPU, with no
    layer and with every layer checkpointed, against benchmarks/memory_plan.py. The peak is
    that of forward and backward alone (benchmarks.gpu.step_memory_split): the optimizer
    step's temporaries, a parameter-sized copy of fp32 state, would otherwise set the peak of
    both choices alike."""
    from benchmarks.gpu import GB
    from benchmarks.memory_plan import totals
    from training.presets import build_config

    sets = ["--set", "model.n_layers=4"]
    plan_cfg = build_config(where.preset("8b"), [] if where.cpu else ["model.n_layers=4"])
    choices = ["none", "all"]
    plan = dict(zip(choices, (t / GB for t in totals(plan_cfg, 1, choices)), strict=True))
    measured: dict[str, float | None] = {}
    for choice in choices:
        check = f"memory_8b_4_layers_{choice}"
        argv = where.throughput(
            "8b", *sets, "--set", f"parallel.activation_checkpoint={choice}", warmup=2, steps=3
        )
        run = suite.run(argv, 75)
        if suite.not_done(check, run, argv):
            continue
        assert run is not None
        out = run.json_line() or {}
        allocated = out.get("forward_backward_peak_allocated_gb")
        measured[choice] = allocated
        suite.figure(
            check,
            "forward_backward_peak_allocated_gb",
            allocated,
            unit="GB",
            target=f"<= {plan[choice]:.1f} (the plan's estimate)",
            met=None if allocated is None else allocated <= plan[choice],
            run=run,
            activation_peak_gb=out.get("activation_peak_gb"),
            forward_backward_start_allocated_gb=out.get("forward_backward_start_allocated_gb"),
            update_peak_allocated_gb=out.get("update_peak_allocated_gb"),
            step_peak_allocated_gb=out.get("max_memory_allocated_gb"),
            max_memory_reserved_gb=out.get("max_memory_reserved_gb"),
        )
    planned = plan["none"] - plan["all"]
    none, every = measured.get("none"), measured.get("all")
    saving = None if none is None or every is None else round(none - every, 2)
    suite.figure(
        "memory_8b_4_layers",
        "activation_checkpointing_saving_gb",
        saving,
        unit="GB",
        target=f"{planned:.2f} +/- {MEMORY_SAVING_TOLERANCE:.0%} (the plan's none - all, "
        "forward and backward peaks)",
        met=None if saving is None else abs(saving - planned) <= MEMORY_SAVING_TOLERANCE * planned,
    )


def _float8(suite: Suite, where: Target) -> None:
    """FP8 against bf16 (benchmarks/float8_training.py): the speed of 8b's decoder layer, the
    loss over a few hundred trainer steps, and `1b` as shipped with FP8 (MFU bf16-equivalent).
    Where FP8 cannot run (a GPU before compute capability 8.9) each says why, not judged."""
    argv = [PYTHON, FLOAT8, "layers", "--repeats", "20"]
    if not where.cpu:  # the CPU smoke test has no FP8 layers to time
        run = suite.run(argv, 75)
        if not suite.not_done("float8_layers", run, argv):
            assert run is not None
            out = run.json_line() or {}
            suite.figure(
                "float8_layers",
                "speedup",
                out.get("speedup"),
                unit="x",
                target="> 1 (8b decoder block, forward and backward, FP8 over bf16)",
                met=None if out.get("speedup") is None else out["speedup"] > 1,
                run=run,
                **{k: out.get(k) for k in ("bf16_ms", "float8_ms", "skipped")},
                bf16_tflops=out.get("bf16_tflops"),
                float8_tflops_bf16_equivalent=out.get("float8_tflops_bf16_equivalent"),
            )
    argv = [PYTHON, FLOAT8, "loss", "--steps", "2" if where.cpu else "300"]
    argv += ["--allow-cpu", "--tail", "2"] if where.cpu else []
    run = suite.run(argv, 300 if where.cpu else 120)
    if not suite.not_done("float8_loss", run, argv):
        assert run is not None
        out = run.json_line() or {}
        within = out.get("within_tolerance")
        suite.figure(
            "float8_loss",
            "relative_difference",
            out.get("relative_difference"),
            target=f"<= {out.get('tolerance')} (mean loss of the last steps, FP8 against bf16)",
            met=within,
            run=run,
            **{k: out.get(k) for k in ("bf16_tail_loss", "float8_tail_loss", "steps", "skipped")},
        )
    if where.cpu:
        return
    passes = shipped_passes("1b")
    flags = ["--passes", str(passes), "--set", "training.float8=true"]
    argv = where.throughput("1b", *flags, warmup=3, steps=5)
    run = suite.run(argv, 120)
    if not suite.not_done("throughput_1b_float8", run, argv):
        assert run is not None
        _throughput_figures(suite, "throughput_1b_float8", run)


# The measured 1b settings benchmarks/README.md compares (the preset's choice is the first
# check): name, then the flags.
VARIANTS_1B: list[tuple[str, list[str]]] = [
    ("1b_plain_loss", ["--set", "training.loss_chunk_tokens=0"]),
    (
        "1b_mb8_every2",
        ["--micro-batch", "8", "--set", "parallel.activation_checkpoint=every:2"],
    ),
    (
        "1b_mb2_all_plain_loss",
        [
            "--micro-batch",
            "2",
            "--set",
            "parallel.activation_checkpoint=all",
            "--set",
            "training.loss_chunk_tokens=0",
        ],
    ),
]
# 8b's activation-checkpointing choices on 8 GPUs (one node): the preset's every:2 first.
VARIANTS_8B = ["every:2", "all", "first:24"]


def _throughput_figures(suite: Suite, check: str, run: Run) -> None:
    out = run.json_line() or {}
    suite.figure(
        check,
        "mfu",
        out.get("mfu"),
        run=run,
        command=out.get("command"),
        mfu_basis=out.get("mfu_basis"),
        passes_per_step=out.get("passes_per_step"),
    )
    suite.figure(check, "tokens_per_s_per_gpu", out.get("tokens_per_s_per_gpu"), run=run)
    suite.figure(
        check, "max_memory_reserved_gb", out.get("max_memory_reserved_gb"), unit="GB", run=run
    )
    suite.figure(check, "first_step_s", out.get("first_step_s"), unit="s", run=run)


def _variants_1b(suite: Suite, where: Target) -> None:
    # On CPU one variant is the smoke test: the others run the same path with other settings.
    for name, flags in VARIANTS_1B[:1] if where.cpu else VARIANTS_1B:
        argv = where.throughput("1b", *flags, warmup=3, steps=5)
        run = suite.run(argv, 90)
        if not suite.not_done(name, run, argv):
            assert run is not None
            _throughput_figures(suite, name, run)


def _torchrun(nproc: int, argv: list[str]) -> list[str]:
    """`argv` (a benchmark script under this Python) under torchrun with `nproc` ranks."""
    launcher = [PYTHON, "-m", "torch.distributed.run", "--standalone"]
    return [*launcher, "--nproc_per_node", str(nproc), *argv[1:]]


def _tensor_parallel(suite: Suite, where: Target) -> None:
    """1b with tensor parallelism over the node's GPUs (the largest of 2, 4, 8 they hold)."""
    degrees = [d for d in (2, 4, 8) if d <= where.gpus]
    if not degrees and not suite.list_only:
        suite.figure(
            "tensor_parallel_1b",
            "completed",
            None,
            skipped=f"needs 2 or more GPUs on the node, found {where.gpus}",
        )
        return
    tp = degrees[-1] if degrees else 2
    flags = ["--set", f"parallel.tp={tp}"]
    argv = _torchrun(
        tp * (max(where.gpus, tp) // tp), where.throughput("1b", *flags, warmup=3, steps=5)
    )
    run = suite.run(argv, 120)
    if not suite.not_done("tensor_parallel_1b", run, argv):
        assert run is not None
        _throughput_figures(suite, "tensor_parallel_1b", run)


def _node_8b(suite: Suite, where: Target) -> None:
    if where.gpus < 8 and not suite.list_only:
        suite.figure(
            "throughput_8b_node",
            "completed",
            None,
            skipped=f"needs 8 GPUs on the node, found {where.gpus}",
        )
        return
    for choice in VARIANTS_8B:
        check = f"throughput_8b_{choice.replace(':', '')}"
        flags = ["--set", f"parallel.activation_checkpoint={choice}"]
        argv = _torchrun(8, where.throughput("8b", *flags, warmup=2, steps=4))
        run = suite.run(argv, 150)
        if not suite.not_done(check, run, argv):
            assert run is not None
            _throughput_figures(suite, check, run)


CHECKS: list[Callable[[Suite, Target], None]] = [
    _throughput_1b,
    _checkpoint_cost,
    _checkpoint_test,
    _memory_8b_four_layers,
    _float8,
    _tensor_parallel,
    _variants_1b,
    _node_8b,
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--allow-cpu", action="store_true", help="smoke-test the suite on CPU")
    ap.add_argument("--budget-s", type=float, default=SUITE_BUDGET_S)
    args = ap.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not (args.allow_cpu or args.list):
        sys.stderr.write(
            "error: the GPU suite needs a CUDA GPU and this machine has none visible "
            "(torch.cuda.is_available() is False); run `make gpu-suite` on a GPU host\n"
        )
        return 2
    gpus = torch.cuda.device_count() if cuda else 0
    where = Target(gpus=8 if args.list else gpus, cpu=not cuda and not args.list)
    suite = Suite(
        common={
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "gpus": gpus,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
        },
        budget_s=args.budget_s,
        list_only=args.list,
        smoke=where.cpu,
    )
    if args.list:
        for check in CHECKS:
            check(suite, where)
        return 0
    # Everything the commands write goes under one directory, removed at the end and on
    # SIGTERM or Ctrl-C (which stop the running command first): their temporary files
    # (TMPDIR) and the compile cache the `1b` runs share (a restart finds it).
    with scratch_dir("hptrain-gpu-suite-", Path(tempfile.gettempdir())) as scratch:
        (scratch / "tmp").mkdir()
        suite.env.update(
            TMPDIR=str(scratch / "tmp"),
            **{COMPILE_CACHE_DIR_ENV: str(scratch / "compile-cache")},
        )
        for check in CHECKS:
            check(suite, where)
    judged = [f for f in suite.figures if f["met"] is not None]
    missed = [f"{f['check']}.{f['figure']}" for f in judged if not f["met"]]
    not_run = [f["check"] for f in suite.figures if f.get("reason", "").startswith("not started")]
    print(
        json.dumps(
            {
                "suite": "gpu",
                "figure": "summary",
                "value": f"{len(judged) - len(missed)}/{len(judged)} targets met",
                "missed": missed,
                "not_run": not_run,
                "budget_s": args.budget_s,
                **suite.common,
                "elapsed_s": round(time.monotonic() - suite.started, 1),
            }
        )
    )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
