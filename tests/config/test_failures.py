"""The failure classifier: one planted message per cause, the order that picks the root cause,
and the exit codes it shares with the trainer."""

from __future__ import annotations

import pytest

from config import failures
from config.failures import classify_failure
from training.cli import USAGE_EXIT_CODE


@pytest.mark.parametrize(
    ("lines", "cause"),
    [
        (["NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, GPU has fallen off the bus."], "gpu"),
        (["XID 48 An uncorrectable double bit error (DBE) has been detected on GPU (0)"], "gpu"),
        (["Instance failed health check: DCGM diag level 4 reported an ECC error"], "gpu"),
        (["NET/OFI Request completed with error. RC: 21. Error: 13 (Input/output error)"], "efa"),
        (["Instance failed EFA health check; rebooting"], "efa"),
        (
            [
                "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, "
                "OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
            ],
            "nccl_timeout",
        ),
        (
            ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"],
            "out_of_memory",
        ),
        (
            ["error: data.dtype uint16 does not match shard train_000.bin; fix data.dtype"],
            "bad_input",
        ),
        (
            ["Traceback (most recent call last):", '  File "model.py", line 3', "KeyError: 'w'"],
            "user_code",
        ),
        (["the node was rebooted by the user"], "unknown"),
        ([], "unknown"),
    ],
)
def test_each_cause_is_found_in_its_planted_message(lines: list[str], cause: str) -> None:
    result = classify_failure(lines)
    assert result.cause == cause
    assert result.restart_helps == failures.RESTART_HELPS[cause]
    if cause != "unknown":
        assert result.evidence in [line.strip() for line in lines]


def test_a_gpu_fault_wins_over_the_nccl_timeout_it_caused() -> None:
    lines = [
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE)",
        "NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus.",
    ]
    assert classify_failure(lines).cause == "gpu"


def test_out_of_memory_wins_over_its_traceback() -> None:
    lines = ["Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory."]
    assert classify_failure(lines).cause == "out_of_memory"


def test_the_kernel_oom_killer_is_out_of_memory_without_a_log_line() -> None:
    result = classify_failure([], exit_code=137, reason="OOMKilled")
    assert (result.cause, result.restart_helps) == ("out_of_memory", False)


def test_the_trainers_bad_input_exit_code_alone_is_bad_input_and_not_retried() -> None:
    assert failures.BAD_INPUT_EXIT_CODE == USAGE_EXIT_CODE
    result = classify_failure(["some unrelated line"], exit_code=USAGE_EXIT_CODE)
    assert (result.cause, result.restart_helps, result.evidence) == (
        "bad_input",
        False,
        "exit code 2",
    )


def test_an_unknown_exit_code_is_unknown_and_may_be_retried() -> None:
    result = classify_failure(["Killed"], exit_code=1)
    assert (result.cause, result.restart_helps, result.evidence) == ("unknown", True, None)
