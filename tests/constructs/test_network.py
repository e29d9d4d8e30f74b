"""The cluster network construct on a bare stack, fed a capacity-plan layout: egress (closed,
or NAT only with deliberate HTTPS rules), NAT placement, construct IDs, independence from
the order of the AZ list."""

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
from tests.support import bare_stack, resources_of, template_of

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


def network_template(
    availability_zones: list[str], *, egress: str = "nat", nat_gateways: int = 1
) -> dict:
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
        egress=egress,
        nat_gateways=nat_gateways,
        interface_endpoints=["sts", "ecr.api"],
        https_egress_cidrs=[EGRESS] if egress == "nat" else [],
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


def test_every_function_logs_to_an_encrypted_group_expiring_with_the_flow_logs(ordered):
    # The AwsCustomResource handler (prefix-list lookup) and the provider behind
    # restrict_default_security_group: no group is left to Lambda's never-expiring default.
    groups = resources_of(ordered, "AWS::Logs::LogGroup")
    (key,) = resources_of(ordered, "AWS::KMS::Key")
    functions = resources_of(ordered, "AWS::Lambda::Function")
    assert len(functions) == 2
    used = {f["Properties"]["LoggingConfig"]["LogGroup"]["Ref"] for f in functions.values()}
    assert len(used) == 2 and used < set(groups)
    for logical in used:
        assert groups[logical]["Properties"]["RetentionInDays"] == 30
        assert groups[logical]["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}


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


# --------------------------------------------------------------------------- egress

AZS = ["us-west-2a", "us-west-2b"]
OPEN = "0.0.0.0/0"


@pytest.fixture(scope="module")
def closed() -> dict:
    return network_template(AZS, egress="closed", nat_gateways=0)


def _count(template: dict, type_: str) -> int:
    return len(resources_of(template, type_))


def _default_routes(template: dict) -> list[dict]:
    return [
        r["Properties"]
        for r in resources_of(template, "AWS::EC2::Route").values()
        if r["Properties"].get("DestinationCidrBlock") == OPEN
    ]


def _subnet_types(template: dict) -> dict[str, str]:
    """Subnet CIDR -> its aws-cdk:subnet-type tag (cluster subnets carry none)."""
    return {
        s["Properties"]["CidrBlock"]: next(
            (t["Value"] for t in s["Properties"]["Tags"] if t["Key"] == "aws-cdk:subnet-type"),
            "-",
        )
        for s in resources_of(template, "AWS::EC2::Subnet").values()
    }


def test_closed_network_has_no_internet_gateway_public_subnet_nat_or_default_route(closed):
    for type_ in (
        "AWS::EC2::InternetGateway",
        "AWS::EC2::VPCGatewayAttachment",
        "AWS::EC2::NatGateway",
        "AWS::EC2::EIP",
        "AWS::EC2::Route",
    ):
        assert _count(closed, type_) == 0, type_
    # Infra and cluster subnets only, both isolated; S3 still reaches every route table.
    assert _count(closed, "AWS::EC2::Subnet") == 2 * len(AZS)
    assert not any(
        s["Properties"]["MapPublicIpOnLaunch"]
        for s in resources_of(closed, "AWS::EC2::Subnet").values()
    )
    assert sorted(_subnet_types(closed).values()) == ["-", "-", "Isolated", "Isolated"]
    (gateway,) = [
        e["Properties"]
        for e in resources_of(closed, "AWS::EC2::VPCEndpoint").values()
        if e["Properties"].get("VpcEndpointType") == "Gateway"
    ]
    assert len(gateway["RouteTableIds"]) == _count(closed, "AWS::EC2::RouteTable") == 4


@pytest.mark.parametrize("count", [1, 2])
def test_nat_egress_creates_exactly_the_configured_nat_gateways(count):
    template = network_template(AZS, egress="nat", nat_gateways=count)
    assert _count(template, "AWS::EC2::NatGateway") == count
    assert _count(template, "AWS::EC2::EIP") == count
    assert _count(template, "AWS::EC2::InternetGateway") == 1
    assert _count(template, "AWS::EC2::Subnet") == 3 * len(AZS)


def test_only_cluster_subnets_route_to_nat_the_infra_subnets_stay_isolated(ordered):
    routes = _default_routes(ordered)
    nat_routes = [r for r in routes if "NatGatewayId" in r]
    internet_routes = [r for r in routes if "GatewayId" in r]
    # One per cluster subnet (none for infra), one per public subnet to the internet gateway.
    assert len(nat_routes) == len(AZS) and len(internet_routes) == len(AZS)
    types = _subnet_types(ordered)
    assert sorted(types.values()) == ["-", "-", "Isolated", "Isolated", "Public", "Public"]


def test_a_closed_network_refuses_nat_gateways_and_egress_cidrs():
    layout = plan_network(
        vpc_cidr=ipaddress.IPv4Network("10.0.0.0/20"),
        cluster_cidr=ipaddress.IPv4Network("10.1.0.0/16"),
        availability_zones=AZS,
        public_prefix=24,
        infra_prefix=24,
        cluster_prefix=None,
        groups=[plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2)],
    )
    for nat_gateways, cidrs in ((1, []), (0, [EGRESS])):
        with pytest.raises(ValueError, match="egress 'closed' takes no NAT gateways"):
            ClusterNetwork(
                bare_stack("Network"),
                "Network",
                layout=layout,
                egress="closed",
                nat_gateways=nat_gateways,
                interface_endpoints=["sts"],
                https_egress_cidrs=cidrs,
                flow_log_retention_days=30,
                removal_policy=cdk.RemovalPolicy.DESTROY,
            )


def test_flow_log_role_trusts_only_this_accounts_flow_logs(ordered):
    (log,) = resources_of(ordered, "AWS::EC2::FlowLog").values()
    role_id = log["Properties"]["DeliverLogsPermissionArn"]["Fn::GetAtt"][0]
    role = resources_of(ordered, "AWS::IAM::Role")[role_id]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "vpc-flow-logs.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": "111111111111"}
    (source,) = trust["Condition"]["ArnLike"].values()
    parts = source["Fn::Join"][1]
    assert parts[-1] == ":ec2:us-west-2:111111111111:vpc-flow-log/*"


def _endpoint_policy(template: dict, service: str) -> list[dict]:
    (endpoint,) = [
        r
        for r in resources_of(template, "AWS::EC2::VPCEndpoint").values()
        if _text(r["Properties"]["ServiceName"]).endswith(f".{service}")
    ]
    statements: list[dict] = endpoint["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _text(value: object) -> str:
    """A value written with Fn::Join (region, partition, URL suffix) as plain text."""
    if isinstance(value, dict) and "Fn::Join" in value:
        names = {"AWS::Region": "us-west-2", "AWS::Partition": "aws", "AWS::URLSuffix": "com"}
        return "".join(
            p if isinstance(p, str) else names.get(p.get("Ref", ""), "?")
            for p in value["Fn::Join"][1]
        )
    return str(value)


def test_other_interface_endpoints_keep_the_default_policy(ordered):
    (sts,) = [
        r
        for r in resources_of(ordered, "AWS::EC2::VPCEndpoint").values()
        if _text(r["Properties"]["ServiceName"]).endswith(".sts")
    ]
    assert "PolicyDocument" not in sts["Properties"]


def test_s3_gateway_reaches_this_accounts_buckets_and_named_aws_buckets_only(ordered):
    statements = {s["Sid"]: s for s in _endpoint_policy(ordered, "s3")}
    own = statements["ThisAccountsBuckets"]
    assert own["Condition"] == {"StringEquals": {"aws:ResourceAccount": "111111111111"}}
    assert own["Action"] == "s3:*"
    others = [s for sid, s in statements.items() if sid != "ThisAccountsBuckets"]
    for statement in others:
        assert statement["Action"] == "s3:GetObject"  # reads only outside the account
        resources = statement["Resource"]
        for resource in resources if isinstance(resources, list) else [resources]:
            assert _text(resource).startswith("arn:aws:s3:::") and _text(resource).endswith("/*")
    layers = _text(statements["EcrImageLayers"]["Resource"])
    assert layers == "arn:aws:s3:::prod-us-west-2-starport-layer-bucket/*"
    assert all(
        s["Effect"] == "Allow" and s["Principal"] == {"AWS": "*"} for s in statements.values()
    )


def test_ecr_endpoints_pull_anywhere_but_push_only_to_this_account(ordered):
    # ecr.dkr gets the same statements (the stacks' tests see both endpoints).
    pull, rest = _endpoint_policy(ordered, "ecr.api")
    assert sorted(pull["Action"]) == [
        "ecr:BatchCheckLayerAvailability",
        "ecr:BatchGetImage",
        "ecr:GetAuthorizationToken",
        "ecr:GetDownloadUrlForLayer",
    ]
    assert "Condition" not in pull
    assert rest["Action"] == "ecr:*"
    assert rest["Condition"] == {"StringEquals": {"aws:ResourceAccount": "111111111111"}}
