"""EKS cluster HyperPod orchestrates through: control plane, access, the add-ons that run
without nodes, and the HyperPod resiliency components (which must exist before the HyperPod
cluster is created). Add-ons that need running nodes are in the cluster add-ons stack."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks_v2
from constructs import Construct

from config.schema import EnvironmentConfig
from platform_constructs.eks_addons import VPC_CNI_CONFIGURATION, PinnedAddon
from platform_constructs.eks_cluster import EksCluster
from platform_constructs.eks_kubectl import KubectlAccess
from platform_constructs.hyperpod_dependencies import HyperPodDependencies
from stacks.network_stack import NetworkStack
from platform_constructs.retention import stateful_removal_policy

# DaemonSet add-ons: they become ACTIVE with zero nodes, so they never hold the stack up.
NODELESS_ADDONS: tuple[str, ...] = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")


class EksStack(cdk.Stack):
    """Exposes `cluster_name`, `cluster_arn`, `cluster_security_group_id` and `kubernetes`
    (pass it as `cluster=` to `aws_eks_v2.KubernetesManifest` / `HelmChart`).

    Storage is not an input: the FSx volume is bound in the cluster add-ons stack, once
    nodes exist."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        network: NetworkStack,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings = config.eks
        # Control-plane ENIs go in the small infrastructure subnets: the cluster subnets are
        # sized address-for-address by the capacity plan for nodes and pods.
        control_plane_subnets = [network.infra_subnets[az] for az in sorted(network.infra_subnets)]

        self.cluster = EksCluster(
            self,
            "Cluster",
            cluster_name=f"hyperpod-{config.environment}-eks",
            kubernetes_version=settings.kubernetes_version,
            vpc=network.vpc,
            control_plane_subnets=control_plane_subnets,
            # Nodes use this self-referencing group; on the control plane too it lets the API
            # server and kubelets reach each other without any rule open to the VPC.
            security_groups=[network.efa_security_group],
            admin_role_arns=settings.admin_role_arns,
            public_access_cidrs=[str(cidr) for cidr in settings.public_access_cidrs],
            log_retention_days=settings.log_retention_days,
            removal_policy=stateful_removal_policy(config.retain_stateful),
        )
        self.kubectl = KubectlAccess(
            self,
            "Kubectl",
            cluster=self.cluster,
            kubernetes_version=settings.kubernetes_version,
            vpc=network.vpc,
            subnets=control_plane_subnets,
            endpoint_security_group=network.endpoint_security_group,
            # The network construct reads the Region's S3 prefix list at deploy time.
            s3_prefix_list_id=network.network.s3_prefix_list_id,
        )

        self.addons: dict[str, PinnedAddon] = {}
        for name in NODELESS_ADDONS:
            self.addons[name] = PinnedAddon(
                self,
                f"Addon-{name}",
                cluster_name=self.cluster.resource.ref,
                addon_name=name,
                version=settings.addons[name],
                configuration=VPC_CNI_CONFIGURATION if name == "vpc-cni" else None,
            )

        self.hyperpod_dependencies = HyperPodDependencies(
            self,
            "HyperPodDependencies",
            cluster=self.kubectl.kubernetes,
            region=config.region,
            instance_groups=config.hyperpod.groups_by_name(),
            image_overrides=settings.image_overrides,
        )
        for manifest in self.hyperpod_dependencies.manifests.values():
            self.kubectl.depend_on_access(manifest)

        self.cluster_name: str = self.cluster.resource.ref
        self.cluster_arn: str = self.cluster.cluster_arn
        self.cluster_security_group_id: str = self.cluster.cluster_security_group_id
        self.kubernetes: eks_v2.ICluster = self.kubectl.kubernetes

        cdk.CfnOutput(self, "ClusterName", value=self.cluster_name)
        cdk.CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --region {self.region} --name {self.cluster_name}",
        )
