"""What `hpctl job list|describe|submit --wait` say about a job, from the objects the API
returns: the HyperPodPyTorchJob (its status as the operator writes it: conditions,
restartCount, startTime, completionTime; the HyperPod CLI's HyperPodPytorchJobStatus in
hyperpod_pytorch_job_unified_config.py), its Kueue Workload (conditions QuotaReserved,
Admitted, Evicted, Finished; `status.admission.clusterQueue`) and its pods.

Pure functions of JSON-shaped dicts, so every rule is tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from config.kubernetes import KUEUE_JOB_UID_LABEL, QUEUE_LABEL

# Job conditions after which nothing more happens (the operator's terminal types).
TERMINAL = frozenset({"Completed", "Succeeded", "Failed"})
# States of a job that Kueue has not admitted (or has taken the quota back from).
QUEUED, PREEMPTED = "Queued", "Preempted"


def parse_time(text: str | None) -> datetime | None:
    """An API timestamp (RFC 3339, `Z` for UTC) as an aware datetime; None for none."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def age(timestamp: str | None, now: datetime) -> str:
    """Time since `timestamp` the way kubectl prints it: 45s, 12m, 3h, 2d ("-" for none)."""
    start = parse_time(timestamp)
    if start is None:
        return "-"
    seconds = max(0, int((now - start).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    """The status condition of type `kind`, if the object has one."""
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def _true(obj: dict[str, Any] | None, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def job_condition(job: dict[str, Any]) -> str | None:
    """The job's most recent condition that holds (the HyperPod CLI's list reads the last
    True one the same way)."""
    held = [
        c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"
    ]
    if not held:
        return None
    latest = max(enumerate(held), key=lambda ic: (ic[1].get("lastTransitionTime") or "", ic[0]))
    return str(latest[1].get("type"))


def admitted(workload: dict[str, Any] | None) -> bool:
    return _true(workload, "QuotaReserved") or _true(workload, "Admitted")


def preempted(workload: dict[str, Any] | None) -> bool:
    evicted = condition(workload, "Evicted")
    return bool(
        _true(workload, "Preempted")
        or (evicted and evicted.get("status") == "True" and evicted.get("reason") == "Preempted")
    )


def job_state(job: dict[str, Any], workload: dict[str, Any] | None) -> str:
    """One word: a terminal condition, Queued or Preempted while Kueue holds the job back,
    Terminating once deleted, else the operator's latest condition (Created, Running, ...)."""
    held = job_condition(job)
    if held in TERMINAL:
        return held
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    if workload is not None and not admitted(workload):
        return PREEMPTED if preempted(workload) else QUEUED
    return held or "Submitted"


def cluster_queue(workload: dict[str, Any] | None) -> str | None:
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    return admission.get("clusterQueue")


def admission(workload: dict[str, Any] | None, position: int | None) -> str:
    """Kueue's word on the job: admitted where, queued at which position, or preempted."""
    if workload is None:
        return "no workload"
    if _true(workload, "Finished"):
        return "finished"
    if admitted(workload):
        return f"admitted to {cluster_queue(workload)}"
    where = f" #{position + 1}" if position is not None else ""
    if preempted(workload):
        return f"preempted, queued{where}"
    return f"queued{where}"


def waiting_reason(workload: dict[str, Any] | None) -> str:
    """Why Kueue has not admitted the workload yet, in its own words."""
    if workload is None:
        return "waiting for Kueue to create the job's workload"
    for kind in ("Evicted", "QuotaReserved"):
        found = condition(workload, kind)
        if found and found.get("message"):
            return str(found["message"])
    return "waiting for quota"


def progress_line(name: str, workload: dict[str, Any] | None, position: int | None) -> str:
    """The line `submit --wait` prints each time the admission changes."""
    if admitted(workload):
        return f"{name}: {admission(workload, position)}"
    return f"{name}: {admission(workload, position)}: {waiting_reason(workload)}"


def replicas(job: dict[str, Any]) -> int:
    specs = (job.get("spec") or {}).get("replicaSpecs") or []
    return sum(int(spec.get("replicas") or 0) for spec in specs)


def _running(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]


def pod_restarts(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


def workload_of(job: dict[str, Any], workloads: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The job's Workload: the one Kueue labelled with the job's UID, else the one the job
    owns (a Workload from before the label)."""
    uid = (job.get("metadata") or {}).get("uid")
    owned = None
    for workload in workloads:
        meta = workload.get("metadata") or {}
        if (meta.get("labels") or {}).get(KUEUE_JOB_UID_LABEL) == uid:
            return workload
        if any(ref.get("uid") == uid for ref in meta.get("ownerReferences") or []):
            owned = workload
    return owned


@dataclass(frozen=True)
class JobRow:
    """One line of `hpctl job list`."""

    name: str
    namespace: str
    state: str
    nodes: str
    restarts: int
    queue: str
    admission: str
    age: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def job_row(
    job: dict[str, Any],
    workload: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    position: int | None,
    now: datetime,
) -> JobRow:
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    return JobRow(
        name=str(meta.get("name")),
        namespace=str(meta.get("namespace")),
        state=job_state(job, workload),
        nodes=f"{len(_running(pods))}/{replicas(job)}",
        restarts=int(status.get("restartCount") or 0),
        queue=str((meta.get("labels") or {}).get(QUEUE_LABEL, "-")),
        admission=admission(workload, position),
        age=age(meta.get("creationTimestamp"), now),
    )


def description(
    job: dict[str, Any],
    workload: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    position: int | None,
    now: datetime,
) -> dict[str, Any]:
    """What `hpctl job describe` prints (and `--json` returns): the job's row, its
    conditions, restarts, Kueue's admission, its pods with their nodes, and the events about
    the job and its workload, oldest first."""
    status = job.get("status") or {}
    row = job_row(job, workload, pods, position, now)
    return {
        **row.as_json(),
        "uid": (job.get("metadata") or {}).get("uid"),
        "started": status.get("startTime"),
        "completed": status.get("completionTime"),
        "restart_status": status.get("restartStatus") or {},
        "conditions": [
            {
                "type": c.get("type"),
                "status": c.get("status"),
                "reason": c.get("reason"),
                "message": c.get("message"),
                "since": c.get("lastTransitionTime"),
            }
            for c in status.get("conditions") or []
        ],
        "workload": None
        if workload is None
        else {
            "name": (workload.get("metadata") or {}).get("name"),
            "cluster_queue": cluster_queue(workload),
            "admitted": admitted(workload),
            "preempted": preempted(workload),
            "waiting": None if admitted(workload) else waiting_reason(workload),
        },
        "pods": [
            {
                "name": (pod.get("metadata") or {}).get("name"),
                "node": (pod.get("spec") or {}).get("nodeName"),
                "phase": (pod.get("status") or {}).get("phase"),
                "restarts": pod_restarts(pod),
            }
            for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name")))
        ],
        "events": [
            {
                "time": e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp"),
                "object": f"{(e.get('involvedObject') or {}).get('kind')}/"
                f"{(e.get('involvedObject') or {}).get('name')}",
                "type": e.get("type"),
                "reason": e.get("reason"),
                "message": " ".join(str(e.get("message") or "").split()),
                "count": e.get("count") or 1,
            }
            for e in sorted(
                events,
                key=lambda e: str(
                    e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or ""
                ),
            )
        ],
    }
