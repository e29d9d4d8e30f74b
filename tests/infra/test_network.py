"""Network stack: subnets exactly as planned, NAT, the EFA security group (no blanket
egress), endpoints, flow logs, pinned logical IDs, and the network config rules.

Templates come from the session fixtures (dev, staging, prod); nothing is synthesized here.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from pathlib import Path

import pytest
import yaml
from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Match, Template

from config.loader import CONFIG_DIR, ConfigError, parse_config
from config.schema import REQUIRED_ENDPOINTS, NetworkConfig
from platform_constructs.network import nat_availability_zones
from tests.conftest import ENVIRONMENTS, SynthResult

REPO = Path(__file__).resolve().parents[2]
OPEN_IPV4 = "0.0.0.0/0"
OPEN_IPV6 = "::/0"

# Logical IDs of the VPC, its secondary CIDR association, the internet gateway and every
# subnet (keyed by AZ name, never by list position). Changing one replaces the resource (a
# subnet cannot be replaced while anything uses it, and its replacement would collide with
# its own CIDR): update this list only together with a migration plan.
_US_WEST_2 = {
    "public:us-west-2a": "NetworkPublicSubnetuswest2aSubnet72400BCD",
    "public:us-west-2b": "NetworkPublicSubnetuswest2bSubnet4485427F",
    "public:us-west-2c": "NetworkPublicSubnetuswest2cSubnetED3A6579",
    "infra:us-west-2a": "NetworkInfraSubnetuswest2aSubnet0A4D2901",
    "infra:us-west-2b": "NetworkInfraSubnetuswest2bSubnetBBDD9A47",
    "infra:us-west-2c": "NetworkInfraSubnetuswest2cSubnetCF8BBABD",
    "cluster:us-west-2a": "NetworkClusterSubnetuswest2aSubnetBC1A81A2",
    "cluster:us-west-2b": "NetworkClusterSubnetuswest2bSubnetDB2532D6",
    "cluster:us-west-2c": "NetworkClusterSubnetuswest2cSubnet3DE2424D",
}
_COMMON = {"vpc": "NetworkVpc7FB7348F", "igw": "NetworkVpcIGW6BEA7B02"}
PINNED_LOGICAL_IDS: dict[str, dict[str, str]] = {
    "dev": _COMMON | {k: v for k, v in _US_WEST_2.items() if not k.endswith("2c")},
    "staging": _COMMON | {"secondary-cidr": "NetworkClusterCidr94778D2C"} | _US_WEST_2,
    "prod": _COMMON
    | {
        "secondary-cidr": "NetworkClusterCidr94778D2C",
        "public:us-east-1a": "NetworkPublicSubnetuseast1aSubnet7D6ED900",
        "public:us-east-1b": "NetworkPublicSubnetuseast1bSubnet88E237C2",
        "public:us-east-1c": "NetworkPublicSubnetuseast1cSubnet527AC3FD",
        "infra:us-east-1a": "NetworkInfraSubnetuseast1aSubnetCDC8D1A0",
        "infra:us-east-1b": "NetworkInfraSubnetuseast1bSubnetCA25B456",
        "infra:us-east-1c": "NetworkInfraSubnetuseast1cSubnet56631B8F",
        "cluster:us-east-1a": "NetworkClusterSubnetuseast1aSubnetBC60B358",
        "cluster:us-east-1b": "NetworkClusterSubnetuseast1bSubnet2ABC252B",
        "cluster:us-east-1c": "NetworkClusterSubnetuseast1cSubnet2C5E9783",
    },
}
NAT_GATEWAYS = {"dev": 1, "staging": 2, "prod": 3}
FLOW_LOG_RETENTION = {"dev": 30, "staging": 90, "prod": 365}
RETAINED = {"dev": False, "staging": True, "prod": True}


@pytest.fixture(params=ENVIRONMENTS)
def env(request) -> SynthResult:
    return request.getfixturevalue(request.param)


def network(result: SynthResult) -> Template:
    return result.template("network")


def raw(result: SynthResult) -> dict:
    return result.templates["network"]


def resources(result: SynthResult, type_: str) -> dict[str, dict]:
    return {k: v for k, v in raw(result)["Resources"].items() if v["Type"] == type_}


def logical_id(result: SynthResult, construct) -> str:
    stack = result.stacks["network"]
    return stack.get_logical_id(construct.node.default_child)


def layout(result: SynthResult):
    return result.platform.network.network.layout


def config(result: SynthResult):
    from config.loader import load_environment

    return load_environment(result.env_name).config


def efa_group_id(result: SynthResult) -> str:
    return logical_id(result, result.stacks["network"].efa_security_group)


def endpoint_group_id(result: SynthResult) -> str:
    return logical_id(result, result.stacks["network"].endpoint_security_group)


def group_ref(logical: str) -> dict:
    return {"Fn::GetAtt": [logical, "GroupId"]}


def egress_rules(result: SynthResult, group: str) -> list[dict]:
    """Every egress rule of `group`: inline in the group and separate resources."""
    inline = raw(result)["Resources"][group]["Properties"].get("SecurityGroupEgress", [])
    separate = [
        r["Properties"]
        for r in resources(result, "AWS::EC2::SecurityGroupEgress").values()
        if r["Properties"]["GroupId"] == group_ref(group)
    ]
    return [*inline, *separate]


def ingress_rules(result: SynthResult, group: str) -> list[dict]:
    inline = raw(result)["Resources"][group]["Properties"].get("SecurityGroupIngress", [])
    separate = [
        r["Properties"]
        for r in resources(result, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == group_ref(group)
    ]
    return [*inline, *separate]


PEER_KEYS = (
    "CidrIp", "CidrIpv6", "DestinationSecurityGroupId", "SourceSecurityGroupId",
    "DestinationPrefixListId", "SourcePrefixListId",
)


def rule_key(rule: dict) -> tuple:
    """(protocol, from, to, peer) with the peer as a CIDR or the JSON of its reference."""
    (peer,) = [rule[k] for k in PEER_KEYS if k in rule]
    peer = peer if isinstance(peer, str) else json.dumps(peer)
    return (rule["IpProtocol"], rule.get("FromPort"), rule.get("ToPort"), peer)


# --------------------------------------------------------------------------- VPC and subnets


def test_vpc_uses_the_planned_primary_cidr(env):
    network(env).has_resource_properties(
        "AWS::EC2::VPC",
        {"CidrBlock": str(layout(env).vpc_cidr), "EnableDnsHostnames": True, "EnableDnsSupport": True},
    )
    network(env).resource_count_is("AWS::EC2::VPC", 1)


def test_public_subnets_are_the_planned_ones(env):
    stack = env.stacks["network"]
    public = stack.network.public_subnets
    assert sorted(public) == sorted(layout(env).public)
    for az, cidr in layout(env).public.items():
        subnet = raw(env)["Resources"][logical_id(env, public[az])]
        assert subnet["Properties"]["AvailabilityZone"] == az
        assert subnet["Properties"]["CidrBlock"] == str(cidr)
        assert subnet["Properties"]["MapPublicIpOnLaunch"] is True


def test_infra_subnets_are_the_planned_private_ones(env):
    infra = env.stacks["network"].infra_subnets
    assert sorted(infra) == sorted(layout(env).infra)
    for az, cidr in layout(env).infra.items():
        subnet = raw(env)["Resources"][logical_id(env, infra[az])]
        assert subnet["Properties"]["AvailabilityZone"] == az
        assert subnet["Properties"]["CidrBlock"] == str(cidr)
        assert subnet["Properties"]["MapPublicIpOnLaunch"] is False


@pytest.mark.parametrize("group,type_", [("public", "Public"), ("infra", "Private")])
def test_public_and_infra_subnets_carry_the_subnet_group_tags(env, group, type_):
    stack = env.stacks["network"]
    subnets = stack.network.public_subnets if group == "public" else stack.infra_subnets
    for az, subnet in subnets.items():
        props = raw(env)["Resources"][logical_id(env, subnet)]["Properties"]
        tags = {t["Key"]: t["Value"] for t in props["Tags"]}
        assert tags["aws-cdk:subnet-name"] == group, az
        assert tags["aws-cdk:subnet-type"] == type_, az
        assert tags["Name"] == subnet.node.path, az


def test_cluster_subnets_are_the_planned_ones(env):
    cluster = env.stacks["network"].cluster_subnets
    assert sorted(cluster) == sorted(layout(env).cluster)
    for az, plan in layout(env).cluster.items():
        network(env).has_resource_properties(
            "AWS::EC2::Subnet",
            {"AvailabilityZone": az, "CidrBlock": str(plan.cidr), "MapPublicIpOnLaunch": False},
        )
        subnet = raw(env)["Resources"][logical_id(env, cluster[az])]
        assert subnet["Properties"]["CidrBlock"] == str(plan.cidr)
        assert subnet["Properties"]["VpcId"] == {"Ref": PINNED_LOGICAL_IDS[env.env_name]["vpc"]}


def test_one_public_infra_and_cluster_subnet_per_az(env):
    azs = config(env).network.availability_zones
    network(env).resource_count_is("AWS::EC2::Subnet", 3 * len(azs))
    subnets = resources(env, "AWS::EC2::Subnet").values()
    for az in azs:
        assert sum(s["Properties"]["AvailabilityZone"] == az for s in subnets) == 3


def test_no_two_subnets_overlap(env):
    cidrs = [
        ipaddress.IPv4Network(s["Properties"]["CidrBlock"])
        for s in resources(env, "AWS::EC2::Subnet").values()
    ]
    for i, a in enumerate(cidrs):
        for b in cidrs[i + 1 :]:
            assert not a.overlaps(b), (a, b)


@pytest.mark.parametrize("name", ["staging", "prod"])
def test_secondary_cidr_is_associated_before_cluster_subnets(request, name):
    result: SynthResult = request.getfixturevalue(name)
    association = PINNED_LOGICAL_IDS[name]["secondary-cidr"]
    network(result).resource_count_is("AWS::EC2::VPCCidrBlock", 1)
    network(result).has_resource(
        "AWS::EC2::VPCCidrBlock",
        {
            "Properties": {
                "CidrBlock": str(layout(result).cluster_cidr),
                "VpcId": {"Ref": PINNED_LOGICAL_IDS[name]["vpc"]},
            }
        },
    )
    assert raw(result)["Resources"][association]["Type"] == "AWS::EC2::VPCCidrBlock"
    for az, subnet in result.stacks["network"].cluster_subnets.items():
        resource = raw(result)["Resources"][logical_id(result, subnet)]
        assert association in resource["DependsOn"], az
        assert ipaddress.IPv4Network(resource["Properties"]["CidrBlock"]).subnet_of(
            layout(result).cluster_cidr
        )


def test_dev_has_no_secondary_cidr_and_cluster_subnets_in_the_upper_half(dev):
    network(dev).resource_count_is("AWS::EC2::VPCCidrBlock", 0)
    vpc_cidr = layout(dev).vpc_cidr
    upper_half = list(vpc_cidr.subnets(prefixlen_diff=1))[1]
    for subnet in dev.stacks["network"].cluster_subnets.values():
        resource = raw(dev)["Resources"][logical_id(dev, subnet)]
        assert ipaddress.IPv4Network(resource["Properties"]["CidrBlock"]).subnet_of(upper_half)
        assert "DependsOn" not in resource


def test_public_and_infra_subnets_stay_in_the_primary_cidr(env):
    stack = env.stacks["network"]
    vpc_cidr = layout(env).vpc_cidr
    for subnet in [*stack.network.public_subnets.values(), *stack.infra_subnets.values()]:
        cidr = raw(env)["Resources"][logical_id(env, subnet)]["Properties"]["CidrBlock"]
        assert ipaddress.IPv4Network(cidr).subnet_of(vpc_cidr)


# --------------------------------------------------------------------------- NAT and routes


def test_nat_gateway_count_per_environment(env):
    expected = NAT_GATEWAYS[env.env_name]
    assert config(env).network.nat_gateways == expected
    network(env).resource_count_is("AWS::EC2::NatGateway", expected)
    network(env).resource_count_is("AWS::EC2::EIP", expected)
    network(env).resource_count_is("AWS::EC2::InternetGateway", 1)


def test_nat_gateways_sit_in_public_subnets_of_the_lowest_letter_azs(env):
    stack = env.stacks["network"]
    public_ids = {logical_id(env, s): az for az, s in stack.network.public_subnets.items()}
    azs = [public_ids[n["Properties"]["SubnetId"]["Ref"]] for n in resources(env, "AWS::EC2::NatGateway").values()]
    expected = sorted(config(env).network.availability_zones)[: NAT_GATEWAYS[env.env_name]]
    assert sorted(azs) == expected
    assert sorted(stack.network.nat_gateways) == expected
    for az, nat in stack.network.nat_gateways.items():
        resource = raw(env)["Resources"][stack.get_logical_id(nat)]
        # Created only once its subnet reaches the internet gateway.
        assert {_public_default_route(env, az), _association(env, stack.network.public_subnets[az])} <= set(
            resource["DependsOn"]
        )


def _public_default_route(result: SynthResult, az: str) -> str:
    subnet = result.stacks["network"].network.public_subnets[az]
    return result.stacks["network"].get_logical_id(subnet.node.find_child("DefaultRoute"))


def _association(result: SynthResult, subnet) -> str:
    return result.stacks["network"].get_logical_id(subnet.node.find_child("RouteTableAssociation"))


def _nat_az(result: SynthResult) -> dict[str, str]:
    """NAT gateway logical ID -> its AZ."""
    subnets = resources(result, "AWS::EC2::Subnet")
    return {
        nat_id: subnets[nat["Properties"]["SubnetId"]["Ref"]]["Properties"]["AvailabilityZone"]
        for nat_id, nat in resources(result, "AWS::EC2::NatGateway").items()
    }


def _default_routes(result: SynthResult, subnet) -> list[dict]:
    table = {"Ref": _route_table_logical_id(result, subnet)}
    return [
        r["Properties"]
        for r in resources(result, "AWS::EC2::Route").values()
        if r["Properties"]["RouteTableId"] == table and r["Properties"]["DestinationCidrBlock"] == OPEN_IPV4
    ]


@pytest.mark.parametrize("kind", ["infra", "cluster"])
def test_private_subnets_route_to_their_own_azs_nat_else_the_lowest_letter_azs(env, kind):
    nat_az = _nat_az(env)
    lowest = min(nat_az.values())
    assert lowest == min(config(env).network.availability_zones)
    stack = env.stacks["network"]
    subnets = stack.infra_subnets if kind == "infra" else stack.cluster_subnets
    for az, subnet in subnets.items():
        (route,) = _default_routes(env, subnet)
        expected_az = az if az in nat_az.values() else lowest
        assert nat_az[route["NatGatewayId"]["Ref"]] == expected_az, az


def test_public_subnets_route_to_the_internet_gateway(env):
    igw = PINNED_LOGICAL_IDS[env.env_name]["igw"]
    attachment = network(env).find_resources("AWS::EC2::VPCGatewayAttachment")
    assert [a["Properties"] for a in attachment.values()] == [
        {"InternetGatewayId": {"Ref": igw}, "VpcId": {"Ref": PINNED_LOGICAL_IDS[env.env_name]["vpc"]}}
    ]
    for az, subnet in env.stacks["network"].network.public_subnets.items():
        (route,) = _default_routes(env, subnet)
        assert route["GatewayId"] == {"Ref": igw}, az
        assert "NatGatewayId" not in route, az
        resource = raw(env)["Resources"][_public_default_route(env, az)]
        assert resource["DependsOn"] == list(attachment), az


def test_nat_placement_depends_on_az_letters_not_list_order():
    assert nat_availability_zones(["us-east-1c", "us-east-1a", "us-east-1b"], 2) == [
        "us-east-1a", "us-east-1b",
    ]
    # A higher-letter AZ added later takes no NAT gateway from the others.
    assert nat_availability_zones(["us-east-1c", "us-east-1d", "us-east-1a", "us-east-1b"], 3) == [
        "us-east-1a", "us-east-1b", "us-east-1c",
    ]
    for count in (0, 4):
        with pytest.raises(ValueError):
            nat_availability_zones(["us-east-1a", "us-east-1b", "us-east-1c"], count)


def _route_table_logical_id(result: SynthResult, subnet) -> str:
    table = subnet.node.find_child("RouteTable")
    return result.stacks["network"].get_logical_id(table)


def test_dev_sends_the_second_azs_cluster_traffic_through_the_only_nat(dev):
    nat_az = _nat_az(dev)
    assert list(nat_az.values()) == ["us-west-2a"]
    subnet = dev.stacks["network"].cluster_subnets["us-west-2b"]
    network(dev).has_resource_properties(
        "AWS::EC2::Route",
        {
            "RouteTableId": {"Ref": _route_table_logical_id(dev, subnet)},
            "DestinationCidrBlock": OPEN_IPV4,
            "NatGatewayId": {"Ref": next(iter(nat_az))},
        },
    )


def test_private_subnets_never_route_to_the_internet_gateway(env):
    stack = env.stacks["network"]
    private_tables = {
        _route_table_logical_id(env, s)
        for s in [*stack.cluster_subnets.values(), *stack.infra_subnets.values()]
    }
    for route in resources(env, "AWS::EC2::Route").values():
        if route["Properties"]["RouteTableId"]["Ref"] in private_tables:
            assert "GatewayId" not in route["Properties"]
            assert "NatGatewayId" in route["Properties"]


# --------------------------------------------------------------------------- security groups


def test_no_security_group_rule_anywhere_is_open_to_the_internet(env):
    for group in resources(env, "AWS::EC2::SecurityGroup").values():
        for rule in [
            *group["Properties"].get("SecurityGroupEgress", []),
            *group["Properties"].get("SecurityGroupIngress", []),
        ]:
            assert rule.get("CidrIp") != OPEN_IPV4 and rule.get("CidrIpv6") != OPEN_IPV6, rule
    for type_ in ("AWS::EC2::SecurityGroupEgress", "AWS::EC2::SecurityGroupIngress"):
        for rule in resources(env, type_).values():
            props = rule["Properties"]
            assert props.get("CidrIp") != OPEN_IPV4 and props.get("CidrIpv6") != OPEN_IPV6, props


def test_every_security_group_has_an_inline_egress_rule(env):
    # Without one, EC2 keeps its default allow-all egress rule: separate
    # AWS::EC2::SecurityGroupEgress resources do not remove it.
    for logical, group in resources(env, "AWS::EC2::SecurityGroup").items():
        assert group["Properties"].get("SecurityGroupEgress"), logical


def test_efa_group_allows_all_traffic_to_and_from_itself(env):
    efa = efa_group_id(env)
    self_ref = group_ref(efa)
    network(env).has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {"GroupId": self_ref, "SourceSecurityGroupId": self_ref, "IpProtocol": "-1"},
    )
    network(env).has_resource_properties(
        "AWS::EC2::SecurityGroupEgress",
        {"GroupId": self_ref, "DestinationSecurityGroupId": self_ref, "IpProtocol": "-1"},
    )


@pytest.mark.parametrize("from_port,to_port", [(988, 988), (1018, 1023)])
def test_efa_group_states_the_lustre_ports_within_the_group(env, from_port, to_port):
    self_ref = group_ref(efa_group_id(env))
    for type_, peer in (
        ("AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId"),
        ("AWS::EC2::SecurityGroupEgress", "DestinationSecurityGroupId"),
    ):
        network(env).has_resource_properties(
            type_,
            {"GroupId": self_ref, peer: self_ref, "IpProtocol": "tcp", "FromPort": from_port, "ToPort": to_port},
        )


def test_efa_group_egress_is_exactly_self_endpoints_and_s3(env):
    efa = efa_group_id(env)
    prefix_list = {"Fn::GetAtt": [_prefix_list_lookup(env), "PrefixLists.0.PrefixListId"]}
    expected = {
        ("-1", None, None, json.dumps(group_ref(efa))),
        ("tcp", 988, 988, json.dumps(group_ref(efa))),
        ("tcp", 1018, 1023, json.dumps(group_ref(efa))),
        ("tcp", 443, 443, json.dumps(group_ref(endpoint_group_id(env)))),
        ("tcp", 443, 443, json.dumps(prefix_list)),
    } | {("tcp", 443, 443, str(c)) for c in config(env).network.https_egress_cidrs}
    assert {rule_key(r) for r in egress_rules(env, efa)} == expected


def _prefix_list_lookup(result: SynthResult) -> str:
    """Logical ID of the deploy-time S3 prefix-list lookup."""
    (lookup,) = resources(result, "Custom::AWS")
    return lookup


def test_s3_egress_rule_is_inline_in_the_efa_group(env):
    efa = raw(env)["Resources"][efa_group_id(env)]
    network(env).has_resource_properties(
        "AWS::EC2::SecurityGroup",
        {
            "GroupDescription": efa["Properties"]["GroupDescription"],
            "SecurityGroupEgress": Match.array_with(
                [
                    Match.object_like(
                        {
                            "IpProtocol": "tcp",
                            "FromPort": 443,
                            "ToPort": 443,
                            "DestinationPrefixListId": {
                                "Fn::GetAtt": [_prefix_list_lookup(env), "PrefixLists.0.PrefixListId"]
                            },
                        }
                    )
                ]
            ),
        },
    )


def test_s3_prefix_list_is_read_at_deploy_time_for_the_stacks_region(env):
    region = env.stacks["network"].region
    (lookup,) = resources(env, "Custom::AWS").values()
    for event in ("Create", "Update"):
        call = json.dumps(lookup["Properties"][event])
        assert f"com.amazonaws.{region}.s3" in call
        assert "describeManagedPrefixLists" in call


def test_endpoint_group_admits_https_from_every_vpc_cidr_only(env):
    endpoint = endpoint_group_id(env)
    cidrs = [str(layout(env).vpc_cidr)] + (
        [str(layout(env).cluster_cidr)] if layout(env).cluster_cidr else []
    )
    assert {rule_key(r) for r in ingress_rules(env, endpoint)} == {
        ("tcp", 443, 443, cidr) for cidr in cidrs
    }
    # Endpoints never initiate connections: only CDK's match-nothing placeholder.
    assert egress_rules(env, endpoint) == [
        {
            "CidrIp": "255.255.255.255/32",
            "Description": "Disallow all traffic",
            "FromPort": 252,
            "IpProtocol": "icmp",
            "ToPort": 86,
        }
    ]


def test_default_security_group_is_stripped(env):
    network(env).has_resource_properties(
        "Custom::VpcRestrictDefaultSG",
        {"DefaultSecurityGroupId": {"Fn::GetAtt": [PINNED_LOGICAL_IDS[env.env_name]["vpc"], "DefaultSecurityGroup"]}},
    )


# --------------------------------------------------------------------------- endpoints


def test_s3_gateway_endpoint_serves_every_private_route_table(env):
    stack = env.stacks["network"]
    tables = [
        {"Ref": _route_table_logical_id(env, s)}
        for s in [*stack.cluster_subnets.values(), *stack.infra_subnets.values()]
    ]
    network(env).has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {
            "VpcEndpointType": "Gateway",
            "ServiceName": Match.any_value(),
            "RouteTableIds": Match.array_equals(tables),
        },
    )
    gateways = [
        e for e in resources(env, "AWS::EC2::VPCEndpoint").values()
        if e["Properties"].get("VpcEndpointType") == "Gateway"
    ]
    assert len(gateways) == 1
    assert ".s3" in json.dumps(gateways[0]["Properties"]["ServiceName"])


def test_interface_endpoints_have_private_dns_in_infra_subnets(env):
    stack = env.stacks["network"]
    region = stack.region
    azs = sorted(config(env).network.availability_zones)
    infra = [{"Ref": logical_id(env, stack.infra_subnets[az])} for az in azs]
    services = config(env).network.interface_endpoints
    assert services, "the default endpoint list is not empty"
    for service in services:
        network(env).has_resource_properties(
            "AWS::EC2::VPCEndpoint",
            {
                "ServiceName": f"com.amazonaws.{region}.{service}",
                "VpcEndpointType": "Interface",
                "PrivateDnsEnabled": True,
                "SubnetIds": Match.array_equals(infra),
                "SecurityGroupIds": [group_ref(endpoint_group_id(env))],
            },
        )
    network(env).resource_count_is("AWS::EC2::VPCEndpoint", len(services) + 1)


def test_nodes_have_the_endpoints_they_need_without_internet_egress(env):
    # Image pulls, IAM for pods, node registration, SSM sessions, and the Lambda API (the
    # kubectl handler in the infra subnets invokes functions).
    services = set(config(env).network.interface_endpoints)
    assert {
        "ecr.api", "ecr.dkr", "sts", "eks", "eks-auth", "ssm", "ssmmessages", "ec2messages", "lambda",
    } <= services
    assert set(REQUIRED_ENDPOINTS) <= services


def test_lambda_endpoint_is_a_default_and_a_required_endpoint(env):
    assert "lambda" in REQUIRED_ENDPOINTS
    assert "lambda" in NetworkConfig.model_fields["interface_endpoints"].default_factory()
    stack = env.stacks["network"]
    network(env).has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {
            "ServiceName": f"com.amazonaws.{stack.region}.lambda",
            "VpcEndpointType": "Interface",
            "PrivateDnsEnabled": True,
        },
    )


# --------------------------------------------------------------------------- flow logs


def test_flow_logs_capture_all_traffic_to_cloudwatch(env):
    network(env).resource_count_is("AWS::EC2::FlowLog", 1)
    network(env).has_resource_properties(
        "AWS::EC2::FlowLog",
        {
            "ResourceId": {"Ref": PINNED_LOGICAL_IDS[env.env_name]["vpc"]},
            "ResourceType": "VPC",
            "TrafficType": "ALL",
            "LogDestinationType": "cloud-watch-logs",
        },
    )


def test_flow_log_retention_per_environment(env):
    days = FLOW_LOG_RETENTION[env.env_name]
    assert config(env).network.flow_log_retention_days == days
    stack = env.stacks["network"]
    flow_group = stack.get_logical_id(stack.network.flow_log_group.node.default_child)
    assert raw(env)["Resources"][flow_group]["Properties"]["RetentionInDays"] == days
    for group in resources(env, "AWS::Logs::LogGroup").values():
        assert group["Properties"]["RetentionInDays"] == days


def test_log_groups_are_encrypted_with_the_rotating_log_key(env):
    stack = env.stacks["network"]
    key = stack.get_logical_id(stack.network.log_key.node.default_child)
    network(env).has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    for group in resources(env, "AWS::Logs::LogGroup").values():
        assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
    statements = raw(env)["Resources"][key]["Properties"]["KeyPolicy"]["Statement"]
    logs_statement = next(s for s in statements if s.get("Sid") == "AllowCloudWatchLogsForThisAccountsLogGroups")
    assert logs_statement["Principal"] == {"Service": f"logs.{stack.region}.amazonaws.com"}
    assert "kms:EncryptionContext:aws:logs:arn" in logs_statement["Condition"]["ArnLike"]


def test_log_groups_and_key_are_retained_where_the_environment_retains_state(env):
    policy = "Retain" if RETAINED[env.env_name] else "Delete"
    assert env.stacks["network"].removal_policy == (
        RemovalPolicy.RETAIN if RETAINED[env.env_name] else RemovalPolicy.DESTROY
    )
    for type_ in ("AWS::KMS::Key", "AWS::Logs::LogGroup"):
        for logical, resource in resources(env, type_).items():
            assert resource["DeletionPolicy"] == policy, logical
            assert resource["UpdateReplacePolicy"] == policy, logical


# --------------------------------------------------------------------------- identity


def test_stateful_logical_ids_are_pinned(env):
    stack = env.stacks["network"]
    pinned = PINNED_LOGICAL_IDS[env.env_name]
    actual = {"vpc": logical_id(env, stack.vpc), "igw": stack.get_logical_id(stack.network.internet_gateway)}
    for kind, subnets in (
        ("public", stack.network.public_subnets),
        ("infra", stack.infra_subnets),
        ("cluster", stack.cluster_subnets),
    ):
        actual |= {f"{kind}:{az}": logical_id(env, s) for az, s in subnets.items()}
    secondary = stack.network.secondary_cidr
    if secondary is not None:
        actual["secondary-cidr"] = stack.get_logical_id(secondary)
    assert actual == pinned
    for logical in pinned.values():
        assert logical in raw(env)["Resources"]
    assert {k for k in pinned.values() if raw(env)["Resources"][k]["Type"] == "AWS::EC2::Subnet"} == set(
        resources(env, "AWS::EC2::Subnet")
    )


def test_stack_interface_for_other_stacks(env):
    stack = env.stacks["network"]
    azs = sorted(config(env).network.availability_zones)
    assert sorted(stack.cluster_subnets) == azs
    assert sorted(stack.infra_subnets) == azs
    assert isinstance(stack.vpc, ec2.Vpc)
    assert isinstance(stack.efa_security_group, ec2.SecurityGroup)
    assert isinstance(stack.endpoint_security_group, ec2.SecurityGroup)
    assert all(isinstance(s, ec2.Subnet) for s in [*stack.cluster_subnets.values(), *stack.infra_subnets.values()])
    # The VPC owns no subnets: every subnet is reached by AZ through the attributes above.
    assert stack.vpc.public_subnets == stack.vpc.private_subnets == stack.vpc.isolated_subnets == []
    assert stack.availability_zones == config(env).network.availability_zones


def test_outputs_name_the_vpc_cluster_subnets_and_efa_group(env):
    outputs = raw(env)["Outputs"]
    assert outputs["VpcId"]["Value"] == {"Ref": PINNED_LOGICAL_IDS[env.env_name]["vpc"]}
    assert outputs["EfaSecurityGroupId"]["Value"] == group_ref(efa_group_id(env))
    for az in config(env).network.availability_zones:
        key = "ClusterSubnet" + az.replace("-", "")
        assert outputs[key]["Value"] == {"Ref": PINNED_LOGICAL_IDS[env.env_name][f"cluster:{az}"]}


def test_subnets_name_their_az_deliberately_for_cfn_lint(env):
    for logical, subnet in resources(env, "AWS::EC2::Subnet").items():
        assert subnet["Metadata"]["cfn-lint"]["config"]["ignore_checks"] == ["W3010"], logical


# --------------------------------------------------------------------------- offline synth


def test_cdk_context_lists_the_azs_of_every_environment():
    context = json.loads((REPO / "cdk.context.json").read_text())
    for name in ENVIRONMENTS:
        data = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())
        key = f"availability-zones:account={data['account']}:region={data['region']}"
        assert set(data["network"]["availability_zones"]) <= set(context[key]), name


def test_synth_needs_no_context_lookup(env):
    manifest = json.loads((env.outdir / "manifest.json").read_text())
    assert not manifest.get("missing"), manifest.get("missing")


# --------------------------------------------------------------------------- config rules


def _dev_data() -> dict:
    return yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())


def _error_lines(mutate) -> list[str]:
    data = copy.deepcopy(_dev_data())
    mutate(data)
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "test")
    return caught.value.lines


@pytest.mark.parametrize("name", ["com.amazonaws.us-west-2.sts", "ECR API", "ecr_api", "ecr."])
def test_rule_interface_endpoint_names_must_be_service_names(name):
    lines = _error_lines(lambda d: d["network"].__setitem__("interface_endpoints", [name]))
    assert len(lines) == 1
    assert lines[0].startswith("network.interface_endpoints: ")
    assert "not an endpoint service name" in lines[0]


def test_rule_s3_is_not_an_interface_endpoint():
    lines = _error_lines(lambda d: d["network"].__setitem__("interface_endpoints", ["sts", "s3"]))
    assert len(lines) == 1
    assert lines[0].startswith("network.interface_endpoints: ")
    assert "gateway endpoint" in lines[0]


def test_rule_interface_endpoints_listed_once():
    lines = _error_lines(lambda d: d["network"].__setitem__("interface_endpoints", ["sts", "ecr.api", "sts"]))
    assert lines == ["network.interface_endpoints: listed more than once: sts; list each endpoint once"]


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "0.0.0.0/1", "128.0.0.0/7"])
def test_rule_https_egress_cidrs_must_be_narrow(cidr):
    lines = _error_lines(lambda d: d["network"].__setitem__("https_egress_cidrs", [cidr]))
    assert len(lines) == 1
    assert lines[0].startswith("network.https_egress_cidrs: ")
    assert "not a narrow rule" in lines[0]


def test_rule_https_egress_cidrs_listed_once():
    lines = _error_lines(
        lambda d: d["network"].__setitem__("https_egress_cidrs", ["203.0.113.10/32", "203.0.113.10/32"])
    )
    assert lines == [
        "network.https_egress_cidrs: listed more than once: 203.0.113.10/32; list each CIDR once"
    ]


def test_narrow_https_egress_cidrs_are_accepted():
    data = copy.deepcopy(_dev_data())
    data["network"]["https_egress_cidrs"] = ["203.0.113.10/32", "10.0.0.0/8"]
    assert [str(c) for c in parse_config(data, "test").network.https_egress_cidrs] == [
        "203.0.113.10/32",
        "10.0.0.0/8",
    ]
