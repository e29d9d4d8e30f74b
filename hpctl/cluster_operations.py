"""On-demand deep health checks and HyperPod's cluster operations, as `hpctl cluster
health-check` and `hpctl cluster operations` use them: the checked request of
StartClusterHealthCheck, and ListClusterOperations / DescribeClusterOperation answers turned
into plain rows and reports. Shapes and values from the SageMaker API model botocore ships
(the project pins it); the commands are in `hpctl.cluster_operations_cmd`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from config.schema import EnvironmentConfig
from hpctl import aws
from hpctl.cluster import NODE_ID, checked_group
from hpctl.errors import InputError
from hpctl.options import utc_iso

# The deep health checks StartClusterHealthCheck accepts (DeepHealthCheckType).
HEALTH_CHECKS = aws.api_enum("sagemaker", "DeepHealthCheckType")
# Without --check: the checks an instance group can also run when a node starts (the
# config's `deep_health_checks`); MultiNodeTrainingValidation only when asked for.
DEFAULT_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")
# ClusterOperationType and ClusterOperationStatus: what --type and --status may name.
OPERATION_TYPES = aws.api_enum("sagemaker", "ClusterOperationType")
OPERATION_STATUSES = aws.api_enum("sagemaker", "ClusterOperationStatus")
# ClusterOperationId's pattern in the API model.
OPERATION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
OPERATION_ID_TEXT = "8-4-4-4-12 lowercase hex digits, from `hpctl cluster operations`"


def _choices(values: frozenset[str]) -> str:
    return ", ".join(sorted(values))


def checked_checks(values: Sequence[str]) -> list[str]:
    """The --check values (de-duplicated, order kept), or the default checks."""
    bad = [v for v in values if v not in HEALTH_CHECKS]
    if bad:
        raise InputError(
            f"--check: {', '.join(map(repr, bad))} is not a deep health check; use "
            f"{_choices(HEALTH_CHECKS)}"
        )
    return list(dict.fromkeys(values)) or list(DEFAULT_HEALTH_CHECKS)


def checked_groups(values: Sequence[str], config: EnvironmentConfig | None) -> list[str]:
    """The --instance-group values, each a group name and, with --env, one the environment
    configures (the service would reject it only after the account check)."""
    if not values:
        raise InputError("--instance-group: name the group(s) to check; repeat for several")
    groups = [checked_group(v) for v in dict.fromkeys(values)]
    if config is not None:
        known = {g.name for g in config.hyperpod.instance_groups}
        unknown = [g for g in groups if g not in known]
        if unknown:
            raise InputError(
                f"--instance-group: {', '.join(map(repr, unknown))} is not an instance group "
                f"of {config.environment}; use {', '.join(sorted(known))}"
            )
    return groups


def checked_check_nodes(values: Sequence[str], groups: Sequence[str]) -> list[str]:
    """The --node-id values of a health check: instance ids of the one group named."""
    if not values:
        return []
    if len(groups) != 1:
        raise InputError(
            "--node-id: the nodes must be of one group; give exactly one --instance-group"
        )
    bad = [v for v in values if not NODE_ID.fullmatch(v)]
    if bad:
        raise InputError(
            f"--node-id: {', '.join(map(repr, bad))} is not an instance id "
            "(i- and 8 or 17 hex digits)"
        )
    return list(dict.fromkeys(values))


def health_check_request(
    cluster: str, groups: Sequence[str], node_ids: Sequence[str], checks: Sequence[str]
) -> dict[str, Any]:
    """StartClusterHealthCheck's parameters: the same checks on every group (all its nodes,
    or `node_ids` of the one group)."""
    configurations = []
    for group in groups:
        configuration: dict[str, Any] = {
            "InstanceGroupName": group,
            "DeepHealthChecks": list(checks),
        }
        if node_ids:
            configuration["InstanceIds"] = list(node_ids)
        configurations.append(configuration)
    return {"ClusterName": cluster, "DeepHealthCheckConfigurations": configurations}


def checked_operation_filters(operation_type: str | None, status: str | None) -> dict[str, str]:
    """ListClusterOperations' Type and Status filters from --type and --status."""
    filters: dict[str, str] = {}
    for option, value, allowed, key in (
        ("--type", operation_type, OPERATION_TYPES, "Type"),
        ("--status", status, OPERATION_STATUSES, "Status"),
    ):
        if value is None:
            continue
        if value not in allowed:
            raise InputError(f"{option}: {value!r} is not one of {_choices(allowed)}")
        filters[key] = value
    return filters


def list_operations(
    sagemaker: Any, cluster: str, filters: dict[str, str], since: datetime | None
) -> list[dict[str, Any]]:
    """Every operation of the cluster (all pages), newest first."""
    params: dict[str, Any] = {
        "ClusterName": cluster,
        "SortBy": "CreationTime",
        "SortOrder": "Descending",
        **filters,
    }
    if since is not None:
        params["CreationTimeAfter"] = since
    return aws.paginate(sagemaker, "list_cluster_operations", "ClusterOperationSummaries", **params)


def operation_row(summary: dict[str, Any]) -> dict[str, Any]:
    return {
        "operation_id": summary.get("OperationId"),
        "type": summary.get("Type"),
        "status": summary.get("Status"),
        "created": utc_iso(summary.get("CreationTime")),
    }


def _counts(configuration: dict[str, Any] | None) -> dict[str, int | None]:
    configuration = configuration or {}
    return {
        "current": configuration.get("CurrentCount"),
        "target": configuration.get("TargetCount"),
        "min": configuration.get("MinCount"),
    }


def operation_report(described: dict[str, Any]) -> dict[str, Any]:
    """One operation as DescribeClusterOperation tells it: per instance group, the scaling
    from its original to its desired counts, or the deep health checks run on it."""
    return {
        **operation_row(described),
        "cluster_arn": described.get("ClusterArn"),
        "scaling": [
            {
                "instance_group": detail.get("InstanceGroupName"),
                "status": detail.get("Status"),
                "original": _counts(detail.get("Original")),
                "desired": _counts(detail.get("Desired")),
            }
            for detail in described.get("ScalingDetails", [])
        ],
        "health_checks": [
            {
                "instance_group": detail["InstanceGroupName"],
                "checks": list(detail["DeepHealthChecks"]),
                "node_ids": list(detail.get("InstanceIds", [])),
            }
            for detail in described.get("DeepHealthCheckDetails", [])
        ],
    }


def checked_operation_id(value: str) -> str:
    if not OPERATION_ID.fullmatch(value):
        raise InputError(f"--operation-id: {value!r} is not an operation id ({OPERATION_ID_TEXT})")
    return value
