"""training-plan: per instance group with a plan, the plan exists with the configured ARN, is
usable, targets HyperPod, outlives the deploy by `PLAN_MIN_REMAINING` and reserves the group's
instances in its zone (see the package docstring)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from config.schema.hyperpod import InstanceGroupConfig
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
        problems.append(f"plan targets {joined(targets)}, not {HYPERPOD_TARGET}")
        fixes.append(f"buy a plan for {HYPERPOD_TARGET}")
    end = plan.get("EndTime")
    if end is not None and status not in DEAD_CAPACITY_STATUSES:
        if end <= now:
            problems.append(f"ended {minute(end)}")
            fixes.append("buy a new plan and set training_plan.arn")
        elif end - now < PLAN_MIN_REMAINING:
            problems.append(
                f"ends {minute(end)}, less than {PLAN_MIN_REMAINING.days} days from now"
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
            f"plan reserves {joined(c['InstanceType'] for c in live)}, "
            f"the group runs {group.instance_type}"
        )
        fixes.append(f"use a plan for {group.instance_type} or change the group's instance_type")
    elif of_type and not in_zone:
        zones = joined(str(c.get("AvailabilityZone")) for c in of_type)
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
    starts = f", starts {day(start)}" if start is not None and start > now else ""
    summary = (
        f"{status}, {reserved} x {group.instance_type} in {wanted.availability_zone}"
        f"{starts}, ends {day(end)}"
    )
    return problems, fixes, summary


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
