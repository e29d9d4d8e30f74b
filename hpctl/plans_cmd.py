"""`hpctl plans ...`: find and buy SageMaker training plans (reserved capacity).

A training plan reserves a fixed number of instances in one Availability Zone for a fixed
time, and buying one is an upfront charge. `search` is free and read-only; `buy` spends
money, so it refuses to run without `--yes` and never prompts (it must be safe in scripts).
What the API accepts and how offerings become rows is in `hpctl.plans`.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from config.instance_types import INSTANCE_TYPES, ULTRASERVER_TYPES, unknown_instance_type
from hpctl import aws
from hpctl.errors import ExitCode, OneLineUsageErrors, fail, report
from hpctl.options import (
    EnvOption,
    JsonListOption,
    minute_of,
    print_table,
    required_environment,
)
from hpctl.plans import (
    ALLOWED_COUNTS,
    ISO_DATE,
    MAX_DAYS,
    MIN_DAYS,
    OFFERING_ID,
    PLAN_NAME,
    PLAN_NAME_MAX,
    Target,
    config_snippet,
    offering_row,
    plan_availability_zones,
    reservable_instance_types,
    search_request,
)

app = typer.Typer(
    help="Search and buy training plans (reserved capacity for HyperPod instance groups).",
    add_completion=False,
    no_args_is_help=True,
)
stdout = Console(soft_wrap=True, highlight=False)


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


def check_ultraserver_type(ctx: typer.Context, value: str) -> str:
    if value not in ULTRASERVER_TYPES:
        fail(
            ctx,
            f"--ultraserver-type: unknown UltraServer type {value!r}; use one of "
            f"{', '.join(sorted(ULTRASERVER_TYPES))}",
            code=ExitCode.USAGE,
        )
    return value


def check_ultraserver_count(ctx: typer.Context, value: int) -> int:
    if value < 1:
        fail(ctx, f"--count: {value} UltraServers; use 1 or more", code=ExitCode.USAGE)
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
        if not ISO_DATE.fullmatch(text):
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
    if not OFFERING_ID.fullmatch(value):
        fail(
            ctx,
            f"--offering-id: {value!r} is not an offering id (lowercase letters, digits and '-'; "
            "copy it from `hpctl plans search`)",
            code=ExitCode.USAGE,
        )
    return value


def check_plan_name(ctx: typer.Context, value: str) -> str:
    if len(value) > PLAN_NAME_MAX or not PLAN_NAME.fullmatch(value):
        fail(
            ctx,
            f"--name: {value!r} is not a valid plan name (1-{PLAN_NAME_MAX} letters, "
            "digits and single or repeated '-' between them)",
            code=ExitCode.USAGE,
        )
    return value


# ------------------------------------------------------------------ search


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


def print_offerings(rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=title)
    table.add_column("offering id", no_wrap=True)
    for column in ("AZ", "start (UTC)", "end (UTC)", "duration"):
        table.add_column(column, no_wrap=True)
    for column in ("upfront fee", "currency", "instances", "UltraServers"):
        table.add_column(column, justify="right")
    for row in rows:
        ultraservers = (
            f"{row['ultraserver_count']} x {', '.join(row['ultraserver_types'])}"
            if row["ultraserver_types"]
            else "-"
        )
        table.add_row(
            row["offering_id"],
            ", ".join(row["availability_zones"]) or "-",
            minute_of(row["start"]),
            minute_of(row["end"]),
            _duration_text(row["duration_hours"], row["duration_minutes"]),
            row["upfront_fee"] or "-",
            row["currency"] or "-",
            str(row["instance_count"]),
            ultraservers,
        )
    print_table(stdout, table)


@app.command(cls=OneLineUsageErrors)
def search(
    ctx: typer.Context,
    count: Annotated[
        int,
        typer.Option("--count", help="Instances (1, 2, 4, ... 64), or UltraServers (1 or more)"),
    ],
    start: Annotated[str, typer.Option("--start", help="Earliest start, YYYY-MM-DD (UTC)")],
    duration_days: Annotated[int, typer.Option("--duration-days", help="1 to 182")],
    target: Annotated[
        Target, typer.Option("--target", help="What the plan will feed")
    ] = Target.hyperpod_cluster,
    env: EnvOption = None,
    as_json: JsonListOption = False,
    instance_type: Annotated[
        str | None, typer.Option("--instance-type", help="e.g. ml.p5.48xlarge")
    ] = None,
    ultraserver_type: Annotated[
        str | None,
        typer.Option(
            "--ultraserver-type",
            help=f"Whole UltraServers instead of instances: {', '.join(sorted(ULTRASERVER_TYPES))}",
        ),
    ] = None,
) -> None:
    """List training plan offerings that match in the environment's Region (read-only,
    free): `--count` instances of `--instance-type`, or `--count` UltraServers of
    `--ultraserver-type`."""
    if (instance_type is None) == (ultraserver_type is None):
        fail(
            ctx,
            "--instance-type: give exactly one of --instance-type (instances) and "
            "--ultraserver-type (whole UltraServers)",
            code=ExitCode.USAGE,
        )
    if ultraserver_type is not None:
        what = check_ultraserver_type(ctx, ultraserver_type)
        count = check_ultraserver_count(ctx, count)
    else:
        what = check_instance_type(ctx, str(instance_type))
        count = check_count(ctx, count)
    request = search_request(
        what,
        count,
        parse_start(ctx, start),
        check_duration(ctx, duration_days),
        target,
        ultraserver=ultraserver_type is not None,
    )
    config = required_environment(ctx, env)
    sagemaker = aws.connect_environment(ctx, config).client("sagemaker")
    with aws.reported_errors(ctx):
        response = aws.call(sagemaker, "search_training_plan_offerings", **request)
    rows = [offering_row(o) for o in response.get("TrainingPlanOfferings", [])]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    asked = f"{count} x {what}"
    if not rows:
        typer.echo(
            f"No offerings for {asked} from {start} for "
            f"{duration_days} days; try another start date, duration or count."
        )
        return
    print_offerings(
        rows,
        f"Training plan offerings: {asked}, {duration_days} days from {start} ({target.value})",
    )
    typer.echo(
        f"Buy one with: hpctl plans buy --offering-id ID --name NAME --env {config.environment} --yes"
    )


# ------------------------------------------------------------------ buy


@app.command(cls=OneLineUsageErrors)
def buy(
    ctx: typer.Context,
    offering_id: Annotated[str, typer.Option("--offering-id", help="From `hpctl plans search`")],
    name: Annotated[str, typer.Option("--name", help="Name for the new training plan")],
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm the purchase (charges the upfront fee)")
    ] = False,
    env: EnvOption = None,
) -> None:
    """Buy an offering as a training plan (an upfront charge) and print its config block.

    In the environment's Region and only with credentials of its account: the plan is bought
    where `plans search --env` found the offering, never in another account."""
    check_offering_id(ctx, offering_id)
    check_plan_name(ctx, name)
    config = required_environment(ctx, env)
    if not yes:
        fail(
            ctx,
            f"refusing to buy offering {offering_id} without --yes: a training plan charges "
            "its upfront fee when bought; check the offering with `hpctl plans search` and "
            "re-run with --yes",
            code=ExitCode.FAILED,
        )
    sagemaker = aws.connect_environment(ctx, config).client("sagemaker")
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
