"""Cluster add-ons stack: the add-ons that need running nodes, their pod identities, and the
static FSx volume. Templates come from the session fixtures (dev, staging, prod)."""

from __future__ import annotations

import functools
import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks_v2 as eks_v2
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from platform_constructs.eks_fsx_volume import FsxStaticVolume
from tests.conftest import ENVIRONMENTS, SynthResult

POD_IDENTITY_TRUST = {
    "Statement": [
        {
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
        }
    ],
    "Version": "2012-10-17",
}


@pytest.fixture(params=ENVIRONMENTS)
def env(request) -> SynthResult:
    return request.getfixturevalue(request.param)


@functools.cache
def _config(env_name: str):
    from config.loader import load_environment

    return load_environment(env_name).config


def _resources(result: SynthResult, type_: str) -> dict[str, dict]:
    return result.template("cluster_addons").find_resources(type_)


def _addon(result: SynthResult, name: str) -> tuple[str, dict]:
    (found,) = [
        (k, v) for k, v in _resources(result, "AWS::EKS::Addon").items()
        if v["Properties"]["AddonName"] == name
    ]
    return found


def _eks_cluster_name(result: SynthResult) -> dict:
    """How the add-ons stack refers to the EKS cluster's name (an import of its export)."""
    return result.stacks["cluster_addons"].resolve(result.stacks["eks"].cluster_name)


# ------------------------------------------------------------------------------ add-ons


def test_node_dependent_addons_are_pinned_to_config(env):
    versions = _config(env.env_name).eks.addons
    names = set()
    for name in ("coredns", "cert-manager", "aws-fsx-csi-driver",
                 "amazon-sagemaker-hyperpod-training-operator"):
        env.template("cluster_addons").has_resource_properties(
            "AWS::EKS::Addon",
            {"AddonName": name, "AddonVersion": versions[name], "ClusterName": _eks_cluster_name(env),
             "ResolveConflicts": "OVERWRITE"},
        )
        names.add(name)
    assert {a["Properties"]["AddonName"] for a in _resources(env, "AWS::EKS::Addon").values()} == names


def test_stack_deploys_after_the_hyperpod_nodes(env):
    addons = env.stacks["cluster_addons"]
    assert env.stacks["hyperpod"] in addons.dependencies


def test_fsx_csi_controller_identity_is_scoped_to_the_file_system(env):
    template = env.template("cluster_addons")
    stack = env.stacks["cluster_addons"]
    file_system_id = stack.resolve(env.stacks["storage"].file_system.file_system_id)
    role_id = stack.get_logical_id(stack.fsx_csi.identity.role.node.default_child)
    template.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation",
        {
            "ClusterName": _eks_cluster_name(env),
            "Namespace": "kube-system",
            "ServiceAccount": "fsx-csi-controller-sa",
            "RoleArn": {"Fn::GetAtt": [role_id, "Arn"]},
        },
    )
    role = template.to_json()["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"] == POD_IDENTITY_TRUST
    assert "ManagedPolicyArns" not in role
    (policy,) = role["Policies"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Action"] == "fsx:DescribeFileSystems"
    parts = statement["Resource"]["Fn::Join"][1]
    assert parts[-1] == file_system_id
    assert parts[-2].endswith(f":fsx:{_config(env.env_name).region}:{_config(env.env_name).account}:file-system/")


def test_training_operator_identity_per_aws_docs(env):
    template = env.template("cluster_addons")
    stack = env.stacks["cluster_addons"]
    role_id = stack.get_logical_id(stack.training_operator.identity.role.node.default_child)
    template.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation",
        {
            "ClusterName": _eks_cluster_name(env),
            "Namespace": "aws-hyperpod",
            "ServiceAccount": "hp-training-operator-controller-manager",
            "RoleArn": {"Fn::GetAtt": [role_id, "Arn"]},
        },
    )
    role = template.to_json()["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"] == POD_IDENTITY_TRUST
    assert "ManagedPolicyArns" not in role
    (policy,) = role["Policies"]
    assert policy["PolicyDocument"]["Statement"] == [
        {
            "Action": "sagemaker:DescribeClusterNode",
            "Effect": "Allow",
            "Resource": stack.resolve(env.stacks["hyperpod"].cluster_arn),
        }
    ]


def test_addons_start_after_their_identity_and_dependencies(env):
    resources = env.template("cluster_addons").to_json()["Resources"]
    associations = {
        v["Properties"]["ServiceAccount"]: k
        for k, v in resources.items() if v["Type"] == "AWS::EKS::PodIdentityAssociation"
    }
    fsx_id, _ = _addon(env, "aws-fsx-csi-driver")
    operator_id, _ = _addon(env, "amazon-sagemaker-hyperpod-training-operator")
    cert_manager_id, _ = _addon(env, "cert-manager")
    assert associations["fsx-csi-controller-sa"] in resources[fsx_id]["DependsOn"]
    assert associations["hp-training-operator-controller-manager"] in resources[operator_id]["DependsOn"]
    # The operator's webhooks need cert-manager's CRDs and issuer.
    assert cert_manager_id in resources[operator_id]["DependsOn"]
    # No inline association: those depend on add-on metadata some versions lack.
    for _, addon in _resources(env, "AWS::EKS::Addon").items():
        assert "PodIdentityAssociations" not in addon["Properties"]


# ----------------------------------------------------------------------- FSx volume


def _render(value, tokens: dict[str, object]) -> str:
    """A manifest string with each CloudFormation token replaced by a placeholder."""
    if isinstance(value, str):
        return value
    (parts,) = [value["Fn::Join"][1]]
    rendered = ""
    for part in parts:
        if isinstance(part, str):
            rendered += part
        else:
            placeholder = f"TOKEN{len(tokens)}"
            tokens[placeholder] = part
            rendered += placeholder
    return rendered


def _fsx_objects(result: SynthResult) -> tuple[list[dict], dict[str, object]]:
    (resource,) = _resources(result, "Custom::AWSCDK-EKS-KubernetesResource").values()
    assert resource["Properties"]["ServiceToken"] == result.stacks["cluster_addons"].resolve(
        result.stacks["eks"].kubernetes.kubectl_provider.service_token
    )
    tokens: dict[str, object] = {}
    return json.loads(_render(resource["Properties"]["Manifest"], tokens)), tokens


def test_static_persistent_volume_points_at_the_file_system(env):
    objects, tokens = _fsx_objects(env)
    storage = env.stacks["storage"]
    stack = env.stacks["cluster_addons"]
    (volume,) = [o for o in objects if o["kind"] == "PersistentVolume"]
    spec = volume["spec"]
    assert spec["csi"]["driver"] == "fsx.csi.aws.com"
    assert tokens[spec["csi"]["volumeHandle"]] == stack.resolve(storage.file_system.file_system_id)
    # dnsname is an attribute of the file system (it may render as several parts).
    assert tokens[spec["csi"]["volumeAttributes"]["mountname"]] == stack.resolve(storage.file_system.mount_name)
    assert spec["csi"]["volumeAttributes"]["dnsname"]
    capacity = f"{_config(env.env_name).storage.fsx.storage_capacity_gib}Gi"
    assert spec["capacity"] == {"storage": capacity}
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["storageClassName"] == ""
    assert spec["claimRef"] == {"namespace": "default", "name": "fsx-claim"}


def test_dns_name_comes_from_the_file_system(env):
    objects, tokens = _fsx_objects(env)
    (volume,) = [o for o in objects if o["kind"] == "PersistentVolume"]
    dnsname = volume["spec"]["csi"]["volumeAttributes"]["dnsname"]
    resolved = env.stacks["cluster_addons"].resolve(env.stacks["storage"].file_system.dns_name)
    used = [tokens[t] for t in tokens if t in dnsname]
    assert used and all(json.dumps(u) in json.dumps(resolved) for u in used)


def test_fsx_claim_in_default_binds_to_the_volume(env):
    objects, _ = _fsx_objects(env)
    (volume,) = [o for o in objects if o["kind"] == "PersistentVolume"]
    (claim,) = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert claim["metadata"]["name"] == "fsx-claim"
    assert claim["metadata"]["namespace"] == "default"
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert claim["spec"]["storageClassName"] == ""
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    # A fixed nominal request, whatever the file system's size (see the next test).
    assert claim["spec"]["resources"]["requests"]["storage"] == "1200Gi"


def _static_volume_objects(capacity_gib: int) -> list[dict]:
    stack = cdk.Stack(cdk.App(), "Volume")
    provider = eks_v2.KubectlProvider.from_kubectl_provider_attributes(
        stack, "Provider", service_token="arn:aws:lambda:us-west-2:111111111111:function:kubectl",
        role=iam.Role.from_role_arn(stack, "Role", "arn:aws:iam::111111111111:role/kubectl"),
    )
    cluster = eks_v2.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="c", kubectl_provider=provider
    )
    FsxStaticVolume(
        stack, "Fsx", cluster=cluster, file_system_id="fs-0123456789abcdef0",
        dns_name="fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com", mount_name="abcdefgh",
        capacity_gib=capacity_gib,
    )
    (resource,) = Template.from_stack(stack).find_resources(
        "Custom::AWSCDK-EKS-KubernetesResource"
    ).values()
    return json.loads(resource["Properties"]["Manifest"])


def test_growing_the_file_system_changes_only_the_volume_not_the_claim():
    """A statically bound claim (storageClassName "") cannot be resized: if its request
    followed the file system's size, growing FSx in config would fail the apply."""
    small, grown = _static_volume_objects(1200), _static_volume_objects(4800)
    claims = [next(o for o in objs if o["kind"] == "PersistentVolumeClaim") for objs in (small, grown)]
    volumes = [next(o for o in objs if o["kind"] == "PersistentVolume") for objs in (small, grown)]
    assert claims[0] == claims[1]
    assert claims[1]["spec"]["resources"]["requests"]["storage"] == "1200Gi"
    assert [v["spec"]["capacity"]["storage"] for v in volumes] == ["1200Gi", "4800Gi"]


def test_file_system_below_the_smallest_fsx_size_is_refused():
    with pytest.raises(ValueError, match="1200"):
        _static_volume_objects(600)


def test_fsx_volume_waits_for_the_csi_driver(env):
    resources = env.template("cluster_addons").to_json()["Resources"]
    fsx_id, _ = _addon(env, "aws-fsx-csi-driver")
    (manifest,) = [v for v in resources.values() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"]
    assert fsx_id in manifest["DependsOn"]


def test_team_namespace_gets_its_own_volume_and_fsx_claim():
    """How a team namespace (created elsewhere, e.g. hyperpod-ns-<team>) gets `fsx-claim`."""
    stack = cdk.Stack(cdk.App(), "Volumes")
    provider = eks_v2.KubectlProvider.from_kubectl_provider_attributes(
        stack, "Provider", service_token="arn:aws:lambda:us-west-2:111111111111:function:kubectl",
        role=iam.Role.from_role_arn(stack, "Role", "arn:aws:iam::111111111111:role/kubectl"),
    )
    cluster = eks_v2.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="c", kubectl_provider=provider
    )
    volume = FsxStaticVolume(
        stack, "Fsx", cluster=cluster, file_system_id="fs-0123456789abcdef0",
        dns_name="fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com", mount_name="abcdefgh",
        capacity_gib=1200,
    )
    volume.add_namespace("hyperpod-ns-team-a")
    with pytest.raises(ValueError, match="already has"):
        volume.add_namespace("hyperpod-ns-team-a")
    manifests = Template.from_stack(stack).find_resources("Custom::AWSCDK-EKS-KubernetesResource")
    by_namespace = {}
    for resource in manifests.values():
        objects = json.loads(resource["Properties"]["Manifest"])
        claim = next(o for o in objects if o["kind"] == "PersistentVolumeClaim")
        by_namespace[claim["metadata"]["namespace"]] = objects
    assert set(by_namespace) == {"default", "hyperpod-ns-team-a"}
    volumes = {ns: next(o for o in objs if o["kind"] == "PersistentVolume") for ns, objs in by_namespace.items()}
    assert volumes["default"]["metadata"]["name"] != volumes["hyperpod-ns-team-a"]["metadata"]["name"]
    assert {v["spec"]["csi"]["volumeHandle"] for v in volumes.values()} == {"fs-0123456789abcdef0"}
    import kubernetes_validate

    for objects in by_namespace.values():
        for obj in objects:
            kubernetes_validate.validate(obj, "1.32.0", strict=True)
    team_claim = next(o for o in by_namespace["hyperpod-ns-team-a"] if o["kind"] == "PersistentVolumeClaim")
    assert team_claim["metadata"]["name"] == "fsx-claim"
    assert team_claim["spec"]["volumeName"] == volumes["hyperpod-ns-team-a"]["metadata"]["name"]


def test_no_lambda_or_role_wildcards_in_the_addons_stack(env):
    template = env.template("cluster_addons")
    assert template.find_resources("AWS::Lambda::Function") == {}
    text = json.dumps(template.to_json())
    assert '"Resource": "*"' not in text
    template.resource_count_is("AWS::IAM::Role", 2)
