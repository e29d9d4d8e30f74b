"""Where the platform's metrics and alerts go: an Amazon Managed Service for Prometheus
workspace (KMS-encrypted, its alert rules and Alertmanager definition from files in the
repository; its log group encrypted with the stack's log key) and the alarm topic everything
notifies.

The topic is encrypted with the same key; the services that publish to it (CloudWatch
alarms, EventBridge rules, the workspace's Alertmanager) get the key through its policy and
the topic through its resource policy, each conditioned on this account.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_aps as aps
from aws_cdk import aws_grafana as grafana
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from platform_constructs.log_groups import log_group, stack_log_key
from platform_constructs.nag import acknowledge

# Services that publish to the alarm topic and therefore encrypt with its key.
TOPIC_PUBLISHERS = ("cloudwatch.amazonaws.com", "events.amazonaws.com", "aps.amazonaws.com")


def alertmanager_definition(topic_arn: str, region: str) -> str:
    """Every alert to the alarm topic, grouped per alert name (AMP Alertmanager format)."""
    return "\n".join(
        [
            "alertmanager_config: |",
            "  route:",
            "    receiver: sns",
            "    group_by: [alertname, cluster_id]",
            "    group_wait: 30s",
            "    group_interval: 5m",
            "    repeat_interval: 4h",
            "  receivers:",
            "    - name: sns",
            "      sns_configs:",
            f"        - topic_arn: {topic_arn}",
            "          sigv4:",
            f"            region: {region}",
            "          attributes:",
            "            source: prometheus",
            "",
        ]
    )


class AlarmTopic(Construct):
    """An SNS topic encrypted with its own rotated key; `emails` subscribe (and confirm)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        emails: Sequence[str],
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description="Platform alarms and the managed Prometheus workspace",
            enable_key_rotation=True,
            removal_policy=removal_policy,
        )
        for service in TOPIC_PUBLISHERS:
            self.key.grant(iam.ServicePrincipal(service), "kms:GenerateDataKey*", "kms:Decrypt")
        self.topic = sns.Topic(self, "Topic", master_key=self.key, enforce_ssl=True)
        for email in emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))


@dataclass(frozen=True, kw_only=True)
class RuleGroups:
    """One rule groups namespace per file: namespace name -> Prometheus rule file text."""

    files: Mapping[str, str]


class PrometheusWorkspace(Construct):
    """The workspace, its rule groups and Alertmanager (routing to `topic`), and its log
    group (`log_group`, encrypted with `log_key`). Exposes `workspace`, `arn`, `remote_write_base` (the endpoint without a trailing
    slash, as the observability add-on expects it)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        key: kms.IKey,
        topic: sns.ITopic,
        rules: RuleGroups,
        retention_days: int,
        log_retention_days: int,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        # Encrypted with the stack's log key: `key` (the workspace's and topic's) does not
        # admit CloudWatch Logs.
        self.log_key = stack_log_key(self, removal_policy=removal_policy)
        self.log_group = log_group(
            self,
            "Logs",
            retention_days=log_retention_days,
            removal_policy=removal_policy,
            encryption_key=self.log_key,
        )
        self.workspace = aps.CfnWorkspace(
            self,
            "Workspace",
            kms_key_arn=key.key_arn,
            alert_manager_definition=alertmanager_definition(topic.topic_arn, stack.region),
            logging_configuration=aps.CfnWorkspace.LoggingConfigurationProperty(
                log_group_arn=self.log_group.log_group_arn
            ),
            workspace_configuration=aps.CfnWorkspace.WorkspaceConfigurationProperty(
                retention_period_in_days=retention_days
            ),
        )
        self.workspace.apply_removal_policy(removal_policy)
        self.arn = self.workspace.attr_arn
        self.remote_write_base = (
            f"https://aps-workspaces.{stack.region}.{stack.url_suffix}/workspaces/"
            f"{self.workspace.attr_workspace_id}"
        )
        self.rule_groups = {
            name: aps.CfnRuleGroupsNamespace(
                self, f"Rules-{name}", name=name, workspace=self.arn, data=text
            )
            for name, text in sorted(rules.files.items())
        }
        # Alertmanager publishes to the topic as the AMP service, for this workspace only.
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("aps.amazonaws.com")],
                actions=["sns:Publish", "sns:GetTopicAttributes"],
                resources=[topic.topic_arn],
                conditions={
                    "ArnEquals": {"aws:SourceArn": self.arn},
                    "StringEquals": {"aws:SourceAccount": stack.account},
                },
            )
        )


class GrafanaWorkspace(Construct):
    """An Amazon Managed Grafana workspace (IAM Identity Center sign-in) whose role may query
    `prometheus_workspace_arn` and read CloudWatch metrics (FSx, EKS, alarms); dashboards
    are imported from the repository's files."""

    def __init__(
        self, scope: Construct, construct_id: str, *, prometheus_workspace_arn: str
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("grafana.amazonaws.com").with_conditions(
                {"StringEquals": {"aws:SourceAccount": stack.account}}
            ),
            description="Managed Grafana: query the platform's Prometheus and CloudWatch",
            inline_policies={
                "Query": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            actions=[
                                "aps:QueryMetrics",
                                "aps:GetSeries",
                                "aps:GetLabels",
                                "aps:GetMetricMetadata",
                            ],
                            resources=[prometheus_workspace_arn],
                        ),
                        iam.PolicyStatement(
                            actions=[
                                "cloudwatch:GetMetricData",
                                "cloudwatch:ListMetrics",
                                "cloudwatch:DescribeAlarms",
                            ],
                            resources=["*"],
                        ),
                    ]
                )
            },
        )
        acknowledge(
            self.role,
            "IAM5",
            "CloudWatch metric reads (GetMetricData, ListMetrics, DescribeAlarms) have no "
            "resource type; they are read-only.",
            finding="Resource::*",
        )
        self.workspace = grafana.CfnWorkspace(
            self,
            "Workspace",
            account_access_type="CURRENT_ACCOUNT",
            authentication_providers=["AWS_SSO"],
            permission_type="CUSTOMER_MANAGED",
            role_arn=self.role.role_arn,
            data_sources=["PROMETHEUS", "CLOUDWATCH"],
            description="Dashboards of the HyperPod platform (files in the repository)",
        )
