"""`hpctl plans ...`: find and buy SageMaker training plans (reserved capacity).

A training plan reserves a fixed number of instances in one Availability Zone for a fixed
time, and buying one is an upfront charge. `search` is free and read-only; `buy` spends
money, so it refuses to run without `--yes` and never prompts (it must be safe in scripts).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Any

import botocore.session
import typer
from rich.console import Console
from rich.table import Table

from config.instance_types import INSTANCE_TYPES, unknown_instance_type
from hpctl import aws
from hpctl.errors import ExitCode, OneLineUsageErrors, fail, report
from hpctl.options import EnvOption, RegionOption, print_table, required_environment

app = typer.Typer(
    help="Search and buy training plans (reserved capacity for HyperPod instance groups).",
    add_completion=False,
    no_args_is_help=True,
)
stdout = Console(soft_wrap=True, highlight=False)

# Offerings come in powers of two up to 64 instances and last 1 to 182 days.
ALLOWED_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
MIN_DAYS, MAX_DAYS = 1, 182
# Patterns from the SageMaker API model (TrainingPlanOfferingId, TrainingPlanName).
_OFFERING_ID = re.compile(r"[a-z0-9\-]{1,256}")
_PLAN_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}")
_PLAN_NAME_MAX = 64
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class Target(StrEnum):
    hyperpod_cluster = "hyperpod-cluster"
    training_job = "training-job"


@lru_cache(maxsize=1)
def reservable_instance_types() -> frozenset[str]:
    """Instance types the training plan API accepts, from the API model botocore ships, so
    a type the service cannot reserve is refused before any call."""
    model = botocore.session.get_session().get_service_model("sagemaker")
    return frozenset(model.shape_for("ReservedCapacityInstanceType").enum)


# ------------------------------------------------------------------ input validation


def check_instance_type(ctx: typer.Context, value: str) -> str:
    if value not in INSTANCE_TYPES:
        fail(ctx, f"--instance-type: {unknown_instance_type(value)}", code=ExitCode.USAGE)
    reservable = reservable_instance_types()
    if value not in reservable:
        offered = sorted(set(INSTANCE_TYPES) & reservable)
        fail(
            ctx,
            f"--instance-type: {value} cannot be reserved with a training plan; "
            f"use one of {', '.join(offered)}",
            code=ExitCode.USAGE,
        )
    return value


def check_count(ctx: typer.Context, value: int) -> int:
    if value not in ALLOWED_COUNTS:
        fail(
            ctx,
            f"--count: {value} instances are not offered; use one of "
            f"{', '.join(map(str, ALLOWED_COUNTS))}",
            code=ExitCode.USAGE,
        )
    return value


def check_duration(ctx: typer.Context, days: int) -> int:
    if not MIN_DAYS <= days <= MAX_DAYS:
        fail(
            ctx,
            f"--duration-days: {days} is out of range; plans last {MIN_DAYS} to {MAX_DAYS} days",
            code=ExitCode.USAGE,
        )
    return days


def today() -> date:
    return datetime.now(UTC).date()


def parse_start(ctx: typer.Context, text: str) -> datetime:
    """The start date as midnight UTC; a plan cannot start in the past."""
    try:
        if not _ISO_DATE.fullmatch(text):
            raise ValueError
        day = date.fromisoformat(text)
    except ValueError:
        fail(
            ctx,
            f"--start: {text!r} is not a date; use YYYY-MM-DD, e.g. 2026-12-01",
            code=ExitCode.USAGE,
        )
    now = today()
    if day < now:
        fail(
            ctx,
            f"--start: {day.isoformat()} is in the past; use {now.isoformat()} or later",
            code=ExitCode.USAGE,
        )
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def check_offering_id(ctx: typer.Context, value: str) -> str:
    if not _OFFERING_ID.fullmatch(value):
        fail(
            ctx,
            f"--offering-id: {value!r} is not an offering id (lowercase letters, digits and '-'; "
            "copy it from `hpctl plans search`)",
            code=ExitCode.USAGE,
        )
    return value


def check_plan_name(ctx: typer.Context, value: str) -> str:
    if len(value) > _PLAN_NAME_MAX or not _PLAN_NAME.fullmatch(value):
        fail(
            ctx,
            f"--name: {value!r} is not a valid plan name (1-{_PLAN_NAME_MAX} letters, "
            "digits and single or repeated '-' between them)",
            code=ExitCode.USAGE,
        )
    return value


# ------------------------------------------------------------------ search


def search_request(
    instance_type: str, count: int, start: datetime, days: int, target: Target
) -> dict[str, Any]:
    """SearchTrainingPlanOfferings parameters. Duration is in hours in the API."""
    return {
        "InstanceType": instance_type,
        "InstanceCount": count,
        "StartTimeAfter": start,
        "DurationHours": days * 24,
        "TargetResources": [target.value],
    }


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value else None


def offering_row(offering: dict[str, Any]) -> dict[str, Any]:
    """One offering, flattened. An offering may bundle several reserved capacities (one per
    AZ and time slot): the row sums their instances and spans their times."""
    parts = offering.get("ReservedCapacityOfferings", [])
    starts = [p["StartTime"] for p in parts if p.get("StartTime")]
    ends = [p["EndTime"] for p in parts if p.get("EndTime")]
    return {
        "offering_id": offering["TrainingPlanOfferingId"],
        "availability_zones": sorted(
            {p["AvailabilityZone"] for p in parts if p.get("AvailabilityZone")}
        ),
        "instance_types": sorted({p["InstanceType"] for p in parts}),
        "instance_count": sum(p["InstanceCount"] for p in parts),
        "start": _iso(min(starts)) if starts else None,
        "end": _iso(max(ends)) if ends else None,
        "duration_hours": offering.get("DurationHours"),
        "duration_minutes": offering.get("DurationMinutes", 0),
        "upfront_fee": offering.get("UpfrontFee"),
        "currency": offering.get("CurrencyCode"),
        "target_resources": offering["TargetResources"],
    }


def _duration_text(hours: int | None, minutes: int) -> str:
    if hours is None:
        return "-"
    days, rest = divmod(hours, 24)
    text = f"{days}d" if days else ""
    if rest or minutes:
        text += f" {rest}h" if text else f"{rest}h"
    if minutes:
        text += f" {minutes}m"
    return text or "0h"


def _when(text: str | None) -> str:
    return datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M") if text else "-"


def print_offerings(rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=title)
    table.add_column("offering id", no_wrap=True)
    for column in ("AZ", "start (UTC)", "end (UTC)", "duration"):
        table.add_column(column, no_wrap=True)
    for column in ("upfront fee", "currency", "instances"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            row["offering_id"],
            ", ".join(row["availability_zones"]) or "-",
            _when(row["start"]),
            _when(row["end"]),
            _duration_text(row["duration_hours"], row["duration_minutes"]),
            row["upfront_fee"] or "-",
            row["currency"] or "-",
            str(row["instance_count"]),
        )
    print_table(stdout, table)


@app.command(cls=OneLineUsageErrors)
def search(
    ctx: typer.Context,
    instance_type: Annotated[str, typer.Option("--instance-type", help="e.g. ml.p5.48xlarge")],
    count: Annotated[int, typer.Option("--count", help="Instances: 1, 2, 4, ... 64")],
    start: Annotated[str, typer.Option("--start", help="Earliest start, YYYY-MM-DD (UTC)")],
    duration_days: Annotated[int, typer.Option("--duration-days", help="1 to 182")],
    target: Annotated[
        Target, typer.Option("--target", help="What the plan will feed")
    ] = Target.hyperpod_cluster,
    env: EnvOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list")] = False,
) -> None:
    """List training plan offerings that match in the environment's Region (read-only,
    free)."""
    request = search_request(
        check_instance_type(ctx, instance_type),
        check_count(ctx, count),
        parse_start(ctx, start),
        check_duration(ctx, duration_days),
        target,
    )
    config = required_environment(ctx, env)
    sagemaker = aws.connect_environment(ctx, config).client("sagemaker")
    with aws.reported_errors(ctx):
        response = aws.call(sagemaker, "search_training_plan_offerings", **request)
    rows = [offering_row(o) for o in response.get("TrainingPlanOfferings", [])]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(
            f"No offerings for {count} x {instance_type} from {start} for "
            f"{duration_days} days; try another start date, duration or count."
        )
        return
    print_offerings(
        rows,
        f"Training plan offerings: {count} x {instance_type}, "
        f"{duration_days} days from {start} ({target.value})",
    )
    typer.echo("Buy one with: hpctl plans buy --offering-id ID --name NAME --yes")


# ------------------------------------------------------------------ buy


def plan_availability_zones(plan: dict[str, Any]) -> list[str]:
    """AZs of a plan's reserved capacities (empty while the service has not placed it)."""
    return sorted(
        {
            s["AvailabilityZone"]
            for s in plan.get("ReservedCapacitySummaries", [])
            if s.get("AvailabilityZone")
        }
    )


def config_snippet(arn: str, zones: list[str]) -> str:
    """The `training_plan` block of an instance group in the environment YAML. Without
    exactly one AZ the key is left out on purpose: a guessed AZ would put the group's
    subnet where the capacity is not, and the config check rejects a missing key."""
    lines = ["training_plan:", f"  arn: {arn}"]
    if len(zones) == 1:
        lines.append(f"  availability_zone: {zones[0]}")
    return "\n".join(lines)


@app.command(cls=OneLineUsageErrors)
def buy(
    ctx: typer.Context,
    offering_id: Annotated[str, typer.Option("--offering-id", help="From `hpctl plans search`")],
    name: Annotated[str, typer.Option("--name", help="Name for the new training plan")],
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm the purchase (charges the upfront fee)")
    ] = False,
    region: RegionOption = None,
) -> None:
    """Buy an offering as a training plan (an upfront charge) and print its config block."""
    check_offering_id(ctx, offering_id)
    check_plan_name(ctx, name)
    if not yes:
        fail(
            ctx,
            f"refusing to buy offering {offering_id} without --yes: a training plan charges "
            "its upfront fee when bought; check the offering with `hpctl plans search` and "
            "re-run with --yes",
            code=ExitCode.FAILED,
        )
    sagemaker = aws.connect(ctx, region).client("sagemaker")
    with aws.reported_errors(ctx):
        arn = aws.call(
            sagemaker,
            "create_training_plan",
            TrainingPlanName=name,
            TrainingPlanOfferingId=offering_id,
        )["TrainingPlanArn"]
        # Printed before the next call so the ARN is not lost if describing the plan fails.
        typer.echo(f"Bought training plan {name}: {arn}")
        plan = aws.call(sagemaker, "describe_training_plan", TrainingPlanName=arn)
    zones = plan_availability_zones(plan)
    typer.echo(f"Status: {plan['Status']}")
    typer.echo("Add to the instance group that uses it:")
    typer.echo(config_snippet(arn, zones))
    if len(zones) == 1:
        # The environment check refuses a plan AZ without a cluster subnet; say so up front.
        typer.echo(f"network.availability_zones must include {zones[0]}: the capacity is there.")
    elif not zones:
        report(
            ctx,
            f"the plan reports no Availability Zone yet (status {plan['Status']}); read it "
            f"later with `aws sagemaker describe-training-plan --training-plan-name {name}`",
        )
    else:
        report(
            ctx,
            f"the plan spans {', '.join(zones)}; give the group a subnet in the AZ its "
            "capacity is in",
        )
