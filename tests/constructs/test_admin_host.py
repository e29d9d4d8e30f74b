"""The admin host on a bare stack: Session Manager only (no inbound rule, no key pair, no
public address), IMDSv2, an encrypted root volume, a least-privilege role, kubectl from the
kubectl handler's own layer bundle, and the cluster-side grant (API ingress and the access
entry for each `kubernetes_access` choice)."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3_assets as s3_assets

from config.kubernetes import ADMIN_HOST_ACCESS_POLICIES
from platform_constructs.admin_host import (
    SESSION_MANAGER_ACTIONS,
    AdminHost,
    kubectl_bundle,
)
from platform_constructs.eks_cluster import EksCluster
from platform_constructs.eks_kubectl import KubectlAccess
from tests.support import bare_stack, only, resources_of, security_group_rules, template_of

CLUSTER = "hyperpod-test-eks"
PREFIX_LIST = "pl-0123456789abcdef0"


def build(kubernetes_access: str = "view") -> tuple[cdk.Stack, AdminHost, EksCluster]:
    stack = bare_stack("AdminHost")
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        availability_zones=["us-west-2a", "us-west-2b"],
        nat_gateways=0,
        subnet_configuration=[
            ec2.SubnetConfiguration(name="infra", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
        ],
    )
    endpoints = ec2.SecurityGroup(stack, "Endpoints", vpc=vpc, allow_all_outbound=False)
    host = AdminHost(
        stack,
        "AdminHost",
        vpc=vpc,
        subnet=vpc.isolated_subnets[0],
        endpoint_security_group=endpoints,
        s3_prefix_list_id=PREFIX_LIST,
        cluster_name=CLUSTER,
        instance_type="t3.small",
        kubernetes_access=kubernetes_access,
    )
    cluster = EksCluster(
        stack,
        "Cluster",
        cluster_name=CLUSTER,
        kubernetes_version="1.35",
        vpc=vpc,
        control_plane_subnets=vpc.isolated_subnets,
        security_groups=[],
        admin_role_arns=[],
        public_access_cidrs=[],
        log_retention_days=30,
        removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    host.grant_cluster_access(cluster)
    return stack, host, cluster


@pytest.fixture(scope="module")
def built() -> tuple[cdk.Stack, AdminHost, EksCluster]:
    return build()


@pytest.fixture(scope="module")
def template(built) -> dict:
    return template_of(built[0]).to_json()


def logical(built, construct) -> str:
    stack = built[0]
    resource = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
    return stack.get_logical_id(resource)


def test_instance_is_session_manager_only_with_imdsv2_and_an_encrypted_root(built, template):
    instance = only(resources_of(template, "AWS::EC2::Instance"))["Properties"]
    assert "KeyName" not in instance
    assert instance["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "required",
    }
    (interface,) = instance["NetworkInterfaces"]
    assert interface["AssociatePublicIpAddress"] is False
    assert interface["GroupSet"] == [
        {"Fn::GetAtt": [logical(built, built[1].security_group), "GroupId"]}
    ]
    assert instance["BlockDeviceMappings"] == [
        {
            "DeviceName": "/dev/xvda",
            "Ebs": {
                "DeleteOnTermination": True,
                "Encrypted": True,
                "VolumeSize": 20,
                "VolumeType": "gp3",
            },
        }
    ]
    # The subnet fixes the AZ; no hard-coded AZ on the instance itself.
    assert "AvailabilityZone" not in instance
    assert instance["InstanceType"] == "t3.small"
    parameter = instance["ImageId"]["Ref"]
    assert template["Parameters"][parameter]["Default"].startswith(
        "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-"
    )
    assert template["Parameters"][parameter]["Default"].endswith("-x86_64")


def test_security_group_has_no_inbound_rule_and_https_egress_to_endpoints_s3_and_api(
    built, template
):
    _, host, cluster = built
    group = logical(built, host.security_group)
    assert security_group_rules(template, group, "Ingress") == []
    assert "SecurityGroupIngress" not in template["Resources"][group]["Properties"]
    egress = security_group_rules(template, group, "Egress")
    peers = sorted(
        json.dumps(
            r.get("DestinationPrefixListId") or r.get("DestinationSecurityGroupId"), sort_keys=True
        )
        for r in egress
    )
    assert all((r["IpProtocol"], r["FromPort"], r["ToPort"]) == ("tcp", 443, 443) for r in egress)
    endpoints = {"Fn::GetAtt": [logical(built, built[0].node.find_child("Endpoints")), "GroupId"]}
    control_plane = {
        "Fn::GetAtt": [logical(built, cluster.control_plane_security_group), "GroupId"]
    }
    assert peers == sorted(
        json.dumps(p, sort_keys=True) for p in (PREFIX_LIST, endpoints, control_plane)
    )
    # The S3 rule is inline: EC2's default allow-all egress never stays on the group.
    inline = template["Resources"][group]["Properties"]["SecurityGroupEgress"]
    assert [r.get("DestinationPrefixListId") for r in inline] == [PREFIX_LIST]


def test_the_control_plane_admits_https_from_the_admin_host(built, template):
    _, host, cluster = built
    ingress = security_group_rules(
        template, logical(built, cluster.control_plane_security_group), "Ingress"
    )
    assert {
        "Description": "Admin host to the Kubernetes API",
        "FromPort": 443,
        "GroupId": {
            "Fn::GetAtt": [logical(built, cluster.control_plane_security_group), "GroupId"]
        },
        "IpProtocol": "tcp",
        "SourceSecurityGroupId": {"Fn::GetAtt": [logical(built, host.security_group), "GroupId"]},
        "ToPort": 443,
    } in ingress


def role_statements(template: dict, built) -> list[dict]:
    role = template["Resources"][logical(built, built[1].role)]["Properties"]
    assert "ManagedPolicyArns" not in role
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"Service": "ec2.amazonaws.com"},
        }
    ]
    (policy,) = role["Policies"]
    statements: list[dict] = policy["PolicyDocument"]["Statement"]
    # No other policy is attached to the role.
    for other in resources_of(template, "AWS::IAM::Policy").values():
        assert {"Ref": logical(built, built[1].role)} not in other["Properties"].get("Roles", [])
    return statements


def test_role_has_the_minimal_session_manager_actions_the_bundle_and_describe_cluster(
    built, template
):
    host = built[1]
    statements = role_statements(template, built)
    assert statements[0] == {
        "Action": list(SESSION_MANAGER_ACTIONS),
        "Effect": "Allow",
        "Resource": "*",
    }
    bundle = built[0].resolve(host.tools.bucket.arn_for_objects(host.tools.s3_object_key))
    assert statements[1] == {"Action": "s3:GetObject", "Effect": "Allow", "Resource": bundle}
    assert "*" not in json.dumps(bundle)
    assert statements[2] == {
        "Action": "eks:DescribeCluster",
        "Effect": "Allow",
        "Resource": built[0].resolve(host.cluster_arn),
    }
    assert json.dumps(statements[2]["Resource"]).endswith(
        f':eks:us-west-2:111111111111:cluster/{CLUSTER}"]]}}'
    )
    assert len(statements) == 3


@pytest.mark.parametrize("access", sorted(ADMIN_HOST_ACCESS_POLICIES))
def test_access_entry_binds_the_chosen_policy_cluster_wide_or_none(access):
    stack, host, cluster = build(access)
    template = template_of(stack).to_json()
    entries = [
        e["Properties"]
        for e in resources_of(template, "AWS::EKS::AccessEntry").values()
        if e["Properties"]["PrincipalArn"] == {"Fn::GetAtt": [logical((stack,), host.role), "Arn"]}
    ]
    policy = ADMIN_HOST_ACCESS_POLICIES[access]
    statements = role_statements(template, (stack, host))
    if policy is None:
        # A relay only: no Kubernetes identity and nothing to describe.
        assert entries == []
        assert [s["Action"] for s in statements][-1] == "s3:GetObject"
        return
    (entry,) = entries
    assert entry["ClusterName"] == {"Ref": logical((stack,), cluster.resource)}
    assert entry["Type"] == "STANDARD"
    (binding,) = entry["AccessPolicies"]
    assert binding["AccessScope"] == {"Type": "cluster"}
    assert json.dumps(binding["PolicyArn"]).endswith(f'cluster-access-policy/{policy}"]]}}')


def test_kubectl_comes_from_the_kubectl_handlers_own_layer_bundle():
    # The same file asset (same hash, so the same S3 object) as the handler's layer.
    stack, host, cluster = build()
    vpc = stack.node.find_child("Vpc")
    KubectlAccess(
        stack,
        "Kubectl",
        cluster=cluster,
        kubernetes_version="1.35",
        vpc=vpc,
        subnets=vpc.isolated_subnets,
        endpoint_security_group=stack.node.find_child("Endpoints"),
        s3_prefix_list_id=PREFIX_LIST,
    )
    assets = {
        a.node.path: a.asset_hash for a in stack.node.find_all() if isinstance(a, s3_assets.Asset)
    }
    layer = only({p: h for p, h in assets.items() if p.endswith("KubectlLayer/Code")})
    assert host.tools.asset_hash == layer
    assert kubectl_bundle().path.is_file()


def test_user_data_installs_kubectl_from_the_bundle_and_sets_the_region(built, template):
    host = built[1]
    instance = only(resources_of(template, "AWS::EC2::Instance"))["Properties"]
    script = instance["UserData"]["Fn::Base64"]
    assert isinstance(script, str)  # account and Region are known: no tokens left
    key = built[0].resolve(host.tools.s3_object_key)
    assert key in script
    assert "aws s3 cp --only-show-errors --region us-west-2" in script
    assert 'install -m 0755 "$work/tools/kubectl/kubectl" /usr/local/bin/kubectl' in script
    assert "export AWS_REGION=us-west-2 AWS_DEFAULT_REGION=us-west-2" in script
    assert f"export EKS_CLUSTER_NAME={CLUSTER}" in script
    # Nothing from the internet.
    for source in ("http://", "https://", "curl", "dnf ", "pip install"):
        assert source not in script, source


def test_unknown_kubernetes_access_is_refused():
    with pytest.raises(ValueError, match="kubernetes_access 'edit'"):
        build("edit")
