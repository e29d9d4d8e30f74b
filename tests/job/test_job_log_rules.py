"""Log-monitoring rules against the trainer's exact line formats.

The elastic agent reads each line of the local-rank-0 worker's stdout file (trailing newline
included) and applies `re.compile(logPattern).match(line)`: anchored at the start, not at the
end. A rule with a threshold parses capture group 1 as a float and compares it with
int(metricThreshold); it turns SLOW after metricEvaluationDataPoints consecutive breaches and a
good value resets the count. `AgentRule` below reproduces exactly that, without the clocks.

Out-of-memory, NCCL and watchdog lines match no rule: those failures end the worker process,
and no line of theirs may count as a start or as progress.
"""

from __future__ import annotations

import operator as op
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from hpctl.job.log_rules import log_rules
from training.metrics import CKPT_FMT, START_FMT, STEP_FMT, WATCHDOG_FMT

# --- the trainer's line formats (the trainer's own format strings) -------------------------


def start_line(
    rank: int, world: int, step: int, resumed_from: str, preset: str, batch: int, preset_batch: int
) -> str:
    return START_FMT.format(
        rank=rank,
        world=world,
        step=step,
        resumed=resumed_from,
        preset=preset,
        batch=batch,
        preset_batch=preset_batch,
    )


def step_line(
    n: int, loss: float, tokens_per_s: float, samples_per_s: float, step_time_s: float
) -> str:
    return STEP_FMT.format(step=n, loss=loss, tps=tokens_per_s, sps=samples_per_s, dt=step_time_s)


def checkpoint_line(n: int, tier: str, blocking_s: float, status: str) -> str:
    return CKPT_FMT.format(step=n, tier=tier, blocking=blocking_s, status=status)


def watchdog_line(seconds: float | str, n: int) -> str:
    # A string passes a fractional value the trainer does not print today ("600.0"): the rule
    # must not depend on the trainer rounding to whole seconds.
    return WATCHDOG_FMT.format(seconds=seconds, step=n)


START = [
    start_line(0, 16, 0, "none", "8b", 512, 512),
    start_line(7, 48, 1500, "fast", "70b", 528, 512),
    start_line(63, 96, 3000, "durable", "8b-long.v2", 480, 512),
]
STEPS = [
    step_line(1, 11.2345, 1234.5, 3.21, 0.812),
    step_line(1500, 2.0, 987654.3, 120.0, 4.1),
    step_line(99999, 0.0001, 0.0, 0.0, 1234.567),
]
BAD_LOSS_STEPS = [
    step_line(10, float("nan"), 1000.0, 1.0, 1.0),
    step_line(11, float("inf"), 1000.0, 1.0, 1.0),
]
CHECKPOINTS = [
    checkpoint_line(50, "fast", 0.123, "started"),
    checkpoint_line(500, "durable", 12.5, "committed"),
    checkpoint_line(1000, "durable", 0.0, "failed"),
]
WATCHDOG = [watchdog_line(600, 1234), watchdog_line("600.0", 0)]
OOM = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
    "capacity of 79.11 GiB of which 1.06 GiB is free.",
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "torch.cuda.OutOfMemoryError: allocation failed",
]
NCCL = [
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
    "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
    "ip-10-1-2-3:123:456 [0] NCCL WARN NET/OFI Request completed with error; Timeout waiting",
    "ip-10-1-2-3:123:456 [0] NCCL WARN Connection closed by remote peer; timeout",
    "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, "
    "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600043 milliseconds before timing out.",
    "ncclInternalError: Internal check failed.",
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting",
]
NOISE = [
    "",
    "INFO: loading dataset shard 3/64",
    "ip-10-1-2-3:123:456 [0] NCCL INFO NET/OFI Selected Provider is efa",
    "ip-10-1-2-3:123:456 [0] NCCL WARN Could not enable P2P between dev 0 and 1",
    "hptrain step=1 loss=1.0000 tokens_per_s=1.0 samples_per_s=1.00 step_time_s=1.000",
    "memory usage is fine, no OutOfMemory here",
]
ALL_LINES = START + STEPS + BAD_LOSS_STEPS + CHECKPOINTS + WATCHDOG + OOM + NCCL + NOISE

# What each rule must match; every other sample line must not match.
EXPECTED = {
    "JobStart": START,
    "JobHang": STEPS,
    "LowThroughput": STEPS + BAD_LOSS_STEPS,
}

_COMPARE = {"gt": op.gt, "gteq": op.ge, "lt": op.lt, "lteq": op.le, "eq": op.eq}


@dataclass
class AgentRule:
    """The agent's per-line rule evaluation (match, metric, consecutive SLOW count)."""

    rule: dict[str, Any]
    pattern: re.Pattern[str] = field(init=False)
    breaches: int = 0
    state: str = "WAITING"

    def __post_init__(self) -> None:
        self.pattern = re.compile(self.rule["logPattern"])

    def feed(self, line: str) -> str:
        match = self.pattern.match(line)
        if match is None:
            return self.state
        threshold, operator = self.rule.get("metricThreshold"), self.rule.get("operator")
        if not match.groups() or threshold is None or operator is None:
            self.state = "HEALTHY"
            return self.state
        value = float(match.group(1))
        needed = int(self.rule.get("metricEvaluationDataPoints", 1))
        if _COMPARE[operator](value, int(threshold)):
            self.breaches = min(self.breaches + 1, needed)
        else:
            self.breaches = 0
        self.state = "SLOW" if self.breaches >= needed else "HEALTHY"
        return self.state


def _rules(spec_factory, **overrides: Any) -> dict[str, dict[str, Any]]:
    spec = spec_factory(min_tokens_per_s=5000, slow_data_points=3, **overrides)
    return {rule["name"]: rule for rule in log_rules(spec)}


def _matches(rule: dict[str, Any], line: str) -> bool:
    return re.compile(rule["logPattern"]).match(line) is not None


def test_every_expected_rule_is_rendered(spec_factory) -> None:
    assert sorted(_rules(spec_factory)) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize(
    "decorate",
    [
        pytest.param(lambda line: line, id="bare"),
        pytest.param(lambda line: line + "\n", id="newline"),
        pytest.param(
            lambda line: f"[default0]:2025-06-01 12:00:00,123 INFO {line}\n", id="prefixed"
        ),
    ],
)
def test_rule_matches_exactly_its_lines(spec_factory, name: str, decorate) -> None:
    rule = _rules(spec_factory)[name]
    matched = [line for line in ALL_LINES if _matches(rule, decorate(line))]
    assert matched == [line for line in ALL_LINES if line in EXPECTED[name]]


def test_nan_loss_is_not_progress(spec_factory) -> None:
    hang = _rules(spec_factory)["JobHang"]
    assert all(_matches(hang, line) for line in STEPS)
    assert not any(_matches(hang, line) for line in BAD_LOSS_STEPS)


@pytest.mark.parametrize("tokens_per_s", [0.0, 1.5, 4999.9, 5000.0, 123456.7])
def test_throughput_capture_group_is_the_printed_tokens_per_s(
    spec_factory, tokens_per_s: float
) -> None:
    rule = _rules(spec_factory)["LowThroughput"]
    line = step_line(42, 3.25, tokens_per_s, 9.87, 0.654) + "\n"
    match = re.compile(rule["logPattern"]).match(line)
    assert match is not None
    assert float(match.group(1)) == round(tokens_per_s, 1)


def test_low_throughput_turns_slow_after_consecutive_breaches_only(spec_factory) -> None:
    agent = AgentRule(_rules(spec_factory)["LowThroughput"])  # < 5000 tokens/s, 3 data points
    lines = [
        (step_line(1, 9.0, 100.0, 1.0, 9.0), "HEALTHY"),  # first breach
        (step_line(2, 8.0, 4999.9, 1.0, 1.0), "HEALTHY"),  # second breach
        (checkpoint_line(2, "fast", 0.5, "committed"), "HEALTHY"),  # not a data point
        (step_line(3, 7.0, 6000.0, 1.0, 1.0), "HEALTHY"),  # good value resets the count
        (step_line(4, 7.0, 10.0, 1.0, 1.0), "HEALTHY"),
        (step_line(5, 7.0, 10.0, 1.0, 1.0), "HEALTHY"),
        (step_line(6, 7.0, 10.0, 1.0, 1.0), "SLOW"),  # third consecutive breach
        (step_line(7, 7.0, 5000.0, 1.0, 1.0), "HEALTHY"),  # threshold itself is not "lt"
    ]
    assert [agent.feed(line + "\n") for line, _ in lines] == [state for _, state in lines]


def test_failure_lines_leave_every_rule_waiting(spec_factory) -> None:
    for rule in _rules(spec_factory).values():
        agent = AgentRule(rule)
        assert [agent.feed(line + "\n") for line in OOM + NCCL + WATCHDOG] == [
            "WAITING" for _ in OOM + NCCL + WATCHDOG
        ], rule["name"]


def test_start_and_hang_rules_report_healthy_on_their_lines(spec_factory) -> None:
    rules = _rules(spec_factory)
    start, hang = AgentRule(rules["JobStart"]), AgentRule(rules["JobHang"])
    assert start.feed(STEPS[0]) == "WAITING"
    assert start.feed(START[0]) == "HEALTHY"
    assert hang.feed(START[0]) == "WAITING"
    assert hang.feed(CHECKPOINTS[1]) == "WAITING"
    assert hang.feed(STEPS[1]) == "HEALTHY"


def test_rule_shapes_match_the_agent_contract(spec_factory) -> None:
    for rule in _rules(spec_factory).values():
        groups = re.compile(rule["logPattern"]).groups
        if "metricThreshold" in rule:
            # int() in the agent: a float threshold would be truncated silently.
            assert type(rule["metricThreshold"]) is int
            assert rule["operator"] in _COMPARE
            assert groups == 1
        else:
            assert "operator" not in rule
            assert groups == 0


def test_timing_fields_come_from_the_spec(spec_factory) -> None:
    rules = _rules(spec_factory, start_deadline_s=123, hang_timeout_s=1456)
    assert rules["JobStart"]["expectedStartCutOffInSeconds"] == 123
    assert rules["JobHang"]["expectedRecurringFrequencyInSeconds"] == 1456


# RE2 (Go) lacks look-around, back-references, possessive quantifiers and atomic groups.
_NOT_RE2 = re.compile(r"\(\?[=!<>]|\(\?<[=!]|\\[1-9]|[*+?}]\+|\(\?>")


def test_patterns_stay_in_the_re2_subset(spec_factory) -> None:
    for rule in _rules(spec_factory).values():
        assert not _NOT_RE2.search(rule["logPattern"]), rule["name"]


def test_re2_guard_catches_unsupported_syntax() -> None:
    for pattern in [r"(?=a)", r"(?!a)", r"(?<=a)b", r"(a)\1", r"a++", r"(?>a)"]:
        assert _NOT_RE2.search(pattern), pattern
