"""training/badput.py: the wall time no surviving step used, by cause, from the run ledger's
records and the job's recoveries; with the productive time it adds up to the wall time."""

from __future__ import annotations

import pytest

from training.badput import CAUSES, OTHER, by_cause, with_other
from training.metrics import AttemptRecord

JOB_START = 1000.0


def _attempt(
    attempt: int,
    started: float,
    first_step_end: float,
    first_step_s: float,
    *,
    blocking: float = 0.0,
    data_wait: float = 0.0,
) -> AttemptRecord:
    return AttemptRecord(
        attempt=attempt,
        started_unix=started,
        first_step_unix=first_step_end,
        first_step_s=first_step_s,
        checkpoint_blocking_s=blocking,
        data_wait_s=data_wait,
    )


def test_a_run_without_faults_loses_its_start_up_checkpoints_and_data_waits() -> None:
    # Started 12 s after the job, first step 2 s long: 12 + (14 - 2 - 1012) = 12 s start-up.
    record = _attempt(0, 1012.0, 1014.0, 2.0, blocking=3.5, data_wait=1.25)
    seconds = by_cause([record], [], job_start_unix=JOB_START, mean_step_s=0.5)
    assert seconds == {
        "startup": 12.0,
        "restart": 0.0,
        "in_process_recovery": 0.0,
        "recomputed_steps": 0.0,
        "checkpoint_blocking": 3.5,
        "data_wait": 1.25,
    }
    assert tuple(seconds) == CAUSES


def test_a_restart_costs_the_time_to_the_next_first_step_and_the_steps_done_again() -> None:
    first = _attempt(0, 1000.0, 1003.0, 1.0, blocking=1.0)
    second = _attempt(1, 1100.0, 1110.0, 4.0, blocking=2.0)
    restart = {
        "kind": "restart",
        "attempt": 1,
        "steps_lost": 7,
        # The fault at 1090, the new attempt at 1100, its first step ended at 1110.
        "phases_s": {"restart": 10.0, "first_step": 10.0},
    }
    seconds = by_cause([second, first], [restart], job_start_unix=JOB_START, mean_step_s=0.5)
    assert seconds["startup"] == 2.0  # the first attempt's only
    # 20 s from the fault to the new first step's end, less that step's own 4 s.
    assert seconds["restart"] == 16.0
    assert seconds["recomputed_steps"] == 3.5
    assert seconds["checkpoint_blocking"] == 3.0


def test_an_in_process_recovery_costs_its_phases_before_the_first_step() -> None:
    record = _attempt(0, 1000.0, 1001.0, 1.0)
    recovery = {
        "kind": "in_process",
        "attempt": 0,
        "steps_lost": 0,
        "phases_s": {
            "detect": 1.0,
            "abort": 0.5,
            "rendezvous": 2.0,
            "state_transfer": 1.5,
            "first_step": 3.0,
        },
    }
    seconds = by_cause([record], [recovery], job_start_unix=JOB_START, mean_step_s=0.5)
    assert (seconds["in_process_recovery"], seconds["restart"]) == (5.0, 0.0)


def test_with_other_names_the_rest_and_adds_up_to_the_wall_time() -> None:
    causes = dict.fromkeys(CAUSES, 1.0)
    seconds = with_other(causes, wall_s=100.0, productive_s=80.0)
    assert seconds[OTHER] == 14.0
    assert sum(seconds.values()) + 80.0 == pytest.approx(100.0)
    # Never below zero when the estimates overlap.
    assert with_other(causes, wall_s=82.0, productive_s=80.0)[OTHER] == 0.0
