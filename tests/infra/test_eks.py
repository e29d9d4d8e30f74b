"""EKS stack: config validation, the cluster, access, node-less add-ons, and the HyperPod
dependency components. Templates come from the session fixtures (dev, staging, prod)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
import yaml
from aws_cdk.assertions import Capture, Match, Template

from config.images import (
    HEALTH_MONITORING_AGENT_ACCOUNTS,
    HEALTH_MONITORING_AGENT_TAG,
    pinned_images,
)
from config.instance_types import INSTANCE_TYPES
from config.loader import ConfigError, parse_config
from config.schema import ADDON_MINIMUM_VERSIONS, SUPPORTED_KUBERNETES_VERSIONS
from platform_constructs.hyperpod_dependencies import (
    MANIFEST_DIR,
    DeviceNodes,
    render_components,
)
from tests.conftest import ENVIRONMENTS, SynthResult

REPO = Path(__file__).resolve().parents[2]
NODE_DEPENDENT_ADDONS = (
    "coredns",
    "aws-fsx-csi-driver",
    "cert-manager",
    "amazon-sagemaker-hyperpod-training-operator",
)
LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"]
GITHUB_HOSTS = ("github.com", "raw.githubusercontent.com", "githubusercontent")
PINNED_IMAGE = re.compile(r"^[^@\s]+(:[A-Za-z0-9_][A-Za-z0-9_.-]*|@sha256:[0-9a-f]{64})$")


@pytest.fixture(params=ENVIRONMENTS)
def env(request) -> SynthResult:
    return request.getfixturevalue(request.param)


def resources(template: Template, type_: str) -> dict[str, dict]:
    return template.find_resources(type_)


def only(found: dict[str, dict]) -> dict:
    assert len(found) == 1, list(found)
    return next(iter(found.values()))


def kubernetes_objects(template: Template) -> list[dict]:
    """Every Kubernetes object the stack applies (manifests without tokens parse as JSON)."""
    objects = []
    for resource in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        objects.extend(json.loads(resource["Properties"]["Manifest"]))
    return objects


def daemonsets(template: Template) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in kubernetes_objects(template) if o["kind"] == "DaemonSet"}


def instance_type_affinity(daemonset: dict) -> list[str]:
    terms = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert len(terms) == 1
    (expression,) = terms[0]["matchExpressions"]
    assert expression["key"] == "node.kubernetes.io/instance-type"
    assert expression["operator"] == "In"
    return expression["values"]


def configured_types(result: SynthResult, predicate) -> list[str]:
    return sorted({g.instance_type for g in _config(result).hyperpod.instance_groups if predicate(g)})


def _config(result: SynthResult):
    return _load_config(result.env_name)


@functools.cache
def _load_config(env_name: str):
    from config.loader import load_environment

    return load_environment(env_name).config


# ----------------------------------------------------------------- config validation


def _dev_data() -> dict:
    return yaml.safe_load((REPO / "config" / "dev.yaml").read_text())


def _errors(mutate) -> list[str]:
    data = _dev_data()
    mutate(data["eks"])
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "x")
    return caught.value.lines


def _one_error_on(field: str, mutate) -> str:
    lines = _errors(mutate)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{field}: "), lines
    assert "\n" not in lines[0]
    return lines[0]


def test_dev_config_is_valid():
    parse_config(_dev_data(), "x")


def test_kubernetes_version_outside_supported_set_is_rejected():
    line = _one_error_on("eks.kubernetes_version", lambda e: e.update(kubernetes_version="1.29"))
    assert all(v in line for v in SUPPORTED_KUBERNETES_VERSIONS)


def test_every_addon_must_be_pinned():
    line = _one_error_on("eks.addons", lambda e: e["addons"].pop("coredns"))
    assert "coredns" in line


def test_addon_version_must_be_an_eks_build():
    line = _one_error_on("eks.addons", lambda e: e["addons"].update({"vpc-cni": "1.20.4"}))
    assert "vpc-cni" in line and "vMAJOR.MINOR.PATCH-eksbuild.N" in line


def test_addon_version_below_minimum_is_rejected():
    # vpc-cni 1.18.3 is HyperPod's documented minimum.
    line = _one_error_on("eks.addons", lambda e: e["addons"].update({"vpc-cni": "v1.18.2-eksbuild.1"}))
    assert "v1.18.3" in line and ADDON_MINIMUM_VERSIONS["vpc-cni"] == (1, 18, 3)


def test_unknown_addon_is_rejected():
    line = _one_error_on("eks.addons", lambda e: e["addons"].update({"vpc-cnii": "v1.20.4-eksbuild.1"}))
    assert "vpc-cnii" in line


def test_kube_proxy_minor_must_match_the_cluster():
    line = _one_error_on(
        "eks.addons.kube-proxy", lambda e: e["addons"].update({"kube-proxy": "v1.31.2-eksbuild.1"})
    )
    assert "1.31" in line and "1.32" in line


def test_admin_role_arn_must_be_a_role_arn():
    line = _one_error_on(
        "eks.admin_role_arns",
        lambda e: e.update(admin_role_arns=["arn:aws:iam::111111111111:user/someone"]),
    )
    assert "user/someone" in line


def test_admin_role_arns_must_be_unique():
    arn = "arn:aws:iam::111111111111:role/PlatformAdmin"
    _one_error_on("eks.admin_role_arns", lambda e: e.update(admin_role_arns=[arn, arn]))


def test_public_access_cidrs_cannot_open_the_endpoint_to_the_internet():
    line = _one_error_on("eks.public_access_cidrs", lambda e: e.update(public_access_cidrs=["0.0.0.0/0"]))
    assert "0.0.0.0/0" in line


def test_log_retention_must_be_a_cloudwatch_period():
    _one_error_on("eks.log_retention_days", lambda e: e.update(log_retention_days=100))


@pytest.mark.parametrize(
    "image",
    [
        "111111111111.dkr.ecr.us-west-2.amazonaws.com/mirror/k8s-device-plugin",
        "111111111111.dkr.ecr.us-west-2.amazonaws.com/mirror/k8s-device-plugin:latest",
    ],
    ids=["no-tag", "latest"],
)
def test_image_override_must_be_pinned(image):
    _one_error_on(
        "eks.image_overrides", lambda e: e.update(image_overrides={"nvidia-device-plugin": image})
    )


def test_image_override_names_a_known_component():
    lines = _errors(lambda e: e.update(image_overrides={"gpu-plugin": "r.example.com/a/b:v1"}))
    assert len(lines) == 1 and lines[0].startswith("eks.image_overrides."), lines


# -------------------------------------------------------------------- control plane


def test_cluster_version_and_api_authentication(env):
    config = _config(env)
    env.template("eks").has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "Name": f"hyperpod-{env.env_name}-eks",
            "Version": config.eks.kubernetes_version,
            "AccessConfig": {
                "AuthenticationMode": Match.string_like_regexp("^API(_AND_CONFIG_MAP)?$"),
                "BootstrapClusterCreatorAdminPermissions": False,
            },
            # Managed add-ons only: EKS must not also install unmanaged copies.
            "BootstrapSelfManagedAddons": False,
        },
    )


def test_endpoint_is_private_when_no_public_cidrs_are_listed(env):
    assert _config(env).eks.public_access_cidrs == []
    cluster = only(resources(env.template("eks"), "AWS::EKS::Cluster"))
    vpc_config = cluster["Properties"]["ResourcesVpcConfig"]
    assert vpc_config["EndpointPrivateAccess"] is True
    assert vpc_config["EndpointPublicAccess"] is False
    assert "PublicAccessCidrs" not in vpc_config


def test_public_endpoint_is_restricted_to_listed_cidrs():
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2

    from platform_constructs.eks_cluster import EksCluster

    stack = cdk.Stack(cdk.App(), "PublicEndpoint", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=0)
    EksCluster(
        stack, "Cluster", cluster_name="c", kubernetes_version="1.32", vpc=vpc,
        control_plane_subnets=vpc.isolated_subnets or vpc.public_subnets, security_groups=[],
        admin_role_arns=[], public_access_cidrs=["203.0.113.0/24"], log_retention_days=30,
        removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    Template.from_stack(stack).has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "ResourcesVpcConfig": Match.object_like(
                {
                    "EndpointPrivateAccess": True,
                    "EndpointPublicAccess": True,
                    "PublicAccessCidrs": ["203.0.113.0/24"],
                }
            )
        },
    )


def test_control_plane_is_in_the_infra_subnets_with_the_node_security_group(env):
    eks_stack = env.stacks["eks"]
    network = env.stacks["network"]
    vpc_config = eks_stack.cluster.resource.resources_vpc_config
    assert list(vpc_config.subnet_ids) == [
        network.infra_subnets[az].subnet_id for az in sorted(network.infra_subnets)
    ]
    assert len(vpc_config.subnet_ids) == len(_config(env).network.availability_zones)
    assert network.efa_security_group.security_group_id in vpc_config.security_group_ids


def test_all_control_plane_log_types_with_governed_retention(env):
    template = env.template("eks")
    template.has_resource_properties(
        "AWS::EKS::Cluster",
        {"Logging": {"ClusterLogging": {"EnabledTypes": [{"Type": t} for t in LOG_TYPES]}}},
    )
    template.has_resource_properties(
        "AWS::Logs::LogGroup",
        {
            "LogGroupName": f"/aws/eks/hyperpod-{env.env_name}-eks/cluster",
            "RetentionInDays": _config(env).eks.log_retention_days,
        },
    )


def test_secrets_are_encrypted_with_a_rotated_key_retained_with_stateful_resources(env):
    template = env.template("eks")
    key_id = only_id(template, "AWS::KMS::Key")
    template.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "EncryptionConfig": [
                {"Provider": {"KeyArn": {"Fn::GetAtt": [key_id, "Arn"]}}, "Resources": ["secrets"]}
            ]
        },
    )
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    expected = "Retain" if _config(env).retain_stateful else "Delete"
    template.has_resource("AWS::KMS::Key", {"DeletionPolicy": expected, "UpdateReplacePolicy": expected})
    template.has_resource("AWS::EKS::Cluster", {"DeletionPolicy": expected})
    template.has_resource_properties(
        "AWS::EKS::Cluster", {"DeletionProtection": _config(env).retain_stateful}
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
        "kms:Encrypt", "kms:Decrypt", "kms:DescribeKey", "kms:CreateGrant"
    }


def only_id(template: Template, type_: str) -> str:
    found = resources(template, type_)
    assert len(found) == 1, list(found)
    return next(iter(found))


def test_one_cluster_admin_access_entry_per_admin_role(env):
    template = env.template("eks")
    admins = _config(env).eks.admin_role_arns
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
                                ["arn:", {"Ref": "AWS::Partition"},
                                 ":eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"],
                            ]
                        },
                        "AccessScope": {"Type": "cluster"},
                    }
                ],
            },
        )
    # Plus exactly one for the kubectl provider's role.
    entries = resources(template, "AWS::EKS::AccessEntry")
    assert len(entries) == len(admins) + 1
    provider_entries = [
        e for e in entries.values() if isinstance(e["Properties"]["PrincipalArn"], dict)
    ]
    assert len(provider_entries) == 1


def test_stack_interface_for_the_hyperpod_and_addons_stacks(env):
    eks_stack = env.stacks["eks"]
    for name in ("cluster_name", "cluster_arn", "cluster_security_group_id"):
        assert isinstance(getattr(eks_stack, name), str)
    assert eks_stack.kubernetes.kubectl_provider is not None


# ------------------------------------------------------------------------------ add-ons


def test_nodeless_addons_are_pinned_to_config(env):
    template = env.template("eks")
    versions = _config(env).eks.addons
    for name in ("vpc-cni", "kube-proxy", "eks-pod-identity-agent"):
        template.has_resource_properties(
            "AWS::EKS::Addon",
            {"AddonName": name, "AddonVersion": versions[name], "ResolveConflicts": "OVERWRITE"},
        )


def test_vpc_cni_keeps_one_address_per_pod_as_the_capacity_plan_assumes(env):
    template = env.template("eks")
    addon = next(
        a for a in resources(template, "AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == "vpc-cni"
    )
    assert json.loads(addon["Properties"]["ConfigurationValues"]) == {
        "env": {"ENABLE_PREFIX_DELEGATION": "false"}
    }


def test_node_dependent_addons_are_not_in_the_eks_stack(env):
    names = {a["Properties"]["AddonName"] for a in resources(env.template("eks"), "AWS::EKS::Addon").values()}
    assert names == {"vpc-cni", "kube-proxy", "eks-pod-identity-agent"}
    assert names.isdisjoint(NODE_DEPENDENT_ADDONS)
    assert resources(env.template("eks"), "AWS::EKS::PodIdentityAssociation") == {}


# --------------------------------------------------------------- kubectl provider


def test_kubectl_provider_runs_in_the_infra_subnets_and_alone_reaches_the_api(env):
    template = env.template("eks")
    kubectl_sg = env.stacks["eks"].kubectl.security_group
    sg_id = env.stacks["eks"].get_logical_id(kubectl_sg.node.default_child)
    functions = resources(template, "AWS::Lambda::Function")
    assert len(functions) == 2  # the kubectl handler and the provider framework's entry point
    for function in functions.values():
        assert function["Properties"]["VpcConfig"]["SecurityGroupIds"] == [
            {"Fn::GetAtt": [sg_id, "GroupId"]}
        ]
        assert len(function["Properties"]["VpcConfig"]["SubnetIds"]) == len(
            _config(env).network.availability_zones
        )
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443,
         "SourceSecurityGroupId": {"Fn::GetAtt": [sg_id, "GroupId"]}},
    )
    # Its role: the VPC-Lambda managed policy and eks:DescribeCluster on this cluster only.
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "Policies": [
                {
                    "PolicyName": "DescribeCluster",
                    "PolicyDocument": Match.object_like(
                        {"Statement": [Match.object_like({"Action": "eks:DescribeCluster",
                                                          "Resource": Match.any_value()})]}
                    ),
                }
            ]
        },
    )


def _egress_rules(template: Template, group_logical_id: str) -> list[dict]:
    """Every egress rule of one group: inline ones and separate SecurityGroupEgress resources."""
    resources_ = template.to_json()["Resources"]
    rules = list(resources_[group_logical_id]["Properties"].get("SecurityGroupEgress", []))
    rules += [
        r["Properties"] for r in resources_.values()
        if r["Type"] == "AWS::EC2::SecurityGroupEgress"
        and r["Properties"]["GroupId"] == {"Fn::GetAtt": [group_logical_id, "GroupId"]}
    ]
    return rules


def test_kubectl_provider_egress_is_https_to_the_api_endpoints_and_s3_only(env):
    template = env.template("eks")
    eks_stack = env.stacks["eks"]
    network = env.stacks["network"]
    sg_id = eks_stack.get_logical_id(eks_stack.kubectl.security_group.node.default_child)
    control_plane_id = eks_stack.get_logical_id(
        eks_stack.cluster.control_plane_security_group.node.default_child
    )
    rules = _egress_rules(template, sg_id)
    for rule in rules:
        assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 443, 443), rule
    destinations = sorted(
        json.dumps(rule.get("DestinationSecurityGroupId") or rule.get("DestinationPrefixListId"), sort_keys=True)
        for rule in rules
    )
    expected = [
        # The Kubernetes API (private endpoint ENIs carry the control-plane group).
        {"Fn::GetAtt": [control_plane_id, "GroupId"]},
        # EKS and Lambda APIs through the interface endpoints.
        eks_stack.resolve(network.endpoint_security_group.security_group_id),
        # The CloudFormation response URL (S3) through the gateway endpoint.
        eks_stack.resolve(network.network.s3_prefix_list_id),
    ]
    assert destinations == sorted(json.dumps(e, sort_keys=True) for e in expected)
    # The inline rule is what removes EC2's default allow-all egress.
    inline = template.to_json()["Resources"][sg_id]["Properties"]["SecurityGroupEgress"]
    assert [r.get("DestinationPrefixListId") for r in inline] == [
        eks_stack.resolve(network.network.s3_prefix_list_id)
    ]


def test_the_vpc_has_the_endpoints_the_kubectl_provider_calls(env):
    endpoints = _config(env).network.interface_endpoints
    assert {"eks", "lambda"} <= set(endpoints)


@pytest.mark.parametrize("stack_name", ["eks", "cluster_addons"])
def test_no_security_group_allows_egress_to_the_internet(env, stack_name):
    resources_ = env.template(stack_name).to_json()["Resources"]
    rules = [
        rule
        for r in resources_.values() if r["Type"] == "AWS::EC2::SecurityGroup"
        for rule in r["Properties"].get("SecurityGroupEgress", [])
    ] + [r["Properties"] for r in resources_.values() if r["Type"] == "AWS::EC2::SecurityGroupEgress"]
    for rule in rules:
        assert rule.get("CidrIp") != "0.0.0.0/0", rule
        assert rule.get("CidrIpv6") != "::/0", rule
    groups = [r for r in resources_.values() if r["Type"] == "AWS::EC2::SecurityGroup"]
    for group in groups:
        # No group is left with EC2's default allow-all egress (no inline rule at all).
        assert group["Properties"].get("SecurityGroupEgress"), group


def test_supported_kubernetes_versions_are_within_the_bundled_kubectl_skew():
    from platform_constructs.eks_kubectl import KUBECTL_MINOR, check_kubectl_skew

    for version in SUPPORTED_KUBERNETES_VERSIONS:
        major, minor = (int(p) for p in version.split("."))
        assert major == KUBECTL_MINOR[0] and abs(minor - KUBECTL_MINOR[1]) <= 1, version
        check_kubectl_skew(version)
    with pytest.raises(ValueError, match="1.29"):
        check_kubectl_skew("1.29")


# ------------------------------------------------------------------- access entries


def _admin_entry_ids(admin_role_arns: list[str]) -> dict[str, str]:
    """PrincipalArn -> logical ID of its access entry, for a cluster built in a throwaway stack."""
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2

    from platform_constructs.eks_cluster import EksCluster

    stack = cdk.Stack(cdk.App(), "Admins", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=0)
    EksCluster(
        stack, "Cluster", cluster_name="c", kubernetes_version="1.32", vpc=vpc,
        control_plane_subnets=vpc.public_subnets, security_groups=[],
        admin_role_arns=admin_role_arns, public_access_cidrs=[], log_retention_days=30,
        removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    entries = Template.from_stack(stack).find_resources("AWS::EKS::AccessEntry")
    return {e["Properties"]["PrincipalArn"]: logical_id for logical_id, e in entries.items()}


def test_admin_access_entries_are_keyed_by_principal_not_list_position():
    arns = [
        "arn:aws:iam::111111111111:role/PlatformAdmin",
        "arn:aws:iam::111111111111:role/ops/OnCall",
        "arn:aws:iam::222222222222:role/PlatformAdmin",  # same name, other account
        "arn:aws:iam::111111111111:role/Platform.Admin",  # same letters, other name
    ]
    forward = _admin_entry_ids(arns)
    assert forward == _admin_entry_ids(list(reversed(arns)))
    assert len(set(forward.values())) == len(arns)
    # Removing the first admin leaves the others' logical IDs (and entries) untouched.
    remaining = _admin_entry_ids(arns[1:])
    assert remaining == {arn: forward[arn] for arn in arns[1:]}
    assert forward["arn:aws:iam::111111111111:role/ops/OnCall"].startswith("ClusterAdminOnCall")


def test_admin_access_entry_ids_in_the_environments_follow_their_principals(env):
    eks_stack = env.stacks["eks"]
    from platform_constructs.eks_cluster import admin_access_entry_id

    for arn, entry in zip(_config(env).eks.admin_role_arns, eks_stack.cluster.admin_access_entries, strict=True):
        assert entry.node.id == admin_access_entry_id(arn)
        assert entry.principal_arn == arn


# ------------------------------------------------------------------------ cfn-lint


def test_ignore_cfn_lint_merges_into_existing_metadata():
    import aws_cdk as cdk
    from aws_cdk import aws_sqs as sqs

    from platform_constructs.cfn_lint import ignore_cfn_lint

    stack = cdk.Stack(cdk.App(), "Lint")
    resource = sqs.CfnQueue(stack, "Queue")
    resource.add_metadata("owner", {"team": "platform"})
    resource.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3010"], "regions": ["us-west-2"]}})
    ignore_cfn_lint(resource, "W3005")
    ignore_cfn_lint(resource, "W3005", "W3011")
    metadata = Template.from_stack(stack).to_json()["Resources"]["Queue"]["Metadata"]
    assert metadata["owner"] == {"team": "platform"}
    assert metadata["cfn-lint"] == {
        "config": {"ignore_checks": ["W3010", "W3005", "W3011"], "regions": ["us-west-2"]}
    }
    with pytest.raises(ValueError):
        ignore_cfn_lint(resource)


# ------------------------------------------------------------- HyperPod dependencies


def test_dependency_components_applied_without_waiting(env):
    template = env.template("eks")
    assert resources(template, "Custom::AWSCDK-EKS-HelmChart") == {}
    assert resources(template, "Custom::AWSCDK-EKS-KubernetesObjectValue") == {}
    kinds = {(o["kind"], o["metadata"]["name"]) for o in kubernetes_objects(template)}
    for expected in [
        ("Namespace", "aws-hyperpod"),
        ("ClusterRoleBinding", "deep-health-check-service-account-role-binding"),
        ("ClusterRoleBinding", "hyperpod-patching"),
        ("DaemonSet", "health-monitoring-agent"),
        ("DaemonSet", "nvidia-device-plugin-daemonset"),
        ("DaemonSet", "aws-efa-k8s-device-plugin"),
    ]:
        assert expected in kinds


def test_gpu_components_are_pinned_to_the_configured_nvidia_types(env):
    sets = daemonsets(env.template("eks"))
    nvidia = configured_types(env, lambda g: INSTANCE_TYPES[g.instance_type].accelerator == "nvidia")
    assert nvidia
    assert instance_type_affinity(sets["nvidia-device-plugin-daemonset"]) == nvidia
    assert instance_type_affinity(sets["health-monitoring-agent"]) == nvidia


def test_efa_plugin_is_pinned_to_the_configured_efa_types(env):
    sets = daemonsets(env.template("eks"))
    efa = configured_types(env, lambda g: g.interface is not None)
    assert efa and not set(efa) & {"ml.m5.xlarge", "ml.m5.2xlarge", "ml.m5.4xlarge"}
    assert instance_type_affinity(sets["aws-efa-k8s-device-plugin"]) == efa


def test_neuron_components_only_with_a_trainium_group(env):
    assert configured_types(env, lambda g: INSTANCE_TYPES[g.instance_type].accelerator == "neuron") == []
    names = {o["metadata"]["name"] for o in kubernetes_objects(env.template("eks"))}
    assert "neuron-device-plugin-daemonset" not in names
    assert "health-monitoring-agent-non-nvidia" not in names


def test_every_image_is_pinned_and_the_agent_is_the_regional_one(env):
    region = _config(env).region
    for daemonset in daemonsets(env.template("eks")).values():
        for container in daemonset["spec"]["template"]["spec"]["containers"]:
            image = container["image"]
            assert PINNED_IMAGE.match(image) and not image.endswith(":latest"), image
    agent = daemonsets(env.template("eks"))["health-monitoring-agent"]
    assert agent["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"{HEALTH_MONITORING_AGENT_ACCOUNTS[region]}.dkr.ecr.{region}.amazonaws.com/"
        f"hyperpod-health-monitoring-agent:{HEALTH_MONITORING_AGENT_TAG}"
    )


def test_components_wait_for_the_namespace_and_the_provider_access(env):
    template = env.template("eks").to_json()["Resources"]
    manifests = {k: v for k, v in template.items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"}
    namespace = next(k for k, v in manifests.items() if '"kind":"Namespace"' in v["Properties"]["Manifest"])
    access = next(
        k for k, v in template.items()
        if v["Type"] == "AWS::EKS::AccessEntry" and isinstance(v["Properties"]["PrincipalArn"], dict)
    )
    for logical_id, manifest in manifests.items():
        assert access in manifest["DependsOn"]
        if logical_id != namespace:
            assert namespace in manifest["DependsOn"]


# Rendering for configurations the three environments do not exercise.


def _groups(data_mutation) -> list:
    data = _dev_data()
    data_mutation(data["hyperpod"]["instance_groups"])
    # A Trainium group needs the Neuron plugin from an ECR copy (nodes have no internet egress).
    data["eks"].setdefault("image_overrides", {})["neuron-device-plugin"] = (
        "111111111111.dkr.ecr.us-west-2.amazonaws.com/neuron/neuron-device-plugin:2.19.16.0"
    )
    return parse_config(data, "x").hyperpod.instance_groups


def test_trainium_group_adds_the_neuron_plugin_and_agent_variant():
    groups = _groups(lambda gs: gs.append({"name": "trn", "instance_type": "ml.trn1.32xlarge", "count": 1}))
    components = render_components(nodes=DeviceNodes.from_groups(groups), images=pinned_images("us-west-2"))
    sets = {o["metadata"]["name"]: o for c in components.values() for o in c if o["kind"] == "DaemonSet"}
    assert instance_type_affinity(sets["neuron-device-plugin-daemonset"]) == ["ml.trn1.32xlarge"]
    assert instance_type_affinity(sets["health-monitoring-agent-non-nvidia"]) == ["ml.trn1.32xlarge"]
    assert instance_type_affinity(sets["aws-efa-k8s-device-plugin"]) == ["ml.g5.12xlarge", "ml.trn1.32xlarge"]
    assert instance_type_affinity(sets["nvidia-device-plugin-daemonset"]) == ["ml.g5.12xlarge"]


def test_device_plugins_tolerate_the_taints_of_their_groups():
    def taint(gs):
        gs[0]["deep_health_checks"] = []
        gs[0]["taints"] = [{"key": "example.com/dedicated", "value": "x", "effect": "NoSchedule"}]

    components = render_components(nodes=DeviceNodes.from_groups(_groups(taint)), images=pinned_images("us-west-2"))
    plugin = components["nvidia-device-plugin"][0]["spec"]["template"]["spec"]
    assert {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"} in plugin["tolerations"]


def test_every_component_is_a_valid_kubernetes_object_for_the_cluster_versions():
    import kubernetes_validate

    groups = _groups(lambda gs: gs.append({"name": "trn", "instance_type": "ml.trn1.32xlarge", "count": 1}))
    components = render_components(nodes=DeviceNodes.from_groups(groups), images=pinned_images("us-east-1"))
    objects = [o for c in components.values() for o in c]
    assert len(objects) >= 15
    for version in SUPPORTED_KUBERNETES_VERSIONS:
        for obj in objects:
            # Strict: an unknown (misspelt) field is an error, not silently dropped.
            kubernetes_validate.validate(obj, f"{version}.0", strict=True)


def test_cpu_only_cluster_gets_no_device_plugins():
    groups = _groups(lambda gs: gs.pop(0))  # leaves the ml.m5 system group
    components = render_components(nodes=DeviceNodes.from_groups(groups), images=pinned_images("us-west-2"))
    assert set(components) == {"namespace", "deep-health-check", "hyperpod-patching"}


def test_region_without_a_published_agent_needs_an_override():
    groups = _groups(lambda gs: None)
    with pytest.raises(ValueError, match="eks.image_overrides.health-monitoring-agent"):
        render_components(nodes=DeviceNodes.from_groups(groups), images=pinned_images("af-south-1"))


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
    for path in MANIFEST_DIR.iterdir():
        assert not any(host in path.read_text() for host in GITHUB_HOSTS), path.name


def test_manifests_are_parseable_kubernetes_objects():
    for path in MANIFEST_DIR.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            assert {"apiVersion", "kind", "metadata"} <= set(doc), path.name
