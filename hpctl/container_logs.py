"""A job's container logs from CloudWatch Logs, after its pods are gone.

The CloudWatch Observability add-on's Fluent Bit writes every container's output to the EKS
cluster's `application` log group, one stream per container named
`<node>-application.var.log.containers.<pod>_<namespace>_<container>-<container id>.log`, each
event the record as JSON (`log`, `stream`, `kubernetes`) (config/container_logs.py).
`read_job_logs` finds the job's streams by that name and reads them with FilterLogEvents.

A job's pods are named after it (`<job>-...`: the training operator's workers, a batch Job's
pods), so a stream belongs to the job when its pod's name starts with `<job>-`; pass `pods` to
name them exactly where another job's name starts with this one's. Permissions:
`logs:DescribeLogStreams` and `logs:FilterLogEvents` on the application log group.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from config.container_logs import APPLICATION_STREAM, container_log_group
from hpctl import aws

# DescribeLogStreams' lastEventTimestamp "typically updates in less than an hour from
# ingestion" (CloudWatch Logs API reference): streams last written this long before the job
# started are still looked at.
LAST_EVENT_LAG = timedelta(hours=1)
# FilterLogEvents takes at most 100 stream names per call (API model).
MAX_STREAMS_PER_CALL = 100
PAGE_SIZE = 50  # DescribeLogStreams' maximum


@dataclass(frozen=True, kw_only=True)
class JobStream:
    """One container's log stream: its name and what the name says."""

    name: str
    node: str
    pod: str
    namespace: str
    container: str


@dataclass(frozen=True, kw_only=True)
class LogLine:
    """One line a container wrote: when (UTC), where, which output (stdout/stderr, None if
    the record does not say) and the text without its newline."""

    time: datetime
    pod: str
    container: str
    node: str
    output: str | None
    text: str


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def parse_stream(name: str) -> JobStream | None:
    """What a Fluent Bit application stream name says, or None for any other stream."""
    match = APPLICATION_STREAM.match(name)
    if match is None:
        return None
    return JobStream(
        name=name,
        node=match["node"],
        pod=match["pod"],
        namespace=match["namespace"],
        container=match["container"],
    )


def _streams(logs: Any, group: str, since: datetime) -> Iterator[dict[str, Any]]:
    """The group's streams, last written first, until they end before `since` (less the
    timestamp's lag)."""
    oldest = _millis(since - LAST_EVENT_LAG)
    params: dict[str, Any] = {
        "logGroupName": group,
        "orderBy": "LastEventTime",
        "descending": True,
        "limit": PAGE_SIZE,
    }
    while True:
        page = aws.call(logs, "describe_log_streams", **params)
        for stream in page.get("logStreams", []):
            last = stream.get("lastEventTimestamp", stream.get("creationTime", 0))
            if last < oldest:
                return
            yield stream
        token = page.get("nextToken")
        if not token:
            return
        params["nextToken"] = token


def job_streams(
    logs: Any,
    group: str,
    *,
    namespace: str,
    job: str,
    since: datetime,
    pods: Collection[str] | None = None,
    container: str | None = None,
) -> list[JobStream]:
    """The streams of `job`'s containers in `namespace` written since `since`, sorted by pod
    and container."""

    def ours(stream: JobStream) -> bool:
        if stream.namespace != namespace:
            return False
        if container is not None and stream.container != container:
            return False
        return stream.pod in pods if pods is not None else stream.pod.startswith(f"{job}-")

    found = (parse_stream(s["logStreamName"]) for s in _streams(logs, group, since))
    return sorted(
        (s for s in found if s is not None and ours(s)),
        key=lambda s: (s.pod, s.container, s.name),
    )


def _line(event: dict[str, Any], stream: JobStream) -> LogLine:
    text, output = event["message"], None
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if isinstance(record, dict) and isinstance(record.get("log"), str):
        text, output = record["log"], record.get("stream")
    return LogLine(
        time=datetime.fromtimestamp(event["timestamp"] / 1000, tz=UTC),
        pod=stream.pod,
        container=stream.container,
        node=stream.node,
        output=output if isinstance(output, str) else None,
        text=text.rstrip("\n"),
    )


def read_job_logs(
    logs: Any,
    *,
    eks_cluster: str,
    namespace: str,
    job: str,
    since: datetime,
    until: datetime | None = None,
    pods: Collection[str] | None = None,
    container: str | None = None,
) -> list[LogLine]:
    """Every line `job`'s containers in `namespace` of `eks_cluster` wrote between `since`
    and `until` (default: now), in time order (ties: by pod, then container). `logs` is a
    CloudWatch Logs client of the cluster's Region; failures raise `aws.AwsCallError`."""
    group = container_log_group(eks_cluster)
    streams = job_streams(
        logs, group, namespace=namespace, job=job, since=since, pods=pods, container=container
    )
    by_name = {s.name: s for s in streams}
    lines: list[LogLine] = []
    for start in range(0, len(streams), MAX_STREAMS_PER_CALL):
        params: dict[str, Any] = {
            "logGroupName": group,
            "logStreamNames": [s.name for s in streams[start : start + MAX_STREAMS_PER_CALL]],
            "startTime": _millis(since),
        }
        if until is not None:
            params["endTime"] = _millis(until)
        while True:
            page = aws.call(logs, "filter_log_events", **params)
            lines += [_line(e, by_name[e["logStreamName"]]) for e in page.get("events", [])]
            token = page.get("nextToken")
            if not token:
                break
            params["nextToken"] = token
    return sorted(lines, key=lambda line: (line.time, line.pod, line.container))
