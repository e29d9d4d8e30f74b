"""quota: the SageMaker cluster-usage quota of the on-demand groups and the EKS, VPC, Elastic
IP and FSx quotas, each against what this environment alone needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config.schema.hyperpod import InstanceGroupConfig
from hpctl.aws import AwsCallError
from hpctl.errors import one_line
from hpctl.preflight.context import OK, PROBLEM, CheckContext, Row, failure_row, number
from hpctl.preflight.training_plan import plan_name

QUOTA = "quota"


@dataclass(frozen=True)
class CodedQuota:
    service_code: str
    quota_code: str
    name: str


EKS_CLUSTERS = CodedQuota("eks", "L-1194D53C", "Clusters")
VPCS_PER_REGION = CodedQuota("vpc", "L-F678F1CE", "VPCs per Region")
IPV4_BLOCKS_PER_VPC = CodedQuota("vpc", "L-83CA0A9D", "IPv4 CIDR blocks per VPC")
ELASTIC_IPS = CodedQuota("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs")
LUSTRE_PERSISTENT_2_STORAGE = CodedQuota(
    "fsx", "L-8F1B9C74", "Lustre Persistent_2 storage capacity"
)


def cluster_usage_quota_name(instance_type: str) -> str:
    return f"{instance_type} for cluster usage"


def _quota_row(
    context: CheckContext,
    subject: str,
    quota: dict[str, Any] | None,
    needed: int,
    why: str,
    unit: str = "",
) -> Row:
    service_code = subject.split(":", 1)[0]
    if quota is None:
        return Row(
            QUOTA,
            subject,
            PROBLEM,
            f"Service Quotas lists no such quota for {service_code} in {context.region}",
            "check that the service offers it in this Region",
        )
    value = quota.get("Value")
    if value is None:
        reason = quota.get("ErrorReason") or {}
        message = one_line(reason.get("ErrorMessage") or "no message")
        return Row(
            QUOTA,
            subject,
            PROBLEM,
            f"Service Quotas gave no value: {reason.get('ErrorCode', 'no error code')}: {message}",
        )
    detail = f"quota {number(value)}{unit}, needs {needed}{unit} ({why})"
    if value >= needed:
        return Row(QUOTA, subject, OK, detail)
    return Row(
        QUOTA,
        subject,
        PROBLEM,
        detail,
        "request an increase: aws service-quotas request-service-quota-increase "
        f"--service-code {quota.get('ServiceCode', service_code)} "
        f"--quota-code {quota.get('QuotaCode', '?')} --desired-value {needed} "
        f"--region {context.region}",
    )


def sagemaker_quota_rows(context: CheckContext) -> list[Row]:
    """One row per instance type of the groups without a plan (their counts summed: they
    share the quota), one ok row per group with a plan."""
    config = context.config
    on_demand: dict[str, list[InstanceGroupConfig]] = {}
    rows = []
    for group in config.hyperpod.groups_by_name():
        subject = f"sagemaker: {cluster_usage_quota_name(group.instance_type)}"
        if group.training_plan is not None:
            rows.append(
                Row(
                    QUOTA,
                    subject,
                    OK,
                    f"{group.name} runs on training plan {plan_name(group.training_plan.arn)}, "
                    "not on-demand quota (see training-plan)",
                )
            )
        else:
            on_demand.setdefault(group.instance_type, []).append(group)
    for instance_type, groups in sorted(on_demand.items()):
        name = cluster_usage_quota_name(instance_type)
        subject = f"sagemaker: {name}"
        try:
            quota = context.quota_by_name("sagemaker", name)
        except AwsCallError as failure:
            rows.append(failure_row(failure, QUOTA, subject))
            continue
        needed = sum(g.count for g in groups)
        why = ", ".join(g.name for g in groups)
        rows.append(_quota_row(context, subject, quota, needed, why))
    return rows


def coded_quota_rows(context: CheckContext) -> list[Row]:
    config = context.config
    wanted: list[tuple[CodedQuota, int, str, str]] = [
        (EKS_CLUSTERS, 1, "the EKS cluster", ""),
        (VPCS_PER_REGION, 1, "the VPC", ""),
    ]
    if config.network.cluster_cidr is not None:
        wanted.append((IPV4_BLOCKS_PER_VPC, 2, "vpc_cidr + cluster_cidr", ""))
    if config.network.nat_gateways:  # a closed network has no NAT gateway and needs no IP
        wanted.append((ELASTIC_IPS, config.network.nat_gateways, "one per NAT gateway", ""))
    wanted.append(
        (LUSTRE_PERSISTENT_2_STORAGE, config.storage.fsx.storage_capacity_gib, "FSx", " GiB")
    )
    rows = []
    for quota, needed, why, unit in wanted:
        subject = f"{quota.service_code}: {quota.name}"
        try:
            found = context.quota_by_code(quota.service_code, quota.quota_code)
        except AwsCallError as failure:
            rows.append(failure_row(failure, QUOTA, subject))
            continue
        rows.append(_quota_row(context, subject, found, needed, why, unit))
    return rows


def quota_rows(context: CheckContext) -> list[Row]:
    return sagemaker_quota_rows(context) + coded_quota_rows(context)
