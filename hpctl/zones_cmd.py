"""`hpctl zones --env NAME`: record the account's Availability Zone names and their zone IDs
in cdk.context.json, so the environment can name zones by ID and synth stays offline.

Reads only the environment file's `account` and `region` (the rest may still name zones the
file cannot resolve yet), checks that the credentials belong to that account
(sts:GetCallerIdentity, `hpctl.aws.connect`) and asks ec2:DescribeAvailabilityZones for the Region's zones of type
availability-zone. Prints the table (name, zone ID, state) and, with `--write`, records it;
commit the file so every synth and reviewer sees the same mapping. Failures are one line
(exit 1 for AWS, 2 for options and files).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from config.errors import ConfigError
from config.loader import read_yaml
from config.zones import CONTEXT_FILE, record_zones, recorded_zone_ids
from hpctl import aws, options
from hpctl.errors import ExitCode, OneLineUsageErrors, fail

app = typer.Typer()


def _account_and_region(ctx: typer.Context, env: str) -> tuple[str, str]:
    path = options.config_dir / f"{env}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in options.config_dir.glob("*.yaml")))
        fail(ctx, f"--env: unknown environment {env!r}; use one of {known}", code=ExitCode.USAGE)
    try:
        data = read_yaml(path)
    except ConfigError as error:
        fail(ctx, "--env: " + "; ".join(error.located_lines()), code=ExitCode.USAGE)
    fields = data if isinstance(data, dict) else {}
    account, region = fields.get("account"), fields.get("region")
    if not isinstance(account, str) or not isinstance(region, str):
        fail(
            ctx,
            f"--env: {path.name} needs `account` (quoted) and `region` before zones can be "
            "looked up; add them",
            code=ExitCode.USAGE,
        )
    return account, region


def account_zones(connection: aws.Connection) -> dict[str, dict[str, Any]]:
    """name -> zone for the Region's Availability Zones (not Local or Wavelength Zones)."""
    found = aws.call(connection.client("ec2"), "describe_availability_zones")
    return {
        z["ZoneName"]: z
        for z in found["AvailabilityZones"]
        if z.get("ZoneType", "availability-zone") == "availability-zone"
    }


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
    account, region = _account_and_region(ctx, env)
    connection = aws.connect(ctx, region, account=account, environment=env)
    with aws.reported_errors(ctx):
        found = account_zones(connection)
    mapping = {name: str(zone["ZoneId"]) for name, zone in sorted(found.items())}
    try:
        recorded = recorded_zone_ids(account, region, context_file)
    except ConfigError as error:
        fail(ctx, "; ".join(error.located_lines()), code=ExitCode.USAGE)
    # Zones written by ID resolve through this record: changing an entry moves every subnet
    # and the file system placed by it to another zone, which replaces them.
    moved = [
        f"{name} {recorded[name]} -> {zone_id}"
        for name, zone_id in mapping.items()
        if recorded.get(name, zone_id) != zone_id
    ]
    if write and moved and not force:
        fail(
            ctx,
            f"--write: cdk.context.json maps {'; '.join(moved)} differently; zones written by "
            "ID would move to other physical zones (replacing subnets and FSx): check the "
            "account, then pass --force",
            code=ExitCode.USAGE,
        )
    rows = [
        {
            "name": name,
            "zone_id": zone_id,
            "state": str(found[name].get("State", "unknown")),
            "recorded": recorded.get(name, "-"),
        }
        for name, zone_id in mapping.items()
    ]
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
