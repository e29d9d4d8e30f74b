"""The elastic agent's log-monitoring rules (`logMonitoringConfiguration`) for a job.

The rules match the trainer's fixed `HPTRAIN ...` lines. The elastic agent inside the
container applies each rule with Python `re.match` (anchored at the start of the line, hence
the leading `.*`) to every line the local-rank-0 worker writes to stdout; a rule's first
capture group is parsed as a float and compared with the integer `metricThreshold`. The
patterns also stay inside the RE2 subset (no look-around, no back-references) so a Go-side
check accepts them.

Only fields the operator's CRD has are emitted (the HyperPod CLI's model of it,
LogMonitoringConfiguration in aws/sagemaker-hyperpod-cli's
hyperpod_pytorch_job_unified_config.py): a rule can report a late start, a hang or a slow
metric, nothing else. There is no rule for CUDA out-of-memory, NCCL errors or the trainer's
watchdog: each ends the worker process with a non-zero status (training/train.py exits on any
exception; torch's ProcessGroupNCCL.hpp defaults TORCH_NCCL_ASYNC_ERROR_HANDLING to 3, which
tears the process down on an NCCL error or timeout; training/watchdog.py exits by itself), and
the operator restarts the job on that exit without a rule.
"""

from __future__ import annotations

from typing import Any

from hpctl.job.spec import JobSpec

# One pattern per trainer line the rules must recognise.
_NUM = r"\d+(?:\.\d+)?"
# Identify the start line by its fixed head; the trailing fields are not needed to spot it.
START_PATTERN = r".*HPTRAIN start rank=\d+ world=\d+ "
# Progress means a step with a finite loss: a nan/inf loss line does not reset the hang clock,
# so a diverged run is restarted from its last checkpoint instead of burning GPU hours.
STEP_PATTERN = r".*HPTRAIN step=\d+ loss=-?\d+\.\d+ "
# Group 1 is the throughput the agent compares with the threshold; the loss may be anything.
THROUGHPUT_PATTERN = rf".*HPTRAIN step=\d+ loss=\S+ tokens_per_s=({_NUM}) "


def log_rules(spec: JobSpec) -> list[dict[str, Any]]:
    """The logMonitoringConfiguration rules for `spec`, in evaluation-report order; none for
    a job that runs a team's own code, whose lines the rules cannot know."""
    if not spec.runs_trainer:
        return []
    rules: list[dict[str, Any]] = [
        # The agent watches local rank 0 of every node, so each node's first worker must print
        # its start line within the deadline (model, data and checkpoint loading included).
        {
            "name": "JobStart",
            "logPattern": START_PATTERN,
            "expectedStartCutOffInSeconds": spec.start_deadline_s,
        },
        # Only global rank 0 prints step lines. Without a start cut-off the other nodes' copies
        # of this rule stay WAITING instead of declaring them hung; the clock starts at the
        # first step line.
        {
            "name": "JobHang",
            "logPattern": STEP_PATTERN,
            "expectedRecurringFrequencyInSeconds": spec.hang_timeout_s,
        },
    ]
    if spec.min_tokens_per_s is not None:
        rules.append(
            {
                "name": "LowThroughput",
                "logPattern": THROUGHPUT_PATTERN,
                "metricThreshold": spec.min_tokens_per_s,
                "operator": "lt",
                "metricEvaluationDataPoints": spec.slow_data_points,
            }
        )
    return rules
