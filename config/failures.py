"""What a failure leaves, classified into its cause: a HyperPod node event's text, a
container's exit code and termination reason, its last log lines, and the trainer's one-line
`error:` messages. Pure: the same evidence always gives the same cause.

Causes, checked in this order because a root cause shows up downstream as another one (a GPU
that falls off the bus makes its peers' collectives time out; a libfabric error is printed
inside an NCCL warning; a CUDA out-of-memory error comes with a Python traceback):

- `gpu`: an NVIDIA Xid or an ECC error. NVIDIA's Xid catalogue (docs.nvidia.com/deploy/
  xid-errors, "Analyzing Xid Errors with the Xid Catalog") lists every Xid with its action;
  the driver logs them as `NVRM: Xid (PCI:...): <n>, ...`. ECC: Xid 48 is an uncorrectable
  double-bit error (DBE), Xid 63/64 dynamic page retirement, Xid 94/95 contained and
  uncontained ECC errors, and row remapping on Ampere and later (NVIDIA "Dynamic Page
  Retirement", "Visibility"). HyperPod's health-monitoring agent and deep health checks
  report the same faults on a node (DCGM diagnostics, GPU/NVLink count).
- `efa`: the Elastic Fabric Adapter or libfabric under NCCL (aws-ofi-nccl logs `NET/OFI`;
  HyperPod's EFA health check and deep health check name EFA).
- `nccl_timeout`: a collective that did not finish (PyTorch's NCCL watchdog: "Watchdog caught
  collective operation timeout"), or an NCCL error without a hardware cause above.
- `out_of_memory`: CUDA's out-of-memory error (`torch.OutOfMemoryError`), or the kernel's
  OOM killer (Kubernetes reason `OOMKilled`).
- `bad_input`: the trainer's one `error:` line and exit code 2 (docs/training-jobs.md, exit
  codes): the same input fails the same way, so a restart cannot help.
- `user_code`: a Python traceback that is none of the above.
- `unknown`: nothing recognised.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

GPU = "gpu"
EFA = "efa"
NCCL_TIMEOUT = "nccl_timeout"
OUT_OF_MEMORY = "out_of_memory"
BAD_INPUT = "bad_input"
USER_CODE = "user_code"
UNKNOWN = "unknown"

# The trainer's exit code for bad input (training.cli.USAGE_EXIT_CODE, the table in
# docs/training-jobs.md; tests/config/test_failures.py holds the two equal: config imports
# nothing from the training container).
BAD_INPUT_EXIT_CODE = 2
# Kubernetes' termination reason when the kernel's OOM killer ended the container.
OOM_KILLED_REASON = "OOMKilled"

# Whether running the same job again can succeed: a node fault goes away with the node
# (HyperPod replaces or reboots it), a timeout may not recur; the same input or the same code
# fails the same way, and so does the same batch size on the same memory.
RESTART_HELPS = {
    GPU: True,
    EFA: True,
    NCCL_TIMEOUT: True,
    OUT_OF_MEMORY: False,
    BAD_INPUT: False,
    USER_CODE: False,
    UNKNOWN: True,
}
CAUSES = tuple(RESTART_HELPS)

# (cause, pattern), first match wins; case-insensitive.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (cause, re.compile(pattern, re.IGNORECASE))
    for cause, pattern in (
        (GPU, r"\bxid\b"),
        (GPU, r"\becc\b|double[- ]bit|\bdbe\b|row remap|page retirement"),
        (GPU, r"fallen off the bus|gpu (?:is )?lost|dcgm diag|nvlink (?:error|down)"),
        (EFA, r"\befa\b|libfabric|net/ofi|\bfi_\w+|rdma"),
        (NCCL_TIMEOUT, r"collective operation timeout|nccl.*time(?:d)? ?out|timeout.*nccl"),
        (NCCL_TIMEOUT, r"\bnccl\b.*(?:error|warn)|processgroupnccl|ncclsystemerror"),
        (OUT_OF_MEMORY, r"out of memory|outofmemoryerror|oomkilled|cannot allocate memory"),
        (BAD_INPUT, r"^error: "),
        (USER_CODE, r"^traceback \(most recent call last\)|^\w+(?:\.\w+)*(?:error|exception): "),
    )
)


@dataclass(frozen=True)
class FailureCause:
    """A failure's cause, whether a restart can help, and the line that decided it (None
    when only the exit code or nothing did)."""

    cause: str
    restart_helps: bool
    evidence: str | None


def _cause(cause: str, evidence: str | None) -> FailureCause:
    return FailureCause(cause, RESTART_HELPS[cause], evidence)


def classify_failure(
    lines: Iterable[str], exit_code: int | None = None, reason: str | None = None
) -> FailureCause:
    """The cause of a failure from its text (`lines`: an event's description, a container's
    last log lines or termination message), its exit code and Kubernetes termination reason.
    Causes are tried in the module's order over every line, so a GPU fault anywhere wins over
    the NCCL timeout it caused."""
    texts = [line.strip() for line in lines if line and line.strip()]
    if reason == OOM_KILLED_REASON:
        return _cause(OUT_OF_MEMORY, reason)
    for cause, pattern in _PATTERNS:
        for text in texts:
            if pattern.search(text):
                return _cause(cause, text)
    if exit_code == BAD_INPUT_EXIT_CODE:
        return _cause(BAD_INPUT, f"exit code {exit_code}")
    return _cause(UNKNOWN, None)
