"""`hpctl preflight --env NAME`: check the AWS account an environment deploys into, before
`cdk deploy` finds out the hard way. Read-only: every call is a Describe/Get/List.

One table, one row per thing checked (check, subject, status, detail, fix), status `ok`,
`problem` or `skipped`; exit 1 when any row is a problem. An AWS failure on one call (access
denied, throttling after the client's retries, a missing credential) turns that row into a
problem naming the error code and the IAM action it needs, and every other check still runs.

The checks, in table order (IAM actions in brackets):

- training-plan [sagemaker:DescribeTrainingPlan]: per instance group with a plan, the plan
  (looked up by the name in its ARN) exists with that ARN, is Active or Scheduled, targets
  HyperPod clusters, ends more than `PLAN_MIN_REMAINING` (7 days) from now, and reserves the
  group's instance type in the group's `training_plan.availability_zone`, at least `count`
  instances at once (groups of one type on one plan are counted together; reservations
  that follow each other in time do not add up). A plan that ends within 7 days is a problem, not a warning: the nodes
  leave when it ends, so extend it or buy the next plan first.
- quota [servicequotas:ListServiceQuotas, servicequotas:GetServiceQuota, and only when the
  applied value is missing servicequotas:ListAWSDefaultServiceQuotas /
  servicequotas:GetAWSDefaultServiceQuota]: SageMaker "<type> for cluster usage" (found by
  name) for the summed count of the groups without a training plan; groups with a plan are
  reported ok without quota (the plan holds their capacity; the training-plan row checks it).
  EKS clusters, VPCs per Region, IPv4 CIDR blocks per VPC (only with network.cluster_cidr),
  EC2-VPC Elastic IPs (one per NAT gateway, only with NAT) and FSx for Lustre Persistent_2 storage capacity
  (found by quota code). Every quota is compared with what this environment alone needs:
  Service Quotas does not report current usage, so an account that already uses part of a
  quota can pass here and still hit it on deploy.
- availability-zone [ec2:DescribeAvailabilityZones]: every network.availability_zones entry
  exists in the Region for this account and is available, and its zone ID is the one
  cdk.context.json records for it (names map to different physical zones in different
  accounts; zones written by ID were placed by that record). HyperPod has no API that says which
  ml.* instance types a zone offers, so on-demand groups are not checked per zone; only
  plan-backed groups are tied to a zone (the training-plan row).
- admin-role [iam:GetRole]: each eks.admin_role_arns role exists with exactly that ARN
  (path included); roles of another account are skipped (this account cannot read them).
- image [ecr:DescribeImages]: each eks.image_overrides image in this account's ECR in the
  environment's Region has its repository and tag (or digest); other images are skipped.
- kubernetes-version [eks:DescribeClusterVersions]: eks.kubernetes_version is in EKS standard
  support. Extended support is a problem (EKS bills it at a higher hourly rate and ends it on a
  fixed date); unsupported or unknown versions are problems.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

import typer
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from config.schema import EnvironmentConfig
from config.schema.eks import SUPPORTED_KUBERNETES_VERSIONS
from config.schema.hyperpod import InstanceGroupConfig
from hpctl import aws
from hpctl.errors import ExitCode, fail, one_line
from hpctl.job_cmd import load_environment_option

Status = Literal["ok", "problem", "skipped"]
OK: Status = "ok"
PROBLEM: Status = "problem"
SKIPPED: Status = "skipped"

# A plan must outlive the deploy by this much; one that ends sooner is a problem.
PLAN_MIN_REMAINING = timedelta(days=7)
USABLE_PLAN_STATUSES = ("Active", "Scheduled")
DEAD_CAPACITY_STATUSES = ("Expired", "Failed")
HYPERPOD_TARGET = "hyperpod-cluster"

# Error codes AWS services use for a missing permission and for throttling.
ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException"}
)
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "SlowDown",
    }
)

# Failures of the credentials themselves (missing, expired, unknown), not of one permission.
CREDENTIAL_CODES = frozenset(
    {
        "NoCredentialsError",
        "PartialCredentialsError",
        "TokenRetrievalError",
        "SSOTokenLoadError",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
    }
)

_TRAINING_PLAN_NAME = re.compile(r":training-plan/(?P<name>[^/]+)$")
_ROLE_ARN = re.compile(r"^arn:[a-z-]+:iam::(?P<account>\d{12}):role/(?P<path>.*/)?(?P<name>[^/]+)$")
# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>(:<tag>|@<digest>)
_ECR_IMAGE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?/"
    r"(?P<repository>[^:@]+)(:(?P<tag>[^:@/]+)|@(?P<digest>sha256:[0-9a-f]{64}))$"
)


def utc_now() -> datetime:
    return datetime.now(UTC)


# The clock plan end times are compared with; tests may replace it.
clock: Callable[[], datetime] = utc_now

stdout = Console(soft_wrap=True, highlight=False)


@dataclass(frozen=True)
class Row:
    """One line of the report."""

    check: str
    subject: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


# ------------------------------------------------------------------ AWS calls


class AwsCallError(Exception):
    """An AWS call failed; knows the IAM action the call needs."""

    def __init__(self, action: str, error: ClientError | BotoCoreError) -> None:
        self.action = action
        self.code, self.message = aws.error_line(error)
        super().__init__(f"{self.code}: {self.message}")

    def row(self, check: str, subject: str) -> Row:
        """The row of a check that could not be made."""
        if self.code in ACCESS_DENIED_CODES:
            return Row(
                check,
                subject,
                PROBLEM,
                f"{self.code}: needs {self.action}",
                f"allow {self.action} to the identity running preflight",
            )
        if self.code in THROTTLING_CODES:
            return Row(
                check,
                subject,
                PROBLEM,
                f"{self.code}: {self.action} was still throttled after retries",
                "run preflight again in a few minutes",
            )
        fix = (
            "configure current AWS credentials for the environment's account (e.g. AWS_PROFILE)"
            if self.code in CREDENTIAL_CODES
            else ""
        )
        return Row(check, subject, PROBLEM, f"{self.code}: {self.message} ({self.action})", fix)


def _action(client: Any, method: str) -> str:
    """`sagemaker:DescribeTrainingPlan` for `describe_training_plan` on a SageMaker client."""
    operation = client.meta.method_to_api_mapping.get(method, method)
    return f"{client.meta.service_model.signing_name}:{operation}"


def call(client: Any, method: str, **params: Any) -> dict[str, Any]:
    """`client.<method>(**params)`; any botocore failure raises `AwsCallError`."""
    try:
        response: dict[str, Any] = getattr(client, method)(**params)
    except (ClientError, BotoCoreError) as error:
        raise AwsCallError(_action(client, method), error) from error
    return response


def paginate(client: Any, method: str, result_key: str, **params: Any) -> list[Any]:
    """Every item of `result_key` over all pages; failures raise `AwsCallError`."""
    try:
        pages = client.get_paginator(method).paginate(**params)
        return [item for page in pages for item in page.get(result_key, [])]
    except (ClientError, BotoCoreError) as error:
        raise AwsCallError(_action(client, method), error) from error


@dataclass
class Account:
    """The account and Region under check: one client per service (through `aws.client`, so
    tests can stub them) and the quota look-ups shared by the quota rows."""

    region: str
    now: datetime = field(default_factory=lambda: clock())
    _clients: dict[str, Any] = field(default_factory=dict)
    _quota_lists: dict[tuple[str, str], list[dict[str, Any]] | AwsCallError] = field(
        default_factory=dict
    )

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = aws.client(service, region=self.region)
        return self._clients[service]

    def quota_by_code(self, service_code: str, quota_code: str) -> dict[str, Any] | None:
        """The applied quota, else the AWS default (quotas never raised have no applied
        value for some services), else None."""
        quotas = self.client("service-quotas")
        for method in ("get_service_quota", "get_aws_default_service_quota"):
            try:
                quota: dict[str, Any] = call(
                    quotas, method, ServiceCode=service_code, QuotaCode=quota_code
                )["Quota"]
            except AwsCallError as failure:
                if failure.code == "NoSuchResourceException":
                    continue
                raise
            return quota
        return None

    def quota_by_name(self, service_code: str, name: str) -> dict[str, Any] | None:
        """The quota of `service_code` named `name` (case-insensitive), applied values first,
        then the AWS defaults; None when neither lists it."""
        wanted = name.casefold()
        for method in ("list_service_quotas", "list_aws_default_service_quotas"):
            for quota in self._quota_list(method, service_code):
                if str(quota.get("QuotaName", "")).strip().casefold() == wanted:
                    return quota
        return None

    def _quota_list(self, method: str, service_code: str) -> list[dict[str, Any]]:
        key = (method, service_code)
        if key not in self._quota_lists:
            try:
                found: list[dict[str, Any]] | AwsCallError = paginate(
                    self.client("service-quotas"), method, "Quotas", ServiceCode=service_code
                )
            except AwsCallError as failure:
                found = failure
            self._quota_lists[key] = found
        cached = self._quota_lists[key]
        if isinstance(cached, AwsCallError):
            raise cached
        return cached


# ------------------------------------------------------------------ formatting helpers


def _day(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d") if value else "unknown"


def _minute(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _joined(items: Iterable[str]) -> str:
    return ", ".join(sorted(set(items)))


# ------------------------------------------------------------------ 1. training plans

TRAINING_PLAN = "training-plan"


def plan_name(arn: str) -> str:
    """The plan's name: DescribeTrainingPlan takes the name, not the ARN."""
    match = _TRAINING_PLAN_NAME.search(arn)
    if match is None:  # the config schema only accepts training plan ARNs
        raise ValueError(f"{arn!r} is not a training plan ARN")
    return match["name"]


def reserved_at_once(capacities: list[dict[str, Any]]) -> int:
    """The most instances these reserved capacities hold at the same time: capacities that
    overlap in time add up, consecutive ones (an extended plan) do not."""
    starts = [c["StartTime"] for c in capacities if c.get("StartTime") is not None]
    if not starts:
        return sum(int(c["TotalInstanceCount"]) for c in capacities)

    def held_at(moment: datetime) -> int:
        return sum(
            int(c["TotalInstanceCount"])
            for c in capacities
            if (c.get("StartTime") is None or c["StartTime"] <= moment)
            and (c.get("EndTime") is None or moment < c["EndTime"])
        )

    return max(held_at(moment) for moment in starts)


def assess_plan(
    group: InstanceGroupConfig,
    plan: dict[str, Any],
    now: datetime,
    sharing: tuple[InstanceGroupConfig, ...] = (),
) -> tuple[list[str], list[str], str]:
    """(problems, fixes, summary) of a DescribeTrainingPlan response for `group`. `sharing`:
    the other groups of the same type on the same plan, whose counts the plan must hold too."""
    wanted = group.training_plan
    if wanted is None:
        raise ValueError(f"group {group.name} has no training plan")
    needed = group.count + sum(g.count for g in sharing)
    needed_by = (
        "the group"
        if not sharing
        else f"groups {', '.join(sorted({group.name, *(g.name for g in sharing)}))}"
    )
    problems: list[str] = []
    fixes: list[str] = []
    if plan["TrainingPlanArn"] != wanted.arn:
        problems.append(f"the plan named {plan['TrainingPlanName']} is {plan['TrainingPlanArn']}")
        fixes.append("set training_plan.arn to the plan's ARN (or deploy with this account)")
    status = plan["Status"]
    if status not in USABLE_PLAN_STATUSES:
        message = plan.get("StatusMessage")
        problems.append(f"status {status}" + (f" ({one_line(message)})" if message else ""))
        fixes.append(
            "wait until the plan is Active or Scheduled"
            if status == "Pending"
            else "buy a new plan (hpctl plans search / buy) and set training_plan.arn"
        )
    targets = plan.get("TargetResources")
    if targets is not None and HYPERPOD_TARGET not in targets:
        problems.append(f"plan targets {_joined(targets)}, not {HYPERPOD_TARGET}")
        fixes.append(f"buy a plan for {HYPERPOD_TARGET}")
    end = plan.get("EndTime")
    if end is not None and status not in DEAD_CAPACITY_STATUSES:
        if end <= now:
            problems.append(f"ended {_minute(end)}")
            fixes.append("buy a new plan and set training_plan.arn")
        elif end - now < PLAN_MIN_REMAINING:
            problems.append(
                f"ends {_minute(end)}, less than {PLAN_MIN_REMAINING.days} days from now"
            )
            fixes.append("extend the plan or buy the next one before deploying")
    live = [
        c
        for c in plan.get("ReservedCapacitySummaries", [])
        if c.get("Status") not in DEAD_CAPACITY_STATUSES
    ]
    of_type = [c for c in live if c["InstanceType"] == group.instance_type]
    in_zone = [c for c in of_type if c.get("AvailabilityZone") == wanted.availability_zone]
    reserved = reserved_at_once(in_zone)
    if live and not of_type:
        problems.append(
            f"plan reserves {_joined(c['InstanceType'] for c in live)}, "
            f"the group runs {group.instance_type}"
        )
        fixes.append(f"use a plan for {group.instance_type} or change the group's instance_type")
    elif of_type and not in_zone:
        zones = _joined(str(c.get("AvailabilityZone")) for c in of_type)
        problems.append(
            f"plan capacity is in {zones}, training_plan.availability_zone is "
            f"{wanted.availability_zone}"
        )
        fixes.append(
            f"buy a plan in {wanted.availability_zone} (where FSx is) or correct "
            "training_plan.availability_zone"
        )
    elif in_zone and reserved < needed:
        problems.append(
            f"plan reserves {reserved} x {group.instance_type} in {wanted.availability_zone}, "
            f"{needed_by} {'needs' if not sharing else 'need'} {needed}"
        )
        lower = (
            f"lower count to {reserved}"
            if not sharing
            else f"lower their counts by {needed - reserved} in total"
        )
        fixes.append(f"{lower} or buy a plan for {needed - reserved} more instances")
    elif not live and status in USABLE_PLAN_STATUSES:
        problems.append("plan has no Active or Scheduled reserved capacity")
        fixes.append("buy a new plan and set training_plan.arn")
    start = plan.get("StartTime")
    starts = f", starts {_day(start)}" if start is not None and start > now else ""
    summary = (
        f"{status}, {reserved} x {group.instance_type} in {wanted.availability_zone}"
        f"{starts}, ends {_day(end)}"
    )
    return problems, fixes, summary


def _describe_plan(account: Account, name: str) -> dict[str, Any] | AwsCallError:
    try:
        return call(account.client("sagemaker"), "describe_training_plan", TrainingPlanName=name)
    except AwsCallError as failure:
        return failure


def training_plan_rows(config: EnvironmentConfig, account: Account) -> list[Row]:
    groups = [g for g in config.hyperpod.groups_by_name() if g.training_plan is not None]
    if not groups:
        return [Row(TRAINING_PLAN, "-", SKIPPED, "no instance group uses a training plan")]
    rows = []
    # Groups may share a plan: describe each plan once.
    plans: dict[str, dict[str, Any] | AwsCallError] = {}
    for group in groups:
        wanted = group.training_plan
        if wanted is None:
            continue
        name = plan_name(wanted.arn)
        subject = f"{group.name}: {name}"
        if name not in plans:
            plans[name] = _describe_plan(account, name)
        plan = plans[name]
        if isinstance(plan, AwsCallError):
            rows.append(
                Row(
                    TRAINING_PLAN,
                    subject,
                    PROBLEM,
                    f"no training plan named {name} in {config.region}",
                    "buy it (hpctl plans search / buy) or correct training_plan.arn",
                )
                if plan.code == "ResourceNotFound"
                else plan.row(TRAINING_PLAN, subject)
            )
            continue
        sharing = tuple(
            g
            for g in groups
            if g is not group
            and g.training_plan is not None
            and g.training_plan.arn == wanted.arn
            and g.instance_type == group.instance_type
        )
        problems, fixes, summary = assess_plan(group, plan, account.now, sharing)
        if problems:
            rows.append(Row(TRAINING_PLAN, subject, PROBLEM, "; ".join(problems), "; ".join(fixes)))
        else:
            rows.append(Row(TRAINING_PLAN, subject, OK, summary))
    return rows


# ------------------------------------------------------------------ 2. service quotas

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
    account: Account,
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
            f"Service Quotas lists no such quota for {service_code} in {account.region}",
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
    detail = f"quota {_number(value)}{unit}, needs {needed}{unit} ({why})"
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
        f"--region {account.region}",
    )


def sagemaker_quota_rows(config: EnvironmentConfig, account: Account) -> list[Row]:
    """One row per instance type of the groups without a plan (their counts summed: they
    share the quota), one ok row per group with a plan."""
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
            quota = account.quota_by_name("sagemaker", name)
        except AwsCallError as failure:
            rows.append(failure.row(QUOTA, subject))
            continue
        needed = sum(g.count for g in groups)
        why = ", ".join(g.name for g in groups)
        rows.append(_quota_row(account, subject, quota, needed, why))
    return rows


def coded_quota_rows(config: EnvironmentConfig, account: Account) -> list[Row]:
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
            found = account.quota_by_code(quota.service_code, quota.quota_code)
        except AwsCallError as failure:
            rows.append(failure.row(QUOTA, subject))
            continue
        rows.append(_quota_row(account, subject, found, needed, why, unit))
    return rows


def quota_rows(config: EnvironmentConfig, account: Account) -> list[Row]:
    return sagemaker_quota_rows(config, account) + coded_quota_rows(config, account)


# ------------------------------------------------------------------ 3. availability zones

AVAILABILITY_ZONE = "availability-zone"


def _zone_uses(config: EnvironmentConfig, zone: str) -> list[str]:
    uses = []
    if zone in config.hyperpod.availability_zones:
        uses.append("cluster subnets")
    if zone == config.storage.fsx.availability_zone:
        uses.append("FSx")
    uses += [
        f"plan of {g.name}"
        for g in config.hyperpod.groups_by_name()
        if g.training_plan is not None and g.training_plan.availability_zone == zone
    ]
    return uses


def availability_zone_rows(config: EnvironmentConfig, account: Account) -> list[Row]:
    zones = config.network.availability_zones
    try:
        found = call(account.client("ec2"), "describe_availability_zones")["AvailabilityZones"]
    except AwsCallError as failure:
        return [failure.row(AVAILABILITY_ZONE, zone) for zone in zones]
    by_name = {z["ZoneName"]: z for z in found}
    offered = _joined(
        name
        for name, z in by_name.items()
        if z.get("ZoneType", "availability-zone") == "availability-zone"
    )
    rows = []
    for zone in zones:
        uses = _zone_uses(config, zone)
        used_by = f"; used by {', '.join(uses)}" if uses else ""
        info = by_name.get(zone)
        if info is None:
            rows.append(
                Row(
                    AVAILABILITY_ZONE,
                    zone,
                    PROBLEM,
                    f"not an Availability Zone of {config.region} for this account{used_by}",
                    f"use zones this account has: {offered}",
                )
            )
            continue
        state = info.get("State", "unknown")
        zone_id = info.get("ZoneId", "unknown zone ID")
        problems = []
        if state != "available":
            messages = "; ".join(m.get("Message", "") for m in info.get("Messages", []))
            problems.append(f"state {state}" + (f" ({one_line(messages)})" if messages else ""))
        if info.get("OptInStatus") == "not-opted-in":
            problems.append("not opted in")
        if info.get("ZoneType", "availability-zone") != "availability-zone":
            problems.append(f"a {info['ZoneType']}, not an Availability Zone")
        fix = f"use other zones of {offered}"
        recorded = config.zone_id(zone)
        if not problems and recorded is not None and recorded != zone_id:
            # Synth placed every subnet by this record: a stale one puts them in other zones.
            problems.append(f"cdk.context.json records {recorded} for it")
            fix = (
                f"run hpctl zones --env {config.environment} --write, commit cdk.context.json "
                "and check the diff of the next synth"
            )
        if problems:
            rows.append(
                Row(
                    AVAILABILITY_ZONE,
                    zone,
                    PROBLEM,
                    f"{zone_id}: {'; '.join(problems)}{used_by}",
                    fix,
                )
            )
        else:
            rows.append(Row(AVAILABILITY_ZONE, zone, OK, f"{zone_id}, {state}{used_by}"))
    return rows


# ------------------------------------------------------------------ 4. admin roles

ADMIN_ROLE = "admin-role"


def admin_role_rows(config: EnvironmentConfig, account: Account) -> list[Row]:
    rows = []
    for arn in config.eks.admin_role_arns:
        match = _ROLE_ARN.match(arn)
        if match is None:  # the config schema only accepts role ARNs
            rows.append(Row(ADMIN_ROLE, arn, PROBLEM, "not an IAM role ARN"))
            continue
        if match["account"] != config.account:
            rows.append(
                Row(
                    ADMIN_ROLE,
                    arn,
                    SKIPPED,
                    f"role of account {match['account']}, not {config.account}: not readable here",
                )
            )
            continue
        name = match["name"]
        try:
            role = call(account.client("iam"), "get_role", RoleName=name)["Role"]
        except AwsCallError as failure:
            if failure.code == "NoSuchEntity":
                rows.append(
                    Row(
                        ADMIN_ROLE,
                        arn,
                        PROBLEM,
                        f"no role named {name} in account {config.account}",
                        "create the role or remove it from eks.admin_role_arns",
                    )
                )
            else:
                rows.append(failure.row(ADMIN_ROLE, arn))
            continue
        if role["Arn"] != arn:
            rows.append(
                Row(
                    ADMIN_ROLE,
                    arn,
                    PROBLEM,
                    f"the role named {name} is {role['Arn']} (path {role.get('Path', '/')})",
                    f"use {role['Arn']} in eks.admin_role_arns",
                )
            )
        else:
            rows.append(Row(ADMIN_ROLE, arn, OK, f"exists ({role.get('RoleId', 'no id')})"))
    return rows


# ------------------------------------------------------------------ 5. image overrides

IMAGE = "image"


def image_rows(config: EnvironmentConfig, account: Account) -> list[Row]:
    overrides = config.eks.image_overrides
    if not overrides:
        return [Row(IMAGE, "-", SKIPPED, "no eks.image_overrides")]
    rows = []
    for component, image in sorted(overrides.items()):
        subject = component
        match = _ECR_IMAGE.match(image)
        if match is None or (match["account"], match["region"]) != (config.account, config.region):
            rows.append(
                Row(
                    IMAGE,
                    subject,
                    SKIPPED,
                    f"{image} is not in the ECR of {config.account} in {config.region}; not checked",
                )
            )
            continue
        repository = match["repository"]
        reference = match["tag"] or match["digest"]
        image_id = {"imageTag": match["tag"]} if match["tag"] else {"imageDigest": match["digest"]}
        try:
            found = call(
                account.client("ecr"),
                "describe_images",
                repositoryName=repository,
                imageIds=[image_id],
            )["imageDetails"]
        except AwsCallError as failure:
            if failure.code == "RepositoryNotFoundException":
                rows.append(
                    Row(
                        IMAGE,
                        subject,
                        PROBLEM,
                        f"repository {repository} does not exist in {config.account} "
                        f"({config.region})",
                        f"create it and push {repository}:{reference}, or correct "
                        f"eks.image_overrides.{component}",
                    )
                )
            elif failure.code == "ImageNotFoundException":
                rows.append(
                    Row(
                        IMAGE,
                        subject,
                        PROBLEM,
                        f"{reference} is not in repository {repository}",
                        f"push {repository}:{reference} or correct eks.image_overrides.{component}",
                    )
                )
            else:
                rows.append(failure.row(IMAGE, subject))
            continue
        archived = [d for d in found if d.get("imageStatus") == "ARCHIVED"]
        if not found:
            rows.append(
                Row(
                    IMAGE,
                    subject,
                    PROBLEM,
                    f"{reference} is not in repository {repository}",
                    f"push {repository}:{reference} or correct eks.image_overrides.{component}",
                )
            )
        elif archived:
            rows.append(
                Row(
                    IMAGE,
                    subject,
                    PROBLEM,
                    f"{reference} in {repository} is archived: nodes cannot pull it",
                    "restore the image (ECR UpdateImageStorageClass to STANDARD)",
                )
            )
        else:
            digest = str(found[0].get("imageDigest", ""))
            rows.append(Row(IMAGE, subject, OK, f"{image} exists ({digest[:19] or 'no digest'})"))
    return rows


# ------------------------------------------------------------------ 6. Kubernetes version

KUBERNETES_VERSION = "kubernetes-version"
_LEGACY_VERSION_STATUS = {
    "standard-support": "STANDARD_SUPPORT",
    "extended-support": "EXTENDED_SUPPORT",
    "unsupported": "UNSUPPORTED",
}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def kubernetes_version_rows(config: EnvironmentConfig, account: Account) -> list[Row]:
    version = config.eks.kubernetes_version
    try:
        versions = paginate(
            account.client("eks"), "describe_cluster_versions", "clusterVersions", includeAll=True
        )
    except AwsCallError as failure:
        return [failure.row(KUBERNETES_VERSION, version)]
    status_of = {
        v["clusterVersion"]: v.get("versionStatus")
        or _LEGACY_VERSION_STATUS.get(str(v.get("status")), "UNKNOWN")
        for v in versions
        if "clusterVersion" in v
    }
    standard = sorted(
        (v for v in SUPPORTED_KUBERNETES_VERSIONS if status_of.get(v) == "STANDARD_SUPPORT"),
        key=_version_key,
    )
    upgrade = (
        f"set eks.kubernetes_version to {standard[-1]} (standard support, supported by the "
        "platform), one minor version at a time"
        if standard
        else "move the platform to a version in standard support (config/schema/eks.py)"
    )
    info = next((v for v in versions if v.get("clusterVersion") == version), None)
    if info is None:
        return [
            Row(
                KUBERNETES_VERSION,
                version,
                PROBLEM,
                f"EKS in {config.region} does not list Kubernetes {version}",
                upgrade,
            )
        ]
    status = status_of[version]
    standard_end = _day(info.get("endOfStandardSupportDate"))
    extended_end = _day(info.get("endOfExtendedSupportDate"))
    if status == "STANDARD_SUPPORT":
        return [
            Row(
                KUBERNETES_VERSION,
                version,
                OK,
                f"standard support until {standard_end}",
            )
        ]
    if status == "EXTENDED_SUPPORT":
        detail = (
            f"in extended support since {standard_end}, until {extended_end} "
            "(billed at the extended support rate)"
        )
    else:
        detail = f"status {status} (extended support ended {extended_end})"
    return [Row(KUBERNETES_VERSION, version, PROBLEM, detail, upgrade)]


# ------------------------------------------------------------------ running and reporting

Check = Callable[[EnvironmentConfig, Account], list[Row]]
CHECKS: tuple[tuple[str, Check], ...] = (
    (TRAINING_PLAN, training_plan_rows),
    (QUOTA, quota_rows),
    (AVAILABILITY_ZONE, availability_zone_rows),
    (ADMIN_ROLE, admin_role_rows),
    (IMAGE, image_rows),
    (KUBERNETES_VERSION, kubernetes_version_rows),
)


def run_checks(config: EnvironmentConfig, account: Account | None = None) -> list[Row]:
    """Every check's rows, in table order. An AWS failure a check did not turn into a row
    itself becomes one problem row; the other checks still run."""
    account = account or Account(config.region)
    rows: list[Row] = []
    for name, check in CHECKS:
        try:
            rows += check(config, account)
        except AwsCallError as failure:
            rows.append(failure.row(name, "-"))
    return rows


def report(config: EnvironmentConfig, rows: list[Row]) -> dict[str, Any]:
    """The `--json` object."""
    counts = {status: sum(r.status == status for r in rows) for status in (OK, PROBLEM, SKIPPED)}
    return {
        "environment": config.environment,
        "account": config.account,
        "region": config.region,
        "ok": counts[PROBLEM] == 0,
        "counts": counts,
        "checks": [r.as_dict() for r in rows],
    }


_STATUS_STYLE = {OK: "green", PROBLEM: "bold red", SKIPPED: "yellow"}


def print_rows(config: EnvironmentConfig, rows: list[Row]) -> None:
    table = Table(title=f"Preflight: {config.environment} ({config.account}, {config.region})")
    table.add_column("check", no_wrap=True)
    table.add_column("subject", no_wrap=True)
    table.add_column("status", no_wrap=True)
    # Sentences wrap inside their cells; names and ARNs stay whole.
    table.add_column("detail", max_width=70)
    table.add_column("fix", max_width=70)
    for row in rows:
        table.add_row(
            Text(row.check),
            Text(row.subject),
            Text(row.status, style=_STATUS_STYLE[row.status]),
            Text(row.detail),
            Text(row.fix or "-"),
        )
    aws.print_table(stdout, table)
    counts = report(config, rows)["counts"]
    stdout.print(
        f"{counts[OK]} ok, {counts[PROBLEM]} problem{'s' if counts[PROBLEM] != 1 else ''}, "
        f"{counts[SKIPPED]} skipped",
        markup=False,
    )


def preflight(
    ctx: typer.Context,
    env: Annotated[
        str | None, typer.Option(help="Environment (config/<env>.yaml), e.g. dev or prod.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Check the AWS account before deploying an environment: training plans, service
    quotas, Availability Zones, EKS admin roles, image overrides in ECR and the Kubernetes
    version. Read-only; exit 1 when any check finds a problem."""
    if env is None:
        fail(ctx, "--env: missing; pass --env", code=ExitCode.USAGE)
    config = load_environment_option(ctx, env)
    rows = run_checks(config)
    if as_json:
        typer.echo(json.dumps(report(config, rows), indent=2))
    else:
        print_rows(config, rows)
    problems = sum(r.status == PROBLEM for r in rows)
    if problems:
        fail(
            ctx,
            f"{problems} of {len(rows)} checks found a problem in {config.account} "
            f"({config.region}); fix them before deploying {config.environment}",
            code=ExitCode.FAILED,
        )
