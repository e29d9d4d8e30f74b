from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from tests.training import loglines
from tests.training.conftest import REPO
from training import metrics
from training.metrics import AttemptRecord, params_sha256, recovery_stats


def test_resize_line_format(capsys: pytest.CaptureFixture[str]) -> None:
    # One line per elastic resize; pinned whole, and read back by the elastic test's pattern.
    metrics.log_resize(4, 2, 4, 2, 8, 64, 8, 2, 2)
    line = capsys.readouterr().out
    assert line == (
        "HPTRAIN resize: world 4 -> 2 (dp 4 -> 2), resumed at step=8 sample_position=64 "
        "global_batch=8 per_dp_rank=2x2\n"
    )
    assert loglines.find(loglines.line_pattern(metrics.RESIZE_FMT), line) == [
        {
            "old_world": "4",
            "world": "2",
            "old_dp": "4",
            "dp": "2",
            "step": "8",
            "position": "64",
            "batch": "8",
            "micro": "2",
            "passes": "2",
        }
    ]


def test_log_line_formats(capsys: pytest.CaptureFixture[str]) -> None:
    # The operator's log monitoring matches these lines: the formats are a fixed contract,
    # pinned here whole, byte for byte.
    metrics.log_start(1, 3, 20, "durable", "tiny", 9, 8)
    metrics.log_step(21, 5.123456, 12345.678, 99.999, 0.0456)
    metrics.log_checkpoint(24, "fast", 0.01234, "committed")
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "HPTRAIN start rank=1 world=3 step=20 resumed_from=durable preset=tiny "
        "global_batch=9 preset_batch=8",
        "HPTRAIN step=21 loss=5.1235 tokens_per_s=12345.7 samples_per_s=100.00 step_time_s=0.046",
        "HPTRAIN checkpoint step=24 tier=fast blocking_s=0.012 status=committed",
    ]
    watchdog = metrics.watchdog_line(30.7, 9)
    assert watchdog == "HPTRAIN watchdog no progress for 30s at step=9; exiting"
    metrics.log_unsaved(40, "durable", 5)
    assert capsys.readouterr().out == (
        "HPTRAIN final checkpoint step=40 tier=durable did not commit; exit_code=5\n"
    )
    # The patterns the other tests parse these lines with read every field back.
    start, step, ckpt = (
        loglines.find(p, line)
        for p, line in zip((loglines.START, loglines.STEP, loglines.CHECKPOINT), lines, strict=True)
    )
    assert start == [
        {
            "rank": "1",
            "world": "3",
            "step": "20",
            "resumed": "durable",
            "preset": "tiny",
            "batch": "9",
            "preset_batch": "8",
        }
    ]
    assert step == [
        {"step": "21", "loss": "5.1235", "tps": "12345.7", "sps": "100.00", "dt": "0.046"}
    ]
    assert ckpt == [{"step": "24", "tier": "fast", "blocking": "0.012", "status": "committed"}]
    assert loglines.find(loglines.WATCHDOG, watchdog) == [{"seconds": "30", "step": "9"}]
    # Whole lines only, with the fixed decimals.
    assert not loglines.STEP.search(lines[1].replace("loss=5.1235", "loss=5.123"))
    assert not loglines.CHECKPOINT.search("x" + lines[2])


def test_params_digest_is_canonical_and_sensitive() -> None:
    a = {"b.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3), "a.weight": torch.ones(3)}
    reordered = {
        "a.weight": torch.ones(3),
        "b.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    }
    assert params_sha256(a) == params_sha256(reordered)
    # bf16 or non-contiguous storage does not change the canonical bytes of equal values.
    assert params_sha256({"x": torch.ones(2, 3).t()}) == params_sha256({"x": torch.ones(3, 2)})
    assert params_sha256({"x": torch.ones(4, dtype=torch.bfloat16)}) == params_sha256(
        {"x": torch.ones(4)}
    )
    flipped = {k: v.clone() for k, v in a.items()}
    flipped["b.weight"].view(-1)[3] = torch.nextafter(torch.tensor(3.0), torch.tensor(4.0))
    assert params_sha256(flipped) != params_sha256(a)
    assert params_sha256({"x": torch.ones(2, 3)}) != params_sha256({"x": torch.ones(3, 2)})
    assert params_sha256({"x": torch.ones(2)}) != params_sha256({"y": torch.ones(2)})


def test_recovery_stats() -> None:
    first = AttemptRecord(
        attempt=0,
        started_unix=100.0,
        last_step=23,
        last_step_unix=150.0,
        faults=[{"kind": "sigkill", "step": 24, "unix": 151.0}],
    )
    second = AttemptRecord(
        attempt=1, started_unix=152.0, resumed_step=20, resumed_from="fast", first_step_unix=160.5
    )
    (stat,) = recovery_stats([second, first])
    assert stat["steps_lost"] == 3 and stat["resumed_from"] == "fast"
    assert stat["recovery_s"] == 9.5


def test_ledger_roundtrip(tmp_path: Path) -> None:
    ledger = metrics.RunLedger(tmp_path, None)
    ledger.record.last_step = 7
    ledger.flush()
    fault = {"kind": "hang", "unix": time.time()}
    metrics.write_fault(tmp_path, ledger.record.attempt, 1, fault)
    again = metrics.RunLedger(tmp_path, None)
    assert again.record.attempt == 1  # numbering continues across restarts
    (rec,) = metrics.read_records(tmp_path)
    assert rec.last_step == 7 and rec.faults[0]["kind"] == "hang"
    attempts = tmp_path / "attempts"
    assert sorted(p.name for p in attempts.iterdir()) == ["attempt_0000.json", "fault_0000_r1.json"]
    assert ledger.path.read_text() == json.dumps(asdict(ledger.record), indent=1)
    assert (attempts / "fault_0000_r1.json").read_text() == json.dumps(fault)


def test_summary_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = {"steps": 3, "exit_reason": "completed", "recoveries": [{"b": 1, "a": None}]}
    metrics.write_summary(tmp_path, summary)
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]
    assert (tmp_path / "summary.json").read_text() == json.dumps(summary, indent=2, sort_keys=True)
    assert capsys.readouterr().out == json.dumps(summary, sort_keys=True) + "\n"


def _run_python(code: str, timeout: float) -> subprocess.CompletedProcess[str]:
    # A hang is a TimeoutExpired failure: the tests never time anything themselves.
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def test_watchdog_exits_nonzero_with_fixed_line() -> None:
    code = (
        "import time; from training.watchdog import Watchdog\n"
        "w = Watchdog(0.5, poll_s=0.05); w.start(); w.beat(7)\n"
        "time.sleep(300)\n"
    )
    proc = _run_python(code, timeout=20)
    assert proc.returncode == 3
    line = loglines.WATCHDOG.fullmatch(proc.stdout.strip())
    assert line is not None, proc.stdout
    assert line["step"] == "7" and line["seconds"].isdigit()


def test_watchdog_quiet_while_beating() -> None:
    # Beats every 0.05 s for three times the 0.5 s timeout. Had the watchdog fired, the
    # process would have printed the watchdog line and exited 3.
    code = (
        "import threading, time; from training.watchdog import Watchdog\n"
        "def running():\n"
        "    return any(t.name == 'hptrain-watchdog' for t in threading.enumerate())\n"
        "w = Watchdog(0.5, poll_s=0.02); w.start()\n"
        "print('running' if running() else 'not started')\n"
        "for i in range(30):\n"
        "    w.beat(i); time.sleep(0.05)\n"
        "w.stop()\n"
        "print('stopped' if not running() else 'still running')\n"
    )
    proc = _run_python(code, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "running\nstopped\n", "")
