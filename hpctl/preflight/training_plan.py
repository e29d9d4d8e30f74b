"""training-plan: per instance group with a plan, the plan exists with the configured ARN, is
usable, targets HyperPod, outlives the deploy by `PLAN_MIN_REMAINING` and reserves the group's
instances in its zone (see the package docstring)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from config.schema.hyperpod import InstanceGroupConfig, TrainingPlanConfig
from hpctl.aws import AwsCallError, call
from hpctl.errors import one_line
from hpctl.preflight.context import (
    OK,
    PROBLEM,
    SKIPPED,
    CheckContext,
    Row,
    day,
    failure_row,
    joined,
    minute,
)

# A plan must outlive the deploy by this much; one that ends sooner is a problem.
PLAN_MIN_REMAINING = timedelta(days=7)
USABLE_PLAN_STATUSES = ("Active", "Scheduled")
DEAD_CAPACITY_STATUSES = ("Expired", "Failed")
HYPERPOD_TARGET = "hyperpod-cluster"
_TRAINING_PLAN_NAME = re.compile(r":training-plan/(?P<name>[^/]+)$")

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


# (problem, fix) pairs, in the order a reader should fix them.
Findings = list[tuple[str, str]]


def _identity_findings(wanted_arn: str, plan: dict[str, Any]) -> Findings:
    """Whether the plan is the configured one, usable, and for HyperPod."""
    findings: Findings = []
    if plan["TrainingPlanArn"] != wanted_arn:
        problem = f"the plan named {plan['TrainingPlanName']} is {plan['TrainingPlanArn']}"
        findings.append(
            (problem, "set training_plan.arn to the plan's ARN (or deploy with this account)")
        )
    status = plan["Status"]
    if status not in USABLE_PLAN_STATUSES:
        message = plan.get("StatusMessage")
        fix = (
            "wait until the plan is Active or Scheduled"
            if status == "Pending"
            else "buy a new plan (hpctl plans search / buy) and set training_plan.arn"
        )
        findings.append((f"status {status}" + (f" ({one_line(message)})" if message else ""), fix))
    targets = plan.get("TargetResources")
    if targets is not None and HYPERPOD_TARGET not in targets:
        findings.append(
            (
                f"plan targets {joined(targets)}, not {HYPERPOD_TARGET}",
                f"buy a plan for {HYPERPOD_TARGET}",
            )
        )
    return findings


def _end_findings(plan: dict[str, Any], now: datetime) -> Findings:
    """Whether the plan outlives the deploy by `PLAN_MIN_REMAINING`."""
    end = plan.get("EndTime")
    if end is None or plan["Status"] in DEAD_CAPACITY_STATUSES:
        return []
    if end <= now:
        return [(f"ended {minute(end)}", "buy a new plan and set training_plan.arn")]
    if end - now < PLAN_MIN_REMAINING:
        return [
            (
                f"ends {minute(end)}, less than {PLAN_MIN_REMAINING.days} days from now",
                "extend the plan or buy the next one before deploying",
            )
        ]
    return []


def _capacity_findings(
    group: InstanceGroupConfig,
    wanted: TrainingPlanConfig,
    plan: dict[str, Any],
    sharing: tuple[InstanceGroupConfig, ...],
) -> tuple[Findings, int]:
    """(findings, instances reserved at once) for the group's type in the zone of its plan
    (`wanted`), against the counts of the group and of the `sharing` groups."""
    needed = group.count + sum(g.count for g in sharing)
    live = [
        c
        for c in plan.get("ReservedCapacitySummaries", [])
        if c.get("Status") not in DEAD_CAPACITY_STATUSES
    ]
    of_type = [c for c in live if c["InstanceType"] == group.instance_type]
    in_zone = [c for c in of_type if c.get("AvailabilityZone") == wanted.availability_zone]
    reserved = reserved_at_once(in_zone)
    if live and not of_type:
        return [
            (
                f"plan reserves {joined(c['InstanceType'] for c in live)}, "
                f"the group runs {group.instance_type}",
                f"use a plan for {group.instance_type} or change the group's instance_type",
            )
        ], reserved
    if of_type and not in_zone:
        zones = joined(str(c.get("AvailabilityZone")) for c in of_type)
        return [
            (
                f"plan capacity is in {zones}, training_plan.availability_zone is "
                f"{wanted.availability_zone}",
                f"buy a plan in {wanted.availability_zone} (where FSx is) or correct "
                "training_plan.availability_zone",
            )
        ], reserved
    if in_zone and reserved < needed:
        needed_by = (
            "the group needs"
            if not sharing
            else f"groups {', '.join(sorted({group.name, *(g.name for g in sharing)}))} need"
        )
        lower = (
            f"lower count to {reserved}"
            if not sharing
            else f"lower their counts by {needed - reserved} in total"
        )
        return [
            (
                f"plan reserves {reserved} x {group.instance_type} in "
                f"{wanted.availability_zone}, {needed_by} {needed}",
                f"{lower} or buy a plan for {needed - reserved} more instances",
            )
        ], reserved
    if not live and plan["Status"] in USABLE_PLAN_STATUSES:
        return [
            (
                "plan has no Active or Scheduled reserved capacity",
                "buy a new plan and set training_plan.arn",
            )
        ], reserved
    return [], reserved


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
    capacity, reserved = _capacity_findings(group, wanted, plan, sharing)
    findings = _identity_findings(wanted.arn, plan) + _end_findings(plan, now) + capacity
    start, end = plan.get("StartTime"), plan.get("EndTime")
    starts = f", starts {day(start)}" if start is not None and start > now else ""
    summary = (
        f"{plan['Status']}, {reserved} x {group.instance_type} in {wanted.availability_zone}"
        f"{starts}, ends {day(end)}"
    )
    return [p for p, _ in findings], [f for _, f in findings], summary


def _describe_plan(context: CheckContext, name: str) -> dict[str, Any] | AwsCallError:
    try:
        return call(context.client("sagemaker"), "describe_training_plan", TrainingPlanName=name)
    except AwsCallError as failure:
        return failure


def training_plan_rows(context: CheckContext) -> list[Row]:
    config = context.config
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
            plans[name] = _describe_plan(context, name)
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
                else failure_row(plan, TRAINING_PLAN, subject)
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
        problems, fixes, summary = assess_plan(group, plan, context.now, sharing)
        if problems:
            rows.append(Row(TRAINING_PLAN, subject, PROBLEM, "; ".join(problems), "; ".join(fixes)))
        else:
            rows.append(Row(TRAINING_PLAN, subject, OK, summary))
    return rows
