"""`hpctl plans ...`: find and buy SageMaker training plans (reserved capacity).

A training plan reserves a fixed number of instances in one Availability Zone for a fixed
time, and buying one is an upfront charge. `search` is free and read-only; `buy` spends
money, so it refuses to run without `--yes` and never prompts (it must be safe in scripts).
What the API accepts and how offerings become rows is in `hpctl.plans`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from config.instance_types import ULTRASERVER_TYPES
from hpctl import aws
from hpctl.errors import ExitCode, OneLineUsageErrors, fail, report
from hpctl.options import (
    EnvOption,
    JsonListOption,
    duration_option,
    minute_of,
    print_table,
    renamed_option,
    required_environment,
)
from hpctl.plans import (
    MAX_DAYS,
    MIN_DAYS,
    Target,
    checked_count,
    checked_days,
    checked_instance_type,
    checked_offering_id,
    checked_plan_name,
    checked_start,
    checked_ultraserver_count,
    checked_ultraserver_type,
    config_snippet,
    offering_row,
    plan_availability_zones,
    search_request,
)

app = typer.Typer(
    help="Search and buy training plans (reserved capacity for HyperPod instance groups).",
    add_completion=False,
    no_args_is_help=True,
)
stdout = Console(soft_wrap=True, highlight=False)


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


def _plan_days(ctx: typer.Context, duration: str | None, old_days: int | None) -> int:
    """The whole days of --duration, or of the old spelling --duration-days (a number)."""
    old = None if old_days is None else f"{old_days}d"
    given = renamed_option(ctx, "--duration-days", old, duration)
    if given is None:
        fail(ctx, "--duration: missing; pass e.g. --duration 14d", code=ExitCode.USAGE)
    option = "--duration" if old is None else "--duration-days"
    return checked_days(option, duration_option(ctx, option, given))


def _what_to_reserve(
    ctx: typer.Context, instance_type: str | None, ultraserver_type: str | None, count: int
) -> tuple[str, int]:
    """(instance or UltraServer type, count), checked against what the API offers."""
    if (instance_type is None) == (ultraserver_type is None):
        fail(
            ctx,
            "--instance-type: give exactly one of --instance-type (instances) and "
            "--ultraserver-type (whole UltraServers)",
            code=ExitCode.USAGE,
        )
    if ultraserver_type is not None:
        return checked_ultraserver_type(ultraserver_type), checked_ultraserver_count(count)
    return checked_instance_type(str(instance_type)), checked_count(count)


@app.command(cls=OneLineUsageErrors)
def search(
    ctx: typer.Context,
    count: Annotated[
        int,
        typer.Option("--count", help="Instances (1, 2, 4, ... 64), or UltraServers (1 or more)"),
    ],
    start: Annotated[str, typer.Option("--start", help="Earliest start, YYYY-MM-DD (UTC)")],
    duration: Annotated[
        str | None,
        typer.Option(
            "--duration",
            metavar="DURATION",
            help=f"How long the plan lasts, in whole days: {MIN_DAYS}d to {MAX_DAYS}d, e.g. "
            "14d or 2w",
            show_default=False,
        ),
    ] = None,
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
    duration_days: Annotated[int | None, typer.Option("--duration-days", hidden=True)] = None,
) -> None:
    """List training plan offerings that match in the environment's Region (read-only,
    free): `--count` instances of `--instance-type`, or `--count` UltraServers of
    `--ultraserver-type`."""
    what, count = _what_to_reserve(ctx, instance_type, ultraserver_type, count)
    begin = checked_start(start)
    days = _plan_days(ctx, duration, duration_days)
    request = search_request(
        what, count, begin, days, target, ultraserver=ultraserver_type is not None
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
            f"{days} days; try another start date, duration or count."
        )
        return
    print_offerings(
        rows, f"Training plan offerings: {asked}, {days} days from {start} ({target.value})"
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
    checked_offering_id(offering_id)
    checked_plan_name(name)
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
