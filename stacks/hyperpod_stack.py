"""The HyperPod cluster of one environment: its node role, lifecycle scripts and cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
from constructs import Construct

from config.schema import EnvironmentConfig
from platform_constructs.hyperpod_cluster import HyperPodCluster
from platform_constructs.hyperpod_role import HyperPodAutoscalingRole, HyperPodExecutionRole
from platform_constructs.lifecycle_scripts import LifecycleScripts, LifecycleSettings
from stacks.eks_stack import EksStack
from stacks.network_stack import NetworkStack
from stacks.storage_stack import StorageStack
from platform_constructs.retention import stateful_removal_policy

LIFECYCLE_DIR = Path(__file__).resolve().parent.parent / "lifecycle"
LIFECYCLE_PREFIX = "hyperpod/lifecycle/"


def cluster_name_for(environment: str) -> str:
    """The HyperPod cluster name. Set explicitly (not generated) because HyperPod names the
    cluster's log group after it, which lets the node role be scoped to that log group, and
    operators and `hpctl` address the cluster by it."""
    return f"hyperpod-{environment}"


class HyperPodStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        network: NetworkStack,
        storage: StorageStack,
        eks: EksStack,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        name = cluster_name_for(config.environment)
        subnets_by_az = dict(network.cluster_subnets)
        retention = stateful_removal_policy(config.retain_stateful)

        node_role = HyperPodExecutionRole(
            self,
            "ExecutionRole",
            cluster_name=name,
            vpc=network.vpc,
            subnets=[subnets_by_az[az] for az in sorted(subnets_by_az)],
            security_group=network.efa_security_group,
            eks_cluster_arn=eks.cluster_arn,
            checkpoint_bucket=storage.checkpoint_bucket,
            removal_policy=retention,
        )
        lifecycle = LifecycleScripts(
            self,
            "LifecycleScripts",
            source_dir=LIFECYCLE_DIR,
            bucket=storage.artifact_bucket,
            prefix=LIFECYCLE_PREFIX,
            settings=LifecycleSettings(fsx_efa_enabled=config.storage.fsx.efa_enabled),
        )
        lifecycle.grant_read(node_role.role)
        autoscaling_role = (
            HyperPodAutoscalingRole(self, "AutoscalingRole", cluster_name=name).role
            if config.hyperpod.autoscaling
            else None
        )
        self.cluster = HyperPodCluster(
            self,
            "Cluster",
            cluster_name=name,
            config=config.hyperpod,
            eks_cluster_arn=eks.cluster_arn,
            subnets_by_az=subnets_by_az,
            security_group=network.efa_security_group,
            execution_role=node_role.role,
            lifecycle=lifecycle,
            removal_policy=retention,
            autoscaling_role=autoscaling_role,
        )
        self.cluster_name = name
        self.cluster_arn = self.cluster.cluster_arn
        self.execution_role = node_role.role
        cdk.CfnOutput(self, "ClusterName", value=name)
        cdk.CfnOutput(self, "ClusterArn", value=self.cluster_arn)
