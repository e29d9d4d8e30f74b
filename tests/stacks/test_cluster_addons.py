"""Cluster add-ons stack of every environment: the add-ons that need running nodes, their pod
identities, and the static FSx volume. Templates come from the session fixtures (dev,
staging, prod)."""

from __future__ import annotations

import json

import pytest

from config.addons import ADDONS, FSX_CSI_DRIVER, TRAINING_OPERATOR
from config.kubernetes import DEFAULT_NAMESPACE, FSX_CLAIM_NAME
from tests.support import SYNTH_GROUP, SynthResult

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)


def assert_pod_identity_trust(env, role: dict, namespace: str, service_account: str) -> None:
    """EKS Pod Identity, only for this cluster's pods of this service account (the session
    tags of the EKS User Guide)."""
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert set(trust["Condition"]) == {"StringEquals"}
    conditions = dict(trust["Condition"]["StringEquals"])
    cluster_arn = conditions.pop("aws:RequestTag/eks-cluster-arn")
    assert conditions == {
        "aws:RequestTag/kubernetes-namespace": namespace,
        "aws:RequestTag/kubernetes-service-account": service_account,
    }
    prefix, name = cluster_arn["Fn::Join"][1]
    assert prefix == f"arn:aws:eks:{env.config.region}:{env.config.account}:cluster/"
    assert name == _eks_cluster_name(env)


def _resources(result: SynthResult, type_: str) -> dict[str, dict]:
    return result.resources("cluster_addons", type_)


def _addon(result: SynthResult, name: str) -> tuple[str, dict]:
    (found,) = [
        (k, v)
        for k, v in _resources(result, "AWS::EKS::Addon").items()
        if v["Properties"]["AddonName"] == name
    ]
    return found


def _eks_cluster_name(result: SynthResult) -> dict:
    """How the add-ons stack refers to the EKS cluster's name (an import of its export)."""
    return result.stacks["cluster_addons"].resolve(result.stacks["eks"].cluster_name)


# ------------------------------------------------------------------------------ add-ons


def test_cluster_addons_are_pinned_to_config(env):
    names = set()
    for name in ("cert-manager", FSX_CSI_DRIVER, TRAINING_OPERATOR):
        env.template("cluster_addons").has_resource_properties(
            "AWS::EKS::Addon",
            {
                "AddonName": name,
                "AddonVersion": env.config.eks.addon_version(name),
                "ClusterName": _eks_cluster_name(env),
                "ResolveConflicts": "OVERWRITE",
            },
        )
        names.add(name)
    assert {
        a["Properties"]["AddonName"] for a in _resources(env, "AWS::EKS::Addon").values()
    } == names
    assert names == {n for n, a in ADDONS.items() if a.stack == "cluster-addons"}
    assert set(env.stacks["cluster_addons"].addons) == names


def test_stack_deploys_after_the_hyperpod_cluster(env):
    addons = env.stacks["cluster_addons"]
    assert env.stacks["hyperpod"] in addons.dependencies
    # Cluster DNS is not here: nodes boot with it (the EKS stack).
    names = {a["Properties"]["AddonName"] for a in _resources(env, "AWS::EKS::Addon").values()}
    assert "coredns" not in names


def test_a_retained_cluster_keeps_its_addons_identities_and_volume(env):
    retained = env.config.retain_stateful
    policy = "Retain" if retained else "Delete"
    for addon in _resources(env, "AWS::EKS::Addon").values():
        assert addon["Properties"]["PreserveOnDelete"] is retained
    for type_ in (
        "AWS::IAM::Role",
        "AWS::EKS::PodIdentityAssociation",
        "Custom::AWSCDK-EKS-KubernetesResource",
    ):
        found = _resources(env, type_)
        assert found, type_
        for resource in found.values():
            assert resource.get("DeletionPolicy", "Delete") == policy, type_


def test_fsx_csi_controller_identity_only_describes_file_systems(env):
    template = env.template("cluster_addons")
    stack = env.stacks["cluster_addons"]
    role_id = env.logical_id("cluster_addons", stack.identities[FSX_CSI_DRIVER].identity.role)
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
    assert_pod_identity_trust(env, role, "kube-system", "fsx-csi-controller-sa")
    assert "ManagedPolicyArns" not in role
    (policy,) = role["Policies"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    # DescribeFileSystems has no resource type: scoped to one ARN it would grant nothing.
    assert statement == {"Action": "fsx:DescribeFileSystems", "Effect": "Allow", "Resource": "*"}


def test_training_operator_identity_per_aws_docs(env):
    template = env.template("cluster_addons")
    stack = env.stacks["cluster_addons"]
    role_id = env.logical_id("cluster_addons", stack.identities[TRAINING_OPERATOR].identity.role)
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
    assert_pod_identity_trust(env, role, "aws-hyperpod", "hp-training-operator-controller-manager")
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
        for k, v in resources.items()
        if v["Type"] == "AWS::EKS::PodIdentityAssociation"
    }
    fsx_id, _ = _addon(env, FSX_CSI_DRIVER)
    operator_id, _ = _addon(env, TRAINING_OPERATOR)
    cert_manager_id, _ = _addon(env, "cert-manager")
    assert associations["fsx-csi-controller-sa"] in resources[fsx_id]["DependsOn"]
    assert (
        associations["hp-training-operator-controller-manager"]
        in resources[operator_id]["DependsOn"]
    )
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
    file_system = env.stacks["storage"].file_system
    stack = env.stacks["cluster_addons"]
    (volume,) = [o for o in objects if o["kind"] == "PersistentVolume"]
    spec = volume["spec"]
    assert spec["csi"]["driver"] == "fsx.csi.aws.com"
    assert tokens[spec["csi"]["volumeHandle"]] == stack.resolve(file_system.file_system_id)
    # dnsname is an attribute of the file system (it may render as several parts).
    assert tokens[spec["csi"]["volumeAttributes"]["mountname"]] == stack.resolve(
        file_system.mount_name
    )
    assert spec["csi"]["volumeAttributes"]["dnsname"]
    capacity = f"{env.config.storage.fsx.storage_capacity_gib}Gi"
    assert spec["capacity"] == {"storage": capacity}
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["storageClassName"] == ""
    assert spec["claimRef"] == {"namespace": "default", "name": "fsx-claim"}
    assert (DEFAULT_NAMESPACE, FSX_CLAIM_NAME) == ("default", "fsx-claim")


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


def test_fsx_volume_waits_for_the_csi_driver(env):
    resources = env.template("cluster_addons").to_json()["Resources"]
    fsx_id, _ = _addon(env, FSX_CSI_DRIVER)
    (manifest,) = [
        v for v in resources.values() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    ]
    assert fsx_id in manifest["DependsOn"]


def test_no_lambda_or_role_wildcards_in_the_addons_stack(env):
    template = env.template("cluster_addons")
    assert template.find_resources("AWS::Lambda::Function") == {}
    # The one "*" is the FSx controller's DescribeFileSystems, which has no resource type.
    text = json.dumps(template.to_json())
    assert text.count('"Resource": "*"') == 1
    assert '"Action": "fsx:DescribeFileSystems", "Effect": "Allow", "Resource": "*"' in text
    template.resource_count_is("AWS::IAM::Role", 2)
