"""Observability of one environment: the managed Prometheus workspace with the repository's
alert rules and Alertmanager, the HyperPod observability add-on writing to it (its collector
gets `aps:RemoteWrite` on this workspace only, through EKS Pod Identity), a managed collector
scraping the trainer's own metrics into it (platform_constructs/metrics_scraper.py), the
CloudWatch Observability add-on shipping every container's logs to log groups created here
(config/container_logs.py),
CloudWatch alarms and EventBridge rules, and the alarm topic they all notify.

Deployed after the cluster add-ons: the add-on needs running nodes (HyperPod observability
add-on setup guide: at least one node before installing) and the pod identity agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from config.addons import CLOUDWATCH_OBSERVABILITY, OBSERVABILITY, Addon
from config.schema import EksConfig
from config.schema.observability import GRAFANA_ENDPOINT_OUTPUT, ObservabilityConfig
from platform_constructs.alarms import PlatformAlarms
from platform_constructs.container_logs import ContainerLogGroups
from platform_constructs.eks_addons import (
    AddonWithPodIdentity,
    IdentityContext,
    PinnedAddon,
    PlacedAddons,
    place_addons,
)
from platform_constructs.eks_fsx_volume import LustreFileSystem
from platform_constructs.log_groups import stack_log_key
from platform_constructs.metrics_scraper import TrainingMetricsScraper
from platform_constructs.monitoring import (
    AlarmTopic,
    GrafanaWorkspace,
    PrometheusWorkspace,
    RuleGroups,
)
from platform_constructs.nag import acknowledge_resource
from platform_constructs.observability import QUOTA_NAMESPACE, rule_files, team_quota_rules

# The workspace's own log group (alert and rule evaluation errors).
WORKSPACE_LOG_RETENTION_DAYS = 90


def addon_configuration(
    observability: ObservabilityConfig, *, workspace_arn: str, remote_write_base: str
) -> dict[str, Any]:
    """The add-on's configurationValues (keys as in AWS's HyperPod observability template)."""
    levels = observability.metrics
    interval = observability.scrape_interval_s

    def category(level: str) -> dict[str, Any]:
        return {"level": level, "scrapeInterval": interval}

    return {
        "ampWorkspace": {"prometheusEndpoint": remote_write_base, "arn": workspace_arn},
        "metricsProvider": {
            "trainingMetrics": category(levels.training),
            "customMetrics": category(levels.cluster),
            "nodeMetrics": category(levels.node),
            "acceleratedComputeMetrics": category(levels.accelerated_compute),
            "networkMetrics": category(levels.network),
            "taskGovernanceMetrics": category(levels.task_governance),
            "scalingMetrics": category(levels.scaling),
        },
        # Container logs stay with HyperPod's own log delivery.
        "logging": {"enabled": False},
    }


class ObservabilityStack(cdk.Stack):
    """Exposes `topic`, `workspace`, `container_logs`, `addons` and `identities` (name ->
    PinnedAddon / AddonWithPodIdentity), `scraper`, `alarms` and `grafana` (None unless asked).

    The trainer's collector needs the cluster (`eks_cluster_arn`), the subnets its ENIs go in
    (`scraper_subnets`: the control plane's, two AZs at least), the group of the nodes its
    pods run on (`pod_security_group`) and the control plane's group (`api_security_group`).
    `team_gpu_quotas`: team namespace -> guaranteed GPUs (config/gpu_accounting.py)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        observability: ObservabilityConfig,
        eks: EksConfig,
        addons: Sequence[Addon],
        eks_cluster_name: str,
        eks_cluster_arn: str,
        vpc: ec2.IVpc,
        scraper_subnets: Sequence[ec2.ISubnet],
        pod_security_group: ec2.ISecurityGroup,
        api_security_group: ec2.ISecurityGroup,
        file_system: LustreFileSystem,
        nat_gateway_ids: Mapping[str, str],
        removal_policy: cdk.RemovalPolicy,
        team_gpu_quotas: Mapping[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        alarm_topic = AlarmTopic(
            self, "AlarmTopic", emails=observability.alarm_emails, removal_policy=removal_policy
        )
        self.topic = alarm_topic.topic
        self.workspace = PrometheusWorkspace(
            self,
            "Prometheus",
            key=alarm_topic.key,
            topic=self.topic,
            rules=RuleGroups(files=_rule_documents(team_gpu_quotas)),
            retention_days=observability.prometheus_retention_days,
            log_retention_days=WORKSPACE_LOG_RETENTION_DAYS,
            removal_policy=removal_policy,
        )
        # Container logs: their groups first (the environment's control-plane retention, the
        # stack's log key), so Fluent Bit finds them instead of creating plain ones.
        self.container_logs = ContainerLogGroups(
            self,
            "ContainerLogs",
            eks_cluster_name=eks_cluster_name,
            retention_days=eks.log_retention_days,
            encryption_key=stack_log_key(self, removal_policy=removal_policy),
            removal_policy=removal_policy,
        )
        placed = self._place_addons(observability, addons, eks_cluster_name, removal_policy)
        self.addons: dict[str, PinnedAddon] = placed.addons
        self.identities: dict[str, AddonWithPodIdentity] = placed.identities
        self._let_fluent_bit_write_container_logs()
        self.scraper = TrainingMetricsScraper(
            self,
            "TrainerScraper",
            cluster_arn=eks_cluster_arn,
            workspace_arn=self.workspace.arn,
            vpc=vpc,
            subnets=scraper_subnets,
            pod_security_group=pod_security_group,
            api_security_group=api_security_group,
            scrape_interval_s=observability.scrape_interval_s,
        )
        self.grafana = self._grafana(observability.grafana)
        self.alarms = PlatformAlarms(
            self,
            "Alarms",
            topic=self.topic,
            eks_cluster_name=eks_cluster_name,
            file_system_id=file_system.file_system_id,
            file_system_capacity_gib=file_system.capacity_gib,
            fsx_free_percent=observability.fsx_free_capacity_percent,
            nat_gateway_ids=nat_gateway_ids,
        )

    def _place_addons(
        self,
        observability: ObservabilityConfig,
        addons: Sequence[Addon],
        eks_cluster_name: str,
        removal_policy: cdk.RemovalPolicy,
    ) -> PlacedAddons:
        """The add-ons, their identities scoped to the workspace and the container log
        groups, the observability add-on configured to write to the workspace."""
        return place_addons(
            self,
            addons,
            cluster_name=eks_cluster_name,
            removal_policy=removal_policy,
            context=IdentityContext(
                workspace_arn=self.workspace.arn,
                container_log_group_arns=self.container_logs.writer_arns,
            ),
            configurations={
                OBSERVABILITY: addon_configuration(
                    observability,
                    workspace_arn=self.workspace.arn,
                    remote_write_base=self.workspace.remote_write_base,
                )
            },
        )

    def _let_fluent_bit_write_container_logs(self) -> None:
        """The CloudWatch Observability add-on's identity waits for its log groups and may
        create streams in them only."""
        container_logs_identity = self.identities[CLOUDWATCH_OBSERVABILITY]
        container_logs_identity.node.add_dependency(self.container_logs)
        for arn in self.container_logs.stream_arns:
            acknowledge_resource(
                container_logs_identity.identity.role,
                "IAM5",
                "Fluent Bit creates one stream per container in each of the platform's container "
                "log groups; the streams' names are only known on the nodes",
                resource=arn,
            )

    def _grafana(self, wanted: bool) -> GrafanaWorkspace | None:
        if not wanted:
            return None
        grafana = GrafanaWorkspace(self, "Grafana", prometheus_workspace_arn=self.workspace.arn)
        cdk.CfnOutput(
            self,
            GRAFANA_ENDPOINT_OUTPUT,
            value=grafana.workspace.attr_endpoint,
            description="Grafana workspace endpoint; hpctl job describe links the per-job "
            "dashboard on it",
        )
        return grafana


def _rule_documents(team_gpu_quotas: Mapping[str, float] | None) -> dict[str, str]:
    """Rule groups namespace -> its rules: the repository's files and, with quotas, the
    generated team quota rules."""
    rule_documents = {path.stem: path.read_text(encoding="utf-8") for path in rule_files()}
    if team_gpu_quotas:
        # Each team's GPU quota, from config: the accounting rules (rules/teams.yaml)
        # compare GPU-hours with it.
        rule_documents[QUOTA_NAMESPACE] = team_quota_rules(team_gpu_quotas)
    return rule_documents
