from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from training import metrics
from training.metrics import AttemptRecord, params_sha256, recovery_stats

# The operator's log monitoring matches these; the format is a fixed contract.
START_RE = re.compile(r"^HPTRAIN start rank=(\d+) world=(\d+) step=(\d+) resumed_from=(fast|durable|none) preset=(\S+)$")
STEP_RE = re.compile(r"^HPTRAIN step=(\d+) loss=(\d+\.\d{4}) tokens_per_s=(\d+\.\d) samples_per_s=(\d+\.\d\d) step_time_s=(\d+\.\d{3})$")
CKPT_RE = re.compile(r"^HPTRAIN checkpoint step=(\d+) tier=(fast|durable) blocking_s=(\d+\.\d{3}) status=(started|committed|failed)$")
WATCHDOG_RE = re.compile(r"^HPTRAIN watchdog no progress for (\d+)s at step=(\d+); exiting$")


def test_log_line_formats(capsys) -> None:  # type: ignore[no-untyped-def]
    metrics.log_start(1, 2, 20, "durable", "tiny")
    metrics.log_step(21, 5.123456, 12345.678, 99.999, 0.0456)
    metrics.log_checkpoint(24, "fast", 0.01234, "committed")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "HPTRAIN start rank=1 world=2 step=20 resumed_from=durable preset=tiny"
    assert lines[1] == "HPTRAIN step=21 loss=5.1235 tokens_per_s=12345.7 samples_per_s=100.00 step_time_s=0.046"
    assert lines[2] == "HPTRAIN checkpoint step=24 tier=fast blocking_s=0.012 status=committed"
    assert START_RE.match(lines[0]) and STEP_RE.match(lines[1]) and CKPT_RE.match(lines[2])
    assert metrics.watchdog_line(30.7, 9) == "HPTRAIN watchdog no progress for 30s at step=9; exiting"
    assert WATCHDOG_RE.match(metrics.watchdog_line(30.7, 9))


def test_params_digest_is_canonical_and_sensitive() -> None:
    a = {"b.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3), "a.weight": torch.ones(3)}
    reordered = {"a.weight": torch.ones(3), "b.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
    assert params_sha256(a) == params_sha256(reordered)
    # bf16 or non-contiguous storage does not change the canonical bytes of equal values.
    assert params_sha256({"x": torch.ones(2, 3).t()}) == params_sha256({"x": torch.ones(3, 2)})
    assert params_sha256({"x": torch.ones(4, dtype=torch.bfloat16)}) == params_sha256({"x": torch.ones(4)})
    flipped = {k: v.clone() for k, v in a.items()}
    flipped["b.weight"].view(-1)[3] = torch.nextafter(torch.tensor(3.0), torch.tensor(4.0))
    assert params_sha256(flipped) != params_sha256(a)
    assert params_sha256({"x": torch.ones(2, 3)}) != params_sha256({"x": torch.ones(3, 2)})
    assert params_sha256({"x": torch.ones(2)}) != params_sha256({"y": torch.ones(2)})


def test_recovery_stats() -> None:
    first = AttemptRecord(attempt=0, started_unix=100.0, last_step=23, last_step_unix=150.0,
                          faults=[{"kind": "sigkill", "step": 24, "unix": 151.0}])
    second = AttemptRecord(attempt=1, started_unix=152.0, resumed_step=20, resumed_from="fast", first_step_unix=160.5)
    (stat,) = recovery_stats([second, first])
    assert stat["steps_lost"] == 3 and stat["resumed_from"] == "fast"
    assert stat["recovery_s"] == 9.5


def test_ledger_roundtrip(tmp_path: Path) -> None:
    ledger = metrics.RunLedger(tmp_path, None)
    ledger.record.last_step = 7
    ledger.flush()
    metrics.write_fault(tmp_path, ledger.record.attempt, 1, {"kind": "hang", "unix": time.time()})
    again = metrics.RunLedger(tmp_path, None)
    assert again.record.attempt == 1  # numbering continues across restarts
    (rec,) = metrics.read_records(tmp_path)
    assert rec.last_step == 7 and rec.faults[0]["kind"] == "hang"


def test_watchdog_exits_nonzero_with_fixed_line() -> None:
    code = (
        "import time; from training.watchdog import Watchdog\n"
        "w = Watchdog(0.5, poll_s=0.05); w.start(); w.beat(7)\n"
        "time.sleep(30)\n"
    )
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert time.monotonic() - t0 < 20
    assert WATCHDOG_RE.match(proc.stdout.strip()), proc.stdout
    assert "at step=7;" in proc.stdout


def test_watchdog_quiet_while_beating() -> None:
    from training.watchdog import Watchdog

    w = Watchdog(0.3, poll_s=0.02)
    w.start()
    for i in range(20):
        w.beat(i)
        time.sleep(0.05)
    w.stop()  # still alive: the process would have exited otherwise
