"""A job's log as CloudWatch Logs archived it (`hpctl job logs --archive`): what its rank
pod, or every rank's, wrote, in time order, also after the job was deleted."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from config.container_logs import container_log_group
from config.schema import EnvironmentConfig
from hpctl import aws
from hpctl.container_logs import LogLine, read_job_logs
from hpctl.job import lifecycle
from hpctl.job.failures import JobOperationError

# How far back the archive is read for a job whose object is gone (its creation time with it).
DEFAULT_SINCE = timedelta(hours=24)


@dataclass(frozen=True)
class LogRecord:
    """One line a job's pod wrote: the pod, its node rank, its container where known, and
    the time CloudWatch recorded it (an archived line only)."""

    pod: str
    rank: int
    line: str
    container: str | None = None
    time: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        """The record as `hpctl job logs --json` prints it (no time where none was kept)."""
        record: dict[str, Any] = {"pod": self.pod, "rank": self.rank, "line": self.line}
        if self.time is not None:
            record["time"] = self.time.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return record


def rank_pod(name: str, rank: int) -> str:
    """The pod of node rank `rank`: the operator names a job's pods <job>-pod-<index> (the
    HyperPod CLI's documentation, hyp get-logs --pod-name <job>-pod-0)."""
    return f"{name}-pod-{rank}"


def first_container(job: dict[str, Any]) -> str | None:
    """The name of the first container of the job's pods, as its manifest has it."""
    specs = (job.get("spec") or {}).get("replicaSpecs") or [{}]
    pod = (specs[0].get("template") or {}).get("spec") or {}
    return next((str(c["name"]) for c in pod.get("containers") or [] if "name" in c), None)


@dataclass(frozen=True)
class ArchiveQuery:
    """Which archived lines of job `name` in `namespace` to read: one node rank's, or every
    rank's; from `since` ago, else from the job's creation (DEFAULT_SINCE for a deleted
    job, `job` None)."""

    namespace: str
    name: str
    rank: int = 0
    all_ranks: bool = False
    since: timedelta | None = None
    job: dict[str, Any] | None = None

    def start(self, now: datetime) -> datetime:
        created = lifecycle.parse_time(
            (self.job or {}).get("metadata", {}).get("creationTimestamp")
        )
        if self.since is None and created is not None:
            return created
        return now - (self.since or DEFAULT_SINCE)


def archived_logs(config: EnvironmentConfig, query: ArchiveQuery, now: datetime) -> list[LogRecord]:
    """What `query` asks for, from the cluster's application log group
    (hpctl.container_logs), with credentials of the environment's account. JobOperationError where
    CloudWatch refuses or holds none of it; aws.CredentialsError without usable credentials."""
    name, since = query.name, query.start(now)
    # Streams of another job whose name starts with this one's are left out by the pod name.
    ranked = re.compile(rf"{re.escape(name)}-pod-(\d+)")
    group = container_log_group(config.names.eks_cluster)
    connection = aws.resolve_environment(config)
    try:
        lines: list[LogLine] = read_job_logs(
            connection.client("logs"),
            eks_cluster=config.names.eks_cluster,
            namespace=query.namespace,
            job=name,
            since=since,
            pods=None if query.all_ranks else [rank_pod(name, query.rank)],
            # The job's container (a deleted job's is not known: every container of the pod).
            container=first_container(query.job) if query.job is not None else None,
        )
    except aws.AwsCallError as failure:
        grant = f"; grant {failure.action}" if failure.code in aws.ACCESS_DENIED_CODES else ""
        raise JobOperationError(
            f"cannot read the archived log of job {name} from {group}: {failure}{grant}"
        ) from None
    matches = [(line, ranked.fullmatch(line.pod)) for line in lines]
    found = [
        LogRecord(line.pod, int(match[1]), line.text, line.container, line.time)
        for line, match in matches
        if match is not None
    ]
    if not found:
        wanted = (
            f"pods {name}-pod-<rank>" if query.all_ranks else f"pod {rank_pod(name, query.rank)}"
        )
        raise JobOperationError(
            f"job {name}: no archived log of {wanted} in {group} since "
            f"{since.isoformat(timespec='seconds')}; widen --since, or check the job's name "
            "and --rank"
        )
    return found
