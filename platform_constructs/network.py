"""The cluster's VPC: subnets exactly as the capacity planner laid them out, egress (closed,
or NAT), the EFA security group, VPC endpoints and flow logs.

Every subnet CIDR comes from `config.capacity.NetworkLayout`; nothing here splits a range
itself. Every subnet (public, infrastructure, cluster) is built explicitly and keyed by its
AZ's name, never by its position in the AZ list: `ec2.Vpc` names the subnets it creates by
index (publicSubnet1, ...), so adding or reordering AZs would replace them. The `ec2.Vpc`
here creates only the VPC itself (and strips its default security group); the internet
gateway, NAT gateways and routes are wired below.

Egress is a config choice (`network.egress`), and a NAT gateway exists only where a security
group lets traffic reach it:
- `closed` (the default): no internet gateway, no public subnets, no NAT; every private
  route table has the local route and the S3 gateway endpoint only. AWS APIs are reached
  through the interface endpoints. The public subnets' ranges stay reserved in the capacity
  plan, so choosing `nat` later adds them without moving any other subnet.
- `nat`: public subnets, the internet gateway and `nat_gateways` NAT gateways; the cluster
  subnets (the only ones whose security group has rules beyond the VPC: the EFA group's
  `https_egress_cidrs`) route to them. The infrastructure subnets never do: nothing in them
  may send traffic out of the VPC.

NAT placement: the NAT gateways sit in the public subnets of the `nat_gateways` AZs with the
lowest letters (sorted AZ names). Each cluster subnet routes to its own AZ's NAT gateway, else
to the NAT gateway of the lowest-letter AZ. Reordering the AZ list, or adding an AZ whose
letter is above every NAT AZ, moves no NAT gateway; adding an AZ with a lower letter,
removing a NAT AZ or changing `nat_gateways` adds, moves or removes NAT gateways, and with
them their Elastic IPs (the egress addresses), but never a subnet.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Literal

import aws_cdk as cdk
import jsii
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct, IConstruct

from config.capacity import NetworkLayout
from platform_constructs.cfn_lint import ignore_cfn_lint, ignore_redundant_role_dependency
from platform_constructs.endpoint_policies import (
    ECR_ENDPOINTS,
    ecr_endpoint_statements,
    s3_endpoint_statements,
)
from platform_constructs.l1 import default_resource
from platform_constructs.log_groups import has_log_group, log_group, log_key, log_to
from platform_constructs.nag import acknowledge

PUBLIC_GROUP = "public"
INFRA_GROUP = "infra"
Egress = Literal["closed", "nat"]
HTTPS = ec2.Port.tcp(443)
# Lustre LNet (988) and the ports the Lustre servers answer from (1018-1023).
LUSTRE_PORTS = (ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023))

# CDK's singleton handler of AwsCustomResource (a fixed id, directly under the stack).
AWS_CUSTOM_RESOURCE_HANDLER_ID = "AWS679f53fac002430cb0da5b7982bd2287"
# CDK's provider behind `restrict_default_security_group` (directly under the stack).
RESTRICT_DEFAULT_SG_PROVIDER_ID = "Custom::VpcRestrictDefaultSGCustomResourceProvider"


def endpoint_construct_id(service: str) -> str:
    """Construct ID of a service's endpoint (ecr.api -> EcrApiEndpoint): stable and
    readable logical IDs."""
    words = service.replace("-", ".").split(".")
    return "".join(word.capitalize() for word in words) + "Endpoint"


def public_subnet_construct_id(availability_zone: str) -> str:
    """Keyed by AZ name, not list position (as every subnet here): a subnet's logical ID
    follows its AZ, whatever else changes in the AZ list."""
    return f"PublicSubnet-{availability_zone}"


def infra_subnet_construct_id(availability_zone: str) -> str:
    return f"InfraSubnet-{availability_zone}"


def cluster_subnet_construct_id(availability_zone: str) -> str:
    return f"ClusterSubnet-{availability_zone}"


def nat_availability_zones(availability_zones: Iterable[str], nat_gateways: int) -> list[str]:
    """The AZs holding a NAT gateway: the `nat_gateways` lowest letters (sorted names), so
    the choice never depends on the order of the AZ list."""
    zones = sorted(availability_zones)
    if not 1 <= nat_gateways <= len(zones):
        raise ValueError(f"{nat_gateways} NAT gateways for {len(zones)} AZs; use 1 to {len(zones)}")
    return zones[:nat_gateways]


@jsii.implements(ec2.IPeer)
class InlinePrefixList:
    """A prefix-list peer that CDK renders inline in the security group.

    CDK never inlines prefix-list rules (`Peer.prefix_list`), and a group whose egress rules
    are all separate resources has no `SecurityGroupEgress` property, so EC2 keeps its
    default allow-all egress rule. An inline rule in the group itself guarantees that
    default is removed, whatever else is added later.
    """

    def __init__(self, prefix_list_id: str) -> None:
        self._prefix_list_id = prefix_list_id

    @property
    def can_inline_rule(self) -> bool:
        return True

    @property
    def unique_id(self) -> str:
        return self._prefix_list_id

    @property
    def connections(self) -> ec2.Connections:
        return ec2.Connections(peer=self)

    def to_ingress_rule_config(self) -> ec2.IngressRuleConfig:
        return ec2.IngressRuleConfig(source_prefix_list_id=self._prefix_list_id)

    def to_egress_rule_config(self) -> ec2.EgressRuleConfig:
        return ec2.EgressRuleConfig(destination_prefix_list_id=self._prefix_list_id)


class ClusterNetwork(Construct):
    """VPC for a HyperPod (EKS) cluster.

    - with `egress="nat"` only: one public subnet per AZ, routed to the internet gateway;
      `nat_gateways` of them hold a NAT gateway (the lowest-letter AZs, see the module
      docstring). With `egress="closed"`, `public_subnets` and `nat_gateways` are empty and
      `internet_gateway` is None;
    - small private "infra" subnets for the EKS control-plane ENIs, interface endpoints,
      in-VPC handlers and the admin host, without a default route (nothing there may leave
      the VPC);
    - one large private cluster subnet per AZ, on the secondary CIDR when there is one, with
      a default route to its AZ's NAT gateway (else the lowest-letter AZ's) under `nat`;
    - the EFA security group: all traffic to and from itself, and no blanket egress: HTTPS
      only to the interface endpoints, S3 (gateway endpoint prefix list) and the deliberately
      listed CIDRs. Whatever else shares the group (the EKS control-plane ENIs, FSx) is
      reached through the self-referencing rules;
    - S3 gateway endpoint on every private route table, and the interface endpoints,
      private DNS on;
    - flow logs to a KMS-encrypted CloudWatch Logs group.

    Subnets are exposed by AZ (`public_subnets`, `infra_subnets`, `cluster_subnets`), never
    through `vpc`: the `ec2.Vpc` owns no subnets, so `vpc.public_subnets`,
    `vpc.private_subnets` and `vpc.select_subnets()` without explicit subnets are empty.
    Use `vpc` for its ID, CIDR and as the VPC of security groups and endpoints.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layout: NetworkLayout,
        egress: Egress,
        nat_gateways: int,
        interface_endpoints: Sequence[str],
        https_egress_cidrs: Sequence[ipaddress.IPv4Network],
        flow_log_retention_days: int,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        # Sorted: the template does not depend on the order of the AZ list either.
        availability_zones = sorted(layout.cluster)
        self.layout = layout
        self.egress = egress
        if egress == "closed" and (nat_gateways or https_egress_cidrs):
            raise ValueError("egress 'closed' takes no NAT gateways and no HTTPS egress CIDRs")

        self.vpc = self._vpc(layout, availability_zones)
        restrict_provider = stack.node.try_find_child(RESTRICT_DEFAULT_SG_PROVIDER_ID)
        if restrict_provider is not None:
            ignore_redundant_role_dependency(restrict_provider.node.try_find_child("Handler"))

        self.internet_gateway: ec2.CfnInternetGateway | None = None
        self.public_subnets: dict[str, ec2.PublicSubnet] = {}
        self.nat_availability_zones: list[str] = []
        self.nat_gateways: dict[str, ec2.CfnNatGateway] = {}
        if egress == "nat":
            self._public_egress(layout, availability_zones, nat_gateways)
        # No default route, whatever the egress: the control-plane ENIs, endpoints, the
        # kubectl handler and the admin host talk to the VPC and its endpoints only.
        self.infra_subnets: dict[str, ec2.ISubnet] = {
            az: self._private_subnet(
                infra_subnet_construct_id(az), az, layout.infra[az], group=INFRA_GROUP, nat=False
            )
            for az in availability_zones
        }

        self.secondary_cidr: ec2.CfnVPCCidrBlock | None = None
        if layout.cluster_cidr is not None:
            self.secondary_cidr = ec2.CfnVPCCidrBlock(
                self, "ClusterCidr", vpc_id=self.vpc.vpc_id, cidr_block=str(layout.cluster_cidr)
            )
        self.cluster_subnets: dict[str, ec2.ISubnet] = {
            az: self._cluster_subnet(az, layout.cluster[az].cidr) for az in availability_zones
        }

        self.vpc_cidrs: list[str] = [str(layout.vpc_cidr)] + (
            [str(layout.cluster_cidr)] if layout.cluster_cidr is not None else []
        )
        self.endpoint_security_group = self._endpoint_security_group()
        self.s3_gateway_endpoint = self._s3_gateway_endpoint()
        self.interface_endpoints = self._interface_endpoints(interface_endpoints)
        self._limit_endpoints(stack)

        # One key for this stack's log groups (flow logs, the prefix-list lookup's logs).
        self.log_key = log_key(self, "LogKey", removal_policy=removal_policy)
        self.flow_log_group = self._log_group(
            "FlowLogGroup", flow_log_retention_days, removal_policy
        )
        self.flow_log = self._flow_log(stack, self.flow_log_group)

        self.s3_prefix_list_id = self._s3_prefix_list_id(
            stack, self._log_group("S3PrefixListLogGroup", flow_log_retention_days, removal_policy)
        )
        if restrict_provider is not None:
            self._log_restrict_provider(restrict_provider, flow_log_retention_days, removal_policy)
        self.efa_security_group = self._efa_security_group(https_egress_cidrs)

    def _vpc(self, layout: NetworkLayout, availability_zones: list[str]) -> ec2.Vpc:
        return ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(str(layout.vpc_cidr)),
            availability_zones=availability_zones,
            # No subnets, gateways or NAT from ec2.Vpc (it names subnets by list position):
            # they are built below, keyed by AZ name.
            subnet_configuration=[],
            nat_gateways=0,
            # Strips the default security group's rules (custom resource): nothing should
            # ever fall back to it.
            restrict_default_security_group=True,
        )

    def _public_egress(
        self, layout: NetworkLayout, availability_zones: list[str], nat_gateways: int
    ) -> None:
        """The internet gateway, a public subnet per AZ and the NAT gateways (egress "nat")."""
        # Under the VPC construct, with the IDs ec2.Vpc gives them: the same logical IDs
        # (and Name tag) as a VPC that ec2.Vpc wired itself.
        gateway = ec2.CfnInternetGateway(self.vpc, "IGW")
        attachment = ec2.CfnVPCGatewayAttachment(
            self.vpc, "VPCGW", vpc_id=self.vpc.vpc_id, internet_gateway_id=gateway.ref
        )
        self.internet_gateway = gateway
        self.public_subnets = {
            az: self._public_subnet(az, layout.public[az], gateway, attachment)
            for az in availability_zones
        }
        self.nat_availability_zones = nat_availability_zones(availability_zones, nat_gateways)
        self.nat_gateways = {
            az: self.public_subnets[az].add_nat_gateway() for az in self.nat_availability_zones
        }

    def _s3_gateway_endpoint(self) -> ec2.GatewayVpcEndpoint:
        return self.vpc.add_gateway_endpoint(
            "S3Endpoint",
            service=ec2.GatewayVpcEndpointAwsService.S3,
            # Every private route table: node and handler traffic to S3 never crosses NAT.
            subnets=[
                ec2.SubnetSelection(
                    subnets=[*self.cluster_subnets.values(), *self.infra_subnets.values()]
                )
            ],
        )

    def _interface_endpoints(self, services: Sequence[str]) -> dict[str, ec2.InterfaceVpcEndpoint]:
        return {
            service: ec2.InterfaceVpcEndpoint(
                self,
                endpoint_construct_id(service),
                vpc=self.vpc,
                service=ec2.InterfaceVpcEndpointAwsService(service),
                subnets=ec2.SubnetSelection(subnets=list(self.infra_subnets.values())),
                security_groups=[self.endpoint_security_group],
                # `open=True` admits only the primary CIDR; the group admits every VPC CIDR.
                open=False,
                private_dns_enabled=True,
            )
            for service in services
        }

    def _flow_log(self, stack: cdk.Stack, log_group: logs.LogGroup) -> ec2.FlowLog:
        flow_log = ec2.FlowLog(
            self,
            "FlowLog",
            resource_type=ec2.FlowLogResourceType.from_vpc(self.vpc),
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        # The delivery role trusts VPC Flow Logs for this account's flow logs only (the
        # confused-deputy conditions of the VPC User Guide's "IAM role for publishing flow
        # logs to CloudWatch Logs"); set on CDK's own role, which keeps its logical ID.
        flow_log_role = flow_log.iam_role
        if flow_log_role is None:
            raise ValueError("the CloudWatch Logs flow log has a delivery role")
        default_resource(flow_log_role, iam.CfnRole).add_property_override(
            "AssumeRolePolicyDocument.Statement.0.Condition",
            {
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {
                    "aws:SourceArn": stack.format_arn(
                        service="ec2", resource="vpc-flow-log", resource_name="*"
                    )
                },
            },
        )
        return flow_log

    def _log_restrict_provider(
        self, provider: IConstruct, retention_days: int, removal_policy: cdk.RemovalPolicy
    ) -> None:
        # The provider stripping the default security group logs with the others: its
        # construct (CDK's singleton, one per stack) takes no log group.
        handler = provider.node.find_child("Handler")
        if not isinstance(handler, cdk.CfnResource):
            raise TypeError(f"{handler.node.path}: expected the provider's function resource")
        if not has_log_group(handler):
            log_to(
                handler,
                self._log_group("RestrictDefaultSgLogGroup", retention_days, removal_policy),
            )

    def _log_group(
        self, construct_id: str, retention_days: int, removal_policy: cdk.RemovalPolicy
    ) -> logs.LogGroup:
        return log_group(
            self,
            construct_id,
            retention_days=retention_days,
            removal_policy=removal_policy,
            encryption_key=self.log_key,
        )

    # ----------------------------------------------------------------------- subnets

    def nat_gateway_for(self, availability_zone: str) -> str:
        """The NAT gateway of `availability_zone`, else that of the lowest-letter AZ (only
        with egress "nat")."""
        if not self.nat_gateways:
            raise ValueError("this network has no NAT gateway (egress is closed)")
        gateway = self.nat_gateways.get(availability_zone)
        if gateway is None:
            gateway = self.nat_gateways[self.nat_availability_zones[0]]
        return gateway.ref

    def _public_subnet(
        self,
        az: str,
        cidr: ipaddress.IPv4Network,
        gateway: ec2.CfnInternetGateway,
        attachment: ec2.CfnVPCGatewayAttachment,
    ) -> ec2.PublicSubnet:
        subnet = ec2.PublicSubnet(
            self,
            public_subnet_construct_id(az),
            availability_zone=az,
            vpc_id=self.vpc.vpc_id,
            cidr_block=str(cidr),
            map_public_ip_on_launch=True,
        )
        subnet.add_default_internet_route(gateway.ref, attachment)
        _tag_subnet(subnet, group=PUBLIC_GROUP, subnet_type="Public")
        return subnet

    def _private_subnet(
        self,
        construct_id: str,
        az: str,
        cidr: ipaddress.IPv4Network,
        *,
        group: str | None,
        nat: bool,
    ) -> ec2.PrivateSubnet:
        """A private subnet; with `nat`, a default route to its AZ's NAT gateway (else the
        lowest-letter AZ's), without it no default route at all (isolated)."""
        subnet = ec2.PrivateSubnet(
            self,
            construct_id,
            availability_zone=az,
            vpc_id=self.vpc.vpc_id,
            cidr_block=str(cidr),
            map_public_ip_on_launch=False,
        )
        if nat:
            subnet.add_default_nat_route(self.nat_gateway_for(az))
        _tag_subnet(subnet, group=group, subnet_type="Private" if nat else "Isolated")
        return subnet

    def _cluster_subnet(self, az: str, cidr: ipaddress.IPv4Network) -> ec2.ISubnet:
        subnet = self._private_subnet(
            cluster_subnet_construct_id(az), az, cidr, group=None, nat=bool(self.nat_gateways)
        )
        if self.secondary_cidr is not None:
            # The subnet's range exists only once the secondary block is associated (and
            # must be deleted before the block is disassociated).
            subnet_resource = default_resource(subnet, ec2.CfnSubnet)
            subnet_resource.add_resource_dependency(self.secondary_cidr)
        return subnet

    # ----------------------------------------------------------------------- security

    def _limit_endpoints(self, stack: cdk.Stack) -> None:
        """Endpoint policies: S3 through the gateway reaches this account's buckets and the
        AWS-owned buckets nodes read (s3_endpoint_statements); images are pushed only to
        this account's ECR repositories (pulls from AWS's registries stay open)."""
        for statement in s3_endpoint_statements(stack.partition, stack.region, stack.account):
            self.s3_gateway_endpoint.add_to_policy(statement)
        for service in ECR_ENDPOINTS:
            endpoint = self.interface_endpoints.get(service)
            if endpoint is None:
                continue
            for statement in ecr_endpoint_statements(stack.account):
                endpoint.add_to_policy(statement)

    def _endpoint_security_group(self) -> ec2.SecurityGroup:
        group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            description="Interface VPC endpoints: HTTPS from inside the VPC only",
            allow_all_outbound=False,
        )
        for cidr in self.vpc_cidrs:
            group.add_ingress_rule(ec2.Peer.ipv4(cidr), HTTPS, f"HTTPS from VPC range {cidr}")
        return group

    def _s3_prefix_list_id(self, stack: cdk.Stack, log_group: logs.ILogGroup) -> str:
        """The region's S3 prefix list (what the gateway endpoint routes), read at deploy
        time: its ID differs per region and synth makes no AWS calls."""
        call = cr.AwsSdkCall(
            service="EC2",
            action="describeManagedPrefixLists",
            parameters={
                "Filters": [
                    {"Name": "prefix-list-name", "Values": [f"com.amazonaws.{stack.region}.s3"]}
                ]
            },
            physical_resource_id=cr.PhysicalResourceId.of(f"s3-prefix-list-{stack.region}"),
            output_paths=["PrefixLists.0.PrefixListId"],
        )
        # Its own role and log group: no AWS managed policy (the default role would carry
        # AWSLambdaBasicExecutionRole), and logs encrypted and expired like the flow logs.
        role = iam.Role(
            self,
            "S3PrefixListRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Reads the region's S3 prefix list ID at deploy time",
        )
        log_group.grant_write(role)
        lookup = cr.AwsCustomResource(
            self,
            "S3PrefixList",
            on_create=call,
            on_update=call,
            policy=cr.AwsCustomResourcePolicy.from_sdk_calls(
                resources=cr.AwsCustomResourcePolicy.ANY_RESOURCE
            ),
            role=role,
            log_group=log_group,
            install_latest_aws_sdk=False,
        )
        acknowledge(
            lookup,
            "IAM5",
            "ec2:DescribeManagedPrefixLists supports no resource-level permissions; the "
            "policy allows only that read-only call",
            finding="Resource::*",
        )
        ignore_redundant_role_dependency(stack.node.try_find_child(AWS_CUSTOM_RESOURCE_HANDLER_ID))
        return lookup.get_response_field("PrefixLists.0.PrefixListId")

    def _efa_security_group(
        self, https_egress_cidrs: Sequence[ipaddress.IPv4Network]
    ) -> ec2.SecurityGroup:
        group = ec2.SecurityGroup(
            self,
            "EfaSecurityGroup",
            vpc=self.vpc,
            description="HyperPod nodes and FSx for Lustre: EFA and Lustre within the group; "
            "HTTPS egress only to endpoints, S3 and listed CIDRs",
            # EFA health checks can fail with 0.0.0.0/0 egress, and nodes reach AWS through
            # endpoints: every egress rule below is deliberate.
            allow_all_outbound=False,
        )
        # EFA needs all traffic to and from the group itself (the FSx ENIs share it).
        group.add_ingress_rule(group, ec2.Port.all_traffic(), "EFA: all traffic within the group")
        group.add_egress_rule(group, ec2.Port.all_traffic(), "EFA: all traffic within the group")
        # Covered by the rules above; kept explicit so narrowing them can never cut Lustre.
        for port in LUSTRE_PORTS:
            group.add_ingress_rule(group, port, "Lustre (FSx) within the group")
            group.add_egress_rule(group, port, "Lustre (FSx) within the group")
        group.add_egress_rule(self.endpoint_security_group, HTTPS, "HTTPS to interface endpoints")
        # Inline (see InlinePrefixList): the group always has an inline egress rule.
        group.add_egress_rule(
            InlinePrefixList(self.s3_prefix_list_id), HTTPS, "HTTPS to S3 (gateway endpoint)"
        )
        for cidr in https_egress_cidrs:
            group.add_egress_rule(
                ec2.Peer.ipv4(str(cidr)), HTTPS, f"Deliberate HTTPS egress to {cidr} (config)"
            )
        return group


def _tag_subnet(subnet: ec2.Subnet, *, group: str | None, subnet_type: str) -> None:
    """The Name tag (its construct path) and the AZ pin; with `group`, also the subnet
    group and type tags ec2.Vpc puts on the subnets it creates, which tools that look
    subnets up by tag rely on."""
    cdk.Tags.of(subnet).add("Name", subnet.node.path)
    if group is not None:
        for key, value in (("aws-cdk:subnet-name", group), ("aws-cdk:subnet-type", subnet_type)):
            cdk.Tags.of(subnet).add(
                key, value, include_resource_types=[ec2.CfnSubnet.CFN_RESOURCE_TYPE_NAME]
            )
    _pin_availability_zone(subnet)


def _pin_availability_zone(subnet: ec2.ISubnet) -> None:
    """Subnets name their AZ on purpose: training plans reserve capacity in a named AZ and
    the capacity plan sizes each AZ's subnet. cfn-lint's W3010 (prefer Fn::GetAZs) does
    not apply."""
    resource = default_resource(subnet, ec2.CfnSubnet)
    ignore_cfn_lint(resource, "W3010")
    # The same check, run by CDK's built-in template validation during synth.
    cdk.Validations.of(resource).acknowledge(
        cdk.Acknowledgment(
            id="CloudFormation-Validate::W3010",
            reason="The subnet is placed in a named AZ on purpose (training plans and the "
            "capacity plan are per AZ)",
        )
    )
