"""EKS stack of every environment: the cluster, access, node-less add-ons, the kubectl
provider and the HyperPod dependency components. Templates come from the session fixtures
(dev, staging, prod)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from aws_cdk.assertions import Capture, Match, Template

from config.addons import ADDONS
from config.images import HEALTH_MONITORING_AGENT_ACCOUNTS, HEALTH_MONITORING_AGENT_TAG
from config.instance_types import INSTANCE_TYPES
from platform_constructs.eks_cluster import admin_access_entry_id
from platform_constructs.hyperpod_dependencies import MANIFEST_DIR
from tests.support import (
    SYNTH_GROUP,
    SynthResult,
    instance_type_affinity,
    kubernetes_objects,
    only,
    resources_of,
    security_group_rules,
)

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)

# What every node needs from its first boot, created with the cluster.
BOOT_ADDONS = {"vpc-cni", "kube-proxy", "eks-pod-identity-agent", "coredns"}
LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"]
GITHUB_HOSTS = ("github.com", "raw.githubusercontent.com", "githubusercontent")
PINNED_IMAGE = re.compile(r"^[^@\s]+(:[A-Za-z0-9_][A-Za-z0-9_.-]*|@sha256:[0-9a-f]{64})$")


def daemonsets(template: Template) -> dict[str, dict]:
    return {
        o["metadata"]["name"]: o for o in kubernetes_objects(template) if o["kind"] == "DaemonSet"
    }


def configured_types(result: SynthResult, predicate) -> list[str]:
    groups = result.config.hyperpod.instance_groups
    return sorted({g.instance_type for g in groups if predicate(g)})


# -------------------------------------------------------------------- control plane


def test_cluster_version_and_api_authentication(env):
    assert env.config.names.eks_cluster == f"hyperpod-{env.env_name}-eks"
    env.template("eks").has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "Name": f"hyperpod-{env.env_name}-eks",
            "Version": env.config.eks.kubernetes_version,
            "AccessConfig": {
                "AuthenticationMode": Match.string_like_regexp("^API(_AND_CONFIG_MAP)?$"),
                "BootstrapClusterCreatorAdminPermissions": False,
            },
            # Managed add-ons only: EKS must not also install unmanaged copies.
            "BootstrapSelfManagedAddons": False,
        },
    )


def test_endpoint_is_private_when_no_public_cidrs_are_listed(env):
    assert env.config.eks.public_access_cidrs == []
    cluster = only(env.resources("eks", "AWS::EKS::Cluster"))
    vpc_config = cluster["Properties"]["ResourcesVpcConfig"]
    assert vpc_config["EndpointPrivateAccess"] is True
    assert vpc_config["EndpointPublicAccess"] is False
    assert "PublicAccessCidrs" not in vpc_config


def test_control_plane_is_in_the_infra_subnets_with_the_node_security_group(env):
    eks_stack = env.stacks["eks"]
    network = env.stacks["network"]
    vpc_config = eks_stack.cluster.resource.resources_vpc_config
    assert list(vpc_config.subnet_ids) == [
        network.infra_subnets[az].subnet_id for az in sorted(network.infra_subnets)
    ]
    assert len(vpc_config.subnet_ids) == len(env.config.network.availability_zones)
    assert network.efa_security_group.security_group_id in vpc_config.security_group_ids


def test_all_control_plane_log_types_with_governed_retention(env):
    template = env.template("eks")
    template.has_resource_properties(
        "AWS::EKS::Cluster",
        {"Logging": {"ClusterLogging": {"EnabledTypes": [{"Type": t} for t in LOG_TYPES]}}},
    )
    # Encrypted with the stack's log key, which CloudWatch Logs may use (log_groups.py).
    log_key = env.logical_id("eks", env.stacks["eks"].cluster.log_key)
    template.has_resource_properties(
        "AWS::Logs::LogGroup",
        {
            "LogGroupName": f"/aws/eks/hyperpod-{env.env_name}-eks/cluster",
            "RetentionInDays": env.config.eks.log_retention_days,
            "KmsKeyId": {"Fn::GetAtt": [log_key, "Arn"]},
        },
    )


def test_secrets_are_encrypted_with_a_rotated_key_retained_with_stateful_resources(env):
    template = env.template("eks")
    key_id = env.logical_id("eks", env.stacks["eks"].cluster.secrets_key)
    template.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "EncryptionConfig": [
                {"Provider": {"KeyArn": {"Fn::GetAtt": [key_id, "Arn"]}}, "Resources": ["secrets"]}
            ]
        },
    )
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    expected = "Retain" if env.config.retain_stateful else "Delete"
    template.has_resource(
        "AWS::KMS::Key", {"DeletionPolicy": expected, "UpdateReplacePolicy": expected}
    )
    template.has_resource("AWS::EKS::Cluster", {"DeletionPolicy": expected})
    template.has_resource_properties(
        "AWS::EKS::Cluster", {"DeletionProtection": env.config.retain_stateful}
    )
    # The cluster role may use the key, and only that key.
    actions = Capture()
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    {
                        "Action": actions,
                        "Effect": "Allow",
                        "Resource": {"Fn::GetAtt": [key_id, "Arn"]},
                    }
                ]
            }
        },
    )
    assert set(actions.as_array()) == {
        "kms:Encrypt",
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:CreateGrant",
    }


def test_one_cluster_admin_access_entry_per_admin_role(env):
    template = env.template("eks")
    admins = env.config.eks.admin_role_arns
    for arn in admins:
        template.has_resource_properties(
            "AWS::EKS::AccessEntry",
            {
                "PrincipalArn": arn,
                "Type": "STANDARD",
                "AccessPolicies": [
                    {
                        "PolicyArn": {
                            "Fn::Join": [
                                "",
                                [
                                    "arn:",
                                    {"Ref": "AWS::Partition"},
                                    ":eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
                                ],
                            ]
                        },
                        "AccessScope": {"Type": "cluster"},
                    }
                ],
            },
        )
    # Plus exactly one for the kubectl provider's role and one for the admin host's role
    # (from the network stack; tests/stacks/test_admin_access.py).
    entries = resources_of(template, "AWS::EKS::AccessEntry")
    assert len(entries) == len(admins) + 2
    provider_entries = [
        e for e in entries.values() if "Fn::GetAtt" in e["Properties"]["PrincipalArn"]
    ]
    assert len(provider_entries) == 1


def test_admin_access_entry_ids_in_the_environments_follow_their_principals(env):
    entries = env.stacks["eks"].cluster.admin_access_entries
    for arn, entry in zip(env.config.eks.admin_role_arns, entries, strict=True):
        assert entry.node.id == admin_access_entry_id(arn)
        assert entry.principal_arn == arn


def test_stack_interface_for_the_hyperpod_and_addons_stacks(env):
    eks_stack = env.stacks["eks"]
    for name in ("cluster_name", "cluster_arn", "cluster_security_group_id"):
        assert isinstance(getattr(eks_stack, name), str)
    assert eks_stack.kubernetes.kubectl_provider is not None


# ------------------------------------------------------------------------------ add-ons


def test_boot_addons_are_pinned_to_config(env):
    template = env.template("eks")
    for name in BOOT_ADDONS:
        template.has_resource_properties(
            "AWS::EKS::Addon",
            {
                "AddonName": name,
                "AddonVersion": env.config.eks.addon_version(name),
                "ResolveConflicts": "OVERWRITE",
            },
        )


def test_vpc_cni_keeps_one_address_per_pod_as_the_capacity_plan_assumes(env):
    addon = next(
        a
        for a in env.resources("eks", "AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == "vpc-cni"
    )
    # And the network policy agent on, which enforces the team namespaces' policies.
    assert json.loads(addon["Properties"]["ConfigurationValues"]) == {
        "enableNetworkPolicy": "true",
        "env": {"ENABLE_PREFIX_DELEGATION": "false"},
    }


def test_only_what_nodes_boot_with_is_in_the_eks_stack(env):
    names = {a["Properties"]["AddonName"] for a in env.resources("eks", "AWS::EKS::Addon").values()}
    assert names == BOOT_ADDONS == {n for n, a in ADDONS.items() if a.stack == "eks"}
    assert set(env.stacks["eks"].addons) == names
    assert env.resources("eks", "AWS::EKS::PodIdentityAssociation") == {}


def test_no_node_boots_without_cluster_dns(env):
    # coredns is created with the EKS cluster, and the HyperPod cluster (whose nodes join
    # it) deploys only after the whole EKS stack.
    assert "coredns" in env.stacks["eks"].addons
    assert env.stacks["eks"] in env.stacks["hyperpod"].dependencies
    assert env.stacks["hyperpod"] not in env.stacks["eks"].dependencies


# ----------------------------------------------------------------------------- teardown


def test_a_retained_cluster_keeps_its_addons_and_components_when_the_stack_goes(env):
    retained = env.config.retain_stateful
    resources = env.templates["eks"]["Resources"]
    for resource in resources.values():
        if resource["Type"] == "AWS::EKS::Addon":
            assert resource["Properties"]["PreserveOnDelete"] is retained
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
            assert resource.get("DeletionPolicy", "Delete") == ("Retain" if retained else "Delete")
    if retained:
        # What the retained control plane runs on stays with it.
        for type_ in ("AWS::EKS::Cluster", "AWS::KMS::Key", "AWS::Logs::LogGroup"):
            env.template("eks").has_resource(type_, {"DeletionPolicy": "Retain"})
        cluster_role = env.logical_id("eks", env.stacks["eks"].cluster.role)
        assert resources[cluster_role]["DeletionPolicy"] == "Retain"
        # Access entries never are: removing an admin from config must revoke access.
        for resource in resources.values():
            if resource["Type"] == "AWS::EKS::AccessEntry":
                assert "DeletionPolicy" not in resource


# --------------------------------------------------------------- kubectl provider


def test_kubectl_provider_runs_in_the_infra_subnets_and_alone_reaches_the_api(env):
    template = env.template("eks")
    sg_id = env.logical_id("eks", env.stacks["eks"].kubectl.security_group)
    functions = resources_of(template, "AWS::Lambda::Function")
    assert len(functions) == 2  # the kubectl handler and the provider framework's entry point
    for function in functions.values():
        assert function["Properties"]["VpcConfig"]["SecurityGroupIds"] == [
            {"Fn::GetAtt": [sg_id, "GroupId"]}
        ]
        assert len(function["Properties"]["VpcConfig"]["SubnetIds"]) == len(
            env.config.network.availability_zones
        )
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {
            "IpProtocol": "tcp",
            "FromPort": 443,
            "ToPort": 443,
            "SourceSecurityGroupId": {"Fn::GetAtt": [sg_id, "GroupId"]},
        },
    )
    # Its role: the VPC-Lambda managed policy and eks:DescribeCluster on this cluster only.
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "Policies": [
                {
                    "PolicyName": "DescribeCluster",
                    "PolicyDocument": Match.object_like(
                        {
                            "Statement": [
                                Match.object_like(
                                    {
                                        "Action": "eks:DescribeCluster",
                                        "Resource": Match.any_value(),
                                    }
                                )
                            ]
                        }
                    ),
                }
            ]
        },
    )


def test_kubectl_provider_egress_is_https_to_the_api_endpoints_and_s3_only(env):
    eks_stack = env.stacks["eks"]
    network = env.stacks["network"]
    sg_id = env.logical_id("eks", eks_stack.kubectl.security_group)
    control_plane_id = env.logical_id("eks", eks_stack.cluster.control_plane_security_group)
    rules = security_group_rules(env.templates["eks"], sg_id, "Egress")
    for rule in rules:
        assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 443, 443), rule
    destinations = sorted(
        json.dumps(
            rule.get("DestinationSecurityGroupId") or rule.get("DestinationPrefixListId"),
            sort_keys=True,
        )
        for rule in rules
    )
    expected = [
        # The Kubernetes API (private endpoint ENIs carry the control-plane group).
        {"Fn::GetAtt": [control_plane_id, "GroupId"]},
        # EKS and Lambda APIs through the interface endpoints.
        eks_stack.resolve(network.endpoint_security_group.security_group_id),
        # The CloudFormation response URL (S3) through the gateway endpoint.
        eks_stack.resolve(network.s3_prefix_list_id),
    ]
    assert destinations == sorted(json.dumps(e, sort_keys=True) for e in expected)
    # The inline rule is what removes EC2's default allow-all egress.
    inline = env.templates["eks"]["Resources"][sg_id]["Properties"]["SecurityGroupEgress"]
    assert [r.get("DestinationPrefixListId") for r in inline] == [
        eks_stack.resolve(network.s3_prefix_list_id)
    ]


def test_the_vpc_has_the_endpoints_the_kubectl_provider_calls(env):
    assert {"eks", "lambda"} <= set(env.config.network.interface_endpoints)


@pytest.mark.parametrize("stack_name", ["eks", "cluster_addons"])
def test_no_security_group_allows_egress_to_the_internet(env, stack_name):
    resources_ = env.templates[stack_name]["Resources"]
    groups = [r for r in resources_.values() if r["Type"] == "AWS::EC2::SecurityGroup"]
    rules = [rule for g in groups for rule in g["Properties"].get("SecurityGroupEgress", [])] + [
        r["Properties"] for r in resources_.values() if r["Type"] == "AWS::EC2::SecurityGroupEgress"
    ]
    for rule in rules:
        assert rule.get("CidrIp") != "0.0.0.0/0", rule
        assert rule.get("CidrIpv6") != "::/0", rule
    for group in groups:
        # No group is left with EC2's default allow-all egress (no inline rule at all).
        assert group["Properties"].get("SecurityGroupEgress"), group


# ------------------------------------------------------------- HyperPod dependencies


def test_dependency_components_applied_without_waiting(env):
    template = env.template("eks")
    assert resources_of(template, "Custom::AWSCDK-EKS-HelmChart") == {}
    assert resources_of(template, "Custom::AWSCDK-EKS-KubernetesObjectValue") == {}
    kinds = {(o["kind"], o["metadata"]["name"]) for o in kubernetes_objects(template)}
    for expected in [
        ("Namespace", "aws-hyperpod"),
        ("ClusterRoleBinding", "deep-health-check-service-account-role-binding"),
        ("ClusterRoleBinding", "hyperpod-patching"),
        ("ClusterRoleBinding", "job-auto-restart"),
        ("DaemonSet", "health-monitoring-agent"),
        ("DaemonSet", "nvidia-device-plugin-daemonset"),
        ("DaemonSet", "aws-efa-k8s-device-plugin"),
    ]:
        assert expected in kinds


def test_gpu_components_are_pinned_to_the_configured_nvidia_types(env):
    sets = daemonsets(env.template("eks"))
    nvidia = configured_types(
        env, lambda g: INSTANCE_TYPES[g.instance_type].accelerator == "nvidia"
    )
    assert nvidia
    assert instance_type_affinity(sets["nvidia-device-plugin-daemonset"]) == nvidia
    assert instance_type_affinity(sets["health-monitoring-agent"]) == nvidia


def test_efa_plugin_is_pinned_to_the_configured_efa_types(env):
    sets = daemonsets(env.template("eks"))
    efa = configured_types(env, lambda g: g.interface is not None)
    assert efa and not set(efa) & {"ml.m5.xlarge", "ml.m5.2xlarge", "ml.m5.4xlarge"}
    assert instance_type_affinity(sets["aws-efa-k8s-device-plugin"]) == efa


def test_neuron_components_only_with_a_trainium_group(env):
    neuron = configured_types(
        env, lambda g: INSTANCE_TYPES[g.instance_type].accelerator == "neuron"
    )
    assert neuron == []
    names = {o["metadata"]["name"] for o in kubernetes_objects(env.template("eks"))}
    assert "neuron-device-plugin-daemonset" not in names
    assert "health-monitoring-agent-non-nvidia" not in names


def test_every_image_is_pinned_and_the_agent_is_the_regional_one(env):
    region = env.config.region
    sets = daemonsets(env.template("eks"))
    for daemonset in sets.values():
        for container in daemonset["spec"]["template"]["spec"]["containers"]:
            image = container["image"]
            assert PINNED_IMAGE.match(image) and not image.endswith(":latest"), image
    agent = sets["health-monitoring-agent"]
    assert agent["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"{HEALTH_MONITORING_AGENT_ACCOUNTS[region]}.dkr.ecr.{region}.amazonaws.com/"
        f"hyperpod-health-monitoring-agent:{HEALTH_MONITORING_AGENT_TAG}"
    )


def test_components_wait_for_the_namespace_and_the_provider_access(env):
    template = env.templates["eks"]["Resources"]
    manifests = {
        k: v for k, v in template.items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    }
    namespace = next(
        k for k, v in manifests.items() if '"kind":"Namespace"' in v["Properties"]["Manifest"]
    )
    access = next(
        k
        for k, v in template.items()
        if v["Type"] == "AWS::EKS::AccessEntry"
        # The provider's role is in this stack (the admin host's is imported).
        and "Fn::GetAtt" in v["Properties"]["PrincipalArn"]
    )
    for logical_id, manifest in manifests.items():
        assert access in manifest["DependsOn"]
        if logical_id != namespace:
            assert namespace in manifest["DependsOn"]


# ---------------------------------------------------------------- nothing from GitHub


def _files(source: Path):
    if source.is_dir():
        yield from (p for p in sorted(source.rglob("*")) if p.is_file())
    else:
        yield source


def _layer_asset_hashes(template: dict) -> set[str]:
    return {
        r["Properties"]["Content"]["S3Key"].split(".")[0]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::LayerVersion"
    }


def test_nothing_references_github(env):
    """Templates, the handler code and the vendored manifests name no GitHub host. The two
    Lambda layers (kubectl, AWS CLI) are the archives shipped inside pinned PyPI packages and
    uploaded as they are; the third-party sources and licences inside them link to their
    upstream projects, which is text, not a fetch, so they are identified and left out."""
    for name in ("eks", "cluster_addons"):
        text = json.dumps(env.templates[name])
        assert not any(host in text for host in GITHUB_HOSTS), name
    layers = _layer_asset_hashes(env.templates["eks"])
    assert len(layers) == 2
    assets = json.loads((env.outdir / f"{env.stacks['eks'].stack_name}.assets.json").read_text())
    scanned = 0
    for asset_hash, asset in assets["files"].items():
        source = env.outdir / asset["source"]["path"]
        if asset_hash in layers or source.name.endswith(".template.json"):
            continue  # layers: see above; the template: checked above
        for path in _files(source):
            scanned += 1
            content = path.read_bytes()
            assert not any(host.encode() in content for host in GITHUB_HOSTS), path
    assert scanned > 0  # the kubectl handler and the provider framework code
    for path in MANIFEST_DIR.glob("*.yaml"):
        assert not any(host in path.read_text() for host in GITHUB_HOSTS), path.name
