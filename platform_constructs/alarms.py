"""CloudWatch alarms and EventBridge rules for what matters without Grafana: HyperPod node
health events, FSx free capacity, NAT gateway port exhaustion and the EKS control plane.
Every alarm and rule notifies one topic.

Sources: HyperPod publishes node health and cluster events to EventBridge (source
`aws.sagemaker`, detail types in `HYPERPOD_EVENTS`; SageMaker developer guide, "Automating
SageMaker with EventBridge"); FSx for Lustre metrics are in `AWS/FSx` by `FileSystemId`
(FSx Lustre guide, monitoring with CloudWatch); EKS vends control-plane metrics in `AWS/EKS`
by `ClusterName` for Kubernetes 1.28 and later (EKS user guide, "Monitor cluster data with
Amazon CloudWatch"); NAT gateways publish `ErrorPortAllocation` in `AWS/NATGateway`.
"""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_sns as sns
from constructs import Construct

GIB = 1024**3
FIVE_MINUTES = cdk.Duration.minutes(5)
HYPERPOD_EVENTS = {
    "NodeHealth": "SageMaker HyperPod Cluster Node Health Event",
    "ClusterState": "SageMaker HyperPod Cluster State Change",
    "ClusterEvent": "SageMaker HyperPod Cluster Event",
}
# Of the cluster events (continuous provisioning), only failures notify.
NOTIFIED_EVENT_LEVELS = {"ClusterEvent": ["Error"]}
# API server 5xx responses in five minutes that page (a healthy control plane returns none;
# a few during an upgrade are expected).
API_SERVER_5XX = 50
# Pods that cannot be scheduled for 15 minutes: capacity or taints are wrong.
UNSCHEDULABLE_PODS = 1


class PlatformAlarms(Construct):
    """Exposes `alarms` (name -> Alarm) and `rules` (name -> EventBridge Rule)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topic: sns.ITopic,
        eks_cluster_name: str,
        file_system_id: str,
        file_system_capacity_gib: int,
        fsx_free_percent: int,
        nat_gateway_ids: Mapping[str, str],
    ) -> None:
        """`nat_gateway_ids`: AZ -> NAT gateway ID (empty without NAT)."""
        super().__init__(scope, construct_id)
        notify = actions.SnsAction(topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self.rules: dict[str, events.Rule] = {}

        self._hyperpod_events(topic, notify)
        self._fsx_capacity_alarm(
            file_system_id, file_system_capacity_gib, fsx_free_percent, notify=notify
        )
        self._nat_port_alarms(nat_gateway_ids, notify=notify)
        self._control_plane_alarms(eks_cluster_name, notify=notify)

    def _hyperpod_events(self, topic: sns.ITopic, notify: actions.SnsAction) -> None:
        # Each environment has its own account, so the account's HyperPod events are this
        # cluster's; the documented examples disagree on the ARN form in `resources`
        # (cluster name or id), so the rules do not filter on it.
        for name, detail_type in HYPERPOD_EVENTS.items():
            levels = NOTIFIED_EVENT_LEVELS.get(name)
            rule = events.Rule(
                self,
                f"{name}Rule",
                description=f"{detail_type}s of this environment's HyperPod cluster",
                event_pattern=events.EventPattern(
                    source=["aws.sagemaker"],
                    detail_type=[detail_type],
                    detail={"EventDetails": {"EventLevel": levels}} if levels else None,
                ),
            )
            rule.add_target(targets.SnsTopic(topic))
            self.rules[name] = rule
        # A count of matched node health events, so the event stream also shows as an alarm
        # (and on dashboards) next to the others.
        self._alarm(
            "NodeHealthEvents",
            cloudwatch.Metric(
                namespace="AWS/Events",
                metric_name="MatchedEvents",
                dimensions_map={"RuleName": self.rules["NodeHealth"].rule_name},
                statistic="Sum",
                period=FIVE_MINUTES,
            ),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description="HyperPod reported node health events (faulty nodes, reboots, "
            "replacements) in the last five minutes",
            notify=notify,
        )

    def _fsx_capacity_alarm(
        self,
        file_system_id: str,
        file_system_capacity_gib: int,
        fsx_free_percent: int,
        *,
        notify: actions.SnsAction,
    ) -> None:
        self._alarm(
            "FsxFreeCapacity",
            cloudwatch.Metric(
                namespace="AWS/FSx",
                metric_name="FreeDataStorageCapacity",
                dimensions_map={"FileSystemId": file_system_id},
                statistic="Minimum",
                period=FIVE_MINUTES,
            ),
            threshold=file_system_capacity_gib * GIB * fsx_free_percent / 100,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=3,
            description=f"FSx for Lustre has less than {fsx_free_percent} % of "
            f"{file_system_capacity_gib} GiB free: checkpoints and datasets will fail to write",
            notify=notify,
        )

    def _nat_port_alarms(
        self, nat_gateway_ids: Mapping[str, str], *, notify: actions.SnsAction
    ) -> None:
        for az, gateway in sorted(nat_gateway_ids.items()):
            self._alarm(
                f"NatPortAllocation-{az}",
                cloudwatch.Metric(
                    namespace="AWS/NATGateway",
                    metric_name="ErrorPortAllocation",
                    dimensions_map={"NatGatewayId": gateway},
                    statistic="Sum",
                    period=FIVE_MINUTES,
                ),
                threshold=1,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                description=f"The NAT gateway in {az} could not allocate a source port",
                notify=notify,
            )

    def _control_plane_alarms(self, eks_cluster_name: str, *, notify: actions.SnsAction) -> None:
        self._alarm(
            "ApiServer5xx",
            cloudwatch.Metric(
                namespace="AWS/EKS",
                metric_name="apiserver_request_total_5XX",
                dimensions_map={"ClusterName": eks_cluster_name},
                statistic="Sum",
                period=FIVE_MINUTES,
            ),
            threshold=API_SERVER_5XX,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description="The EKS API server answered with 5xx errors",
            notify=notify,
        )
        self._alarm(
            "UnschedulablePods",
            cloudwatch.Metric(
                namespace="AWS/EKS",
                metric_name="scheduler_pending_pods_UNSCHEDULABLE",
                dimensions_map={"ClusterName": eks_cluster_name},
                statistic="Maximum",
                period=FIVE_MINUTES,
            ),
            threshold=UNSCHEDULABLE_PODS,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=3,
            description="Pods have been unschedulable for 15 minutes (capacity, taints or quota)",
            notify=notify,
        )

    def _alarm(
        self,
        name: str,
        metric: cloudwatch.Metric,
        *,
        threshold: float,
        comparison: cloudwatch.ComparisonOperator,
        description: str,
        notify: actions.SnsAction,
        evaluation_periods: int = 1,
    ) -> None:
        alarm = cloudwatch.Alarm(
            self,
            name,
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=evaluation_periods,
            alarm_description=description,
            # No data means nothing happened (no events, no errors), not an outage.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(notify)
        self.alarms[name] = alarm
