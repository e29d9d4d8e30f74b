"""A team's workspace on a bare stack: wait for the namespace, then the claim, the service
account with its pod identity, the team ConfigMap and the Job that creates the team's
directories."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3

from platform_constructs.eks_fsx_volume import FsxStaticVolume, LustreFileSystem
from platform_constructs.team_workspace import (
    DIRECTORY_JOB_PREFIX,
    NAMESPACE_WAIT,
    TeamWorkspace,
    TeamWorkspaceProps,
    directory_job,
)
from tests.support import (
    KUBERNETES_VALIDATE_VERSIONS,
    bare_stack,
    imported_cluster,
    only,
    resources_of,
    template_of,
)

NAMESPACE = "hyperpod-ns-research"
GID = 437786
DIRECTORIES = ("/fsx/teams/research", "/fsx/teams/research/runs")
IMAGE = "public.ecr.aws/docker/library/busybox:1.37.0"
TOLERATION = {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}
PREFIX = "teams/research/"
OBJECT_VALUE = "Custom::AWSCDK-EKS-KubernetesObjectValue"
MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"


PROPS = TeamWorkspaceProps(
    team="research",
    namespace=NAMESPACE,
    service_account="training",
    config_map="hyperpod-team",
    config={"managed-tier-s3-path": "s3://ckpt/teams/research/managed-tier"},
    checkpoint_prefix=PREFIX,
    metrics_namespace="HyperPod/Training",
    user_id=GID,
    group_id=GID,
    directories=DIRECTORIES,
    setup_image=IMAGE,
    tolerations=(TOLERATION,),
)


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
            data_path="/data",
        ),
        namespaces=(),
    )
    TeamWorkspace(
        stack,
        "Research",
        props=PROPS,
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
    assert len(manifests) == 3
    for manifest in manifests.values():
        assert wait_id in manifest["DependsOn"]


def _objects() -> list[dict[str, Any]]:
    return [
        o
        for m in resources_of(TEMPLATE, MANIFEST).values()
        for o in json.loads(m["Properties"]["Manifest"])
    ]


def _directory_job() -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(logical id, resource, Job) of the directory Job's manifest."""
    ((logical_id, resource),) = [
        (i, m)
        for i, m in resources_of(TEMPLATE, MANIFEST).items()
        if json.loads(m["Properties"]["Manifest"])[0]["kind"] == "Job"
    ]
    return logical_id, resource, json.loads(resource["Properties"]["Manifest"])[0]


def test_service_account_config_map_and_claims_in_the_team_namespace():
    objects = _objects()
    namespaced = {
        (o["kind"], o["metadata"]["name"]): o
        for o in objects
        if o["kind"] not in ("PersistentVolume", "Job")
    }
    assert set(namespaced) == {
        ("ServiceAccount", "training"),
        ("ConfigMap", "hyperpod-team"),
        ("PersistentVolumeClaim", "fsx-team"),
        ("PersistentVolumeClaim", "fsx-data"),
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


def test_every_object_passes_the_kubernetes_schema():
    import kubernetes_validate

    for version in KUBERNETES_VALIDATE_VERSIONS:
        for obj in _objects():
            # The handler's prune label is applied as is; strict: no unknown fields.
            kubernetes_validate.validate(obj, version, strict=True)


def test_directory_job_runs_in_the_platform_namespace_before_the_team_claims():
    # The team namespace has no claim above the team's tree; teams have no access to default.
    directory_id, _, job = _directory_job()
    assert job["metadata"]["namespace"] == "default"
    claims = next(
        m
        for m in resources_of(TEMPLATE, MANIFEST).values()
        if "PersistentVolumeClaim" in m["Properties"]["Manifest"]
    )
    assert directory_id in claims["DependsOn"]
    pod = job["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-claim"}}]
    (container,) = pod["containers"]
    assert container["volumeMounts"] == [{"name": "fsx", "mountPath": "/fsx"}]
    assert container["image"] == IMAGE
    assert pod["tolerations"] == [TOLERATION]
    assert pod["automountServiceAccountToken"] is False


def test_directory_job_is_root_only_for_chown_chmod_and_setgid():
    _, _, job = _directory_job()
    (container,) = job["spec"]["template"]["spec"]["containers"]
    context = container["securityContext"]
    assert (context["runAsUser"], context["runAsNonRoot"]) == (0, False)
    assert context["capabilities"] == {
        "drop": ["ALL"],
        "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"],
    }
    assert context["allowPrivilegeEscalation"] is False
    script = container["command"][-1]
    for directory in DIRECTORIES:
        assert directory in script
    assert f"chown {GID}:{GID} " in script and "chmod 2770 " in script


def test_directory_job_is_one_shot_and_cleans_up():
    _, _, job = _directory_job()
    spec = job["spec"]
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["backoffLimit"] >= 1
    assert spec["ttlSecondsAfterFinished"] > 0
    assert spec["activeDeadlineSeconds"] > 0


def test_directory_job_name_follows_its_spec():
    # Jobs are immutable: a changed spec must be a new Job, an unchanged one the same name.
    name = directory_job(PROPS)["metadata"]["name"]
    assert name.startswith(DIRECTORY_JOB_PREFIX)
    assert directory_job(PROPS)["metadata"]["name"] == name
    for changed in (
        dataclasses.replace(PROPS, group_id=GID + 1),
        dataclasses.replace(PROPS, user_id=GID + 1),
        dataclasses.replace(PROPS, setup_image=IMAGE + "-1"),
        dataclasses.replace(PROPS, directories=DIRECTORIES[:1]),
        dataclasses.replace(PROPS, tolerations=()),
    ):
        assert directory_job(changed)["metadata"]["name"] != name
    assert len(name) <= 63  # the Job's name becomes a label value on its pods


def test_team_role_trusts_only_its_service_account_in_this_cluster():
    association = only(resources_of(TEMPLATE, "AWS::EKS::PodIdentityAssociation"))["Properties"]
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    role = resources_of(TEMPLATE, "AWS::IAM::Role")[role_id]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert set(trust["Condition"]) == {"StringEquals"}
    conditions = dict(trust["Condition"]["StringEquals"])
    cluster_arn = conditions.pop("aws:RequestTag/eks-cluster-arn")
    assert conditions == {
        "aws:RequestTag/kubernetes-namespace": NAMESPACE,
        "aws:RequestTag/kubernetes-service-account": "training",
    }
    assert cluster_arn["Fn::Join"][1][-1] == ":eks:us-west-2:111111111111:cluster/c"
