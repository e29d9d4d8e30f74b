"""Network stack: the cluster VPC as the capacity plan laid it out, and the admin host."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from config.capacity import NetworkLayout
from config.schema import NetworkConfig
from config.schema.network import ADMIN_HOST_OUTPUT
from platform_constructs.admin_host import AdminHost
from platform_constructs.network import ClusterNetwork


class NetworkStack(cdk.Stack):
    """Owns the VPC, its subnets, egress (NAT only with `network.egress: nat`), endpoints,
    flow logs, the EFA security group and the admin host.

    Other stacks use `vpc` (its ID and CIDR; it owns no subnets), `cluster_subnets` /
    `infra_subnets` (by AZ), `efa_security_group`, `endpoint_security_group`,
    `s3_prefix_list_id` (the Region's S3 prefix list, routed by the gateway endpoint),
    `nat_gateway_ids` (empty without NAT) and `admin_host` (None when disabled; the EKS stack
    grants it API access).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        network: NetworkConfig,
        layout: NetworkLayout,
        cluster_name: str,
        removal_policy: cdk.RemovalPolicy,
        **kwargs: Any,
    ) -> None:
        """`cluster_name`: the EKS cluster's name (the admin host may describe it).
        `removal_policy` applies to the flow-log key and log group."""
        # Set before anything reads `availability_zones` (ec2.Vpc does).
        self._availability_zones = list(network.availability_zones)
        super().__init__(scope, construct_id, **kwargs)

        cluster_network = ClusterNetwork(
            self,
            "Network",
            layout=layout,
            egress=network.egress,
            nat_gateways=network.nat_gateways,
            interface_endpoints=network.interface_endpoints,
            https_egress_cidrs=network.https_egress_cidrs,
            flow_log_retention_days=network.flow_log_retention_days,
            removal_policy=removal_policy,
        )
        self.vpc: ec2.IVpc = cluster_network.vpc
        self.cluster_subnets: dict[str, ec2.ISubnet] = cluster_network.cluster_subnets
        self.infra_subnets: dict[str, ec2.ISubnet] = cluster_network.infra_subnets
        self.efa_security_group: ec2.ISecurityGroup = cluster_network.efa_security_group
        self.endpoint_security_group: ec2.ISecurityGroup = cluster_network.endpoint_security_group
        self.s3_prefix_list_id: str = cluster_network.s3_prefix_list_id
        # AZ -> NAT gateway ID, for the alarms on them.
        self.nat_gateway_ids: dict[str, str] = {
            az: gateway.ref for az, gateway in cluster_network.nat_gateways.items()
        }
        self.admin_host: AdminHost | None = None
        host = network.admin_host
        if host.enabled:
            # The lowest-letter AZ's infra subnet: the choice never depends on the AZ order.
            self.admin_host = AdminHost(
                self,
                "AdminHost",
                vpc=self.vpc,
                subnet=self.infra_subnets[min(self.infra_subnets)],
                endpoint_security_group=self.endpoint_security_group,
                s3_prefix_list_id=self.s3_prefix_list_id,
                cluster_name=cluster_name,
                instance_type=host.instance_type,
                kubernetes_access=host.kubernetes_access,
            )

        # For operators and scripts (`aws cloudformation describe-stacks`); other stacks use
        # the attributes above.
        cdk.CfnOutput(self, "VpcId", value=self.vpc.vpc_id, description="Cluster VPC")
        for az, subnet in sorted(self.cluster_subnets.items()):
            cdk.CfnOutput(
                self,
                f"ClusterSubnet-{az}",
                value=subnet.subnet_id,
                description=f"Cluster subnet in {az} ({layout.cluster[az].cidr})",
            )
        cdk.CfnOutput(
            self,
            "EfaSecurityGroupId",
            value=self.efa_security_group.security_group_id,
            description="Security group of HyperPod nodes and FSx for Lustre",
        )
        if self.admin_host is not None:
            cdk.CfnOutput(
                self,
                ADMIN_HOST_OUTPUT,
                value=self.admin_host.instance_id,
                description="Admin host (SSM Session Manager only): aws ssm start-session "
                "--target <this ID>; see docs/access.md",
            )

    @property
    def availability_zones(self) -> list[str]:
        """The configured AZs. Overridden (the documented way to pin a stack's AZs) so that
        the VPC never asks the account for them: synth stays offline and deterministic.
        cdk.context.json lists the same zones for tools that read context."""
        return self._availability_zones
