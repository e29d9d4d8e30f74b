"""An `eks.addons` override reaches the synthesized add-on, and only that one: both EKS
stacks built on their own from an EksConfig's rows of the add-on table (no environment
file), as the platform plan hands them over."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2

from config.addons import ADDONS, placed_in
from platform_constructs.eks_fsx_volume import LustreFileSystem
from stacks.cluster_addons_stack import ClusterAddonsStack
from stacks.eks_stack import EksStack
from tests.support import (
    ACCOUNT,
    REGION,
    eks_config,
    imported_cluster,
    resources_of,
    template_of,
)

OVERRIDES = {
    "coredns": "v1.11.4-eksbuild.20",
    "vpc-cni": "v1.19.0-eksbuild.1",
    "cert-manager": "v1.17.2-eksbuild.1",
}
EKS = eks_config(addons=OVERRIDES)
ENV = cdk.Environment(account=ACCOUNT, region=REGION)


def addon_versions(stack: cdk.Stack) -> dict[str, str]:
    return {
        a["Properties"]["AddonName"]: a["Properties"]["AddonVersion"]
        for a in resources_of(template_of(stack), "AWS::EKS::Addon").values()
    }


def expected(stack: str) -> dict[str, str]:
    return {
        name: OVERRIDES.get(name, addon.version)
        for name, addon in ADDONS.items()
        if addon.stack == stack
    }


def test_the_overrides_differ_from_the_pins():
    # An override equal to its pin would prove nothing below.
    for name, version in OVERRIDES.items():
        assert ADDONS[name].version != version, name


def test_overrides_reach_the_cluster_addons_stack():
    app = cdk.App()
    scope = cdk.Stack(app, "Cluster", env=ENV)
    stack = ClusterAddonsStack(
        app,
        "Addons",
        env=ENV,
        addons=placed_in("cluster-addons", EKS),
        cluster_name="c",
        kubernetes=imported_cluster(scope),
        hyperpod_cluster_arn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdef012345",
        file_system=LustreFileSystem(
            file_system_id="fs-0123456789abcdef0",
            arn=f"arn:aws:fsx:{REGION}:{ACCOUNT}:file-system/fs-0123456789abcdef0",
            dns_name=f"fs-0123456789abcdef0.fsx.{REGION}.amazonaws.com",
            mount_name="abcdefgh",
            capacity_gib=1200,
            data_path="/data",
        ),
    )
    assert addon_versions(stack) == expected("cluster-addons")
    assert addon_versions(stack)["cert-manager"] == OVERRIDES["cert-manager"]


def test_overrides_reach_the_eks_stack():
    app = cdk.App()
    network = cdk.Stack(app, "Network", env=ENV)
    vpc = ec2.Vpc(
        network,
        "Vpc",
        availability_zones=[f"{REGION}a", f"{REGION}b"],
        subnet_configuration=[
            ec2.SubnetConfiguration(name="infra", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
        ],
    )
    stack = EksStack(
        app,
        "Eks",
        env=ENV,
        eks=EKS,
        addons=placed_in("eks", EKS),
        cluster_name="c",
        node_groups=(),
        vpc=vpc,
        infra_subnets={s.availability_zone: s for s in vpc.isolated_subnets},
        node_security_group=ec2.SecurityGroup(network, "Nodes", vpc=vpc),
        endpoint_security_group=ec2.SecurityGroup(network, "Endpoints", vpc=vpc),
        s3_prefix_list_id="pl-0123456789abcdef0",
        removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    assert addon_versions(stack) == expected("eks")
    assert addon_versions(stack)["vpc-cni"] == OVERRIDES["vpc-cni"]
    assert addon_versions(stack)["coredns"] == OVERRIDES["coredns"]
