"""`hpctl.container_logs.read_job_logs` against botocore's Stubber on a real CloudWatch Logs
client (the API model checks every request and canned response): the job's streams found by
Fluent Bit's stream names over pages, read in batches of 100 over pages, lines in time order,
and failures as `AwsCallError`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.stub import Stubber

from config.container_logs import container_log_group
from hpctl.aws import AwsCallError
from hpctl.container_logs import (
    LAST_EVENT_LAG,
    LogLine,
    parse_stream,
    read_job_logs,
)
from tests.cli.conftest import offline_clients

CLUSTER = "hyperpod-prod-eks"
GROUP = container_log_group(CLUSTER)
NAMESPACE = "hyperpod-ns-foundation"
JOB = "llama-8b"
SINCE = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
UNTIL = SINCE + timedelta(hours=2)
NODE = "hyperpod-i-0123456789abcdef0"


def at(seconds: int) -> datetime:
    return SINCE + timedelta(seconds=seconds)


def millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def stream_name(
    pod: str, container: str = "trainer", namespace: str = NAMESPACE, n: int = 0
) -> str:
    return f"{NODE}-application.var.log.containers.{pod}_{namespace}_{container}-{n:064x}.log"


def stream(name: str, minutes_after: float) -> dict[str, Any]:
    last = millis(SINCE + timedelta(minutes=minutes_after))
    return {"logStreamName": name, "creationTime": last - 1000, "lastEventTimestamp": last}


def record(text: str, output: str = "stdout") -> str:
    return json.dumps(
        {"log": text + "\n", "stream": output, "kubernetes": {"namespace_name": NAMESPACE}}
    )


def event(name: str, seconds: int, message: str, number: int) -> dict[str, Any]:
    when = millis(SINCE + timedelta(seconds=seconds))
    return {
        "logStreamName": name,
        "timestamp": when,
        "message": message,
        "ingestionTime": when + 500,
        "eventId": f"{number:056d}",
    }


WORKER_0 = stream_name(f"{JOB}-worker-0")
WORKER_1 = stream_name(f"{JOB}-worker-1", n=1)
OTHER_JOB = stream_name("mistral-worker-0", n=2)
OTHER_TEAM = stream_name(f"{JOB}-worker-0", namespace="hyperpod-ns-research", n=3)
SIDECAR = stream_name(f"{JOB}-worker-0", container="log-shipper", n=4)


@pytest.fixture(scope="module")
def logs_client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return offline_clients(tmp_path_factory, "us-east-1", ("logs",))["logs"]


@pytest.fixture
def stub(logs_client: Any):
    with Stubber(logs_client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def describe_params(token: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "logGroupName": GROUP,
        "orderBy": "LastEventTime",
        "descending": True,
        "limit": 50,
    }
    if token:
        params["nextToken"] = token
    return params


def test_stream_names_parse_as_fluent_bit_writes_them() -> None:
    parsed = parse_stream(WORKER_1)
    assert parsed is not None
    assert (parsed.node, parsed.pod, parsed.namespace, parsed.container) == (
        NODE,
        f"{JOB}-worker-1",
        NAMESPACE,
        "trainer",
    )
    assert parse_stream(f"{NODE}-dataplane.systemd.kubelet.service") is None


def test_reads_the_jobs_containers_in_time_order(logs_client: Any, stub: Stubber) -> None:
    # Two pages of streams, newest first; the second ends with one last written before the
    # job (less the lag), where the listing stops.
    stub.add_response(
        "describe_log_streams",
        {
            "logStreams": [stream(WORKER_1, 90), stream(OTHER_JOB, 80), stream(OTHER_TEAM, 70)],
            "nextToken": "page-2",
        },
        describe_params(),
    )
    stale = stream(stream_name(f"{JOB}-worker-9", n=9), -61)
    stub.add_response(
        "describe_log_streams",
        {"logStreams": [stream(WORKER_0, 60), stream(SIDECAR, 50), stale], "nextToken": "page-3"},
        describe_params("page-2"),
    )
    names = sorted([WORKER_0, WORKER_1, SIDECAR])
    read = {
        "logGroupName": GROUP,
        "logStreamNames": names,
        "startTime": millis(SINCE),
        "endTime": millis(UNTIL),
    }
    stub.add_response(
        "filter_log_events",
        {
            "events": [
                event(WORKER_1, 30, record("rank 1 ready"), 1),
                event(WORKER_0, 10, record("HPTRAIN start global_batch=528"), 2),
            ],
            "nextToken": "events-2",
        },
        read,
    )
    stub.add_response(
        "filter_log_events",
        {
            "events": [
                event(WORKER_0, 30, record("NCCL WARN timeout", output="stderr"), 3),
                event(SIDECAR, 40, "plain text line\n", 4),
            ]
        },
        {**read, "nextToken": "events-2"},
    )
    lines = read_job_logs(
        logs_client, eks_cluster=CLUSTER, namespace=NAMESPACE, job=JOB, since=SINCE, until=UNTIL
    )
    assert lines == [
        LogLine(
            time=at(10),
            pod=f"{JOB}-worker-0",
            container="trainer",
            node=NODE,
            output="stdout",
            text="HPTRAIN start global_batch=528",
        ),
        LogLine(
            time=at(30),
            pod=f"{JOB}-worker-0",
            container="trainer",
            node=NODE,
            output="stderr",
            text="NCCL WARN timeout",
        ),
        LogLine(
            time=at(30),
            pod=f"{JOB}-worker-1",
            container="trainer",
            node=NODE,
            output="stdout",
            text="rank 1 ready",
        ),
        LogLine(
            time=at(40),
            pod=f"{JOB}-worker-0",
            container="log-shipper",
            node=NODE,
            output=None,
            text="plain text line",
        ),
    ]


def test_one_container_of_named_pods(logs_client: Any, stub: Stubber) -> None:
    stub.add_response(
        "describe_log_streams",
        {"logStreams": [stream(WORKER_1, 90), stream(WORKER_0, 60), stream(SIDECAR, 50)]},
        describe_params(),
    )
    stub.add_response(
        "filter_log_events",
        {"events": []},
        {"logGroupName": GROUP, "logStreamNames": [WORKER_0], "startTime": millis(SINCE)},
    )
    lines = read_job_logs(
        logs_client,
        eks_cluster=CLUSTER,
        namespace=NAMESPACE,
        job=JOB,
        since=SINCE,
        pods={f"{JOB}-worker-0"},
        container="trainer",
    )
    assert lines == []


def test_more_than_100_streams_are_read_in_batches(logs_client: Any, stub: Stubber) -> None:
    names = [stream_name(f"{JOB}-worker-{i}", n=i) for i in range(120)]
    stub.add_response(
        "describe_log_streams",
        {"logStreams": [stream(n, 30) for n in names]},
        describe_params(),
    )
    # Sorted by pod name, as the reader orders them: worker-0, worker-1, worker-10, ...
    ordered = sorted(names, key=lambda n: (n.split(".containers.")[1].split("_")[0], n))
    for batch in (ordered[:100], ordered[100:]):
        stub.add_response(
            "filter_log_events",
            {"events": [event(batch[0], 5, record("x"), 1)]},
            {"logGroupName": GROUP, "logStreamNames": batch, "startTime": millis(SINCE)},
        )
    lines = read_job_logs(
        logs_client, eks_cluster=CLUSTER, namespace=NAMESPACE, job=JOB, since=SINCE
    )
    assert len(lines) == 2


def test_no_streams_reads_nothing(logs_client: Any, stub: Stubber) -> None:
    stub.add_response("describe_log_streams", {"logStreams": []}, describe_params())
    assert (
        read_job_logs(logs_client, eks_cluster=CLUSTER, namespace=NAMESPACE, job=JOB, since=SINCE)
        == []
    )


def test_the_lag_keeps_streams_whose_timestamp_trails(logs_client: Any, stub: Stubber) -> None:
    trailing = stream(WORKER_0, -(LAST_EVENT_LAG.total_seconds() / 60) + 1)
    stub.add_response("describe_log_streams", {"logStreams": [trailing]}, describe_params())
    stub.add_response(
        "filter_log_events",
        {"events": []},
        {"logGroupName": GROUP, "logStreamNames": [WORKER_0], "startTime": millis(SINCE)},
    )
    read_job_logs(logs_client, eks_cluster=CLUSTER, namespace=NAMESPACE, job=JOB, since=SINCE)


def test_a_missing_log_group_is_an_aws_call_error(logs_client: Any, stub: Stubber) -> None:
    stub.add_client_error(
        "describe_log_streams",
        service_error_code="ResourceNotFoundException",
        service_message="The specified log group does not exist.",
        http_status_code=400,
        expected_params=describe_params(),
    )
    with pytest.raises(AwsCallError) as failure:
        read_job_logs(logs_client, eks_cluster=CLUSTER, namespace=NAMESPACE, job=JOB, since=SINCE)
    assert failure.value.action == "logs:DescribeLogStreams"
    assert str(failure.value) == (
        "ResourceNotFoundException: The specified log group does not exist."
    )
