"""How often a tier can and should checkpoint, from what its checkpoints measured.

Two rules, judged on rank 0 after each commit from the wall time per step (between the
manager's saves), the tier's blocking time per checkpoint and its commit time:

* fit: one checkpoint is in flight at a time, so an interval shorter than a commit makes
  every save wait for the previous one. A fixed interval that short is one warning line,
  naming the interval that fits (interval x step time >= commit time).
* auto (``checkpoint.<tier>_interval=auto``): the interval that maximises expected goodput
  (Young/Daly). Each checkpoint costs training its blocking time C; a failure loses on
  average half an interval of work. Waste per second ~ C / T + T / (2 x MTBF), least at
  T = sqrt(2 x MTBF x C). The interval is that, and never shorter than the fit. The tier's
  configured interval is the first one (to measure), then each commit re-plans it; every
  rank applies a new interval at its next save (the manager), so all ranks agree on which
  steps are due.

MTBF (mean time between failures of the job) is ``checkpoint.mtbf_hours``; 0 (the default)
derives it from the job's nodes: AWS cites jobs of 1,024 nodes failing about every 8 hours,
i.e. one failure per 8,192 node-hours, so a job of N nodes fails every 8,192 / N hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from training.checkpoint.config import CheckpointConfig, tier_key

# One failure per this many node-hours: 1,024 nodes, about every 8 hours.
NODE_HOURS_PER_FAILURE = 8.0 * 1024
_HOUR_S = 3600.0


def mtbf_s(mtbf_hours: float, nodes: int) -> float:
    """The job's mean time between failures in seconds: `mtbf_hours`, or for 0 the
    per-node rate (NODE_HOURS_PER_FAILURE) scaled to `nodes`."""
    hours = mtbf_hours if mtbf_hours > 0 else NODE_HOURS_PER_FAILURE / max(1, nodes)
    return hours * _HOUR_S


def young_daly_s(cost_s: float, mtbf: float) -> float:
    """Seconds between checkpoints that waste least: sqrt(2 x MTBF x cost)."""
    return math.sqrt(2.0 * mtbf * max(0.0, cost_s))


@dataclass(frozen=True)
class Measured:
    """One tier's figures, from its committed checkpoints and the steps between saves."""

    step_s: float  # wall seconds per training step
    blocking_s: float  # training time one checkpoint costs
    commit_s: float  # from a checkpoint's start to its commit

    def fitting_interval(self) -> int:
        """The fewest steps that take at least one commit."""
        return max(1, math.ceil(self.commit_s / self.step_s))

    def best_interval(self, mtbf: float) -> int:
        """Young/Daly in steps, never shorter than fitting_interval."""
        best = round(young_daly_s(self.blocking_s, mtbf) / self.step_s)
        return max(best, self.fitting_interval())


def too_short(tier: str, interval: int, m: Measured) -> str | None:
    """The warning for a fixed `interval` shorter than one commit; None when it fits."""
    if interval <= 0 or interval * m.step_s >= m.commit_s:
        return None
    return (
        f"checkpoint tier {tier}: interval {interval} steps ({interval * m.step_s:.1f} s) is "
        f"shorter than its commit ({m.commit_s:.1f} s), so each save waits for the last: "
        f"{tier_key(tier, 'interval')}={m.fitting_interval()} fits (or =auto)"
    )


def planned(tier: str, old: int, new: int, m: Measured, mtbf: float) -> str:
    """The line that reports an auto tier's new interval and what it was chosen from."""
    return (
        f"checkpoint tier {tier}: interval {old} -> {new} steps (auto: step {m.step_s:.3f} s, "
        f"blocking {m.blocking_s:.3f} s, commit {m.commit_s:.1f} s, MTBF {mtbf / _HOUR_S:.1f} h)"
    )


class IntervalPlanner:
    """A record of saves and blocking times, and a verdict after each commit where `judge`
    (rank 0: one rank decides, and the manager sends an auto interval to the others)."""

    def __init__(self, cfg: CheckpointConfig, nodes: int, judge: bool = True) -> None:
        self.cfg = cfg
        self.judge = judge
        self.mtbf = mtbf_s(cfg.mtbf_hours, nodes)
        self._saves: list[tuple[int, float]] = []  # (step, time) of the last two saves
        self._blocking: dict[str, float] = {}  # tier -> blocking of its last reported one
        self._warned: set[str] = set()

    def started(self, step: int, now: float) -> None:
        self._saves = [*self._saves[-1:], (step, now)]

    def reported(self, tier: str, blocking_s: float) -> None:
        self._blocking[tier] = blocking_s

    def step_s(self) -> float | None:
        """Wall seconds per step between the last two saves (None before two)."""
        if len(self._saves) < 2 or self._saves[1][0] <= self._saves[0][0]:
            return None
        (s0, t0), (s1, t1) = self._saves
        return (t1 - t0) / (s1 - s0)

    def committed(self, tier: str, commit_s: float) -> tuple[int | None, str | None]:
        """(the new interval of an auto tier or None, a line to print or None)."""
        step_s = self.step_s()
        blocking = self._blocking.get(tier)
        if not self.judge or step_s is None or step_s <= 0 or blocking is None:
            return None, None
        m = Measured(step_s, blocking, commit_s)
        spec = self.cfg.tier(tier)
        if spec.auto_interval:
            new = m.best_interval(self.mtbf)
            # Measurements jitter: a change within 10% is not worth a line and a new schedule.
            fits = spec.interval >= m.fitting_interval()
            if fits and abs(new - spec.interval) <= 0.1 * spec.interval:
                return None, None
            return new, planned(tier, spec.interval, new, m, self.mtbf)
        warning = too_short(tier, spec.interval, m)
        if warning is None or tier in self._warned:
            return None, None
        self._warned.add(tier)
        return None, warning
