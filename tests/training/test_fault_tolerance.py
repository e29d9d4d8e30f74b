"""End-to-end fault tests: 2 ranks on CPU (gloo) through the local launcher.

Every faulty run must end with the same final_params_sha256 as the fault-free reference,
bit for bit: deterministic data order, restored RNG/optimizer/schedule state and a fixed
reduction order make a resumed run indistinguishable from an uninterrupted one.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.training import loglines
from tests.training.conftest import STEPS, LaunchResult, launch
from training.checkpoint.format import list_committed, validate_checkpoint
from training.data import write_token_shard
from training.metrics import START_FMT

# Every test here trains through the launcher (2 processes, seconds each).
pytestmark = pytest.mark.slow

START = loglines.line_pattern(START_FMT, world="2", preset="tiny")


def _ok(r: LaunchResult) -> None:
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def _starts(r: LaunchResult) -> list[tuple[int, str]]:
    """(resumed step, tier) per attempt, from rank 0's start line."""
    starts = loglines.find(START, r.stdout)
    return [(int(s["step"]), s["resumed"]) for s in starts if s["rank"] == "0"]


def _steps_per_attempt(r: LaunchResult) -> list[list[int]]:
    chunks = re.split(r"^HPTRAIN-LAUNCH attempt \d+ failed.*$", r.stdout, flags=re.M)
    return [[int(s["step"]) for s in loglines.find(loglines.STEP, c)] for c in chunks]


def test_reference_run(reference_run: LaunchResult) -> None:
    s = reference_run.summary
    assert s["steps"] == STEPS and s["restarts"] == 0 and s["exit_reason"] == "completed"
    assert re.fullmatch(r"[0-9a-f]{64}", s["final_params_sha256"])
    assert _steps_per_attempt(reference_run) == [list(range(1, STEPS + 1))]
    assert _starts(reference_run) == [(0, "none")]
    # Every rank's start line names the batch it runs and the preset's: tiny's 8 splits over 2.
    batches = {(b["batch"], b["preset_batch"]) for b in loglines.find(START, reference_run.stdout)}
    assert batches == {("8", "8")}
    assert 0 < s["goodput"] <= 1 and s["checkpoint_blocking_s_total"] > 0
    assert (reference_run.out / "final" / "model.pt").is_file()
    # Keep-last-k held during the run: fast keeps 3, durable 2 (10, 20, 30, 40 were written).
    assert [r.step for r in list_committed(reference_run.out / "ckpt" / "durable", "durable")] == [
        40,
        30,
    ]
    assert len(list_committed(reference_run.out / "ckpt" / "fast", "fast")) == 3


def test_kill_and_restart_is_bit_exact(reference_run: LaunchResult, tmp_path: Path) -> None:
    r = launch(tmp_path, "--kill-rank", "1", "--kill-at-step", "23")
    _ok(r)
    s = r.summary
    assert s["restarts"] == 1
    assert s["launcher"]["attempts"][0]["exit_codes"][1] == -9  # rank 1 really was SIGKILLed
    # Newest checkpoint before step 23: step 20 (durable, it covers the fast tier there).
    assert _starts(r) == [(0, "none"), (20, "durable")]
    first, second = _steps_per_attempt(r)
    assert first == list(range(1, 23)) and second == list(range(21, STEPS + 1))
    assert s["recoveries"][0]["steps_lost"] == 2
    assert s["final_params_sha256"] == reference_run.summary["final_params_sha256"]
    # The lost time is named: the restart and the 2 steps done again, beside start-up.
    badput = s["badput_s"]
    assert badput["restart"] > 0 and badput["recomputed_steps"] > 0 and badput["startup"] > 0
    assert reference_run.summary["badput_s"]["restart"] == 0


def _adds_up(summary: dict[str, Any]) -> None:
    """Productive time and every cause of badput make the wall time (to the ms rounding):
    no cause counted twice. Only for runs without estimated causes (no steps done again)."""
    total = summary["productive_step_time_s"] + sum(summary["badput_s"].values())
    assert total == pytest.approx(summary["wall_time_s"], abs=0.01)


def test_a_slow_data_source_is_data_wait_not_productive_time(tmp_path: Path) -> None:
    r = launch(tmp_path, "--slow-data-ms", "150", steps=8)
    _ok(r)
    s = r.summary
    # Each of the 8 steps waited at least 150 ms for its batch, outside its step time.
    assert s["badput_s"]["data_wait"] >= 8 * 0.150
    step_times = [float(line["dt"]) for line in loglines.find(loglines.STEP, r.stdout)]
    assert len(step_times) == 8 and sum(step_times) == pytest.approx(
        s["productive_step_time_s"], abs=0.01
    )
    _adds_up(s)


def test_kill_during_checkpoint_never_loads_torn(
    reference_run: LaunchResult, tmp_path: Path
) -> None:
    r = launch(tmp_path, "--kill-during-checkpoint", "12")
    _ok(r)
    attempt0 = r.summary["launcher"]["attempts"][0]
    fast_after_kill = attempt0["checkpoints_after"]["fast"]
    # The shards of step 12 were on disk but never committed...
    assert any(n.startswith("step_00000012.tmp-") for n in fast_after_kill), fast_after_kill
    assert "step_00000012" not in fast_after_kill
    # ...so the restart resumed from the newest committed step (durable 10), not from 12.
    assert _starts(r)[1] == (10, "durable")
    # The torn directory was cleaned up on restart.
    assert not any(".tmp-" in p.name for p in (tmp_path / "ckpt" / "fast").iterdir())
    assert r.summary["final_params_sha256"] == reference_run.summary["final_params_sha256"]


def _committed_steps(listing: dict[str, list[str]]) -> list[tuple[int, str]]:
    """(step, tier) of the committed checkpoints in a launcher listing, newest first."""
    found = [
        (int(n[5:]), tier)
        for tier, names in listing.items()
        for n in names
        if re.fullmatch(r"step_\d{8}", n)
    ]
    return sorted(found, key=lambda c: (-c[0], c[1] != "fast"))


def test_corrupt_newest_falls_back_to_previous(reference_run: LaunchResult, tmp_path: Path) -> None:
    r = launch(tmp_path, "--kill-rank", "0", "--kill-at-step", "23", "--corrupt-newest")
    _ok(r)
    attempt0 = r.summary["launcher"]["attempts"][0]
    corrupted = attempt0["corrupted"]
    # The kill waits for the in-flight checkpoint, so step 20 (durable) was committed.
    assert corrupted.startswith("durable/step_00000020/")
    assert "checksum mismatch" in r.stderr + r.stdout or "checksum mismatch" in _logs(tmp_path)
    # Expected: the newest committed checkpoint older than the corrupted one, as the launcher
    # recorded them after the kill (fast step 16) -- an older checkpoint, not a fresh start.
    committed = _committed_steps(attempt0["checkpoints_after"])
    assert committed[0] == (20, "durable")
    previous = next(c for c in committed if c[0] < 20)
    assert previous == (16, "fast")
    assert _starts(r)[1] == previous
    recovery = r.summary["recoveries"][0]
    assert (recovery["resumed_step"], recovery["resumed_from"]) == previous
    assert r.summary["final_params_sha256"] == reference_run.summary["final_params_sha256"]


def _logs(out: Path) -> str:
    return "".join(p.read_text() for p in sorted((out / "logs").glob("*.log")))


def test_sigterm_saves_and_exits_cleanly(tmp_path: Path) -> None:
    # This run also exercises the memory-mapped shard source.
    data = tmp_path / "tokens"
    data.mkdir()
    rng = np.random.default_rng(1)
    for i in range(3):
        write_token_shard(
            str(data / f"shard_{i}.bin"), rng.integers(0, 1024, size=64 * 50 + 1), "uint16"
        )
    out = tmp_path / "run"
    r = launch(
        out, "--sigterm-at-step", "17", overrides=["data.source=memmap", f"data.path={data}"]
    )
    _ok(r)
    s = r.summary
    assert s["exit_reason"] == "sigterm" and s["steps"] == 17 and s["restarts"] == 0
    assert s["launcher"]["attempts"][0]["exit_codes"] == [0, 0]
    # Every checkpoint line, a committed one with its commit_s= and bytes= too.
    sigterm_save = [
        c["status"]
        for c in loglines.find(loglines.CHECKPOINT, r.stdout)
        if (c["step"], c["tier"]) == ("17", "durable")
    ]
    assert sigterm_save == ["started", "committed"]
    (newest, *_) = list_committed(out / "ckpt" / "durable", "durable")
    assert newest.step == 17
    for rank in (0, 1):
        ok, why = validate_checkpoint(newest.path, rank)
        assert ok, why
    # Relaunching the same directory resumes from the SIGTERM checkpoint and completes.
    again = launch(out, steps=20, overrides=["data.source=memmap", f"data.path={data}"])
    _ok(again)
    assert _starts(again) == [(17, "durable")]
    assert again.summary["steps"] == 20
    # The job restarted once (across two launches); this launch did not restart at all.
    assert again.summary["restarts"] == 1 and again.summary["launcher"]["restarts"] == 0
    # The relaunch's logs were added next to the first launch's, not written over them.
    assert sorted(p.name for p in (out / "logs").iterdir()) == [
        "attempt0_rank0.log",
        "attempt0_rank1.log",
        "attempt1_rank0.log",
        "attempt1_rank1.log",
    ]
    assert "HPTRAIN step=17 " in (out / "logs" / "attempt0_rank0.log").read_text()
    assert again.summary["launcher"]["attempts"][0]["job_attempt"] == 1


def test_hung_rank_trips_watchdog(reference_run: LaunchResult, tmp_path: Path) -> None:
    r = launch(tmp_path, "--hang-rank", "1", "--hang-at-step", "9", "--watchdog-s", "3")
    _ok(r)
    s = r.summary
    assert s["restarts"] == 1
    assert 3 in s["launcher"]["attempts"][0]["exit_codes"]  # watchdog exit code
    # The hung rank's watchdog, and maybe its peer's (stuck in a collective), at step 8.
    assert {w["step"] for w in loglines.find(loglines.WATCHDOG, r.stdout)} == {"8"}
    assert _starts(r)[1] == (8, "fast")
    assert s["final_params_sha256"] == reference_run.summary["final_params_sha256"]


def test_hsdp_with_activation_checkpointing_trains(tmp_path: Path) -> None:
    # 2 x 1 mesh (replicate x shard) exercises the HSDP path on the same 2 CPU ranks.
    r = launch(
        tmp_path,
        steps=12,
        overrides=["parallel.dp_replicate=2", "parallel.activation_checkpoint=true"],
    )
    _ok(r)
    losses = [float(s["loss"]) for s in loglines.find(loglines.STEP, r.stdout)]
    assert len(losses) == 12 and losses[-1] < losses[0]
    assert r.summary["steps"] == 12 and re.fullmatch(
        r"[0-9a-f]{64}", r.summary["final_params_sha256"]
    )


def test_intact_but_incompatible_checkpoints_are_not_discarded(
    reference_run: LaunchResult, tmp_path: Path
) -> None:
    shutil.copytree(reference_run.out / "ckpt", tmp_path / "ckpt")
    before = sorted(p.name for p in (tmp_path / "ckpt" / "durable").iterdir())
    # Bad input: the launcher stops after the first attempt (no restarts) with exit code 2
    # and the rank's one-line error.
    r = launch(tmp_path, overrides=["model.dim=96"])
    assert r.returncode == 2
    assert r.summary["launcher"]["restarts"] == 0
    assert r.summary["launcher"]["attempts"][0]["outcome"] == "bad_input"
    assert "refusing to start from scratch" in r.stderr and r.stderr.startswith("error: ")
    assert "refusing to start from scratch" in _logs(tmp_path)
    assert "Traceback" not in _logs(tmp_path)
    # Nothing was pruned or overwritten by a run that started over.
    assert sorted(p.name for p in (tmp_path / "ckpt" / "durable").iterdir()) == before


def test_node_local_fast_tier_resumes_on_every_node(tmp_path: Path) -> None:
    # Two emulated nodes of one rank each: each node has its own fast directory and its own
    # LOCAL_RANK 0, as with /dev/shm per pod. Replicated state (step, schedule, data position,
    # RNG) must be in every node's copy, so a resume works with the durable tier gone.
    extra = ["--nodes", "2"]
    first = launch(tmp_path, *extra, steps=14, overrides=["training.cpu_threads=1"])
    _ok(first)
    for node in (0, 1):
        fast = tmp_path / "ckpt" / f"fast-node{node}"
        assert [r.step for r in list_committed(fast, "fast")] == [12, 8, 4]
        ok, why = validate_checkpoint(fast / "step_00000012", node)
        assert ok, why
    shutil.rmtree(tmp_path / "ckpt" / "durable")
    again = launch(
        tmp_path, *extra, "--max-restarts", "0", steps=20, overrides=["training.cpu_threads=1"]
    )
    _ok(again)
    starts = [
        (int(s["rank"]), int(s["step"]), s["resumed"]) for s in loglines.find(START, again.stdout)
    ]
    assert sorted(starts) == [(0, 12, "fast"), (1, 12, "fast")]
    assert again.summary["steps"] == 20 and "refusing" not in _logs(tmp_path)


def _tmp_dirs(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "ckpt").rglob("*.tmp-*"))


def test_disk_full_once_then_later_checkpoints_commit(
    reference_run: LaunchResult, tmp_path: Path
) -> None:
    r = launch(tmp_path, "--disk-full-at-checkpoint", "8")
    _ok(r)
    statuses = {(int(c["step"]), c["status"]) for c in loglines.find(loglines.CHECKPOINT, r.stdout)}
    assert (8, "failed") in statuses and (12, "committed") in statuses
    assert "No space left on device (injected)" in r.stderr + r.stdout
    s = r.summary
    assert s["checkpoints_failed"] == 1 and s["final_checkpoint_committed"] is True
    assert s["restarts"] == 0 and _tmp_dirs(tmp_path) == []
    # A failed checkpoint changes nothing in training.
    assert s["final_params_sha256"] == reference_run.summary["final_params_sha256"]


def test_disk_full_for_good_fails_the_run(tmp_path: Path) -> None:
    r = launch(tmp_path, "--disk-full-from-step", "30", "--max-restarts", "0", steps=32)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    assert r.summary["launcher"]["attempts"][0]["exit_codes"] == [5, 5]
    assert "HPTRAIN final checkpoint step=32 tier=durable did not commit; exit_code=5" in r.stdout
    s = r.summary
    assert s["exit_reason"] == "completed" and s["final_checkpoint_committed"] is False
    assert s["last_checkpoint"] == {"durable": 20, "fast": 28}
    assert _tmp_dirs(tmp_path) == []


def test_sigterm_whose_save_failed_exits_nonzero(tmp_path: Path) -> None:
    r = launch(
        tmp_path, "--sigterm-at-step", "13", "--disk-full-from-step", "13", "--max-restarts", "0"
    )
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    assert r.summary["launcher"]["attempts"][0]["exit_codes"] == [5, 5]
    assert "HPTRAIN final checkpoint step=13 tier=durable did not commit; exit_code=5" in r.stdout
    assert r.summary["exit_reason"] == "sigterm"
    assert r.summary["final_checkpoint_committed"] is False


def test_all_checkpoints_corrupt_stops_then_start_fresh_trains(
    reference_run: LaunchResult, tmp_path: Path
) -> None:
    shutil.copytree(reference_run.out / "ckpt", tmp_path / "ckpt")
    refs = [
        ref
        for tier in ("fast", "durable")
        for ref in list_committed(tmp_path / "ckpt" / tier, tier)
    ]
    for ref in refs:
        shard = ref.path / "__0_0.distcp"
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    r = launch(tmp_path)
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for ref in refs:
        assert f"{ref.tier}/{ref.path.name}: __0_0.distcp checksum mismatch" in lines[0]
    assert r.summary["launcher"]["attempts"][0]["outcome"] == "bad_input"
    # Nothing trained over them...
    assert loglines.find(loglines.STEP, r.stdout) == []
    assert all(ref.path.is_dir() for ref in refs)
    # ...until a fresh start is asked for: the same run again, from step 0.
    fresh = launch(tmp_path, "--start-fresh")
    _ok(fresh)
    assert _starts(fresh) == [(0, "none")]
    assert fresh.summary["final_params_sha256"] == reference_run.summary["final_params_sha256"]


def test_another_world_size_resumes_resharded(reference_run: LaunchResult, tmp_path: Path) -> None:
    shutil.copytree(reference_run.out / "ckpt", tmp_path / "ckpt")
    r = launch(tmp_path, nproc=1, steps=STEPS + 4, overrides=["training.cpu_threads=1"])
    _ok(r)
    start = loglines.line_pattern(START_FMT, world="1")
    assert [(int(s["step"]), s["resumed"]) for s in loglines.find(start, r.stdout)] == [
        (STEPS, "durable")
    ]
    # (The launcher passes each rank's stderr on through its stdout.)
    assert "world_size 2 -> 1 (allowed: resharded by DCP" in r.stdout
    assert f"training.steps {STEPS} -> {STEPS + 4} (allowed" in r.stdout
    assert r.summary["steps"] == STEPS + 4 and r.summary["world_size"] == 1


def test_more_ranks_than_wrote_the_checkpoints_resumes_resharded(tmp_path: Path) -> None:
    first = launch(tmp_path, nproc=1, steps=12, overrides=["training.cpu_threads=1"])
    _ok(first)
    again = launch(tmp_path, steps=16, overrides=["training.cpu_threads=1"])
    _ok(again)
    assert _starts(again) == [(12, "durable")]  # the final save of the 1-rank run
    assert "world_size 1 -> 2 (allowed" in again.stdout
    assert again.summary["steps"] == 16 and again.summary["restarts"] == 1
    # The resumed run kept training the same model: the loss did not jump back to its start.
    losses = [float(s["loss"]) for s in loglines.find(loglines.STEP, again.stdout)]
    first_losses = [float(s["loss"]) for s in loglines.find(loglines.STEP, first.stdout)]
    assert losses[0] < first_losses[0]
