"""`hpctl cluster health-check` against botocore's Stubber on one real SageMaker client (the
pinned API model checks every request and canned response): the request per instance group,
the default and chosen checks, nodes of one group, `--json`, the account check of `--env`,
and the one-line refusals (no --yes, unknown group or check, nodes of several groups, AWS
errors)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hpctl.cluster_operations import HEALTH_CHECKS
from hpctl.errors import ExitCode
from tests.cli.conftest import Stubbed, error_line, expect_failure, hpctl
from tests.cli.test_cluster_health import CLUSTER_ARN, NAME, REGION, node_id

PREFIX = "hpctl cluster health-check: "
DEFAULT_CHECKS = ["InstanceStress", "InstanceConnectivity"]


def request(*groups: tuple[str, list[str], list[str]]) -> dict[str, Any]:
    """StartClusterHealthCheck's parameters for (group, checks, node ids) tuples."""
    configurations = []
    for group, checks, nodes in groups:
        configuration: dict[str, Any] = {"InstanceGroupName": group, "DeepHealthChecks": checks}
        if nodes:
            configuration["InstanceIds"] = nodes
        configurations.append(configuration)
    return {"ClusterName": NAME, "DeepHealthCheckConfigurations": configurations}


def started(stubbed: Stubbed, params: dict[str, Any]) -> None:
    stubbed.stubber.add_response("start_cluster_health_check", {"ClusterArn": CLUSTER_ARN}, params)


def test_the_pinned_model_has_the_three_checks():
    assert {
        "InstanceStress",
        "InstanceConnectivity",
        "MultiNodeTrainingValidation",
    } == HEALTH_CHECKS


def test_every_node_of_each_group_gets_the_default_checks(sagemaker: Stubbed):
    started(sagemaker, request(("gpu-p5", DEFAULT_CHECKS, []), ("system", DEFAULT_CHECKS, [])))
    result = hpctl(
        "cluster", "health-check", "--env", "prod",
        "--instance-group", "gpu-p5", "--instance-group", "system", "--yes",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"Deep health checks InstanceStress, InstanceConnectivity started on group(s) gpu-p5, "
        f"system of {NAME}.",
        "Follow them: hpctl cluster operations --env prod --type DeepHealthCheck "
        "--status InProgress",
    ]
    # --env checks whose credentials these are (STS) before the call, in the env's Region.
    assert sagemaker.clients == [("sts", REGION), ("sagemaker", REGION)]


def test_chosen_checks_on_some_nodes_of_one_group_as_json(sagemaker: Stubbed):
    nodes = [node_id(3), node_id(5)]
    checks = ["MultiNodeTrainingValidation", "InstanceConnectivity"]
    started(sagemaker, request(("gpu-p5", checks, nodes)))
    result = hpctl(
        "cluster", "health-check", "--env", "prod", "--instance-group", "gpu-p5",
        "--check", checks[0], "--check", checks[1], "--check", checks[0],
        "--node-id", nodes[0], "--node-id", nodes[1], "--yes", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "cluster": NAME,
        "cluster_arn": CLUSTER_ARN,
        "checks": checks,
        "instance_groups": ["gpu-p5"],
        "node_ids": nodes,
    }


def test_by_name_any_group_name_goes_to_the_service(sagemaker: Stubbed):
    started(sagemaker, request(("anything", DEFAULT_CHECKS, [])))
    result = hpctl(
        "cluster", "health-check", "--name", NAME, "--region", REGION,
        "--instance-group", "anything", "--yes",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].startswith(
        f"Follow them: hpctl cluster operations --name {NAME}"
    )


def test_without_yes_nothing_is_called():
    result = expect_failure(
        "cluster", "health-check", "--env", "prod", "--instance-group", "gpu-p5",
        code=ExitCode.FAILED,
        starts_with=f"{PREFIX}refusing to check group(s) gpu-p5 of {NAME} without --yes:",
    )  # fmt: skip
    assert result.stderr.rstrip().endswith("re-run with --yes")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--instance-group", "gpu-p4"],
            "--instance-group: 'gpu-p4' is not an instance group of prod; use ",
        ),
        (
            ["--instance-group", "gpu-p5", "--check", "DeepStress"],
            "--check: 'DeepStress' is not a deep health check; use InstanceConnectivity, "
            "InstanceStress, MultiNodeTrainingValidation",
        ),
        (
            ["--instance-group", "gpu-p5", "--instance-group", "system", "--node-id", node_id(1)],
            "--node-id: the nodes must be of one group; give exactly one --instance-group",
        ),
        (
            ["--instance-group", "gpu-p5", "--node-id", "i-xyz"],
            "--node-id: 'i-xyz' is not an instance id",
        ),
        (["--instance-group", "gpu_p5"], "--instance-group: 'gpu_p5' is not an instance group"),
    ],
)
def test_bad_input_is_one_usage_line_before_any_call(args: list[str], expected: str):
    expect_failure(
        "cluster", "health-check", "--env", "prod", *args, "--yes",
        code=ExitCode.USAGE, starts_with=f"{PREFIX}{expected}",
    )  # fmt: skip


def test_no_group_is_a_usage_error():
    result = hpctl("cluster", "health-check", "--env", "prod", "--yes")
    assert "--instance-group" in error_line(result, ExitCode.USAGE)


def test_an_aws_error_is_one_line(sagemaker: Stubbed):
    sagemaker.stubber.add_client_error(
        "start_cluster_health_check",
        service_error_code="ValidationException",
        service_message="Deep health checks are already running on gpu-p5",
        http_status_code=400,
        expected_params=request(("gpu-p5", DEFAULT_CHECKS, [])),
    )
    expect_failure(
        "cluster", "health-check", "--env", "prod", "--instance-group", "gpu-p5", "--yes",
        code=ExitCode.FAILED,
        starts_with=f"{PREFIX}ValidationException: Deep health checks are already running",
    )  # fmt: skip


def test_credentials_of_another_account_stop_before_the_call(sagemaker: Stubbed):
    sagemaker.stubs.caller = "999999999999"
    result = hpctl(
        "cluster", "health-check", "--env", "prod", "--instance-group", "gpu-p5", "--yes"
    )
    line = error_line(result, ExitCode.USAGE)
    assert line.startswith(f"{PREFIX}--env: prod deploys into account 333333333333"), line
    assert ("sagemaker", REGION) not in sagemaker.clients
