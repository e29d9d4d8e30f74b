"""The `AWS::SageMaker::Cluster` of one environment, built from its HyperPod config.

Instance groups are keyed by name and emitted in name order, and each group's properties
depend on that group's config alone: adding, removing or reordering groups in the file never
changes another group (no perpetual diffs from list positions).

AMI updates per group: a custom AMI (`ImageId`) or a pinned `ImageReleaseVersion` (changing
it updates the group's software), a `ScheduledUpdateConfig` (cron schedule, rolling batches, wait, rollback on
CloudWatch alarms) and `AutoPatchConfig`; `CapacityRequirements` chooses on-demand or spot.
HyperPod reads the rollback alarms with the instance groups' execution role ("Update your
AMI version in your SageMaker HyperPod cluster": cloudwatch:DescribeAlarms on the execution
role), so the construct grants exactly those alarms to it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from config.kubernetes import Taint
from platform_constructs.cfn_lint import ignore_cfn_lint
from platform_constructs.hyperpod_role import LOG_GROUP_PREFIX
from platform_constructs.lifecycle_scripts import LifecycleScripts
from platform_constructs.nag import acknowledge, acknowledge_known_wildcards
from platform_constructs.retention import RETENTION_DAYS

# Pinned so that refactoring the construct tree can never make CloudFormation replace (and
# so delete) the cluster and its nodes.
CLUSTER_LOGICAL_ID = "HyperPodCluster"
# The NodeProvisioningMode (config/schema/hyperpod.py) under which HyperPod takes customer
# keys for node volumes.
CONTINUOUS_PROVISIONING = "Continuous"


# The construct ID of CDK's per-stack LogRetention handler (aws-logs LogRetention).
LOG_RETENTION_HANDLER_ID = "LogRetentionaae0aa3c5b4d4f87b02d85b201efdd8a"


@dataclass(frozen=True, kw_only=True)
class TrainingPlan:
    """Reserved capacity: the group launches in `availability_zone`'s subnet."""

    arn: str
    availability_zone: str


@dataclass(frozen=True, kw_only=True)
class BatchSize:
    """A rolling-update batch: `kind` INSTANCE_COUNT or CAPACITY_PERCENTAGE."""

    kind: str
    value: int


@dataclass(frozen=True, kw_only=True)
class ScheduledUpdate:
    """When HyperPod rolls AMI updates onto a group and how: without `max_batch` the whole
    group at once; `wait_seconds` and `rollback_alarms` act between batches."""

    schedule_expression: str
    max_batch: BatchSize | None = None
    rollback_batch: BatchSize | None = None
    wait_seconds: int | None = None
    rollback_alarms: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class InstanceGroupProps:
    """One instance group. `interface`: efa / efa-only, None for types without EFA."""

    name: str
    instance_type: str
    count: int
    min_count: int | None = None
    threads_per_core: int = 1
    ebs_volume_gib: int
    # Root and /opt/sagemaker volumes on the cluster's customer key (fixed at group creation).
    volume_customer_key: bool = False
    deep_health_checks: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    interface: str | None = None
    training_plan: TrainingPlan | None = None
    # The HyperPod AMI release (MAJOR.MINOR.PATCH); None: the latest when the group is created.
    image_release_version: str | None = None
    scheduled_update: ScheduledUpdate | None = None
    # AutoPatchConfig PatchingStrategy (WhenIdle / WhenAllIdle); None: no automatic patching.
    auto_patch: str | None = None
    # "on-demand" / "spot"; None: HyperPod's default.
    capacity: str | None = None
    # The group's own AMI (ImageId, ami-...); None: HyperPod's AMI.
    image_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class HyperPodClusterProps:
    """`availability_zones`: the cluster-level subnets (groups without a training plan).
    `tiered_storage_percent`: memory share of the managed checkpoint tier; None: off."""

    availability_zones: tuple[str, ...]
    node_recovery: str
    node_provisioning_mode: str | None
    tiered_storage_percent: int | None
    autoscaling: bool
    log_retention_days: int
    instance_groups: tuple[InstanceGroupProps, ...]


class HyperPodCluster(Construct):
    """The cluster resource; `cluster_name` and `cluster_arn` identify it to other stacks."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        props: HyperPodClusterProps,
        eks_cluster_arn: str,
        subnets_by_az: Mapping[str, ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        execution_role: iam.IRole,
        lifecycle: LifecycleScripts,
        removal_policy: cdk.RemovalPolicy,
        autoscaling_role: iam.IRole | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if props.autoscaling and autoscaling_role is None:
            raise ValueError("autoscaling is enabled but no autoscaling role was given")
        self._subnets_by_az = dict(subnets_by_az)
        self._security_group_ids = [security_group.security_group_id]
        self._execution_role = execution_role
        self._lifecycle = lifecycle
        self.volume_key = self._volume_key(props, removal_policy)

        self.resource = self._cluster_resource(
            cluster_name, props, eks_cluster_arn, autoscaling_role
        )
        self.resource.override_logical_id(CLUSTER_LOGICAL_ID)
        if self.volume_key is not None:
            # Nodes launch while the cluster is created: the role must hold the key first.
            self._volume_key_grant.apply_before(self.resource)
        self.resource.apply_removal_policy(removal_policy)
        # Nodes download the scripts while the cluster is created: they must be in S3 first.
        self.resource.node.add_dependency(lifecycle.deployment)
        self._grant_rollback_alarms(props.instance_groups)
        if any(g.image_release_version is not None for g in props.instance_groups):
            _acknowledge_image_release_version(self.resource)
        self.cluster_name = cluster_name
        self.cluster_arn = self.resource.attr_cluster_arn
        self.log_retention = self._log_retention(
            cluster_name, props.log_retention_days, removal_policy
        )
        self._acknowledge_log_retention_handler()

    def _cluster_resource(
        self,
        cluster_name: str,
        props: HyperPodClusterProps,
        eks_cluster_arn: str,
        autoscaling_role: iam.IRole | None,
    ) -> sagemaker.CfnCluster:
        tiered_percent = props.tiered_storage_percent
        return sagemaker.CfnCluster(
            self,
            "Resource",
            cluster_name=cluster_name,
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(
                    cluster_arn=eks_cluster_arn
                )
            ),
            # Groups without a training plan may land in any cluster-level subnet, as the
            # capacity plan assumed when it sized them. VpcConfig is fixed at creation, so it
            # lists hyperpod.availability_zones (which never grows with network AZs).
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                subnets=[
                    self._subnets_by_az[az].subnet_id for az in sorted(props.availability_zones)
                ],
                security_group_ids=self._security_group_ids,
            ),
            instance_groups=[
                self._instance_group(g) for g in sorted(props.instance_groups, key=_by_name)
            ],
            node_recovery=props.node_recovery,
            node_provisioning_mode=props.node_provisioning_mode,
            # Stated even when off, so turning it off in config turns it off in the cluster.
            tiered_storage_config=sagemaker.CfnCluster.TieredStorageConfigProperty(
                mode="Disable" if tiered_percent is None else "Enable",
                instance_memory_allocation_percentage=tiered_percent,
            ),
            auto_scaling=sagemaker.CfnCluster.ClusterAutoScalingConfigProperty(
                mode="Enable", auto_scaler_type="Karpenter"
            )
            if props.autoscaling
            else None,
            # Only the autoscaler assumes the cluster role; without autoscaling there is none.
            cluster_role=autoscaling_role.role_arn
            if props.autoscaling and autoscaling_role is not None
            else None,
        )

    def _log_retention(
        self, cluster_name: str, retention_days: int, removal_policy: cdk.RemovalPolicy
    ) -> logs.LogRetention:
        # HyperPod creates /aws/sagemaker/Clusters/<name>/<cluster id> (node logs and the
        # lifecycle scripts' output) with no retention; the ID exists only once the cluster
        # does, so CDK's LogRetention (create if missing, then set) runs after it.
        return logs.LogRetention(
            self,
            "LogRetention",
            log_group_name=cdk.Fn.join(
                "",
                [
                    f"{LOG_GROUP_PREFIX}/{cluster_name}/",
                    cdk.Fn.select(1, cdk.Fn.split("/", self.cluster_arn)),
                ],
            ),
            retention=RETENTION_DAYS[retention_days],
            removal_policy=removal_policy,
        )

    def _acknowledge_log_retention_handler(self) -> None:
        """LogRetention's handler is CDK's per-stack singleton; its findings are accepted on
        its role and policy only."""
        handler = cdk.Stack.of(self).node.try_find_child(LOG_RETENTION_HANDLER_ID)
        if handler is None:
            raise ValueError(f"CDK's LogRetention handler {LOG_RETENTION_HANDLER_ID} moved")
        function = handler.node.find_child("Resource")
        if isinstance(function, cdk.CfnResource):
            # CDK lists the role it also references in DependsOn (same order either way).
            ignore_cfn_lint(function, "W3005")
        role = handler.node.find_child("ServiceRole")
        acknowledge(
            role,
            "IAM4",
            "CDK's LogRetention handler uses AWSLambdaBasicExecutionRole: it writes its own "
            "log group and creates the cluster's group when HyperPod has not yet; the managed "
            "policy grants CloudWatch Logs only.",
            finding="Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        )
        policy = role.node.find_child("DefaultPolicy").node.default_child
        if not isinstance(policy, iam.CfnPolicy):
            raise TypeError("CDK's LogRetention handler policy is no longer an iam.CfnPolicy")
        acknowledge_known_wildcards(
            policy,
            [
                (
                    re.compile(r"Resource::\*"),
                    "CDK's LogRetention handler sets and removes retention policies by log "
                    "group name given at deploy time (logs:PutRetentionPolicy, "
                    "logs:DeleteRetentionPolicy take no narrower resource here).",
                ),
                (
                    re.compile(
                        rf"Resource::arn:[^:]+:logs:[^:]+:\d{{12}}:log-group:"
                        rf"{re.escape(f'{LOG_GROUP_PREFIX}/{self.cluster_name}/')}.*:\*"
                    ),
                    "The cluster's own log group (named by its cluster ID) and its streams.",
                ),
            ],
        )

    def _instance_group(
        self, group: InstanceGroupProps
    ) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        """One group's properties, computed from that group alone."""
        cfn = sagemaker.CfnCluster
        kubernetes = None
        if group.labels or group.taints:
            kubernetes = cfn.ClusterKubernetesConfigProperty(
                labels=dict(sorted(group.labels.items())) or None,
                taints=[
                    cfn.ClusterKubernetesTaintProperty(key=t.key, effect=t.effect, value=t.value)
                    for t in group.taints
                ]
                or None,
            )
        plan = group.training_plan
        return cfn.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.count,
            min_instance_count=group.min_count,
            threads_per_core=group.threads_per_core,
            execution_role=self._execution_role.role_arn,
            life_cycle_config=cfn.ClusterLifeCycleConfigProperty(
                source_s3_uri=self._lifecycle.s3_uri, on_create=self._lifecycle.on_create
            ),
            instance_storage_configs=self._storage(group),
            on_start_deep_health_checks=list(group.deep_health_checks) or None,
            kubernetes_config=kubernetes,
            # The interface the capacity plan sized the subnets for (efa takes an address
            # per extra network card, efa-only none).
            network_interface=cfn.ClusterNetworkInterfaceProperty(interface_type=group.interface)
            if group.interface is not None
            else None,
            training_plan_arn=plan.arn if plan is not None else None,
            # Reserved capacity exists in one AZ only: launch the group in that AZ's subnet.
            override_vpc_config=cfn.VpcConfigProperty(
                subnets=[self._subnets_by_az[plan.availability_zone].subnet_id],
                security_group_ids=self._security_group_ids,
            )
            if plan is not None
            else None,
            image_release_version=group.image_release_version,
            image_id=group.image_id,
            scheduled_update_config=_scheduled_update(group.scheduled_update),
            auto_patch_config=cfn.AutoPatchConfigProperty(patching_strategy=group.auto_patch)
            if group.auto_patch is not None
            else None,
            # The options objects are empty: their presence chooses the capacity type.
            capacity_requirements=_capacity(group.capacity),
        )

    def _volume_key(
        self, props: HyperPodClusterProps, removal_policy: cdk.RemovalPolicy
    ) -> kms.Key | None:
        """The customer key of the nodes' root and /opt/sagemaker volumes, where HyperPod
        takes one: only with continuous node provisioning (AWS's "Customer managed AWS KMS key
        encryption for SageMaker HyperPod", smcluster-cmk). HyperPod creates grants on it for
        EC2 with the instance groups' execution role whenever it launches nodes (scale-out,
        BatchAddClusterNodes, UpdateClusterSoftware), so that role gets kms:CreateGrant and
        kms:DescribeKey on this key, in its IAM policy and in the key policy (which names its
        one user, and keeps CDK's account statement for administration); no
        encryption-context condition (HyperPod passes none)."""
        if props.node_provisioning_mode != CONTINUOUS_PROVISIONING or not any(
            g.volume_customer_key for g in props.instance_groups
        ):
            return None
        key = kms.Key(
            self,
            "VolumeKey",
            description=f"Encrypts the node volumes of HyperPod cluster {cdk.Stack.of(self).stack_name}",
            enable_key_rotation=True,
            removal_policy=removal_policy,
            pending_window=cdk.Duration.days(
                30 if removal_policy == cdk.RemovalPolicy.RETAIN else 7
            ),
        )
        actions = ("kms:CreateGrant", "kms:DescribeKey")
        self._volume_key_grant = key.grant(self._execution_role, *actions)
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="HyperPodNodeVolumes",
                principals=[self._execution_role],
                actions=list(actions),
                resources=["*"],
            )
        )
        return key

    def _storage(
        self, group: InstanceGroupProps
    ) -> list[sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty]:
        """The /opt/sagemaker volume, and for a group on the volume key the root volume, both
        on it. Groups without the setting keep AWS's key: a running group's key cannot
        change, so the key is something a group is created with."""
        cfn = sagemaker.CfnCluster
        key_arn = (
            self.volume_key.key_arn
            if self.volume_key is not None and group.volume_customer_key
            else None
        )
        configs = [
            cfn.ClusterEbsVolumeConfigProperty(
                volume_size_in_gb=group.ebs_volume_gib, volume_kms_key_id=key_arn
            )
        ]
        if key_arn is not None:
            # RootVolume: the size is HyperPod's; only the key is given.
            configs.append(
                cfn.ClusterEbsVolumeConfigProperty(root_volume=True, volume_kms_key_id=key_arn)
            )
        return [cfn.ClusterInstanceStorageConfigProperty(ebs_volume_config=c) for c in configs]

    def _grant_rollback_alarms(self, groups: tuple[InstanceGroupProps, ...]) -> None:
        """cloudwatch:DescribeAlarms on the named rollback alarms only, for the role the
        groups run with; the cluster waits for the grant."""
        names = sorted(
            {a for g in groups if g.scheduled_update for a in g.scheduled_update.rollback_alarms}
        )
        if not names:
            return
        stack = cdk.Stack.of(self)
        grant = self._execution_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReadRollbackAlarms",
                actions=["cloudwatch:DescribeAlarms"],
                resources=[
                    stack.format_arn(
                        service="cloudwatch",
                        resource="alarm",
                        resource_name=name,
                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                    )
                    for name in names
                ],
            )
        )
        if grant.policy_dependable is not None:
            self.resource.node.add_dependency(grant.policy_dependable)


def _by_name(group: InstanceGroupProps) -> str:
    return group.name


def _batch(size: BatchSize) -> sagemaker.CfnCluster.CapacitySizeConfigProperty:
    return sagemaker.CfnCluster.CapacitySizeConfigProperty(type=size.kind, value=size.value)


def _scheduled_update(
    update: ScheduledUpdate | None,
) -> sagemaker.CfnCluster.ScheduledUpdateConfigProperty | None:
    if update is None:
        return None
    cfn = sagemaker.CfnCluster
    if update.max_batch is None:
        # RollingUpdatePolicy requires MaximumBatchSize; the rest acts between batches.
        if update.rollback_batch or update.wait_seconds is not None or update.rollback_alarms:
            raise ValueError("rollback_batch, wait_seconds and rollback_alarms need max_batch")
        return cfn.ScheduledUpdateConfigProperty(schedule_expression=update.schedule_expression)
    rollback = update.rollback_batch
    return cfn.ScheduledUpdateConfigProperty(
        schedule_expression=update.schedule_expression,
        deployment_config=cfn.DeploymentConfigProperty(
            rolling_update_policy=cfn.RollingUpdatePolicyProperty(
                maximum_batch_size=_batch(update.max_batch),
                rollback_maximum_batch_size=_batch(rollback) if rollback else None,
            ),
            wait_interval_in_seconds=update.wait_seconds,
            auto_rollback_configuration=[
                cfn.AlarmDetailsProperty(alarm_name=name) for name in update.rollback_alarms
            ]
            or None,
        ),
    )


def _capacity(
    capacity: str | None,
) -> sagemaker.CfnCluster.ClusterCapacityRequirementsProperty | None:
    if capacity is None:
        return None
    if capacity == "spot":
        return sagemaker.CfnCluster.ClusterCapacityRequirementsProperty(spot={})
    if capacity == "on-demand":
        return sagemaker.CfnCluster.ClusterCapacityRequirementsProperty(on_demand={})
    raise ValueError(f"capacity {capacity!r}: use 'on-demand' or 'spot'")


def _acknowledge_image_release_version(resource: sagemaker.CfnCluster) -> None:
    """CDK's built-in template validation bundles an AWS::SageMaker::Cluster schema older
    than ImageReleaseVersion and reports it as an unexpected property (F3002); cfn-lint 1.58,
    which the test suite runs on every template, has the current schema and checks it."""
    cdk.Validations.of(resource).acknowledge(
        cdk.Acknowledgment(
            id="CloudFormation-Validate::F3002",
            reason="InstanceGroups[].ImageReleaseVersion postdates the AWS::SageMaker::Cluster "
            "schema CDK's validator bundles; cfn-lint checks it against the current schema",
        )
    )
