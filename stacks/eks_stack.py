"""EKS cluster HyperPod orchestrates through: control plane, access, the add-ons every node
needs from its first boot (the table's `eks` rows: pod networking, kube-proxy, pod identity,
cluster DNS), and the HyperPod resiliency components. All must exist before the HyperPod
cluster is created, and the HyperPod stack depends on this one. Add-ons whose permissions
name the HyperPod cluster are in the cluster add-ons stack.

Under the cluster's RETAIN policy, deleting this stack leaves the cluster as it runs: the
add-ons' software is preserved (PreserveOnDelete) and the manifests are retained."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks_v2
from constructs import Construct

from config.addons import Addon
from config.kubernetes import NodeGroup
from config.schema import EksConfig
from platform_constructs.admin_host import AdminHost
from platform_constructs.eks_addons import AddonWithPodIdentity, PinnedAddon, place_addons
from platform_constructs.eks_cluster import EksCluster
from platform_constructs.eks_kubectl import KubectlAccess
from platform_constructs.hyperpod_dependencies import HyperPodDependencies


class EksStack(cdk.Stack):
    """Exports `cluster_name`, `cluster_arn`, `cluster_security_group_id` and `kubernetes`
    (pass it as `cluster=` to `aws_eks_v2.KubernetesManifest` / `HelmChart`).

    Storage is not an input: the FSx volume is bound in the cluster add-ons stack, once
    nodes exist."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        eks: EksConfig,
        addons: Sequence[Addon],
        cluster_name: str,
        node_groups: Sequence[NodeGroup],
        vpc: ec2.IVpc,
        infra_subnets: Mapping[str, ec2.ISubnet],
        node_security_group: ec2.ISecurityGroup,
        endpoint_security_group: ec2.ISecurityGroup,
        s3_prefix_list_id: str,
        removal_policy: cdk.RemovalPolicy,
        admin_host: AdminHost | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # Control-plane ENIs go in the small infrastructure subnets: the cluster subnets are
        # sized address-for-address by the capacity plan for nodes and pods.
        control_plane_subnets = [infra_subnets[az] for az in sorted(infra_subnets)]
        self.control_plane_subnets = control_plane_subnets

        self.cluster = self._cluster(
            eks, cluster_name, vpc, control_plane_subnets, node_security_group, removal_policy
        )
        # The admin host (network stack) reaches the private endpoint; its role gets an
        # access entry scoped by network.admin_host.kubernetes_access.
        self.admin_host_access = (
            admin_host.grant_cluster_access(self.cluster) if admin_host is not None else None
        )
        self.kubectl = KubectlAccess(
            self,
            "Kubectl",
            cluster=self.cluster,
            kubernetes_version=eks.kubernetes_version,
            vpc=vpc,
            subnets=control_plane_subnets,
            endpoint_security_group=endpoint_security_group,
            s3_prefix_list_id=s3_prefix_list_id,
        )

        # Created before any node exists, as AWS's HyperPod EKS template does. The DaemonSets
        # are ACTIVE with zero nodes; coredns is DEGRADED until nodes come, which
        # CloudFormation accepts as created (config/addons.py), so none holds the stack up.
        placed = place_addons(
            self,
            addons,
            cluster_name=self.cluster.resource.ref,
            removal_policy=removal_policy,
        )
        self.addons: dict[str, PinnedAddon] = placed.addons
        self.identities: dict[str, AddonWithPodIdentity] = placed.identities

        self.hyperpod_dependencies = self._hyperpod_dependencies(eks, node_groups, removal_policy)

        self.cluster_name: str = self.cluster.resource.ref
        self.cluster_arn: str = self.cluster.cluster_arn
        self.cluster_security_group_id: str = self.cluster.cluster_security_group_id
        self.kubernetes: eks_v2.ICluster = self.kubectl.kubernetes

        self._outputs()

    def _cluster(
        self,
        eks: EksConfig,
        cluster_name: str,
        vpc: ec2.IVpc,
        control_plane_subnets: Sequence[ec2.ISubnet],
        node_security_group: ec2.ISecurityGroup,
        removal_policy: cdk.RemovalPolicy,
    ) -> EksCluster:
        return EksCluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            kubernetes_version=eks.kubernetes_version,
            vpc=vpc,
            control_plane_subnets=control_plane_subnets,
            # Nodes use this self-referencing group; on the control plane too it lets the API
            # server and kubelets reach each other without any rule open to the VPC.
            security_groups=[node_security_group],
            admin_role_arns=eks.admin_role_arns,
            public_access_cidrs=[str(cidr) for cidr in eks.public_access_cidrs],
            log_retention_days=eks.log_retention_days,
            removal_policy=removal_policy,
        )

    def _hyperpod_dependencies(
        self,
        eks: EksConfig,
        node_groups: Sequence[NodeGroup],
        removal_policy: cdk.RemovalPolicy,
    ) -> HyperPodDependencies:
        dependencies = HyperPodDependencies(
            self,
            "HyperPodDependencies",
            cluster=self.kubectl.kubernetes,
            region=self.region,
            node_groups=node_groups,
            image_overrides=eks.image_overrides,
            removal_policy=removal_policy,
        )
        for manifest in dependencies.manifests.values():
            self.kubectl.depend_on_access(manifest)
        return dependencies

    def _outputs(self) -> None:
        cdk.CfnOutput(self, "ClusterName", value=self.cluster_name)
        cdk.CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --region {self.region} --name {self.cluster_name}",
        )
