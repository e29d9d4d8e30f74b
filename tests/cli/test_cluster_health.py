"""`hpctl cluster health --env NAME` against botocore's Stubber on one real SageMaker client:
the API model checks every request (each expected parameter is exact) and each canned
response. The environment is config/prod.yaml (cluster hyperpod-prod in us-east-1, 16 gpu-p5
and 3 system nodes, teams evaluation, foundation and research) or a copy of it without
governance. No test reaches the network."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console

from hpctl import cluster_cmd
from hpctl.errors import ExitCode
from tests.cli.conftest import Stubbed, error_line, expect_failure, hpctl
from tests.support import environment

NAME = "hyperpod-prod"
REGION = "us-east-1"
ACCOUNT = "333333333333"
CLUSTER_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdef012345"
NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
SINCE = NOW - timedelta(hours=24)
LAUNCHED = datetime(2026, 11, 1, 8, 30, tzinfo=UTC)
P5, M5 = "ml.p5.48xlarge", "ml.m5.4xlarge"
PREFIX = "hpctl cluster health: "


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_cmd, "clock", lambda: NOW)


def table_rows(text: str) -> list[list[str]]:
    """The body cells of the tables in `text`."""
    return [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in text.splitlines()
        if line.startswith("│")
    ]


# ------------------------------------------------------------------ canned responses


def node_id(number: int) -> str:
    return f"i-{number:017x}"


def node(number: int, group: str, status: str = "Running", message: str | None = None) -> dict:
    summary: dict[str, Any] = {
        "InstanceGroupName": group,
        "InstanceId": node_id(number),
        "InstanceType": P5 if group == "gpu-p5" else M5,
        "LaunchTime": LAUNCHED,
        "InstanceStatus": {"Status": status},
    }
    if message:
        summary["InstanceStatus"]["Message"] = message
    return summary


def prod_nodes(**statuses: tuple[str, str]) -> list[dict]:
    """The 16 gpu-p5 nodes (1-16) and 3 system nodes (17-19), all Running except the ones
    named `n<number>=(status, message)`."""
    nodes = []
    for number in range(1, 20):
        status, message = statuses.get(f"n{number}", ("Running", ""))
        nodes.append(node(number, "gpu-p5" if number <= 16 else "system", status, message))
    return nodes


def describe(
    status: str = "InService",
    gpu: tuple[int, int] = (16, 16),
    mode: str | None = "Continuous",
) -> dict:
    response: dict[str, Any] = {
        "ClusterArn": CLUSTER_ARN,
        "ClusterName": NAME,
        "ClusterStatus": status,
        "InstanceGroups": [
            {
                "InstanceGroupName": "gpu-p5",
                "InstanceType": P5,
                "CurrentCount": gpu[0],
                "TargetCount": gpu[1],
                "Status": "InService" if gpu[0] == gpu[1] else "Degraded",
            },
            {
                "InstanceGroupName": "system",
                "InstanceType": M5,
                "CurrentCount": 3,
                "TargetCount": 3,
                "Status": "InService",
            },
        ],
    }
    if mode:
        response["NodeProvisioningMode"] = mode
    return response


def event(number: int, when: datetime, level: str, description: str, **where: str) -> dict:
    summary = {
        "EventId": f"0000000{number}-aaaa-bbbb-cccc-dddddddddddd",
        "ClusterArn": CLUSTER_ARN,
        "ClusterName": NAME,
        "ResourceType": "Instance" if "InstanceId" in where else "InstanceGroup",
        "EventTime": when,
        "EventLevel": level,
        "Description": description,
        **where,
    }
    return summary


EVENTS = [
    event(
        1,
        NOW - timedelta(hours=2),
        "Warn",
        "Node failed the deep health check and is being replaced",
        InstanceGroupName="gpu-p5",
        InstanceId=node_id(3),
    ),
    event(
        2, NOW - timedelta(hours=5), "Info", "Scaled to 16 instances", InstanceGroupName="gpu-p5"
    ),
]


def quota(team: str, resources: list[dict], status: str = "Created", **extra: Any) -> dict:
    return {
        "ComputeQuotaArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:compute-quota/{team[:4]}00000000",
        "ComputeQuotaId": f"{team[:4]}00000000",
        "Name": f"{NAME}-{team}",
        "Status": status,
        "ClusterArn": CLUSTER_ARN,
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": resources,
            "ResourceSharingConfig": {"Strategy": "LendAndBorrow"},
            "PreemptTeamTasks": "LowerPriority",
        },
        "ComputeQuotaTarget": {"TeamName": team, "FairShareWeight": 10},
        "ActivationState": "Enabled",
        "CreationTime": LAUNCHED,
        **extra,
    }


QUOTAS = {
    "evaluation": quota("evaluation", [{"InstanceType": P5, "Count": 2}]),
    "foundation": quota("foundation", [{"InstanceType": P5, "Count": 8}]),
    "research": quota(
        "research",
        [
            {"InstanceType": M5, "VCpu": 16.0, "MemoryInGiB": 64.0},
            {"InstanceType": P5, "Count": 6},
        ],
    ),
}

DESCRIBE_PARAMS = {"ClusterName": NAME}
NODES_PARAMS = {"ClusterName": NAME, "MaxResults": 100}
EVENTS_PARAMS = {
    "ClusterName": NAME,
    "EventTimeAfter": SINCE,
    "SortBy": "EventTime",
    "SortOrder": "Descending",
    "MaxResults": 20,
}
QUOTAS_PARAMS = {"ClusterArn": CLUSTER_ARN, "MaxResults": 100}


def queue(
    stubbed: Stubbed,
    *,
    cluster: dict | None = None,
    nodes: list[dict] | None = None,
    events: list[dict] | None = None,
    quotas: list[dict] | None = None,
) -> None:
    """The four calls of a run, in order, with one page each."""
    stub = stubbed.stubber
    stub.add_response("describe_cluster", cluster or describe(), DESCRIBE_PARAMS)
    stub.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": prod_nodes() if nodes is None else nodes},
        NODES_PARAMS,
    )
    stub.add_response(
        "list_cluster_events", {"Events": EVENTS if events is None else events}, EVENTS_PARAMS
    )
    stub.add_response(
        "list_compute_quotas",
        {"ComputeQuotaSummaries": list(QUOTAS.values()) if quotas is None else quotas},
        QUOTAS_PARAMS,
    )


# ------------------------------------------------------------------ healthy


def test_healthy_cluster_is_one_screen_and_exit_0(sagemaker: Stubbed):
    queue(sagemaker)
    result = hpctl("cluster", "health", "--env", "prod")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert sagemaker.clients == [("sts", REGION), ("sagemaker", REGION)]
    lines = result.stdout.splitlines()
    assert lines[0] == f"Cluster {NAME}: InService"
    assert "All 19 nodes Running." in lines
    assert lines[-2:] == [
        "Usage per team: not in the SageMaker API; see the Kueue dashboard.",
        f"{NAME} is healthy.",
    ]
    assert table_rows(result.stdout) == [
        # Instance groups
        ["gpu-p5", P5, "InService", "16", "16"],
        ["system", M5, "InService", "3", "3"],
        # Nodes by group and status
        ["gpu-p5", "Running", "16"],
        ["system", "Running", "3"],
        # Events, newest first
        [
            "2026-11-02 10:00",
            "Warn",
            "Instance",
            "gpu-p5",
            node_id(3),
            "Node failed the deep health check and is being replaced",
        ],
        ["2026-11-02 07:00", "Info", "InstanceGroup", "gpu-p5", "-", "Scaled to 16 instances"],
        # Compute quotas, by team
        [
            "evaluation",
            f"{NAME}-evaluation",
            f"{P5} (2 nodes)",
            "LendAndBorrow",
            "Enabled",
            "Created",
        ],
        [
            "foundation",
            f"{NAME}-foundation",
            f"{P5} (8 nodes)",
            "LendAndBorrow",
            "Enabled",
            "Created",
        ],
        [
            "research",
            f"{NAME}-research",
            f"{M5} (16 vCPU, 64 GiB memory); {P5} (6 nodes)",
            "LendAndBorrow",
            "Enabled",
            "Created",
        ],
    ]
    assert "Events in the last 24 h, newest first (at most 20)" in result.stdout
    assert "without a compute quota" not in result.stdout


def test_json_is_one_object_with_the_same_data(sagemaker: Stubbed):
    queue(
        sagemaker,
        events=[EVENTS[0]],
        quotas=[QUOTAS["evaluation"], QUOTAS["foundation"], QUOTAS["research"]],
    )
    result = hpctl("cluster", "health", "--env", "prod", "--json")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    report = json.loads(result.stdout)
    assert list(report) == [
        "environment",
        "region",
        "healthy",
        "problems",
        "cluster",
        "events",
        "quotas",
    ]
    assert (report["environment"], report["region"], report["healthy"], report["problems"]) == (
        "prod",
        REGION,
        True,
        [],
    )
    summary = report["cluster"]
    assert list(summary) == [
        "name",
        "arn",
        "status",
        "failure_message",
        "instance_groups",
        "nodes_total",
        "unhealthy_nodes",
        "node_counts",
    ]
    assert (summary["name"], summary["arn"], summary["status"]) == (NAME, CLUSTER_ARN, "InService")
    assert summary["instance_groups"][0] == {
        "name": "gpu-p5",
        "instance_type": P5,
        "status": "InService",
        "current_count": 16,
        "target_count": 16,
        "training_plan_arn": None,
    }
    assert summary["nodes_total"] == 19
    assert summary["unhealthy_nodes"] == []
    assert summary["node_counts"] == [
        {"instance_group": "gpu-p5", "status": "Running", "count": 16},
        {"instance_group": "system", "status": "Running", "count": 3},
    ]
    assert report["events"] == {
        "available": True,
        "note": None,
        "since": SINCE.isoformat(),
        "events": [
            {
                "time": (NOW - timedelta(hours=2)).isoformat(),
                "level": "Warn",
                "resource_type": "Instance",
                "instance_group": "gpu-p5",
                "instance_id": node_id(3),
                "description": "Node failed the deep health check and is being replaced",
                "event_id": "00000001-aaaa-bbbb-cccc-dddddddddddd",
            }
        ],
    }
    quotas = report["quotas"]
    assert list(quotas) == ["configured_teams", "missing_teams", "extra_teams", "usage", "quotas"]
    assert quotas["configured_teams"] == ["evaluation", "foundation", "research"]
    assert (quotas["missing_teams"], quotas["extra_teams"]) == ([], [])
    assert quotas["usage"] == "not in the SageMaker API; see the Kueue dashboard"
    assert quotas["quotas"][2] == {
        "team": "research",
        "name": f"{NAME}-research",
        "id": "rese00000000",
        "status": "Created",
        "activation_state": "Enabled",
        "sharing": "LendAndBorrow",
        "resources": [
            {
                "instance_type": M5,
                "count": None,
                "accelerators": None,
                "vcpu": 16.0,
                "memory_gib": 64.0,
            },
            {
                "instance_type": P5,
                "count": 6,
                "accelerators": None,
                "vcpu": None,
                "memory_gib": None,
            },
        ],
    }


def test_pages_of_nodes_and_quotas_are_all_read(sagemaker: Stubbed):
    nodes = prod_nodes(n19=("Pending", ""))
    stub = sagemaker.stubber
    stub.add_response("describe_cluster", describe(), DESCRIBE_PARAMS)
    stub.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": nodes[:10], "NextToken": "nodes-2"},
        NODES_PARAMS,
    )
    stub.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": nodes[10:], "NextToken": "nodes-3"},
        {**NODES_PARAMS, "NextToken": "nodes-2"},
    )
    stub.add_response(
        "list_cluster_nodes", {"ClusterNodeSummaries": []}, {**NODES_PARAMS, "NextToken": "nodes-3"}
    )
    stub.add_response("list_cluster_events", {"Events": []}, EVENTS_PARAMS)
    stub.add_response(
        "list_compute_quotas",
        {"ComputeQuotaSummaries": [QUOTAS["research"]], "NextToken": "quotas-2"},
        QUOTAS_PARAMS,
    )
    stub.add_response(
        "list_compute_quotas",
        {"ComputeQuotaSummaries": [QUOTAS["evaluation"], QUOTAS["foundation"]]},
        {**QUOTAS_PARAMS, "NextToken": "quotas-2"},
    )
    result = hpctl("cluster", "health", "--env", "prod", "--json")
    assert error_line(result, ExitCode.FAILED) == (
        f"{PREFIX}1 of 19 nodes is not running in {NAME}; see the JSON"
    )
    report = json.loads(result.stdout)
    assert report["cluster"]["nodes_total"] == 19
    assert report["cluster"]["node_counts"] == [
        {"instance_group": "gpu-p5", "status": "Running", "count": 16},
        {"instance_group": "system", "status": "Pending", "count": 1},
        {"instance_group": "system", "status": "Running", "count": 2},
    ]
    assert [q["team"] for q in report["quotas"]["quotas"]] == [
        "evaluation",
        "foundation",
        "research",
    ]
    assert report["quotas"]["missing_teams"] == []
    assert report["events"]["events"] == []


# ------------------------------------------------------------------ unhealthy


def test_nodes_not_running_exit_1_with_the_summary_line(sagemaker: Stubbed):
    queue(
        sagemaker,
        nodes=prod_nodes(
            n4=("Failure", "EFA health check failed"), n18=("DeepHealthCheckInProgress", "")
        ),
        events=[],
    )
    result = hpctl("cluster", "health", "--env", "prod")
    assert error_line(result, ExitCode.FAILED) == (
        f"{PREFIX}2 of 19 nodes are not running in {NAME}; see the table"
    )
    rows = table_rows(result.stdout)
    assert ["gpu-p5", "Failure", "1"] in rows
    assert ["gpu-p5", "Running", "15"] in rows
    assert ["system", "DeepHealthCheckInProgress", "1"] in rows
    assert "2 of 19 nodes not Running" in result.stdout
    assert [
        "gpu-p5",
        node_id(4),
        P5,
        "Failure",
        "EFA health check failed",
        "2026-11-01 08:30",
    ] in rows
    assert ["system", node_id(18), M5, "DeepHealthCheckInProgress", "-", "2026-11-01 08:30"] in rows
    assert "No events in the last 24 h." in result.stdout
    assert "is healthy" not in result.stdout


def test_cluster_not_in_service_and_group_short_of_nodes_are_problems(sagemaker: Stubbed):
    queue(sagemaker, cluster=describe(status="Updating", gpu=(15, 16)), nodes=prod_nodes()[1:])
    result = hpctl("cluster", "health", "--env", "prod", "--json")
    assert error_line(result, ExitCode.FAILED) == (
        f"{PREFIX}{NAME} is Updating, not InService; instance group gpu-p5 of {NAME} has 15 of "
        "16 nodes; see the JSON"
    )
    report = json.loads(result.stdout)
    assert report["healthy"] is False
    assert report["problems"] == [
        f"{NAME} is Updating, not InService",
        f"instance group gpu-p5 of {NAME} has 15 of 16 nodes",
    ]
    assert report["cluster"]["instance_groups"][0]["status"] == "Degraded"


def test_quota_missing_for_a_configured_team(sagemaker: Stubbed):
    interns = quota(
        "interns", [{"InstanceType": P5, "Accelerators": 8}], ActivationState="Disabled"
    )
    deleted = quota("evaluation", [{"InstanceType": P5, "Count": 2}], status="Deleted")
    queue(sagemaker, quotas=[QUOTAS["research"], interns, deleted, QUOTAS["foundation"]])
    result = hpctl("cluster", "health", "--env", "prod")
    assert error_line(result, ExitCode.FAILED) == (
        f"{PREFIX}no compute quota on {NAME} for configured team evaluation; see the table"
    )
    rows = table_rows(result.stdout)
    # The deleted quota is left out; the extra team's quota is listed.
    assert [r[0] for r in rows if r[1].startswith(f"{NAME}-")] == [
        "foundation",
        "interns",
        "research",
    ]
    assert [
        "interns",
        f"{NAME}-interns",
        f"{P5} (8 accelerators)",
        "LendAndBorrow",
        "Disabled",
        "Created",
    ] in rows
    assert "Configured teams without a compute quota: evaluation" in result.stdout
    assert "Quotas of teams not in the prod config: interns" in result.stdout


def test_failed_quota_is_a_problem(sagemaker: Stubbed):
    failed = quota("research", [{"InstanceType": P5, "Count": 6}], status="UpdateFailed")
    queue(sagemaker, quotas=[QUOTAS["evaluation"], QUOTAS["foundation"], failed])
    result = hpctl("cluster", "health", "--env", "prod", "--json")
    assert error_line(result, ExitCode.FAILED) == (
        f"{PREFIX}compute quota {NAME}-research of team research is UpdateFailed; see the JSON"
    )
    assert json.loads(result.stdout)["quotas"]["missing_teams"] == []


# ------------------------------------------------------------------ sections without data


def test_events_need_continuous_provisioning_and_are_not_asked_for_otherwise(sagemaker: Stubbed):
    stub = sagemaker.stubber
    stub.add_response("describe_cluster", describe(mode=None), DESCRIBE_PARAMS)
    stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": prod_nodes()}, NODES_PARAMS)
    # No list_cluster_events: the Stubber fails on any call nobody queued.
    stub.add_response(
        "list_compute_quotas", {"ComputeQuotaSummaries": list(QUOTAS.values())}, QUOTAS_PARAMS
    )
    result = hpctl("cluster", "health", "--env", "prod")
    assert result.exit_code == 0, result.output
    assert (
        "Events: not available (ListClusterEvents needs NodeProvisioningMode Continuous; "
        "the cluster has none)."
    ) in result.stdout.splitlines()


def test_environment_without_governance_lists_quotas_without_comparing(
    sagemaker: Stubbed, monkeypatch: pytest.MonkeyPatch
):
    # prod as loaded, less its governance section (other sections may depend on it, so the
    # validated config is copied rather than a file without it written).
    config = environment("prod").config.model_copy(update={"governance": None})
    monkeypatch.setattr(cluster_cmd, "required_environment", lambda _ctx, _name: config)
    queue(sagemaker, events=[], quotas=[QUOTAS["foundation"]])
    result = hpctl("cluster", "health", "--env", "prod", "--json")
    assert result.exit_code == 0, result.output
    quotas = json.loads(result.stdout)["quotas"]
    assert (quotas["configured_teams"], quotas["missing_teams"], quotas["extra_teams"]) == (
        None,
        None,
        None,
    )
    assert [q["team"] for q in quotas["quotas"]] == ["foundation"]


# ------------------------------------------------------------------ progress


def terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """Progress goes to a console that believes it is a terminal (rich draws nothing on a
    pipe); what it draws lands in the returned buffer."""
    buffer = io.StringIO()
    monkeypatch.setattr(cluster_cmd, "stderr", Console(file=buffer, force_terminal=True, width=100))
    return buffer


def test_progress_on_a_terminal_names_each_step(
    sagemaker: Stubbed, monkeypatch: pytest.MonkeyPatch
):
    buffer = terminal(monkeypatch)
    queue(sagemaker)
    result = hpctl("cluster", "health", "--env", "prod")
    assert result.exit_code == 0, result.output
    drawn = buffer.getvalue()
    for step in (
        "describing the cluster",
        "listing nodes",
        "reading the events of the last 24 h",
        "listing compute quotas",
    ):
        assert f"{NAME}: {step}" in drawn
    # Nothing of the progress reaches stdout.
    assert "describing the cluster" not in result.stdout


def test_no_progress_in_json_mode(sagemaker: Stubbed, monkeypatch: pytest.MonkeyPatch):
    buffer = terminal(monkeypatch)
    queue(sagemaker)
    result = hpctl("cluster", "health", "--env", "prod", "--json")
    assert result.exit_code == 0, result.output
    assert buffer.getvalue() == ""
    assert json.loads(result.stdout)["healthy"] is True


# ------------------------------------------------------------------ failures


def test_access_denied_on_one_call_is_one_line(sagemaker: Stubbed):
    stub = sagemaker.stubber
    stub.add_response("describe_cluster", describe(), DESCRIBE_PARAMS)
    stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": prod_nodes()}, NODES_PARAMS)
    stub.add_response("list_cluster_events", {"Events": []}, EVENTS_PARAMS)
    stub.add_client_error(
        "list_compute_quotas",
        "AccessDeniedException",
        f"User: arn:aws:sts::{ACCOUNT}:assumed-role/ReadOnly/me is not authorized to perform: "
        "sagemaker:ListComputeQuotas",
        expected_params=QUOTAS_PARAMS,
    )
    result = expect_failure(
        "cluster",
        "health",
        "--env",
        "prod",
        code=ExitCode.FAILED,
        starts_with=f"{PREFIX}AccessDeniedException: User: arn:aws:sts::{ACCOUNT}:",
    )
    assert result.stderr.endswith("is not authorized to perform: sagemaker:ListComputeQuotas\n")


def test_unknown_environment_is_exit_2_before_any_call(sagemaker: Stubbed):
    result = expect_failure(
        "cluster", "health", "--env", "nope", code=ExitCode.USAGE, starts_with=f"{PREFIX}--env: "
    )
    assert "nope" in result.stderr
    assert sagemaker.clients == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], f"{PREFIX}--env: missing; pass --env"),
        (["--env", "prod", "--name", NAME], f"{PREFIX}No such option: --name"),
    ],
    ids=["missing-env", "unknown-option"],
)
def test_bad_input_is_one_line_exit_2(sagemaker: Stubbed, args: list[str], expected: str):
    result = hpctl("cluster", "health", *args)
    assert error_line(result, ExitCode.USAGE).startswith(expected)
    assert sagemaker.clients == []
