"""`hpctl zones --env NAME`: record the account's Availability Zone names and their zone IDs
in cdk.context.json, so the environment can name zones by ID and synth stays offline.

Reads only the environment file's `account` and `region` (the rest may still name zones the
file cannot resolve yet), checks that the credentials belong to that account
(sts:GetCallerIdentity, `hpctl.aws.connect`) and asks ec2:DescribeAvailabilityZones for the Region's zones of type
availability-zone. Prints the table (name, zone ID, state) and, with `--write`, records it;
commit the file so every synth and reviewer sees the same mapping. Failures are one line
(exit 1 for AWS, 2 for options and files). What is read and compared is in `hpctl.zones`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from config.errors import ConfigError
from config.zones import CONTEXT_FILE, record_zones, recorded_zone_ids
from hpctl import aws, options
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.zones import account_and_region, account_zones, moved_zones, zone_rows

app = typer.Typer()


@app.command("zones", cls=OneLineUsageErrors)
def zones(
    ctx: typer.Context,
    env: options.EnvOption = None,
    write: Annotated[
        bool, typer.Option("--write", help="Record the mapping in cdk.context.json.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --write, also change names the file already maps to another zone ID.",
        ),
    ] = False,
    json_output: options.JsonOption = False,
    context_file: Annotated[Path, typer.Option(hidden=True)] = CONTEXT_FILE,
) -> None:
    """Show (and with --write record) the account's AZ names and zone IDs."""
    env = options.required_env(ctx, env)
    account, region = account_and_region(env)
    connection = aws.connect(ctx, region, account=account, environment=env)
    with aws.reported_errors(ctx):
        found = account_zones(connection)
    mapping = {name: str(zone["ZoneId"]) for name, zone in sorted(found.items())}
    try:
        recorded = recorded_zone_ids(account, region, context_file)
    except ConfigError as error:
        fail(ctx, "; ".join(error.located_lines()), code=ExitCode.USAGE)
    moved = moved_zones(mapping, recorded)
    if write and moved and not force:
        fail(
            ctx,
            f"--write: cdk.context.json maps {'; '.join(moved)} differently; zones written by "
            "ID would move to other physical zones (replacing subnets and FSx): check the "
            "account, then pass --force",
            code=ExitCode.USAGE,
        )
    rows = zone_rows(found, mapping, recorded)
    if write:
        available = [name for name, zone in found.items() if zone.get("State") == "available"]
        record_zones(account, region, mapping, available, context_file)
    differs = [r["name"] for r in rows if r["recorded"] != r["zone_id"]]
    if json_output:
        document = {"account": account, "region": region, "zones": rows, "differs": differs}
        typer.echo(json.dumps(document | {"written": write}, indent=2))
        return
    table = Table("name", "zone ID", "state", "recorded")
    for row in rows:
        table.add_row(row["name"], row["zone_id"], row["state"], row["recorded"])
    options.print_table(Console(), table)
    if write:
        typer.echo(f"recorded {len(rows)} zones of {account}/{region}; commit cdk.context.json")
    elif differs:
        typer.echo(
            f"cdk.context.json differs for {', '.join(differs)}; run with --write and commit it"
        )
