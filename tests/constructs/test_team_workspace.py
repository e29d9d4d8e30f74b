"""A team's workspace on a bare stack: wait for the namespace, then the claim, the service
account with its pod identity, and the team ConfigMap."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3

from platform_constructs.eks_fsx_volume import FsxStaticVolume, LustreFileSystem
from platform_constructs.team_workspace import NAMESPACE_WAIT, TeamWorkspace, TeamWorkspaceProps
from tests.support import bare_stack, imported_cluster, only, resources_of, template_of

NAMESPACE = "hyperpod-ns-research"
PREFIX = "teams/research/"
OBJECT_VALUE = "Custom::AWSCDK-EKS-KubernetesObjectValue"
MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"


def _workspace() -> tuple[dict[str, Any], cdk.Stack]:
    stack = bare_stack("Workspace")
    cluster = imported_cluster(stack)
    quota = cdk.CfnWaitConditionHandle(stack, "Quota")
    volume = FsxStaticVolume(
        stack,
        "Fsx",
        cluster=cluster,
        file_system=LustreFileSystem(
            file_system_id="fs-0123456789abcdef0",
            arn="arn:aws:fsx:us-east-1:111111111111:file-system/fs-0123456789abcdef0",
            dns_name="fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
            mount_name="abcdefgh",
            capacity_gib=1200,
        ),
        namespaces=(),
    )
    TeamWorkspace(
        stack,
        "Research",
        props=TeamWorkspaceProps(
            team="research",
            namespace=NAMESPACE,
            service_account="training",
            config_map="hyperpod-team",
            config={"managed-tier-s3-path": "s3://ckpt/teams/research/managed-tier"},
            checkpoint_prefix=PREFIX,
            metrics_namespace="HyperPod/Training",
        ),
        cluster=cluster,
        cluster_name="c",
        volume=volume,
        checkpoint_bucket=s3.Bucket.from_bucket_name(stack, "Checkpoints", "ckpt"),
        data_bucket=s3.Bucket.from_bucket_name(stack, "Data", "data"),
        created_after=quota,
    )
    return template_of(stack).to_json(), stack


TEMPLATE, _ = _workspace()


def _statements() -> list[dict[str, Any]]:
    return [
        s
        for policy in resources_of(TEMPLATE, "AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ] + [
        s
        for role in resources_of(TEMPLATE, "AWS::IAM::Role").values()
        for policy in role["Properties"].get("Policies", [])
        for s in policy["PolicyDocument"]["Statement"]
    ]


def _actions(statement: dict[str, Any]) -> set[str]:
    actions = statement["Action"]
    return {actions} if isinstance(actions, str) else set(actions)


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def test_waits_for_the_namespace_the_quota_creates():
    ((wait_id, wait),) = resources_of(TEMPLATE, OBJECT_VALUE).items()
    assert wait["Properties"]["ObjectType"] == "namespace"
    assert wait["Properties"]["ObjectName"] == NAMESPACE
    assert wait["Properties"]["JsonPath"] == ".status.phase"
    assert wait["Properties"]["TimeoutSeconds"] == NAMESPACE_WAIT.to_seconds()
    assert "Quota" in wait["DependsOn"]
    # Everything applied into the namespace waits for it.
    manifests = resources_of(TEMPLATE, MANIFEST)
    assert len(manifests) == 2
    for manifest in manifests.values():
        assert wait_id in manifest["DependsOn"]


def test_service_account_config_map_and_claim_in_the_team_namespace():
    objects = [
        o
        for m in resources_of(TEMPLATE, MANIFEST).values()
        for o in json.loads(m["Properties"]["Manifest"])
    ]
    namespaced = {
        (o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] != "PersistentVolume"
    }
    assert set(namespaced) == {
        ("ServiceAccount", "training"),
        ("ConfigMap", "hyperpod-team"),
        ("PersistentVolumeClaim", "fsx-claim"),
    }
    assert {o["metadata"]["namespace"] for o in namespaced.values()} == {NAMESPACE}
    config_map = namespaced[("ConfigMap", "hyperpod-team")]
    assert config_map["data"] == {"managed-tier-s3-path": "s3://ckpt/teams/research/managed-tier"}


def test_pod_identity_maps_the_service_account_to_the_team_role():
    association = only(resources_of(TEMPLATE, "AWS::EKS::PodIdentityAssociation"))["Properties"]
    assert (association["Namespace"], association["ServiceAccount"]) == (NAMESPACE, "training")
    (role_id,) = resources_of(TEMPLATE, "AWS::IAM::Role")
    assert association["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    role = resources_of(TEMPLATE, "AWS::IAM::Role")[role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "pods.eks.amazonaws.com"
    }


def test_checkpoint_access_stops_at_the_team_prefix():
    writes = [s for s in _statements() if "s3:PutObject" in _actions(s)]
    assert len(writes) == 1
    assert writes[0]["Resource"]["Fn::Join"][1][-1] == f":s3:::ckpt/{PREFIX}*"
    (listing,) = [s for s in _statements() if _actions(s) == {"s3:ListBucket"}]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [PREFIX, f"{PREFIX}*"]}}


def test_data_bucket_is_read_only():
    data = [s for s in _statements() if ":::data" in _text(s["Resource"])]
    assert data
    for statement in data:
        assert all(a.startswith(("s3:Get", "s3:List")) for a in _actions(statement))


def test_metrics_only_into_the_training_namespace():
    (metrics,) = [s for s in _statements() if "cloudwatch:PutMetricData" in _actions(s)]
    assert metrics["Condition"] == {"StringEquals": {"cloudwatch:namespace": "HyperPod/Training"}}
