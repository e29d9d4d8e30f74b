"""`hpctl capacity` and `hpctl instance-types`: offline IP planning for one instance group or a
whole environment (`--env NAME` or `--config FILE`), and the instance types the planner
knows. The figures are built in `hpctl.capacity`."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from config.errors import ConfigError
from config.instance_types import InterfaceType
from config.loader import load_file
from hpctl.capacity import environment_plan, group_plan, instance_type_rows
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.options import EnvOption, JsonListOption, JsonObjectOption, environment_file, print_table

app = typer.Typer()
stdout = Console(soft_wrap=True)


class OrchestratorChoice(StrEnum):
    eks = "eks"
    slurm = "slurm"


class InterfaceChoice(StrEnum):
    efa = "efa"
    efa_only = "efa-only"


def _interface_type(choice: InterfaceChoice | None) -> InterfaceType | None:
    return None if choice is None else choice.value


def _print_group(result: dict[str, object]) -> None:
    table = Table(title=f"IP plan: {result['count']} x {result['instance_type']}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, str(value))
    print_table(stdout, table)


def _print_plan(source: Path, layout_dict: dict[str, Any]) -> None:
    groups = Table(title=f"Cluster subnets for {source}")
    for column in ("AZ", "CIDR", "usable", "required", "free", "groups", "room to grow"):
        groups.add_column(
            column, justify="right" if column in ("usable", "required", "free") else "left"
        )
    for az, subnet in layout_dict["cluster_subnets"].items():
        growth = ", ".join(f"up to {n} more {g}" for g, n in subnet["growth_nodes"].items())
        groups.add_row(
            az,
            subnet["cidr"],
            str(subnet["usable"]),
            str(subnet["required"]),
            str(subnet["free"]),
            ", ".join(subnet["groups"]) or "-",
            growth or "-",
        )
    print_table(stdout, groups)
    per_group = Table(title="Instance groups")
    for column in (
        "group",
        "type",
        "interface",
        "nodes",
        "headroom",
        "IPs/node",
        "IPs total",
        "min subnet",
    ):
        per_group.add_column(column)
    for group in layout_dict["groups"]:
        per_group.add_row(
            group["name"],
            group["instance_type"],
            str(group["interface"] or "-"),
            str(group["count"]),
            str(group["headroom_nodes"]),
            str(group["ips_per_node"]),
            str(group["ips_total"]),
            f"/{group['subnet_prefix']}",
        )
    print_table(stdout, per_group)


def _environment_source(
    ctx: typer.Context, env: str | None, config: Path | None, single_group: bool
) -> Path | None:
    """The environment file to plan (--env or --config), or None to plan one group."""
    if env is not None and config is not None:
        fail(ctx, "--env: use either --env or --config, not both", code=ExitCode.USAGE)
    if (env is not None or config is not None) and single_group:
        given = "--env" if env is not None else "--config"
        fail(
            ctx,
            f"{given}: use either {given} or --instance-type/--count, not both",
            code=ExitCode.USAGE,
        )
    return environment_file(env) if env is not None else config


@app.command("capacity", cls=OneLineUsageErrors)
def capacity(
    ctx: typer.Context,
    instance_type: Annotated[
        str | None, typer.Option("--instance-type", help="e.g. ml.p5.48xlarge")
    ] = None,
    count: Annotated[int | None, typer.Option("--count", min=1, help="Nodes in the group")] = None,
    orchestrator: Annotated[
        OrchestratorChoice, typer.Option("--orchestrator", case_sensitive=False)
    ] = OrchestratorChoice.eks,
    interface: Annotated[
        InterfaceChoice | None,
        typer.Option("--interface", help="efa (an address per card) or efa-only (none)"),
    ] = None,
    headroom: Annotated[
        int,
        typer.Option("--headroom", min=0, help="Spare nodes for replacements and rolling updates"),
    ] = 0,
    env: EnvOption = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", metavar="FILE", help="Plan an environment file, instead of --env"),
    ] = None,
    as_json: JsonObjectOption = False,
) -> None:
    """Addresses per node, group and subnet, and the smallest subnet that holds them.

    For one group (--instance-type, --count) or a whole environment (--env or --config)."""
    source = _environment_source(ctx, env, config, bool(instance_type or count))
    if source is not None:
        try:
            layout = environment_plan(load_file(source))
        except ConfigError as error:
            fail(ctx, *error.located_lines(), code=ExitCode.FAILED)
        if as_json:
            stdout.print_json(json.dumps(layout))
        else:
            _print_plan(source, layout)
        return
    if instance_type is None or count is None:
        fail(
            ctx,
            "--instance-type/--count: both are required (or pass --env NAME or --config FILE)",
            code=ExitCode.USAGE,
        )
    result = group_plan(
        instance_type, count, orchestrator.value, _interface_type(interface), headroom
    )
    if as_json:
        print(json.dumps(result))
    else:
        _print_group(result)


@app.command("instance-types", cls=OneLineUsageErrors)
def instance_types(as_json: JsonListOption = False) -> None:
    """The instance types the planner and validation know, with their network figures."""
    rows = instance_type_rows()
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(title="Known instance types")
    for column in rows[0]:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    print_table(stdout, table)
