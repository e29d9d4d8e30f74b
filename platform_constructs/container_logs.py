"""The log groups the CloudWatch Observability add-on's Fluent Bit writes container and node
logs to (config/container_logs.py), created before the add-on with the environment's retention
and the stack's log key. Fluent Bit would otherwise create them itself on first write, without
encryption and without a retention.

The names are fixed by Fluent Bit's configuration (`/aws/containerinsights/<cluster>/<kind>`),
so they are set here, not generated; a group kept by a retained stack must be deleted (or
imported) before the stack can be created again."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from config.container_logs import CONTAINER_LOG_KINDS, container_log_group
from platform_constructs.l1 import default_resource
from platform_constructs.log_groups import log_group


class ContainerLogGroups(Construct):
    """Exposes `groups` (kind -> LogGroup), `writer_arns` (the ARNs a writer is granted on:
    each group, and its streams) and `stream_arns` (those of the streams: a wildcard, since
    Fluent Bit names a stream per container)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        eks_cluster_name: str,
        retention_days: int,
        encryption_key: kms.IKey,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.groups: dict[str, logs.LogGroup] = {}
        arns: list[str] = []
        streams: list[str] = []
        for kind in CONTAINER_LOG_KINDS:
            name = container_log_group(eks_cluster_name, kind)
            group = log_group(
                self,
                kind.capitalize(),
                retention_days=retention_days,
                removal_policy=removal_policy,
                encryption_key=encryption_key,
            )
            default_resource(group, logs.CfnLogGroup).log_group_name = name
            self.groups[kind] = group
            for resource_name in (name, f"{name}:log-stream:*"):
                arns.append(
                    stack.format_arn(
                        service="logs",
                        resource="log-group",
                        resource_name=resource_name,
                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                    )
                )
            streams.append(arns[-1])
        self.writer_arns: tuple[str, ...] = tuple(arns)
        self.stream_arns: tuple[str, ...] = tuple(streams)
