"""`hpctl cluster status|nodes|reboot|replace`, against moto's emulated cluster where moto
has the call (create/describe cluster, list nodes) and botocore's Stubber elsewhere (several
pages of nodes, node statuses moto never produces, the batch reboot/replace calls moto lacks,
AWS failures). Stubber checks every request against the real API model. No test reaches the
network: credentials are fake and sockets refuse to connect."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber
from moto import mock_aws
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.sagemaker.models import sagemaker_backends

from hpctl import aws
from hpctl.errors import ExitCode
from tests.cli.conftest import Stubbed, caller_identity, error_line, expect_failure, hpctl

NAME = "hyperpod-prod"
CLUSTER_ARN = f"arn:aws:sagemaker:us-east-1:{DEFAULT_ACCOUNT_ID}:cluster/abcdef012345"
LAUNCHED = datetime(2026, 11, 1, 8, 30, tzinfo=UTC)
NODE_A, NODE_B, NODE_C = "i-0123456789abcdef0", "i-0fedcba9876543210", "i-0a1b2c3d4e5f60718"


def table_rows(text: str) -> list[list[str]]:
    """The body cells of the tables in `text`."""
    return [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in text.splitlines()
        if line.startswith("│")
    ]


# ------------------------------------------------------------------ moto


def moto_group(name: str, instance_type: str, count: int) -> dict[str, Any]:
    return {
        "InstanceGroupName": name,
        "InstanceType": instance_type,
        "InstanceCount": count,
        # moto insists on a lifecycle bucket named sagemaker-*, as the service documents.
        "LifeCycleConfig": {
            "SourceS3Uri": "s3://sagemaker-lifecycle/eks/",
            "OnCreate": "on_create.sh",
        },
        "ExecutionRole": f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/hyperpod-nodes",
        "ThreadsPerCore": 1,
    }


@pytest.fixture
def moto_cluster() -> Iterator[Any]:
    """An emulated cluster: gpu (3 x p5), gpu-spare (1 x p5) and system (2 x m5) groups."""
    with mock_aws():
        aws.client("sagemaker").create_cluster(
            ClusterName=NAME,
            InstanceGroups=[
                moto_group("gpu", "ml.p5.48xlarge", 3),
                moto_group("gpu-spare", "ml.p5.48xlarge", 1),
                moto_group("system", "ml.m5.xlarge", 2),
            ],
            VpcConfig={
                "SecurityGroupIds": ["sg-0123456789abcdef0"],
                "Subnets": ["subnet-0123456789abcdef0"],
            },
        )
        yield sagemaker_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].clusters[NAME]


def test_status_reads_the_emulated_cluster(moto_cluster: Any):
    result = hpctl("cluster", "status", "--name", NAME)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Cluster {NAME}: InService\n")
    assert "All 6 nodes Running." in result.stdout
    # moto's groups carry no Status, hence "-".
    assert table_rows(result.stdout) == [
        ["gpu", "ml.p5.48xlarge", "-", "3", "3"],
        ["gpu-spare", "ml.p5.48xlarge", "-", "1", "1"],
        ["system", "ml.m5.xlarge", "-", "2", "2"],
    ]


def test_status_json_counts_groups_and_lists_unhealthy_nodes(moto_cluster: Any):
    # moto only ever reports Running; a node's status is set the way the service would.
    moto_cluster.nodes["gpu-1"].status = "Failure"
    result = hpctl("cluster", "status", "--name", NAME, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "InService"
    assert report["nodes_total"] == 6
    counts = {g["name"]: (g["current_count"], g["target_count"]) for g in report["instance_groups"]}
    assert counts == {"gpu": (3, 3), "gpu-spare": (1, 1), "system": (2, 2)}
    assert [(n["instance_id"], n["status"]) for n in report["unhealthy_nodes"]] == [
        ("gpu-1", "Failure")
    ]


def test_status_table_shows_the_unhealthy_node(moto_cluster: Any):
    moto_cluster.nodes["system-0"].status = "Pending"
    result = hpctl("cluster", "status", "--name", NAME)
    assert result.exit_code == 0
    assert "1 of 6 nodes not Running" in result.stdout
    (line,) = [text for text in result.stdout.splitlines() if "system-0" in text]
    assert "Pending" in line
    assert "All 6 nodes" not in result.stdout


def test_nodes_group_filter_is_exact_although_the_api_matches_substrings(moto_cluster: Any):
    result = hpctl("cluster", "nodes", "--name", NAME, "--instance-group", "gpu", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["instance_id"] for r in rows] == ["gpu-0", "gpu-1", "gpu-2"]
    assert {r["instance_group"] for r in rows} == {"gpu"}


def test_nodes_old_group_option_still_filters_with_one_deprecation_line(moto_cluster: Any):
    result = hpctl("cluster", "nodes", "--name", NAME, "--group", "gpu", "--json")
    assert result.exit_code == 0, result.output
    assert [r["instance_id"] for r in json.loads(result.stdout)] == ["gpu-0", "gpu-1", "gpu-2"]
    assert result.stderr == (
        "hpctl cluster nodes: --group is deprecated and goes in the next release; "
        "use --instance-group\n"
    )


def test_nodes_table_lists_every_node(moto_cluster: Any):
    result = hpctl("cluster", "nodes", "--name", NAME)
    assert result.exit_code == 0
    assert f"6 nodes in {NAME}" in result.stdout
    for node in moto_cluster.nodes:
        assert node in result.stdout


def test_unknown_cluster_is_one_line(moto_cluster: Any):
    result = hpctl("cluster", "status", "--name", "no-such-cluster")
    assert error_line(result, ExitCode.FAILED) == (
        "hpctl cluster status: ValidationException: Could not find cluster 'no-such-cluster'."
    )


# ------------------------------------------------------------------ stubbed reads


def node(node_id: str, group: str, status: str = "Running", message: str | None = None) -> dict:
    summary: dict[str, Any] = {
        "InstanceGroupName": group,
        "InstanceId": node_id,
        "InstanceType": "ml.p5.48xlarge",
        "LaunchTime": LAUNCHED,
        "InstanceStatus": {"Status": status},
    }
    if message:
        summary["InstanceStatus"]["Message"] = message
    return summary


def describe(groups: list[tuple[str, int, int]], status: str = "InService") -> dict:
    return {
        "ClusterArn": CLUSTER_ARN,
        "ClusterName": NAME,
        "ClusterStatus": status,
        "InstanceGroups": [
            {
                "InstanceGroupName": g,
                "InstanceType": "ml.p5.48xlarge",
                "CurrentCount": current,
                "TargetCount": target,
                "Status": "Degraded" if current < target else "InService",
            }
            for g, current, target in groups
        ],
    }


def test_status_follows_every_page_of_nodes(sagemaker: Stubbed):
    stub = sagemaker.stubber
    stub.add_response("describe_cluster", describe([("gpu", 2, 3)]), {"ClusterName": NAME})
    stub.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": [node(NODE_A, "gpu")], "NextToken": "page-2"},
        {"ClusterName": NAME, "MaxResults": 100},
    )
    stub.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": [node(NODE_B, "gpu", "Failure", "EFA health check failed")]},
        {"ClusterName": NAME, "MaxResults": 100, "NextToken": "page-2"},
    )
    result = hpctl("cluster", "status", "--name", NAME, "--region", "us-east-1", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["nodes_total"] == 2
    assert report["instance_groups"][0]["status"] == "Degraded"
    assert report["unhealthy_nodes"] == [
        {
            "instance_group": "gpu",
            "instance_id": NODE_B,
            "instance_type": "ml.p5.48xlarge",
            "status": "Failure",
            "message": "EFA health check failed",
            "launch_time": LAUNCHED.isoformat(),
            "private_dns": None,
            "ultraserver_id": None,
        }
    ]
    assert sagemaker.clients == [("sts", "us-east-1"), ("sagemaker", "us-east-1")]


def gb200_node(node_id: str, ultraserver: str) -> dict:
    summary = node(node_id, "gpu-gb200")
    summary["InstanceType"] = "ml.p6e-gb200.36xlarge"
    summary["UltraServerInfo"] = {"Id": ultraserver, "Type": "ml.u-p6e-gb200x72"}
    return summary


def test_nodes_show_the_ultraserver_of_each_ultraserver_instance(sagemaker: Stubbed):
    # The reply's UltraServerInfo as botocore's model has it (the Stubber checks the shape).
    nodes = [gb200_node(NODE_A, "us-1a2b3c"), gb200_node(NODE_B, "us-4d5e6f"), node(NODE_C, "gpu")]
    for output in ("--json", None):
        sagemaker.stubber.add_response(
            "list_cluster_nodes",
            {"ClusterNodeSummaries": nodes},
            {"ClusterName": NAME, "MaxResults": 100},
        )
        args = ["cluster", "nodes", "--name", NAME, *([output] if output else [])]
        result = hpctl(*args)
        assert result.exit_code == 0, result.output
        if output:
            rows = {r["instance_id"]: r["ultraserver_id"] for r in json.loads(result.stdout)}
            assert rows == {NODE_A: "us-1a2b3c", NODE_B: "us-4d5e6f", NODE_C: None}
        else:
            assert "UltraServer" in result.stdout
            assert "us-1a2b3c" in result.stdout
            assert "us-4d5e6f" in result.stdout


def test_nodes_without_ultraservers_have_no_ultraserver_column(sagemaker: Stubbed):
    sagemaker.stubber.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": [node(NODE_A, "gpu")]},
        {"ClusterName": NAME, "MaxResults": 100},
    )
    result = hpctl("cluster", "nodes", "--name", NAME)
    assert result.exit_code == 0, result.output
    assert "UltraServer" not in result.stdout


def test_nodes_passes_the_group_filter_to_the_api(sagemaker: Stubbed):
    sagemaker.stubber.add_response(
        "list_cluster_nodes",
        {
            "ClusterNodeSummaries": [
                node(NODE_B, "gpu"),
                node(NODE_C, "gpu-spare"),
                node(NODE_A, "gpu"),
            ]
        },
        {"ClusterName": NAME, "InstanceGroupNameContains": "gpu", "MaxResults": 100},
    )
    result = hpctl("cluster", "nodes", "--name", NAME, "--instance-group", "gpu", "--json")
    assert result.exit_code == 0, result.output
    assert [r["instance_id"] for r in json.loads(result.stdout)] == [NODE_A, NODE_B]


def test_nodes_of_an_environment_name_its_cluster(sagemaker: Stubbed):
    # The titles once printed the --name option, None when the cluster came from --env.
    for nodes, said in (([node(NODE_A, "gpu")], f"1 nodes in {NAME}"), ([], "No nodes in")):
        sagemaker.stubber.add_response(
            "list_cluster_nodes",
            {"ClusterNodeSummaries": nodes},
            {"ClusterName": NAME, "MaxResults": 100},
        )
        result = hpctl("cluster", "nodes", "--env", "prod")
        assert result.exit_code == 0, result.output
        assert said in result.stdout and NAME in result.stdout and "None" not in result.stdout


def test_a_repeated_page_token_is_one_line(sagemaker: Stubbed):
    page = {"ClusterNodeSummaries": [node(NODE_A, "gpu")], "NextToken": "same"}
    sagemaker.stubber.add_response("list_cluster_nodes", page)
    sagemaker.stubber.add_response("list_cluster_nodes", page)
    result = hpctl("cluster", "nodes", "--name", NAME)
    assert error_line(result, ExitCode.FAILED).startswith(
        "hpctl cluster nodes: PaginationError: Error during pagination: The same next token "
        "was received twice"
    )


@pytest.mark.parametrize("verb", ["status", "nodes"])
def test_env_addresses_the_environments_cluster_with_its_account_and_region(
    sagemaker: Stubbed, monkeypatch: pytest.MonkeyPatch, verb: str
):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")  # the environment's Region wins
    if verb == "status":
        sagemaker.stubber.add_response(
            "describe_cluster", describe([("gpu", 1, 1)]), {"ClusterName": NAME}
        )
    sagemaker.stubber.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": [node(NODE_A, "gpu")]},
        {"ClusterName": NAME, "MaxResults": 100},
    )
    result = hpctl("cluster", verb, "--env", "prod", "--json")
    assert result.exit_code == 0, result.output
    assert sagemaker.clients == [("sts", "us-east-1"), ("sagemaker", "us-east-1")]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["status"], "--name/--env: give one"),
        (["status", "--name", NAME, "--env", "prod"], "--name/--env: give one"),
        (["nodes", "--env", "prod", "--region", "us-east-1"], "--region: --env decides the Region"),
        (
            ["reboot", "--env", "qa", "--node-id", NODE_A, "--yes"],
            "--env: unknown environment 'qa'",
        ),
    ],
    ids=["neither", "both", "env-and-region", "unknown-env"],
)
def test_the_cluster_is_named_once_before_any_call(
    sagemaker: Stubbed, args: list[str], expected: str
):
    expect_failure(
        "cluster", *args, code=ExitCode.USAGE, starts_with=f"hpctl cluster {args[0]}: {expected}"
    )
    assert sagemaker.clients == []


# ------------------------------------------------------------------ reboot / replace


@pytest.mark.parametrize("verb", ["reboot", "replace"])
def test_disruptive_commands_refuse_without_yes_and_call_nothing(sagemaker: Stubbed, verb: str):
    result = expect_failure(
        "cluster",
        verb,
        "--name",
        NAME,
        "--node-id",
        NODE_A,
        "--node-id",
        NODE_B,
        code=ExitCode.FAILED,
        starts_with=f"hpctl cluster {verb}: refusing to {verb} 2 node(s) of {NAME} without --yes: ",
    )
    assert error_line(result, ExitCode.FAILED).endswith("; re-run with --yes")
    assert sagemaker.clients == []


def test_replace_warns_that_volumes_are_destroyed(sagemaker: Stubbed):
    result = hpctl("cluster", "replace", "--name", NAME, "--node-id", NODE_A)
    assert "destroys all their volumes" in error_line(result, ExitCode.FAILED)


@pytest.mark.parametrize("verb", ["reboot", "replace"])
def test_disruptive_commands_send_unique_node_ids_and_report_each(sagemaker: Stubbed, verb: str):
    sagemaker.stubber.add_response(
        f"batch_{verb}_cluster_nodes",
        {"Successful": [NODE_A, NODE_B], "Failed": []},
        {"ClusterName": NAME, "NodeIds": [NODE_A, NODE_B]},
    )
    result = hpctl(
        "cluster",
        verb,
        "--name",
        NAME,
        "--node-id",
        NODE_A,
        "--node-id",
        NODE_B,
        "--node-id",
        NODE_A,
        "--yes",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{NODE_A}: {verb} requested",
        f"{NODE_B}: {verb} requested",
    ]
    assert result.stderr == ""


def test_replace_reports_per_node_failures_and_exits_non_zero(sagemaker: Stubbed):
    sagemaker.stubber.add_response(
        "batch_replace_cluster_nodes",
        {
            "Successful": [NODE_A],
            "Failed": [
                {
                    "NodeId": NODE_B,
                    "ErrorCode": "InvalidInstanceStatus",
                    "Message": "Node is already being replaced",
                }
            ],
        },
        {"ClusterName": NAME, "NodeIds": [NODE_A, NODE_B, NODE_C]},
    )
    result = hpctl(
        "cluster",
        "replace",
        "--name",
        NAME,
        "--node-id",
        NODE_A,
        "--node-id",
        NODE_B,
        "--node-id",
        NODE_C,
        "--yes",
    )
    assert result.exit_code == 1
    assert result.stdout == f"{NODE_A}: replace requested\n"
    assert result.stderr.splitlines() == [
        f"hpctl cluster replace: {NODE_B}: InvalidInstanceStatus: Node is already being replaced",
        # Not in either list of the response: not counted as done.
        f"hpctl cluster replace: {NODE_C}: NotInResponse: the service reported no result for this node",
        "hpctl cluster replace: 2 of 3 node(s) failed",
    ]
    assert "Traceback" not in result.output


def test_reboot_reports_a_refused_call_in_one_line(sagemaker: Stubbed):
    sagemaker.stubber.add_client_error(
        "batch_reboot_cluster_nodes",
        "AccessDeniedException",
        "User is not authorized to perform: sagemaker:BatchRebootClusterNodes",
        expected_params={"ClusterName": NAME, "NodeIds": [NODE_A]},
    )
    result = hpctl("cluster", "reboot", "--name", NAME, "--node-id", NODE_A, "--yes")
    assert error_line(result, ExitCode.FAILED) == (
        "hpctl cluster reboot: AccessDeniedException: User is not authorized to perform: "
        "sagemaker:BatchRebootClusterNodes"
    )


# ------------------------------------------------------------------ input validation


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["status", "--name", "bad_name"], "--name: 'bad_name' is not a cluster name"),
        (["status", "--name", "x" * 64], f"--name: '{'x' * 64}' is not a cluster name"),
        (
            ["nodes", "--name", NAME, "--instance-group", "gpu group"],
            "--instance-group: 'gpu group' is not an instance group name",
        ),
        (
            ["nodes", "--name", NAME, "--instance-group", "gpu", "--group", "gpu"],
            "--group: the old spelling of --instance-group; give --instance-group only",
        ),
        (
            ["reboot", "--name", NAME, "--node-id", "i-XYZ", "--yes"],
            "--node-id: 'i-XYZ' is not an instance id",
        ),
        (
            ["replace", "--name", NAME, "--node-id", "i-0123456789", "--yes"],
            "--node-id: 'i-0123456789' is not an instance id",
        ),
        (
            [
                "reboot",
                "--name",
                NAME,
                *[a for i in range(26) for a in ("--node-id", f"i-{i:08x}")],
                "--yes",
            ],
            "--node-id: 26 nodes given; at most 25 per call, run it in batches",
        ),
    ],
    ids=[
        "name-pattern",
        "name-too-long",
        "group-pattern",
        "group-under-both-spellings",
        "node-id-pattern",
        "node-id-length",
        "too-many-nodes",
    ],
)
def test_bad_input_is_one_line_before_any_call(sagemaker: Stubbed, args: list[str], expected: str):
    expect_failure(
        "cluster", *args, code=ExitCode.USAGE, starts_with=f"hpctl cluster {args[0]}: {expected}"
    )
    assert sagemaker.clients == []


def test_cluster_arn_is_accepted_as_name(sagemaker: Stubbed):
    sagemaker.stubber.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": []},
        {"ClusterName": CLUSTER_ARN, "MaxResults": 100},
    )
    result = hpctl("cluster", "nodes", "--name", CLUSTER_ARN)
    assert result.exit_code == 0
    assert f"No nodes in cluster {CLUSTER_ARN}." in result.stdout


# ------------------------------------------------------------------ local botocore failures


def real_client_with(monkeypatch: pytest.MonkeyPatch, event: str, handler: Any) -> None:
    """Commands get real clients (real parameter validation, real retry and send path)
    with `handler` on `event`; STS answers from a Stubber."""
    build = aws.client

    def factory(service: str, region: str | None = None, source: Any = None) -> Any:
        made = build(service, region, source)
        if service == "sts":
            identity = Stubber(made)
            identity.add_response(
                "get_caller_identity", caller_identity(DEFAULT_ACCOUNT_ID), expected_params={}
            )
            identity.activate()
        made.meta.events.register(event, handler)
        return made

    monkeypatch.setattr(aws, "client", factory)


def test_unreachable_endpoint_is_one_line(monkeypatch: pytest.MonkeyPatch):
    def unreachable(request: Any, **_: Any) -> None:
        raise EndpointConnectionError(endpoint_url=request.url)

    real_client_with(monkeypatch, "before-send.sagemaker", unreachable)
    result = hpctl("cluster", "status", "--name", NAME)
    assert error_line(result, ExitCode.FAILED) == (
        "hpctl cluster status: EndpointConnectionError: Could not connect to the endpoint URL: "
        '"https://api.sagemaker.us-east-1.amazonaws.com/"'
    )


def test_parameters_the_api_model_rejects_are_one_line(monkeypatch: pytest.MonkeyPatch):
    def add_unknown_parameter(params: dict[str, Any], **_: Any) -> None:
        params["Unexpected"] = True

    real_client_with(
        monkeypatch, "before-parameter-build.sagemaker.DescribeCluster", add_unknown_parameter
    )
    result = hpctl("cluster", "status", "--name", NAME)
    assert error_line(result, ExitCode.FAILED) == (
        "hpctl cluster status: ParamValidationError: Parameter validation failed: Unknown "
        'parameter in input: "Unexpected", must be one of: ClusterName'
    )


def test_missing_credentials_are_one_line(monkeypatch: pytest.MonkeyPatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    result = hpctl("cluster", "reboot", "--name", NAME, "--node-id", NODE_A, "--yes")
    assert error_line(result, ExitCode.FAILED) == (
        "hpctl cluster reboot: no AWS credentials found; set AWS_PROFILE or run `aws sso login`"
    )


def test_missing_region_is_one_line(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    result = hpctl("cluster", "nodes", "--name", NAME)
    assert error_line(result, ExitCode.FAILED) == (
        "hpctl cluster nodes: no AWS Region; pass --region or set AWS_REGION"
    )
