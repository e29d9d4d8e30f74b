"""A tier's interval against its measured commit: the warning when it does not fit, and
interval=auto (Young/Daly from the blocking cost and the failure rate)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.training import appstate
from tests.training.conftest import local_checkpoints
from training.checkpoint.config import (
    AUTO_FIRST_INTERVAL,
    FAST,
    CheckpointConfig,
    TierConfig,
)
from training.checkpoint.interval import (
    NODE_HOURS_PER_FAILURE,
    IntervalPlanner,
    Measured,
    mtbf_s,
    too_short,
    young_daly_s,
)
from training.checkpoint.manager import CheckpointManager
from training.config_parsing import ConfigError
from training.presets import build_config

HOUR = 3600.0


def test_the_failure_rate_defaults_to_the_cited_one_per_node() -> None:
    # AWS: jobs of 1,024 nodes fail about every 8 hours.
    assert NODE_HOURS_PER_FAILURE == 8 * 1024
    assert mtbf_s(0, 1024) == 8 * HOUR
    assert mtbf_s(0, 16) == 512 * HOUR
    assert mtbf_s(0, 0) == mtbf_s(0, 1) == 8192 * HOUR
    assert mtbf_s(2.5, 1024) == 2.5 * HOUR  # configured: the nodes do not matter


def test_young_daly_is_the_square_root_of_twice_mtbf_times_cost() -> None:
    assert young_daly_s(0.5, 28800) == pytest.approx(math.sqrt(28800))
    assert young_daly_s(2.0, 100) == pytest.approx(20.0)
    assert young_daly_s(-1.0, 100) == 0.0


def test_the_interval_that_fits_takes_at_least_one_commit() -> None:
    assert Measured(step_s=0.19, blocking_s=0.02, commit_s=36.0).fitting_interval() == 190
    assert Measured(step_s=1.0, blocking_s=0.0, commit_s=0.1).fitting_interval() == 1
    assert Measured(step_s=1.0, blocking_s=0.0, commit_s=3.0).fitting_interval() == 3


def test_the_best_interval_is_young_daly_unless_a_commit_takes_longer() -> None:
    mtbf = 8 * HOUR
    # sqrt(2 x 28800 x 0.5) = 169.7 s, at 1 s a step; a commit of 3 s fits in it.
    assert Measured(1.0, 0.5, 3.0).best_interval(mtbf) == 170
    # Nearly free checkpoints: as often as a commit allows.
    assert Measured(1.0, 0.0001, 30.0).best_interval(mtbf) == 30


def test_a_fixed_interval_shorter_than_a_commit_is_one_line_naming_the_fit() -> None:
    # The H200 figures of the recovery issue: 50 steps of 0.19 s, commits of 36 s.
    m = Measured(step_s=0.19, blocking_s=0.02, commit_s=36.0)
    assert too_short("fast", 50, m) == (
        "checkpoint tier fast: interval 50 steps (9.5 s) is shorter than its commit (36.0 s), "
        "so each save waits for the last: checkpoint.fast_interval=190 fits (or =auto)"
    )
    assert too_short("fast", 190, m) is None
    assert too_short("fast", 0, m) is None  # a disabled tier


def _planner(tier: TierConfig, nodes: int = 1024, mtbf_hours: float = 0.0) -> IntervalPlanner:
    return IntervalPlanner(
        CheckpointConfig(tiers=(tier,), sigterm_tier=tier.name, mtbf_hours=mtbf_hours), nodes
    )


def test_nothing_is_judged_before_two_saves_and_a_blocking_time() -> None:
    planner = _planner(TierConfig(FAST, interval=5))
    planner.started(5, 100.0)
    planner.reported(FAST, 0.1)
    assert planner.committed(FAST, 60.0) == (None, None)  # one save: no step time yet
    planner.started(10, 105.0)
    assert planner.step_s() == 1.0
    other = _planner(TierConfig(FAST, interval=5))
    other.started(5, 100.0)
    other.started(10, 105.0)
    assert other.committed(FAST, 60.0) == (None, None)  # no blocking time reported yet


def test_a_fixed_interval_that_does_not_fit_is_warned_once() -> None:
    planner = _planner(TierConfig(FAST, interval=5))
    planner.started(5, 0.0)
    planner.started(10, 5.0)
    planner.reported(FAST, 0.1)
    interval, line = planner.committed(FAST, 12.0)
    assert interval is None
    assert line is not None and "checkpoint.fast_interval=12 fits" in line
    assert planner.committed(FAST, 12.0) == (None, None)


def test_only_the_judging_rank_gives_a_verdict() -> None:
    tier = TierConfig(FAST, interval=5, auto_interval=True)
    planner = IntervalPlanner(CheckpointConfig(tiers=(tier,), sigterm_tier=FAST), 1, judge=False)
    planner.started(5, 0.0)
    planner.started(10, 5.0)
    planner.reported(FAST, 0.5)
    assert planner.committed(FAST, 3.0) == (None, None)


def test_a_fixed_interval_that_fits_says_nothing() -> None:
    planner = _planner(TierConfig(FAST, interval=5))
    planner.started(5, 0.0)
    planner.started(10, 5.0)
    planner.reported(FAST, 0.1)
    assert planner.committed(FAST, 4.0) == (None, None)


def test_an_auto_interval_is_planned_from_the_measured_figures() -> None:
    planner = _planner(TierConfig(FAST, interval=5, auto_interval=True), mtbf_hours=8)
    planner.started(5, 0.0)
    planner.started(10, 5.0)
    planner.reported(FAST, 0.5)
    interval, line = planner.committed(FAST, 3.0)
    assert interval == 170
    assert line == (
        "checkpoint tier fast: interval 5 -> 170 steps (auto: step 1.000 s, blocking 0.500 s, "
        "commit 3.0 s, MTBF 8.0 h)"
    )


def test_an_auto_interval_within_ten_percent_is_kept() -> None:
    planner = _planner(TierConfig(FAST, interval=160, auto_interval=True), mtbf_hours=8)
    planner.started(160, 0.0)
    planner.started(320, 160.0)
    planner.reported(FAST, 0.5)
    assert planner.committed(FAST, 3.0) == (None, None)  # 170 is within 10% of 160
    # ...unless the interval no longer fits a commit.
    assert planner.committed(FAST, 165.0)[0] == 170


def test_interval_auto_is_set_with_the_interval_key() -> None:
    c = build_config("tiny", ["checkpoint.fast_interval=auto"]).checkpoint
    preset = build_config("tiny", []).checkpoint
    assert c.tier(FAST) == replace(preset.tier(FAST), auto_interval=True)
    # A number replaces auto; auto on a disabled tier starts it at AUTO_FIRST_INTERVAL.
    c = build_config("tiny", ["checkpoint.fast_interval=auto", "checkpoint.fast_interval=7"])
    assert (c.checkpoint.tier(FAST).interval, c.checkpoint.tier(FAST).auto_interval) == (7, False)
    c = build_config("tiny", ["checkpoint.fast_interval=0", "checkpoint.fast_interval=AUTO"])
    assert c.checkpoint.tier(FAST).interval == AUTO_FIRST_INTERVAL


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "checkpoint.fast_interval=often",
            "checkpoint.fast_interval must be a number of steps or auto, got 'often'",
        ),
        (
            "checkpoint.mtbf_hours=-1",
            r"checkpoint.mtbf_hours must be >= 0 \(0 = from the job's nodes\), got -1.0",
        ),
        ("checkpoint.write_threads=-2", r"checkpoint.write_threads must be >= 0"),
    ],
)
def test_bad_interval_settings_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config("tiny", [override])


def test_every_rank_applies_a_planned_interval_at_its_next_save(
    tmp_path: Path,
    world_of_one: None,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    tiers = (TierConfig(FAST, interval=5, keep=1, auto_interval=True),)
    cfg = local_checkpoints(tmp_path, tiers, sigterm_tier=FAST)
    app = appstate.build()
    manager = CheckpointManager(
        cfg, tmp_path, app.stateful, rank=0, world_size=1, local_rank=0, device=torch.device("cpu")
    )
    monkeypatch.setattr(manager.intervals, "committed", lambda tier, commit_s: (7, "planned"))
    try:
        manager.save(5, FAST)
        manager.wait()
        assert cfg.tier(FAST).interval == 5  # the schedule changes at a save, not meanwhile
        manager.save(10, FAST)
        assert cfg.tier(FAST).interval == 7
        assert cfg.tier(FAST).auto_interval
        assert cfg.tier_due(14) == FAST and cfg.tier_due(15) is None
        manager.wait()
    finally:
        manager.close()
        manager.destroy_group()
    assert "hptrain: planned" in capfd.readouterr().err
