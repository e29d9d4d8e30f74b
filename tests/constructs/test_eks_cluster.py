"""The EKS control plane construct on a bare stack: endpoint access and admin entries."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Match

from platform_constructs.eks_cluster import EksCluster, admin_access_entry_id
from tests.support import bare_stack, resources_of, template_of


def eks_cluster(
    *,
    admin_role_arns: list[str] = (),
    public_access_cidrs: list[str] = (),
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.DESTROY,
) -> cdk.Stack:
    stack = bare_stack("Eks")
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=0)
    cluster = EksCluster(
        stack,
        "Cluster",
        cluster_name="c",
        kubernetes_version="1.35",
        vpc=vpc,
        control_plane_subnets=vpc.public_subnets,
        security_groups=[],
        admin_role_arns=list(admin_role_arns),
        public_access_cidrs=list(public_access_cidrs),
        log_retention_days=30,
        removal_policy=removal_policy,
    )
    # Like the kubectl provider: a client group allowed into the control plane.
    client = ec2.SecurityGroup(stack, "Client", vpc=vpc)
    cluster.control_plane_security_group.add_ingress_rule(client, ec2.Port.tcp(443))
    return stack


def test_a_retained_cluster_keeps_everything_it_runs_on():
    resources = template_of(
        eks_cluster(
            admin_role_arns=["arn:aws:iam::111111111111:role/PlatformAdmin"],
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
    ).to_json()["Resources"]
    mine = {k: v for k, v in resources.items() if k.startswith("Cluster")}
    kept = {v["Type"] for v in mine.values() if v.get("DeletionPolicy") == "Retain"}
    assert {
        "AWS::EKS::Cluster",
        "AWS::KMS::Key",
        "AWS::Logs::LogGroup",
        "AWS::IAM::Role",  # the control plane manages its ENIs with it
        "AWS::IAM::Policy",  # the role's use of the secrets key
        "AWS::EC2::SecurityGroup",
    } <= kept
    for resource in mine.values():
        if resource["Type"] in (
            # would block deleting the client's group, deleted with the stack
            "AWS::EC2::SecurityGroupIngress",
            # removing an admin from config must revoke their access
            "AWS::EKS::AccessEntry",
        ):
            assert "DeletionPolicy" not in resource, resource["Type"]
        else:
            assert resource["DeletionPolicy"] == "Retain", resource["Type"]


def test_a_cluster_that_is_not_retained_changes_nothing_else():
    resources = template_of(eks_cluster()).to_json()["Resources"]
    (role,) = [r for r in resources.values() if r["Type"] == "AWS::IAM::Role"]
    assert "DeletionPolicy" not in role


def test_public_endpoint_is_restricted_to_listed_cidrs():
    template = template_of(eks_cluster(public_access_cidrs=["203.0.113.0/24"]))
    template.has_resource_properties(
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


def _admin_entry_ids(admin_role_arns: list[str]) -> dict[str, str]:
    """PrincipalArn -> logical ID of its access entry."""
    entries = resources_of(
        template_of(eks_cluster(admin_role_arns=admin_role_arns)), "AWS::EKS::AccessEntry"
    )
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


def test_admin_entry_ids_need_literal_arns():
    with pytest.raises(ValueError, match="literal ARNs"):
        admin_access_entry_id(f"arn:aws:iam::{cdk.Aws.ACCOUNT_ID}:role/Admin")


def test_control_plane_needs_two_availability_zones():
    stack = bare_stack()
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a"], nat_gateways=0)
    with pytest.raises(ValueError, match="at least two Availability Zones"):
        EksCluster(
            stack,
            "Cluster",
            cluster_name="c",
            kubernetes_version="1.35",
            vpc=vpc,
            control_plane_subnets=vpc.public_subnets,
            security_groups=[],
            admin_role_arns=[],
            public_access_cidrs=[],
            log_retention_days=30,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
