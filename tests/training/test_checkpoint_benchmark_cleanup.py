"""Checkpoint benchmarks remove what they write, also when stopped by SIGTERM or Ctrl-C: a
stopped run once left 51 GB in /dev/shm and the next one was killed for memory. And the
commit benchmark prints the raw write and the commit side by side."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from benchmarks.scratch import removing_new, scratch_dir

REPO = Path(__file__).resolve().parents[2]
COMMIT_BENCHMARK = [sys.executable, str(REPO / "benchmarks" / "checkpoint_commit.py")]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_scratch_directory_is_removed_when_the_run_is_stopped(
    tmp_path: Path, signum: int
) -> None:
    before = signal.getsignal(signum)
    with pytest.raises(SystemExit) as stopped, scratch_dir("bench-", tmp_path) as work:
        (work / "shard").write_bytes(b"x" * 1000)
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler interrupts this
    assert stopped.value.code == 128 + signum
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signum) == before


def test_a_stop_that_breaks_a_write_on_its_way_out_still_exits_with_the_signal(
    tmp_path: Path,
) -> None:
    # As in torch.save: the stop lands inside a writer, whose own cleanup then raises
    # another error in place of the SystemExit.
    def interrupted_write() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts this
        finally:
            raise RuntimeError("unexpected pos 704 vs 598")

    with pytest.raises(SystemExit) as stopped, scratch_dir("bench-", tmp_path):
        interrupted_write()
    assert stopped.value.code == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []


def test_a_scratch_directory_is_removed_after_an_error(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="disk"), scratch_dir("bench-", tmp_path) as work:
        (work / "f").write_text("x")
        raise OSError("disk")
    assert list(tmp_path.iterdir()) == []


def test_what_a_killed_benchmark_left_is_removed_and_nothing_older(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    monkeypatch.setattr("benchmarks.scratch.SHM", shm)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    (shm / "bench-older").mkdir(parents=True)
    tmp.mkdir()
    with removing_new("bench-"):
        (shm / "bench-new" / "fast").mkdir(parents=True)  # as a SIGKILL would leave them
        (tmp / "bench-other").mkdir()
        (tmp / "unrelated").mkdir()
    assert sorted(p.name for p in [*shm.iterdir(), *tmp.iterdir()]) == ["bench-older", "unrelated"]


def test_the_commit_benchmark_stopped_by_sigterm_leaves_nothing(tmp_path: Path) -> None:
    argv = [*COMMIT_BENCHMARK, "--gib", "0.01", "--repeats", "100000", "--dir", str(tmp_path)]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120  # a guard against a hang, not a measurement
        while not list(tmp_path.glob("hptrain-commit-bench-*/fast/step_*")):
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            assert time.monotonic() < deadline, "no checkpoint was committed"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []


def test_the_commit_benchmark_prints_raw_and_commit_side_by_side(tmp_path: Path) -> None:
    argv = [*COMMIT_BENCHMARK, "--gib", "0.01", "--repeats", "2", "--dir", str(tmp_path)]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
    out = json.loads(line)
    for way in ("raw", "raw_parallel", "commit", "legacy_commit"):
        for figure in ("gib_s", "gib_s_median", "cpu_s_per_gib"):
            assert out[f"{way}_{figure}"] > 0, (way, figure)
        assert out[f"{way}_gib_s"] >= out[f"{way}_gib_s_median"]  # the fastest repeat
    assert out["ratio"] == pytest.approx(out["commit_gib_s"] / out["raw_gib_s"], abs=2e-3)
    assert out["ratio_median"] > 0 and out["target"] == "ratio >= 0.5"
    assert len(out["load_average_1m"]) == 2
    assert isinstance(out["target_met"], bool)
    assert out["storage"] == str(tmp_path) and list(tmp_path.iterdir()) == []
    # The committed lines the ratio comes from carry the tier's speed.
    assert result.stdout.count("status=committed commit_s=") == 2
