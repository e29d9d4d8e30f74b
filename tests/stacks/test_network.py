"""Network stack of every environment: subnets exactly as planned, egress (every environment
is a closed network: no internet gateway, NAT or default route; NAT placement and routes are
checked on each environment switched to `egress: nat`), the EFA security group (no blanket
egress), endpoints and flow logs. Templates come from the session fixtures (dev, staging,
prod); pinned logical IDs are in tests/stability/."""

from __future__ import annotations

import ipaddress
import json

import aws_cdk as cdk
import pytest
from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Match, Template

from config.schema import REQUIRED_ENDPOINTS, NetworkConfig
from config.schema.network import ADMIN_HOST_OUTPUT
from platform_constructs.admin_host import AdminHost
from platform_constructs.retention import stateful_removal_policy
from tests.support import (
    SYNTH_GROUP,
    SynthResult,
    cluster_network,
    security_group_rules,
    variant_of,
)

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)

OPEN_IPV4 = "0.0.0.0/0"
OPEN_IPV6 = "::/0"
# NAT gateways of each environment switched to `egress: nat` (the network stack alone).
NAT_GATEWAYS = {"dev": 1, "staging": 2, "prod": 3}
EGRESS_CIDR = "203.0.113.10/32"
FLOW_LOG_RETENTION = {"dev": 30, "staging": 90, "prod": 365}
RETAINED = {"dev": False, "staging": True, "prod": True}
PEER_KEYS = (
    "CidrIp", "CidrIpv6", "DestinationSecurityGroupId", "SourceSecurityGroupId",
    "DestinationPrefixListId", "SourcePrefixListId",
)  # fmt: skip


def network(result: SynthResult) -> Template:
    return result.template("network")


def raw(result: SynthResult) -> dict:
    return result.templates["network"]


def resources(result: SynthResult, type_: str) -> dict[str, dict]:
    return result.resources("network", type_)


def logical_id(result: SynthResult, construct) -> str:
    return result.logical_id("network", construct)


def vpc_id(result: SynthResult) -> str:
    return logical_id(result, result.stacks["network"].vpc)


def efa_group_id(result: SynthResult) -> str:
    return logical_id(result, result.stacks["network"].efa_security_group)


def endpoint_group_id(result: SynthResult) -> str:
    return logical_id(result, result.stacks["network"].endpoint_security_group)


def group_ref(logical: str) -> dict:
    return {"Fn::GetAtt": [logical, "GroupId"]}


def egress_rules(result: SynthResult, group: str) -> list[dict]:
    return security_group_rules(raw(result), group, "Egress")


def ingress_rules(result: SynthResult, group: str) -> list[dict]:
    return security_group_rules(raw(result), group, "Ingress")


def rule_key(rule: dict) -> tuple:
    """(protocol, from, to, peer) with the peer as a CIDR or the JSON of its reference."""
    (peer,) = [rule[k] for k in PEER_KEYS if k in rule]
    peer = peer if isinstance(peer, str) else json.dumps(peer)
    return (rule["IpProtocol"], rule.get("FromPort"), rule.get("ToPort"), peer)


# --------------------------------------------------------------------------- VPC and subnets


def test_vpc_uses_the_planned_primary_cidr(env):
    network(env).has_resource_properties(
        "AWS::EC2::VPC",
        {
            "CidrBlock": str(env.layout.vpc_cidr),
            "EnableDnsHostnames": True,
            "EnableDnsSupport": True,
        },
    )
    network(env).resource_count_is("AWS::EC2::VPC", 1)


def test_a_closed_network_has_no_public_subnet_but_keeps_their_planned_ranges(env):
    assert env.config.network.egress == "closed"
    assert cluster_network(env).public_subnets == {}
    # Reserved: switching to egress: nat adds them without moving any other subnet.
    assert sorted(env.layout.public) == sorted(env.config.network.availability_zones)


def test_public_subnets_are_the_planned_ones(nat_env):
    env = nat_env
    public = cluster_network(env).public_subnets
    assert sorted(public) == sorted(env.layout.public)
    for az, cidr in env.layout.public.items():
        subnet = raw(env)["Resources"][logical_id(env, public[az])]
        assert subnet["Properties"]["AvailabilityZone"] == az
        assert subnet["Properties"]["CidrBlock"] == str(cidr)
        assert subnet["Properties"]["MapPublicIpOnLaunch"] is True


def test_infra_subnets_are_the_planned_private_ones(env):
    infra = env.stacks["network"].infra_subnets
    assert sorted(infra) == sorted(env.layout.infra)
    for az, cidr in env.layout.infra.items():
        subnet = raw(env)["Resources"][logical_id(env, infra[az])]
        assert subnet["Properties"]["AvailabilityZone"] == az
        assert subnet["Properties"]["CidrBlock"] == str(cidr)
        assert subnet["Properties"]["MapPublicIpOnLaunch"] is False


def _assert_subnet_group_tags(env: SynthResult, group: str, type_: str) -> None:
    subnets = (
        cluster_network(env).public_subnets
        if group == "public"
        else env.stacks["network"].infra_subnets
    )
    assert subnets
    for az, subnet in subnets.items():
        props = raw(env)["Resources"][logical_id(env, subnet)]["Properties"]
        tags = {t["Key"]: t["Value"] for t in props["Tags"]}
        assert tags["aws-cdk:subnet-name"] == group, az
        assert tags["aws-cdk:subnet-type"] == type_, az
        assert tags["Name"] == subnet.node.path, az


def test_infra_subnets_carry_the_subnet_group_tags_as_isolated(env):
    _assert_subnet_group_tags(env, "infra", "Isolated")


@pytest.mark.parametrize(("group", "type_"), [("public", "Public"), ("infra", "Isolated")])
def test_with_nat_public_and_infra_subnets_carry_the_subnet_group_tags(nat_env, group, type_):
    _assert_subnet_group_tags(nat_env, group, type_)


def test_cluster_subnets_are_the_planned_ones(env):
    cluster = env.stacks["network"].cluster_subnets
    assert sorted(cluster) == sorted(env.layout.cluster)
    for az, plan in env.layout.cluster.items():
        network(env).has_resource_properties(
            "AWS::EC2::Subnet",
            {"AvailabilityZone": az, "CidrBlock": str(plan.cidr), "MapPublicIpOnLaunch": False},
        )
        subnet = raw(env)["Resources"][logical_id(env, cluster[az])]
        assert subnet["Properties"]["CidrBlock"] == str(plan.cidr)
        assert subnet["Properties"]["VpcId"] == {"Ref": vpc_id(env)}


def _assert_subnets_per_az(env: SynthResult, per_az: int) -> None:
    azs = env.config.network.availability_zones
    network(env).resource_count_is("AWS::EC2::Subnet", per_az * len(azs))
    subnets = resources(env, "AWS::EC2::Subnet").values()
    for az in azs:
        assert sum(s["Properties"]["AvailabilityZone"] == az for s in subnets) == per_az


def test_one_infra_and_cluster_subnet_per_az(env):
    _assert_subnets_per_az(env, 2)


def test_with_nat_one_public_infra_and_cluster_subnet_per_az(nat_env):
    _assert_subnets_per_az(nat_env, 3)


def test_no_two_subnets_overlap(env):
    cidrs = [
        ipaddress.IPv4Network(s["Properties"]["CidrBlock"])
        for s in resources(env, "AWS::EC2::Subnet").values()
    ]
    for i, a in enumerate(cidrs):
        for b in cidrs[i + 1 :]:
            assert not a.overlaps(b), (a, b)


@pytest.mark.parametrize("name", ["staging", "prod"])
def test_secondary_cidr_is_associated_before_cluster_subnets(synth_all, name):
    result = synth_all[name]
    secondary = cluster_network(result).secondary_cidr
    assert secondary is not None
    association = result.logical_id("network", secondary)
    network(result).resource_count_is("AWS::EC2::VPCCidrBlock", 1)
    network(result).has_resource(
        "AWS::EC2::VPCCidrBlock",
        {
            "Properties": {
                "CidrBlock": str(result.layout.cluster_cidr),
                "VpcId": {"Ref": vpc_id(result)},
            }
        },
    )
    assert raw(result)["Resources"][association]["Type"] == "AWS::EC2::VPCCidrBlock"
    for az, subnet in result.stacks["network"].cluster_subnets.items():
        resource = raw(result)["Resources"][logical_id(result, subnet)]
        assert association in resource["DependsOn"], az
        assert ipaddress.IPv4Network(resource["Properties"]["CidrBlock"]).subnet_of(
            result.layout.cluster_cidr
        )


def test_dev_has_no_secondary_cidr_and_cluster_subnets_in_the_upper_half(dev):
    network(dev).resource_count_is("AWS::EC2::VPCCidrBlock", 0)
    upper_half = list(dev.layout.vpc_cidr.subnets(prefixlen_diff=1))[1]
    for subnet in dev.stacks["network"].cluster_subnets.values():
        resource = raw(dev)["Resources"][logical_id(dev, subnet)]
        assert ipaddress.IPv4Network(resource["Properties"]["CidrBlock"]).subnet_of(upper_half)
        assert "DependsOn" not in resource


def test_public_and_infra_subnets_stay_in_the_primary_cidr(nat_env):
    env = nat_env
    subnets = [
        *cluster_network(env).public_subnets.values(),
        *env.stacks["network"].infra_subnets.values(),
    ]
    for subnet in subnets:
        cidr = raw(env)["Resources"][logical_id(env, subnet)]["Properties"]["CidrBlock"]
        assert ipaddress.IPv4Network(cidr).subnet_of(env.layout.vpc_cidr)


# --------------------------------------------------------------------------- egress


@pytest.fixture(scope="module", params=sorted(NAT_GATEWAYS))
def nat_env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The environment's network stack alone, switched to egress: nat with one deliberate
    HTTPS egress CIDR and NAT_GATEWAYS[name] NAT gateways."""
    from stacks.network_stack import NetworkStack

    name = request.param
    loaded = variant_of(
        name,
        lambda d: d["network"].update(
            egress="nat", nat_gateways=NAT_GATEWAYS[name], https_egress_cidrs=[EGRESS_CIDR]
        ),
    )
    config = loaded.config
    outdir = tmp_path_factory.mktemp(f"cdk-nat-{name}")
    app = cdk.App(outdir=str(outdir))
    stack = NetworkStack(
        app,
        "nat-network",
        env=cdk.Environment(account=config.account, region=config.region),
        network=config.network,
        layout=loaded.layout,
        cluster_name=config.names.eks_cluster,
        removal_policy=RemovalPolicy.DESTROY,
    )
    template = Template.from_stack(stack).to_json()
    return SynthResult(
        env_name=name,
        loaded=loaded,
        outdir=outdir,
        platform=None,  # type: ignore[arg-type]
        stacks={"network": stack},
        templates={"network": template},
    )


def test_closed_network_has_no_internet_gateway_nat_or_elastic_ip(env):
    for type_ in (
        "AWS::EC2::InternetGateway",
        "AWS::EC2::VPCGatewayAttachment",
        "AWS::EC2::NatGateway",
        "AWS::EC2::EIP",
    ):
        network(env).resource_count_is(type_, 0)
    assert cluster_network(env).internet_gateway is None
    assert cluster_network(env).nat_gateways == {}
    # The observability stack's NAT alarms get nothing to watch.
    assert env.stacks["network"].nat_gateway_ids == {}


def test_closed_network_routes_nothing_out_of_the_vpc(env):
    # Local routes are implicit; S3 is reached through the gateway endpoint's prefix list.
    network(env).resource_count_is("AWS::EC2::Route", 0)


def test_nat_gateway_count_per_egress_choice(nat_env):
    env = nat_env
    expected = NAT_GATEWAYS[env.env_name]
    assert env.config.network.nat_gateways == expected
    network(env).resource_count_is("AWS::EC2::NatGateway", expected)
    network(env).resource_count_is("AWS::EC2::EIP", expected)
    network(env).resource_count_is("AWS::EC2::InternetGateway", 1)
    assert sorted(env.stacks["network"].nat_gateway_ids) == sorted(
        cluster_network(env).nat_gateways
    )


def test_nat_gateways_sit_in_public_subnets_of_the_lowest_letter_azs(nat_env):
    env = nat_env
    construct = cluster_network(env)
    public_ids = {logical_id(env, s): az for az, s in construct.public_subnets.items()}
    azs = [
        public_ids[n["Properties"]["SubnetId"]["Ref"]]
        for n in resources(env, "AWS::EC2::NatGateway").values()
    ]
    expected = sorted(env.config.network.availability_zones)[: NAT_GATEWAYS[env.env_name]]
    assert sorted(azs) == expected
    assert sorted(construct.nat_gateways) == expected
    for az, nat in construct.nat_gateways.items():
        resource = raw(env)["Resources"][logical_id(env, nat)]
        # Created only once its subnet reaches the internet gateway.
        subnet = construct.public_subnets[az]
        assert {_public_default_route(env, az), _association(env, subnet)} <= set(
            resource["DependsOn"]
        )


def _public_default_route(result: SynthResult, az: str) -> str:
    subnet = cluster_network(result).public_subnets[az]
    return logical_id(result, subnet.node.find_child("DefaultRoute"))


def _association(result: SynthResult, subnet) -> str:
    return logical_id(result, subnet.node.find_child("RouteTableAssociation"))


def _route_table_logical_id(result: SynthResult, subnet) -> str:
    return logical_id(result, subnet.node.find_child("RouteTable"))


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
        if r["Properties"]["RouteTableId"] == table
        and r["Properties"]["DestinationCidrBlock"] == OPEN_IPV4
    ]


def test_cluster_subnets_route_to_their_own_azs_nat_else_the_lowest_letter_azs(nat_env):
    env = nat_env
    nat_az = _nat_az(env)
    lowest = min(nat_az.values())
    assert lowest == min(env.config.network.availability_zones)
    for az, subnet in env.stacks["network"].cluster_subnets.items():
        (route,) = _default_routes(env, subnet)
        expected_az = az if az in nat_az.values() else lowest
        assert nat_az[route["NatGatewayId"]["Ref"]] == expected_az, az


def test_infra_subnets_never_route_out_of_the_vpc_even_with_nat(nat_env):
    # Nothing there (control-plane ENIs, endpoints, the kubectl handler, the admin host) has
    # a security group rule beyond the VPC: a NAT route would carry nothing.
    for az, subnet in nat_env.stacks["network"].infra_subnets.items():
        assert _default_routes(nat_env, subnet) == [], az


def test_public_subnets_route_to_the_internet_gateway(nat_env):
    env = nat_env
    igw = logical_id(env, cluster_network(env).internet_gateway)
    attachment = network(env).find_resources("AWS::EC2::VPCGatewayAttachment")
    assert [a["Properties"] for a in attachment.values()] == [
        {"InternetGatewayId": {"Ref": igw}, "VpcId": {"Ref": vpc_id(env)}}
    ]
    for az, subnet in cluster_network(env).public_subnets.items():
        (route,) = _default_routes(env, subnet)
        assert route["GatewayId"] == {"Ref": igw}, az
        assert "NatGatewayId" not in route, az
        resource = raw(env)["Resources"][_public_default_route(env, az)]
        assert resource["DependsOn"] == list(attachment), az


@pytest.mark.parametrize("nat_env", ["dev"], indirect=True)
def test_dev_sends_the_second_azs_cluster_traffic_through_the_only_nat(nat_env):
    dev = nat_env
    nat_az = _nat_az(dev)
    assert list(nat_az.values()) == ["us-east-1a"]
    subnet = dev.stacks["network"].cluster_subnets["us-east-1b"]
    network(dev).has_resource_properties(
        "AWS::EC2::Route",
        {
            "RouteTableId": {"Ref": _route_table_logical_id(dev, subnet)},
            "DestinationCidrBlock": OPEN_IPV4,
            "NatGatewayId": {"Ref": next(iter(nat_az))},
        },
    )


def test_private_subnets_never_route_to_the_internet_gateway(nat_env):
    env = nat_env
    stack = env.stacks["network"]
    private_tables = {
        _route_table_logical_id(env, s)
        for s in [*stack.cluster_subnets.values(), *stack.infra_subnets.values()]
    }
    for route in resources(env, "AWS::EC2::Route").values():
        if route["Properties"]["RouteTableId"]["Ref"] in private_tables:
            assert "GatewayId" not in route["Properties"]
            assert "NatGatewayId" in route["Properties"]


def test_with_nat_the_efa_group_adds_exactly_the_listed_https_egress(nat_env):
    efa = efa_group_id(nat_env)
    cidrs = [r["CidrIp"] for r in egress_rules(nat_env, efa) if "CidrIp" in r]
    assert cidrs == [EGRESS_CIDR]


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
    self_ref = group_ref(efa_group_id(env))
    network(env).has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {"GroupId": self_ref, "SourceSecurityGroupId": self_ref, "IpProtocol": "-1"},
    )
    network(env).has_resource_properties(
        "AWS::EC2::SecurityGroupEgress",
        {"GroupId": self_ref, "DestinationSecurityGroupId": self_ref, "IpProtocol": "-1"},
    )


@pytest.mark.parametrize(("from_port", "to_port"), [(988, 988), (1018, 1023)])
def test_efa_group_states_the_lustre_ports_within_the_group(env, from_port, to_port):
    self_ref = group_ref(efa_group_id(env))
    for type_, peer in (
        ("AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId"),
        ("AWS::EC2::SecurityGroupEgress", "DestinationSecurityGroupId"),
    ):
        network(env).has_resource_properties(
            type_,
            {
                "GroupId": self_ref,
                peer: self_ref,
                "IpProtocol": "tcp",
                "FromPort": from_port,
                "ToPort": to_port,
            },
        )


def _prefix_list_lookup(result: SynthResult) -> str:
    """Logical ID of the deploy-time S3 prefix-list lookup."""
    (lookup,) = resources(result, "Custom::AWS")
    return lookup


def test_efa_group_egress_is_exactly_self_endpoints_and_s3(env):
    efa = efa_group_id(env)
    prefix_list = {"Fn::GetAtt": [_prefix_list_lookup(env), "PrefixLists.0.PrefixListId"]}
    expected = {
        ("-1", None, None, json.dumps(group_ref(efa))),
        ("tcp", 988, 988, json.dumps(group_ref(efa))),
        ("tcp", 1018, 1023, json.dumps(group_ref(efa))),
        ("tcp", 443, 443, json.dumps(group_ref(endpoint_group_id(env)))),
        ("tcp", 443, 443, json.dumps(prefix_list)),
    } | {("tcp", 443, 443, str(c)) for c in env.config.network.https_egress_cidrs}
    assert {rule_key(r) for r in egress_rules(env, efa)} == expected


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
                                "Fn::GetAtt": [
                                    _prefix_list_lookup(env),
                                    "PrefixLists.0.PrefixListId",
                                ]
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
    assert env.resolved("network", env.stacks["network"].s3_prefix_list_id) == {
        "Fn::GetAtt": [_prefix_list_lookup(env), "PrefixLists.0.PrefixListId"]
    }


def test_endpoint_group_admits_https_from_every_vpc_cidr_only(env):
    endpoint = endpoint_group_id(env)
    layout = env.layout
    cidrs = [str(layout.vpc_cidr)] + ([str(layout.cluster_cidr)] if layout.cluster_cidr else [])
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
        {"DefaultSecurityGroupId": {"Fn::GetAtt": [vpc_id(env), "DefaultSecurityGroup"]}},
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
        e
        for e in resources(env, "AWS::EC2::VPCEndpoint").values()
        if e["Properties"].get("VpcEndpointType") == "Gateway"
    ]
    assert len(gateways) == 1
    assert ".s3" in json.dumps(gateways[0]["Properties"]["ServiceName"])


def test_interface_endpoints_have_private_dns_in_infra_subnets(env):
    stack = env.stacks["network"]
    azs = sorted(env.config.network.availability_zones)
    infra = [{"Ref": logical_id(env, stack.infra_subnets[az])} for az in azs]
    services = env.config.network.interface_endpoints
    assert services, "the default endpoint list is not empty"
    for service in services:
        network(env).has_resource_properties(
            "AWS::EC2::VPCEndpoint",
            {
                "ServiceName": f"com.amazonaws.{stack.region}.{service}",
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
    services = set(env.config.network.interface_endpoints)
    assert {
        "ecr.api", "ecr.dkr", "sts", "eks", "eks-auth", "ssm", "ssmmessages", "ec2messages",
        "lambda",
    } <= services  # fmt: skip
    assert set(REQUIRED_ENDPOINTS) <= services


def test_lambda_endpoint_is_a_default_and_a_required_endpoint(env):
    assert "lambda" in REQUIRED_ENDPOINTS
    assert "lambda" in NetworkConfig.model_fields["interface_endpoints"].default_factory()
    network(env).has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {
            "ServiceName": f"com.amazonaws.{env.stacks['network'].region}.lambda",
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
            "ResourceId": {"Ref": vpc_id(env)},
            "ResourceType": "VPC",
            "TrafficType": "ALL",
            "LogDestinationType": "cloud-watch-logs",
        },
    )


def test_flow_log_retention_per_environment(env):
    days = FLOW_LOG_RETENTION[env.env_name]
    assert env.config.network.flow_log_retention_days == days
    flow_group = logical_id(env, cluster_network(env).flow_log_group)
    assert raw(env)["Resources"][flow_group]["Properties"]["RetentionInDays"] == days
    for group in resources(env, "AWS::Logs::LogGroup").values():
        assert group["Properties"]["RetentionInDays"] == days


def test_log_groups_are_encrypted_with_the_rotating_log_key(env):
    stack = env.stacks["network"]
    key = logical_id(env, cluster_network(env).log_key)
    network(env).has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    for group in resources(env, "AWS::Logs::LogGroup").values():
        assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
    statements = raw(env)["Resources"][key]["Properties"]["KeyPolicy"]["Statement"]
    logs_statement = next(
        s for s in statements if s.get("Sid") == "AllowCloudWatchLogsForThisAccountsLogGroups"
    )
    assert logs_statement["Principal"] == {"Service": f"logs.{stack.region}.amazonaws.com"}
    assert "kms:EncryptionContext:aws:logs:arn" in logs_statement["Condition"]["ArnLike"]


def test_log_groups_and_key_are_retained_where_the_environment_retains_state(env):
    policy = "Retain" if RETAINED[env.env_name] else "Delete"
    assert env.config.retain_stateful is RETAINED[env.env_name]
    assert stateful_removal_policy(env.config.retain_stateful) == (
        RemovalPolicy.RETAIN if RETAINED[env.env_name] else RemovalPolicy.DESTROY
    )
    for type_ in ("AWS::KMS::Key", "AWS::Logs::LogGroup"):
        for logical, resource in resources(env, type_).items():
            assert resource["DeletionPolicy"] == policy, logical
            assert resource["UpdateReplacePolicy"] == policy, logical


# --------------------------------------------------------------------------- interface


def test_stack_interface_for_other_stacks(env):
    stack = env.stacks["network"]
    azs = sorted(env.config.network.availability_zones)
    assert sorted(stack.cluster_subnets) == azs
    assert sorted(stack.infra_subnets) == azs
    assert isinstance(stack.vpc, ec2.Vpc)
    assert isinstance(stack.efa_security_group, ec2.SecurityGroup)
    assert isinstance(stack.endpoint_security_group, ec2.SecurityGroup)
    assert isinstance(stack.s3_prefix_list_id, str)
    assert all(
        isinstance(s, ec2.Subnet)
        for s in [*stack.cluster_subnets.values(), *stack.infra_subnets.values()]
    )
    # The VPC owns no subnets: every subnet is reached by AZ through the attributes above.
    assert stack.vpc.public_subnets == stack.vpc.private_subnets == stack.vpc.isolated_subnets == []
    assert stack.availability_zones == env.config.network.availability_zones
    assert stack.nat_gateway_ids == {}
    assert isinstance(stack.admin_host, AdminHost)


def test_outputs_name_the_vpc_cluster_subnets_and_efa_group(env):
    outputs = raw(env)["Outputs"]
    assert outputs["VpcId"]["Value"] == {"Ref": vpc_id(env)}
    assert outputs["EfaSecurityGroupId"]["Value"] == group_ref(efa_group_id(env))
    for az in env.config.network.availability_zones:
        key = "ClusterSubnet" + az.replace("-", "")
        subnet = env.stacks["network"].cluster_subnets[az]
        assert outputs[key]["Value"] == {"Ref": logical_id(env, subnet)}
    # hpctl kubeconfig reads the admin host's instance ID from here.
    instance = env.stacks["network"].admin_host.instance
    assert outputs[ADMIN_HOST_OUTPUT]["Value"] == {"Ref": logical_id(env, instance)}


# --------------------------------------------------------------------------- admin host


def test_admin_host_is_one_ssm_instance_in_the_lowest_letter_infra_subnet(env):
    stack = env.stacks["network"]
    (instance,) = resources(env, "AWS::EC2::Instance").values()
    (interface,) = instance["Properties"]["NetworkInterfaces"]
    lowest = min(env.config.network.availability_zones)
    assert interface["SubnetId"] == {"Ref": logical_id(env, stack.infra_subnets[lowest])}
    assert interface["AssociatePublicIpAddress"] is False
    assert instance["Properties"]["MetadataOptions"]["HttpTokens"] == "required"
    assert all(m["Ebs"]["Encrypted"] for m in instance["Properties"]["BlockDeviceMappings"])
    assert "KeyName" not in instance["Properties"]
    network(env).resource_count_is("AWS::EC2::KeyPair", 0)


def test_admin_host_group_admits_nothing_and_reaches_only_endpoints_and_s3_here(env):
    host = logical_id(env, env.stacks["network"].admin_host.security_group)
    assert ingress_rules(env, host) == []
    prefix_list = {"Fn::GetAtt": [_prefix_list_lookup(env), "PrefixLists.0.PrefixListId"]}
    # The third rule, HTTPS to the control plane, lives in the EKS stack (tests/stacks/test_eks).
    assert {rule_key(r) for r in egress_rules(env, host)} == {
        ("tcp", 443, 443, json.dumps(group_ref(endpoint_group_id(env)))),
        ("tcp", 443, 443, json.dumps(prefix_list)),
    }


def test_admin_host_role_describes_only_this_environments_cluster(env):
    role = raw(env)["Resources"][logical_id(env, env.stacks["network"].admin_host.role)]
    (policy,) = role["Properties"]["Policies"]
    describe = [
        s for s in policy["PolicyDocument"]["Statement"] if s["Action"] == "eks:DescribeCluster"
    ]
    names = env.config.names
    assert describe == [
        {
            "Action": "eks:DescribeCluster",
            "Effect": "Allow",
            "Resource": f"arn:aws:eks:{env.config.region}:{env.config.account}:cluster/"
            f"{names.eks_cluster}",
        }
    ]
    assert "ManagedPolicyArns" not in role["Properties"]
