"""The cluster network construct on a bare stack, fed a capacity-plan layout: NAT placement,
construct IDs, independence from the order of the AZ list, and deliberate egress."""

from __future__ import annotations

import ipaddress

import aws_cdk as cdk
import pytest

from config.capacity import plan_group, plan_network
from platform_constructs.network import (
    ClusterNetwork,
    endpoint_construct_id,
    nat_availability_zones,
)
from tests.support import bare_stack, template_of

EGRESS = ipaddress.IPv4Network("203.0.113.10/32")


def test_nat_placement_depends_on_az_letters_not_list_order():
    assert nat_availability_zones(["us-east-1c", "us-east-1a", "us-east-1b"], 2) == [
        "us-east-1a",
        "us-east-1b",
    ]
    # A higher-letter AZ added later takes no NAT gateway from the others.
    assert nat_availability_zones(["us-east-1c", "us-east-1d", "us-east-1a", "us-east-1b"], 3) == [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
    ]
    for count in (0, 4):
        with pytest.raises(ValueError):
            nat_availability_zones(["us-east-1a", "us-east-1b", "us-east-1c"], count)


def test_endpoint_construct_ids_follow_the_service_name():
    assert endpoint_construct_id("ecr.api") == "EcrApiEndpoint"
    assert endpoint_construct_id("eks-auth") == "EksAuthEndpoint"
    assert endpoint_construct_id("sts") == "StsEndpoint"


def network_template(availability_zones: list[str]) -> dict:
    layout = plan_network(
        vpc_cidr=ipaddress.IPv4Network("10.0.0.0/20"),
        cluster_cidr=ipaddress.IPv4Network("10.1.0.0/16"),
        availability_zones=availability_zones,
        public_prefix=24,
        infra_prefix=24,
        cluster_prefix=None,
        groups=[plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2)],
    )
    stack = bare_stack("Network")
    ClusterNetwork(
        stack,
        "Network",
        layout=layout,
        nat_gateways=1,
        interface_endpoints=["sts", "ecr.api"],
        https_egress_cidrs=[EGRESS],
        flow_log_retention_days=30,
        removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    return template_of(stack).to_json()


@pytest.fixture(scope="module")
def ordered() -> dict:
    return network_template(["us-west-2a", "us-west-2b"])


def test_the_order_of_the_az_list_changes_nothing(ordered):
    assert network_template(["us-west-2b", "us-west-2a"]) == ordered


def test_https_egress_cidr_becomes_one_narrow_inline_rule_on_the_efa_group(ordered):
    (efa,) = [
        r
        for r in ordered["Resources"].values()
        if r["Type"] == "AWS::EC2::SecurityGroup"
        and r["Properties"]["GroupDescription"].startswith("HyperPod nodes")
    ]
    inline = efa["Properties"]["SecurityGroupEgress"]
    assert {
        "CidrIp": str(EGRESS),
        "Description": f"Deliberate HTTPS egress to {EGRESS} (config)",
        "FromPort": 443,
        "IpProtocol": "tcp",
        "ToPort": 443,
    } in inline
    assert sorted(r.get("CidrIp", "prefix-list") for r in inline) == [str(EGRESS), "prefix-list"]


def test_cluster_subnets_wait_for_the_secondary_cidr(ordered):
    resources = ordered["Resources"]
    (association,) = [k for k, v in resources.items() if v["Type"] == "AWS::EC2::VPCCidrBlock"]
    cluster = [
        v
        for v in resources.values()
        if v["Type"] == "AWS::EC2::Subnet"
        and ipaddress.IPv4Network(v["Properties"]["CidrBlock"]).subnet_of(
            ipaddress.IPv4Network("10.1.0.0/16")
        )
    ]
    assert len(cluster) == 2
    assert all(association in subnet["DependsOn"] for subnet in cluster)
