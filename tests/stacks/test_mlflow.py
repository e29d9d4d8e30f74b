"""The optional MLflow tracking server (storage.mlflow.enabled): off in every environment as
shipped; switched on, a server with its artifacts under a prefix of the artifact bucket, which
the teams' job identities, and no other principal, may log to, and whose ARN each team's
ConfigMap carries to the jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config.kubernetes import team_namespace
from config.teams import MLFLOW_TRACKING_URI_KEY, TEAM_CONFIG_MAP
from platform_constructs.mlflow import JOB_ACTIONS
from tests.policy.iam_permissions import Stack, environment_violations, policy_documents
from tests.support import (
    SYNTH_GROUP,
    SynthResult,
    kubernetes_objects,
    one_error_on,
    only,
    synthesize,
    variant_of,
)

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)

SERVER = "AWS::SageMaker::MlflowTrackingServer"


def _enable(data: dict[str, Any]) -> None:
    data["storage"]["mlflow"] = {"enabled": True, "size": "Medium", "artifact_prefix": "runs/"}


@pytest.fixture(scope="module")
def with_mlflow(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    return synthesize(variant_of("dev", _enable), Path(tmp_path_factory.mktemp("mlflow")))


def _server_arn(result: SynthResult) -> str:
    """The ARN written out: the environment's account and region are known at synth."""
    storage = result.stacks["storage"]
    name = result.config.names.mlflow_tracking_server
    return f"arn:aws:sagemaker:{storage.region}:{storage.account}:mlflow-tracking-server/{name}"


def _mlflow_statements(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for owner, document in policy_documents(template):
        for statement in document.get("Statement", []):
            actions = statement.get("Action", [])
            actions = actions if isinstance(actions, list) else [actions]
            if any(str(a).startswith("sagemaker-mlflow:") for a in actions):
                found.append((owner, statement))
    return found


def test_no_environment_runs_a_server_as_shipped(synth_all: dict[str, SynthResult]) -> None:
    for name, result in synth_all.items():
        assert not result.config.storage.mlflow.enabled, name
        for short, template in result.templates.items():
            assert not result.resources(short, SERVER), (name, short)
            assert _mlflow_statements(template) == [], (name, short)


def test_the_server_stores_artifacts_under_its_prefix_of_the_artifact_bucket(
    with_mlflow: SynthResult,
) -> None:
    server = only(with_mlflow.resources("storage", SERVER))["Properties"]
    bucket = with_mlflow.logical_id("storage", with_mlflow.platform.storage.artifact_bucket)
    assert server["ArtifactStoreUri"] == {"Fn::Join": ["", ["s3://", {"Ref": bucket}, "/runs/"]]}
    assert server["TrackingServerName"] == with_mlflow.config.names.mlflow_tracking_server
    assert server["TrackingServerSize"] == "Medium"
    assert server["WeeklyMaintenanceWindowStart"] == "Sun:03:00"
    assert server["AutomaticModelRegistration"] is False
    assert "MlflowVersion" not in server


def test_the_servers_role_reaches_only_its_prefix(with_mlflow: SynthResult) -> None:
    server = only(with_mlflow.resources("storage", SERVER))
    role_id = server["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    role = with_mlflow.resources("storage", "AWS::IAM::Role")[role_id]
    principal = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
    assert principal == {"Service": "sagemaker.amazonaws.com"}
    bucket = with_mlflow.logical_id("storage", with_mlflow.platform.storage.artifact_bucket)
    (policy,) = [
        p
        for p in with_mlflow.resources("storage", "AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [{"Ref": role_id}]
    ]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert statements["ArtifactObjects"]["Resource"] == {
        "Fn::Join": ["", [{"Fn::GetAtt": [bucket, "Arn"]}, "/runs/*"]]
    }
    assert statements["ArtifactListing"]["Condition"] == {
        "StringLike": {"s3:prefix": ["runs/", "runs/*"]}
    }
    assert "DependsOn" in server and any(d.startswith(role_id) for d in server["DependsOn"])


def test_only_the_teams_job_identities_may_use_the_server(with_mlflow: SynthResult) -> None:
    granted: list[str] = []
    for short, template in with_mlflow.templates.items():
        for owner, statement in _mlflow_statements(template):
            granted.append(f"{short}:{owner}")
            assert short == "governance"
            assert sorted(statement["Action"]) == sorted(JOB_ACTIONS)
            assert statement["Resource"] == _server_arn(with_mlflow)
    teams = with_mlflow.platform.governance.workspaces  # type: ignore[union-attr]
    roles = {
        with_mlflow.logical_id("governance", w.identity.role.node.default_child)
        for w in teams.values()
    }
    assert len(granted) == len(teams) >= 1
    policies = with_mlflow.resources("governance", "AWS::IAM::Policy")
    for entry in granted:
        owner = entry.split(":", 1)[1]
        assert {r["Ref"] for r in policies[owner]["Properties"]["Roles"]} <= roles


def test_each_team_config_map_names_the_server(with_mlflow: SynthResult) -> None:
    maps = {
        o["metadata"]["namespace"]: o["data"]
        for o in kubernetes_objects(with_mlflow.templates["governance"])
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == TEAM_CONFIG_MAP
    }
    for team in with_mlflow.config.governance.teams:
        assert maps[team_namespace(team.name)][MLFLOW_TRACKING_URI_KEY] == _server_arn(with_mlflow)


def test_every_policy_names_actions_aws_authorizes_on_the_server(with_mlflow: SynthResult) -> None:
    stacks = {
        name: Stack(
            name=name,
            template=with_mlflow.templates[name],
            region=with_mlflow.stacks[name].region,
            account=with_mlflow.stacks[name].account,
        )
        for name in with_mlflow.templates
    }
    violations, unmodelled = environment_violations(stacks)
    assert violations == []
    assert unmodelled == set()


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("size", "Huge", "Input should be 'Small', 'Medium' or 'Large'"),
        ("artifact_prefix", "/mlflow", "'/mlflow' is not a key prefix;"),
        ("artifact_prefix", "mlflow", "each ending in '/' (e.g. mlflow/)"),
        ("weekly_maintenance_window_start", "Sunday:03:00", "write e.g. Sun:03:00"),
        ("mlflow_version", "latest", "'latest' is not an MLflow version; write e.g. 3.0"),
    ],
)
def test_mlflow_settings_are_checked(field: str, value: str, expected: str) -> None:
    def mutate(data: dict[str, Any]) -> None:
        data["storage"]["mlflow"] = {"enabled": True, field: value}

    line = one_error_on(f"storage.mlflow.{field}", mutate)
    assert expected in line
