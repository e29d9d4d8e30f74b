"""`hpctl cluster events --since DURATION` against botocore's Stubber on one real SageMaker client
(the API model checks each request and each canned response): per-node history over every
page of ListClusterEvents, failures counted once per operation, repeat offenders and how to
replace them, `--json`, and the failures (input, provisioning mode, AWS errors)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hpctl import cluster_cmd
from hpctl.errors import ExitCode
from tests.cli.conftest import Stubbed, expect_failure, hpctl
from tests.cli.test_cluster_health import (
    CLUSTER_ARN,
    DESCRIBE_PARAMS,
    NAME,
    REGION,
    describe,
    node_id,
    table_rows,
)
from training.checkpoint.interval import NODE_HOURS_PER_FAILURE

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
PREFIX = "hpctl cluster events: "


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_cmd, "clock", lambda: NOW)


def event(
    number: int,
    hours_ago: float,
    level: str,
    description: str,
    node: int,
    group: str = "gpu-p5",
    operation: str | None = None,
) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "EventId": f"{number:08x}-aaaa-bbbb-cccc-dddddddddddd",
        "ClusterArn": CLUSTER_ARN,
        "ClusterName": NAME,
        "InstanceGroupName": group,
        "InstanceId": node_id(node),
        "ResourceType": "Instance",
        "EventTime": NOW - timedelta(hours=hours_ago),
        "EventLevel": level,
        "Description": description,
    }
    if operation is not None:
        summary["OperationId"] = operation
    return summary


OP_A = "11111111-2222-3333-4444-555555555555"
OP_B = "66666666-7777-8888-9999-000000000000"
# Node 3 failed twice (one failure reported by two events of one operation, then another),
# node 5 once, node 17 (system) only had routine events.
PAGE_1 = [
    event(1, 150, "Error", "Node failed the deep health check", 3, operation=OP_A),
    event(2, 149, "Warn", "Node is being rebooted", 3, operation=OP_A),
    event(3, 100, "Info", "Node joined the cluster", 17, group="system"),
]
PAGE_2 = [
    event(4, 20, "Warn", "Node failed the health check and is being rebooted", 3, operation=OP_B),
    event(5, 5, "Error", "GPU XID 79: node is being rebooted", 5),
]


WEEK = timedelta(days=7)
RATES_HEADER = [
    "Failure rate per group (the trainer assumes one failure per 8,192 node-hours; "
    "checkpoint.mtbf_hours):"
]


def quiet_rates(hours: int) -> list[str]:
    """The rate lines of a window of `hours` without a failure (16 + 3 nodes)."""
    return [
        *RATES_HEADER,
        f"  gpu-p5: 16 nodes, {16 * hours:,} node-hours, no failure",
        f"  system: 3 nodes, {3 * hours:,} node-hours, no failure",
    ]


def events_params(token: str | None = None, window: timedelta = WEEK) -> dict[str, Any]:
    params: dict[str, Any] = {
        "ClusterName": NAME,
        "ResourceType": "Instance",
        "EventTimeAfter": NOW - window,
        "SortBy": "EventTime",
        "SortOrder": "Ascending",
        "MaxResults": 100,
    }
    if token:
        params["NextToken"] = token
    return params


def queue(
    stubbed: Stubbed,
    pages: tuple[list[dict[str, Any]], ...] = (PAGE_1, PAGE_2),
    window: timedelta = WEEK,
) -> None:
    stub = stubbed.stubber
    stub.add_response("describe_cluster", describe(), DESCRIBE_PARAMS)
    for index, page in enumerate(pages):
        response: dict[str, Any] = {"Events": page}
        if index < len(pages) - 1:
            response["NextToken"] = f"page-{index + 2}"
        stub.add_response(
            "list_cluster_events",
            response,
            events_params(f"page-{index + 1}" if index else None, window),
        )


def test_history_per_node_with_repeat_offenders_and_how_to_replace_them(sagemaker: Stubbed):
    queue(sagemaker)
    result = hpctl("cluster", "events", "--env", "prod", "--since", "7d")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert table_rows(result.stdout) == [
        [
            "gpu-p5",
            node_id(3),
            "2",
            "unknown",
            "3",
            "3",
            "2026-11-19 16:00",
            "Node failed the health check and is being rebooted",
        ],
        [
            "gpu-p5",
            node_id(5),
            "1",
            "gpu",
            "1",
            "1",
            "2026-11-20 07:00",
            "GPU XID 79: node is being rebooted",
        ],
        ["system", node_id(17), "0", "-", "0", "1", "2026-11-16 08:00", "Node joined the cluster"],
    ]
    lines = result.stdout.splitlines()
    assert lines[-6:] == [
        f"Failed more than once in the last 7 days: {node_id(3)}.",
        f"  unknown, more than once: {node_id(3)}",
        "Replace them (drain first; README Operations): hpctl cluster replace --env prod "
        f"--node-id {node_id(3)} --yes",
        *RATES_HEADER,
        # 16 nodes x 168 h = 2,688 node-hours, 3 failures (node 3 twice, node 5 once).
        "  gpu-p5: 16 nodes, 2,688 node-hours, 3 failures: one per 896 node-hours; a job of N "
        "nodes: --set checkpoint.mtbf_hours=<896 / N>",
        "  system: 3 nodes, 504 node-hours, no failure",
    ]


def test_json_has_every_event_per_node(sagemaker: Stubbed):
    queue(sagemaker)
    result = hpctl("cluster", "events", "--env", "prod", "--since", "1w", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["cluster"] == NAME
    assert report["since"] == "2026-11-13T12:00:00+00:00"
    assert report["days"] == 7
    assert report["repeat_offenders"] == [node_id(3)]
    first = report["nodes"][0]
    assert (first["instance_id"], first["failures"], first["health_events"]) == (node_id(3), 2, 3)
    assert [e["event_id"] for e in first["history"]] == [
        e["EventId"] for e in (PAGE_1[0], PAGE_1[1], PAGE_2[0])
    ]
    assert first["history"][0] == {
        "time": "2026-11-14T06:00:00+00:00",
        "level": "Error",
        "resource_type": "Instance",
        "instance_group": "gpu-p5",
        "instance_id": node_id(3),
        "description": "Node failed the deep health check",
        "event_id": PAGE_1[0]["EventId"],
        "cause": "unknown",
    }


def test_the_json_has_each_groups_failure_rate_for_the_trainers_mtbf(sagemaker: Stubbed):
    queue(sagemaker)
    report = json.loads(hpctl("cluster", "events", "--env", "prod", "--json").stdout)
    assert report["failure_rates"] == [
        {
            "instance_group": "gpu-p5",
            "nodes": 16,
            "node_hours": 2688.0,
            "failures": 3,
            "node_hours_per_failure": 896.0,
            "assumed_node_hours_per_failure": NODE_HOURS_PER_FAILURE,
        },
        {
            "instance_group": "system",
            "nodes": 3,
            "node_hours": 504.0,
            "failures": 0,
            "node_hours_per_failure": None,
            "assumed_node_hours_per_failure": NODE_HOURS_PER_FAILURE,
        },
    ]


def test_no_events_says_so(sagemaker: Stubbed):
    queue(sagemaker, pages=([],), window=timedelta(days=1))
    result = hpctl("cluster", "events", "--env", "prod", "--since", "1d")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"No node events in {NAME} in the last 1 day.",
        *quiet_rates(24),
    ]


def test_since_in_hours_reads_that_window(sagemaker: Stubbed):
    queue(sagemaker, pages=([],), window=timedelta(hours=36))
    result = hpctl("cluster", "events", "--env", "prod", "--since", "36h")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"No node events in {NAME} in the last 36 hours.",
        *quiet_rates(36),
    ]
    queue(sagemaker, pages=([],), window=timedelta(hours=36))
    report = json.loads(
        hpctl("cluster", "events", "--env", "prod", "--since", "36h", "--json").stdout
    )
    assert (report["since"], report["days"]) == ("2026-11-19T00:00:00+00:00", 1.5)


def test_the_default_window_is_a_week(sagemaker: Stubbed):
    queue(sagemaker, pages=([],))
    result = hpctl("cluster", "events", "--env", "prod")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"No node events in {NAME} in the last 7 days.",
        *quiet_rates(168),
    ]


def test_a_bare_number_is_still_days_with_one_deprecation_line(sagemaker: Stubbed):
    queue(sagemaker, pages=([],), window=timedelta(days=14))
    result = hpctl("cluster", "events", "--env", "prod", "--since", "14")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"No node events in {NAME} in the last 14 days.",
        *quiet_rates(14 * 24),
    ]
    assert result.stderr == (
        f"{PREFIX}--since 14: a number without a unit is deprecated and read as days; write 14d\n"
    )


def test_single_failures_are_not_repeat_offenders(sagemaker: Stubbed):
    queue(sagemaker, pages=([PAGE_1[0], PAGE_1[1], PAGE_2[1]],))
    result = hpctl("cluster", "events", "--env", "prod", "--since", "7d", "--json")
    report = json.loads(result.stdout)
    assert [n["failures"] for n in report["nodes"]] == [1, 1]
    assert report["repeat_offenders"] == []


@pytest.mark.parametrize(
    ("since", "expected"),
    [
        ("0d", "--since: 0 days is out of range; use 1h to 365d"),
        ("366d", "--since: 366 days is out of range; use 1h to 365d"),
        ("53w", "--since: 371 days is out of range; use 1h to 365d"),
        ("30m", "--since: 30 minutes is out of range; use 1h to 365d"),
        ("-1", "--since: '-1' is not a duration; write a number and a unit, e.g. 30m, 6h"),
        ("7 days", "--since: '7 days' is not a duration"),
        ("1.5d", "--since: '1.5d' is not a duration"),
    ],
)
def test_since_out_of_range_or_unreadable_is_a_usage_error(since: str, expected: str):
    expect_failure(
        "cluster",
        "events",
        "--env",
        "prod",
        "--since",
        since,
        code=ExitCode.USAGE,
        starts_with=PREFIX + expected,
    )


def test_a_bare_number_out_of_range_is_refused_after_its_deprecation_line():
    result = hpctl("cluster", "events", "--env", "prod", "--since", "366")
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.splitlines() == [
        f"{PREFIX}--since 366: a number without a unit is deprecated and read as days; write 366d",
        f"{PREFIX}--since: 366 days is out of range; use 1h to 365d",
    ]


def test_cluster_without_continuous_provisioning_has_no_events(sagemaker: Stubbed):
    sagemaker.stubber.add_response("describe_cluster", describe(mode=None), DESCRIBE_PARAMS)
    expect_failure(
        "cluster",
        "events",
        "--env",
        "prod",
        code=ExitCode.FAILED,
        starts_with=f"{PREFIX}{NAME}: ListClusterEvents needs NodeProvisioningMode Continuous",
    )


def test_an_aws_error_is_one_line(sagemaker: Stubbed):
    sagemaker.stubber.add_response("describe_cluster", describe(), DESCRIBE_PARAMS)
    sagemaker.stubber.add_client_error(
        "list_cluster_events",
        service_error_code="AccessDeniedException",
        service_message="not authorized to perform sagemaker:ListClusterEvents",
        http_status_code=400,
        expected_params=events_params(),
    )
    expect_failure(
        "cluster",
        "events",
        "--env",
        "prod",
        code=ExitCode.FAILED,
        starts_with=f"{PREFIX}AccessDeniedException: not authorized to perform "
        "sagemaker:ListClusterEvents",
    )


def test_by_name_the_hint_names_the_cluster(sagemaker: Stubbed):
    queue(sagemaker)
    result = hpctl("cluster", "events", "--name", NAME, "--region", REGION)
    assert result.exit_code == 0, result.output
    (hint,) = [line for line in result.stdout.splitlines() if "cluster replace" in line]
    assert hint.endswith(f"hpctl cluster replace --name {NAME} --node-id {node_id(3)} --yes")
