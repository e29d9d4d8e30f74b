"""The HyperPod cluster of one environment: its node role, lifecycle scripts and cluster."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config.schema import HyperPodConfig, InstanceGroupConfig
from config.schema.hyperpod import ScheduledUpdateConfig, batch_size_parts
from platform_constructs.hyperpod_cluster import (
    BatchSize,
    HyperPodCluster,
    HyperPodClusterProps,
    InstanceGroupProps,
    ScheduledUpdate,
    TrainingPlan,
)
from platform_constructs.hyperpod_role import HyperPodAutoscalingRole, HyperPodExecutionRole
from platform_constructs.lifecycle_scripts import LifecycleScripts, LifecycleSettings

LIFECYCLE_DIR = Path(__file__).resolve().parent.parent / "lifecycle"
LIFECYCLE_PREFIX = "hyperpod/lifecycle/"


def _batch(value: int | str | None) -> BatchSize | None:
    if value is None:
        return None
    kind, size = batch_size_parts(value)
    return BatchSize(kind=kind, value=size)


def scheduled_update_props(update: ScheduledUpdateConfig | None) -> ScheduledUpdate | None:
    if update is None:
        return None
    return ScheduledUpdate(
        schedule_expression=update.cron,
        max_batch=_batch(update.max_batch),
        rollback_batch=_batch(update.rollback_batch),
        wait_seconds=update.wait_s,
        rollback_alarms=tuple(update.rollback_alarms or ()),
    )


def instance_group_props(group: InstanceGroupConfig) -> InstanceGroupProps:
    plan = group.training_plan
    updates = group.updates
    return InstanceGroupProps(
        name=group.name,
        instance_type=group.instance_type,
        count=group.count,
        min_count=group.min_count,
        threads_per_core=group.threads_per_core,
        ebs_volume_gib=group.ebs_volume_gib,
        volume_customer_key=group.volume_customer_key,
        deep_health_checks=tuple(group.deep_health_checks),
        labels=dict(group.labels),
        taints=tuple(group.taints),
        interface=group.interface,
        training_plan=TrainingPlan(arn=plan.arn, availability_zone=plan.availability_zone)
        if plan is not None
        else None,
        image_release_version=updates.image_release_version if updates else None,
        scheduled_update=scheduled_update_props(updates.scheduled_update if updates else None),
        auto_patch=updates.auto_patch if updates else None,
        capacity=group.capacity,
        image_id=group.image_id,
    )


def cluster_props(hyperpod: HyperPodConfig) -> HyperPodClusterProps:
    tiered = hyperpod.tiered_storage
    return HyperPodClusterProps(
        availability_zones=tuple(hyperpod.availability_zones),
        node_recovery=hyperpod.node_recovery,
        node_provisioning_mode=hyperpod.node_provisioning_mode,
        tiered_storage_percent=tiered.memory_percent if tiered.enabled else None,
        autoscaling=hyperpod.autoscaling,
        log_retention_days=hyperpod.log_retention_days,
        instance_groups=tuple(instance_group_props(g) for g in hyperpod.instance_groups),
    )


class HyperPodStack(cdk.Stack):
    """Exports `cluster_name`, `cluster_arn` and `execution_role`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        hyperpod: HyperPodConfig,
        cluster_name: str,
        fsx_efa_enabled: bool,
        eks_cluster_arn: str,
        vpc: ec2.IVpc,
        cluster_subnets: Mapping[str, ec2.ISubnet],
        node_security_group: ec2.ISecurityGroup,
        artifact_bucket: s3.IBucket,
        removal_policy: cdk.RemovalPolicy,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        subnets_by_az = dict(cluster_subnets)

        node_role = HyperPodExecutionRole(
            self,
            "ExecutionRole",
            cluster_name=cluster_name,
            vpc=vpc,
            subnets=[subnets_by_az[az] for az in sorted(subnets_by_az)],
            security_group=node_security_group,
            eks_cluster_arn=eks_cluster_arn,
            removal_policy=removal_policy,
        )
        lifecycle = LifecycleScripts(
            self,
            "LifecycleScripts",
            source_dir=LIFECYCLE_DIR,
            bucket=artifact_bucket,
            prefix=LIFECYCLE_PREFIX,
            settings=LifecycleSettings(fsx_efa_enabled=fsx_efa_enabled),
        )
        lifecycle.grant_read(node_role.role)
        autoscaling_role = (
            HyperPodAutoscalingRole(
                self, "AutoscalingRole", cluster_name=cluster_name, removal_policy=removal_policy
            ).role
            if hyperpod.autoscaling
            else None
        )
        self.cluster = HyperPodCluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            props=cluster_props(hyperpod),
            eks_cluster_arn=eks_cluster_arn,
            subnets_by_az=subnets_by_az,
            security_group=node_security_group,
            execution_role=node_role.role,
            lifecycle=lifecycle,
            removal_policy=removal_policy,
            autoscaling_role=autoscaling_role,
        )
        self.cluster_name = cluster_name
        self.cluster_arn = self.cluster.cluster_arn
        self.execution_role = node_role.role
        cdk.CfnOutput(self, "ClusterName", value=cluster_name)
        cdk.CfnOutput(self, "ClusterArn", value=self.cluster_arn)
