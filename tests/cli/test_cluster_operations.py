"""`hpctl cluster operations` against botocore's Stubber on one real SageMaker client (the
pinned API model checks every request and canned response): every page of
ListClusterOperations newest first with its filters, DescribeClusterOperation for one
operation (scaling counts and deep health checks per group), `--json`, and the one-line
failures."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hpctl import cluster_operations_cmd
from hpctl.errors import ExitCode
from tests.cli.conftest import Stubbed, expect_failure, hpctl
from tests.cli.test_cluster_health import CLUSTER_ARN, NAME, REGION, node_id, table_rows

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
PREFIX = "hpctl cluster operations: "
SCALING = "11111111-2222-3333-4444-555555555555"
CHECK = "66666666-7777-8888-9999-000000000000"


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_operations_cmd, "clock", lambda: NOW)


def summary(operation: str, kind: str, status: str, hours_ago: int) -> dict[str, Any]:
    return {
        "OperationId": operation,
        "ClusterArn": CLUSTER_ARN,
        "Type": kind,
        "Status": status,
        "CreationTime": NOW - timedelta(hours=hours_ago),
    }


def list_params(token: str | None = None, **filters: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "ClusterName": NAME,
        "SortBy": "CreationTime",
        "SortOrder": "Descending",
        **filters,
    }
    if token:
        params["NextToken"] = token
    return params


def test_every_page_newest_first(sagemaker: Stubbed):
    stub = sagemaker.stubber
    stub.add_response(
        "list_cluster_operations",
        {"ClusterOperationSummaries": [summary(CHECK, "DeepHealthCheck", "InProgress", 1)],
         "NextToken": "page-2"},
        list_params(),
    )  # fmt: skip
    stub.add_response(
        "list_cluster_operations",
        {"ClusterOperationSummaries": [summary(SCALING, "Scaling", "Done", 30)]},
        list_params("page-2"),
    )
    result = hpctl("cluster", "operations", "--env", "prod")
    assert result.exit_code == 0, result.output
    assert table_rows(result.stdout) == [
        [CHECK, "DeepHealthCheck", "InProgress", "2026-11-20 11:00"],
        [SCALING, "Scaling", "Done", "2026-11-19 06:00"],
    ]
    assert sagemaker.clients == [("sts", REGION), ("sagemaker", REGION)]


def test_filters_and_since_reach_the_request_and_json_lists_the_rows(sagemaker: Stubbed):
    sagemaker.stubber.add_response(
        "list_cluster_operations",
        {"ClusterOperationSummaries": [summary(CHECK, "DeepHealthCheck", "InProgress", 1)]},
        list_params(
            Type="DeepHealthCheck",
            Status="InProgress",
            CreationTimeAfter=NOW - timedelta(days=2),
        ),
    )
    result = hpctl(
        "cluster", "operations", "--env", "prod", "--type", "DeepHealthCheck",
        "--status", "InProgress", "--since", "2d", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {
            "operation_id": CHECK,
            "type": "DeepHealthCheck",
            "status": "InProgress",
            "created": "2026-11-20T11:00:00+00:00",
        }
    ]


def test_no_operations_says_so(sagemaker: Stubbed):
    sagemaker.stubber.add_response(
        "list_cluster_operations", {"ClusterOperationSummaries": []}, list_params()
    )
    result = hpctl("cluster", "operations", "--name", NAME, "--region", REGION)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"No operations of {NAME} match.\n"


def described(**details: Any) -> dict[str, Any]:
    return {
        "OperationId": SCALING,
        "ClusterArn": CLUSTER_ARN,
        "Type": "Scaling",
        "Status": "InProgress",
        "CreationTime": NOW - timedelta(hours=2),
        **details,
    }


DESCRIBE_PARAMS = {"ClusterName": NAME, "OperationId": SCALING}


def test_one_scaling_operation_per_group(sagemaker: Stubbed):
    sagemaker.stubber.add_response(
        "describe_cluster_operation",
        described(
            ScalingDetails=[
                {
                    "InstanceGroupName": "gpu-p5",
                    "Status": "InProgress",
                    "Original": {"CurrentCount": 14, "TargetCount": 14},
                    "Desired": {"CurrentCount": 14, "TargetCount": 16, "MinCount": 12},
                }
            ]
        ),
        DESCRIBE_PARAMS,
    )
    result = hpctl("cluster", "operations", "--env", "prod", "--operation-id", SCALING)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == (
        f"Operation {SCALING}: Scaling, InProgress, created 2026-11-20 10:00 UTC"
    )
    assert table_rows(result.stdout) == [["gpu-p5", "InProgress", "14/14/-", "14/16/12"]]


def test_one_health_check_operation_as_json(sagemaker: Stubbed):
    checks = {
        "InstanceGroupName": "gpu-p5",
        "InstanceIds": [node_id(3)],
        "DeepHealthChecks": ["InstanceStress"],
    }
    sagemaker.stubber.add_response(
        "describe_cluster_operation",
        described(Type="DeepHealthCheck", DeepHealthCheckDetails=[checks]),
        DESCRIBE_PARAMS,
    )
    result = hpctl("cluster", "operations", "--env", "prod", "--operation-id", SCALING, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["type"] == "DeepHealthCheck"
    assert report["scaling"] == []
    assert report["health_checks"] == [
        {"instance_group": "gpu-p5", "checks": ["InstanceStress"], "node_ids": [node_id(3)]}
    ]


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["--type", "Upgrade"], ExitCode.USAGE, "--type: 'Upgrade' is not one of DeepHealthCheck"),
        (["--status", "Failed"], ExitCode.USAGE, "--status: 'Failed' is not one of Done"),
        (["--since", "7"], ExitCode.USAGE, "--since: "),
        (["--operation-id", "op-1"], ExitCode.USAGE, "--operation-id: 'op-1' is not an operation"),
        (
            ["--operation-id", SCALING, "--type", "Scaling"],
            ExitCode.USAGE,
            "--operation-id: describes one operation; drop --type, --status and --since",
        ),
    ],
)
def test_bad_input_is_one_line_before_any_call(args: list[str], code: ExitCode, expected: str):
    expect_failure(
        "cluster", "operations", "--env", "prod", *args,
        code=code, starts_with=f"{PREFIX}{expected}",
    )  # fmt: skip


def test_an_aws_error_is_one_line(sagemaker: Stubbed):
    sagemaker.stubber.add_client_error(
        "describe_cluster_operation",
        service_error_code="ResourceNotFound",
        service_message=f"Operation {SCALING} not found",
        http_status_code=400,
        expected_params=DESCRIBE_PARAMS,
    )
    expect_failure(
        "cluster", "operations", "--env", "prod", "--operation-id", SCALING,
        code=ExitCode.FAILED,
        starts_with=f"{PREFIX}ResourceNotFound: Operation {SCALING} not found",
    )  # fmt: skip
