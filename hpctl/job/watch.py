"""Following a job through Kueue: its Workload, its place in the LocalQueue while it waits,
and waiting for its admission (`hpctl job submit --wait`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from config.kubernetes import KUEUE_JOB_UID_LABEL, QUEUE_LABEL
from hpctl.job import lifecycle
from hpctl.job.kube import Cluster

# How long one watch request stays open before it is renewed.
WATCH_WINDOW_S = 300


def job_selector(job: dict[str, Any]) -> str:
    """The label selector of the job's Workload: Kueue labels it with the job's uid."""
    return f"{KUEUE_JOB_UID_LABEL}={job['metadata']['uid']}"


def workload(cluster: Cluster, job: dict[str, Any], team: str) -> dict[str, Any] | None:
    """The job's Workload, if Kueue made one."""
    namespace = job["metadata"]["namespace"]
    return lifecycle.workload_of(job, cluster.workloads(namespace, team, job_selector(job)))


def position(cluster: Cluster, job: dict[str, Any], held: dict[str, Any] | None) -> int | None:
    """The job's 0-based place in its LocalQueue while Kueue holds its Workload `held` back,
    if known."""
    if held is None or lifecycle.admitted(held):
        return None
    meta = job.get("metadata") or {}
    queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
    if not queue:
        return None
    positions = cluster.pending_positions(meta["namespace"], queue)
    return positions.get((held.get("metadata") or {}).get("name", ""))


def wait_for_admission(
    cluster: Cluster, job: dict[str, Any], team: str, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Watch the job's Workload until Kueue admits it, calling `progress` with a line each
    time what it says changes; the admitted Workload. API failures raise KubeError."""
    meta = job["metadata"]
    namespace, selector = meta["namespace"], job_selector(job)
    last = ""

    def report(current: dict[str, Any] | None) -> None:
        nonlocal last
        line = lifecycle.progress_line(meta["name"], current, position(cluster, job, current))
        if line != last:
            progress(line)
            last = line

    def latest() -> dict[str, Any] | None:
        found = cluster.workloads(namespace, team, selector)
        return found[0] if found else None

    current = latest()
    report(current)
    while current is None or not lifecycle.admitted(current):
        for kind, seen in cluster.watch_workloads(namespace, team, selector, WATCH_WINDOW_S):
            current = None if kind == "DELETED" else seen
            report(current)
            if lifecycle.admitted(current):
                break
        if not lifecycle.admitted(current):
            # The watch window ended: go on from what the server has now.
            current = latest()
            report(current)
    return current
