"""`hpctl capacity` and `hpctl instance-types`: offline IP planning for one instance group or a
whole environment file, and the instance types the planner knows."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from config.capacity import (
    AWS_RESERVED_PER_SUBNET,
    MIN_SUBNET_PREFIX,
    CapacityError,
    plan_group,
)
from config.errors import ConfigError
from config.instance_types import (
    INSTANCE_TYPES,
    InterfaceType,
    known_instance_types,
    lookup,
)
from config.loader import load_file
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.options import JsonListOption, JsonObjectOption

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


def _single_group(
    ctx: typer.Context,
    instance_type: str,
    count: int,
    orchestrator: OrchestratorChoice,
    interface: InterfaceChoice | None,
    headroom: int,
) -> dict[str, object]:
    try:
        figures = lookup(instance_type)
    except KeyError as error:
        fail(ctx, f"--instance-type: {error.args[0]}", code=ExitCode.USAGE)
    chosen = _interface_type(interface)
    if chosen and not figures.supports_interface(chosen):
        supported = figures.supported_interfaces
        fix = f"use --interface {' or '.join(supported)}" if supported else "omit --interface"
        fail(
            ctx,
            f"--interface: {instance_type} does not support {chosen!r}; {fix}",
            code=ExitCode.USAGE,
        )
    plan = plan_group(
        name=instance_type,
        instance_type=instance_type,
        count=count,
        orchestrator=orchestrator.value,
        interface=chosen,
        headroom_nodes=headroom,
    )
    result = plan.as_dict()
    del result["name"], result["availability_zone"]
    prefix = plan.subnet_prefix
    result["subnet_prefix_fits_aws_limits"] = prefix >= MIN_SUBNET_PREFIX
    size = 1 << (32 - max(prefix, 0))
    result["subnet_size"] = size
    result["growth_nodes_in_subnet"] = (
        size - AWS_RESERVED_PER_SUBNET - plan.ips_total
    ) // plan.ips_per_node
    return result


def _print_group(result: dict[str, object]) -> None:
    table = Table(title=f"IP plan: {result['count']} x {result['instance_type']}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, str(value))
    stdout.print(table)


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
    stdout.print(groups)
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
    stdout.print(per_group)


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
    config: Annotated[
        Path | None, typer.Option("--config", help="Plan a whole environment file instead")
    ] = None,
    as_json: JsonObjectOption = False,
) -> None:
    """Addresses per node, per group and per subnet, with the smallest subnet that holds them."""
    if config is not None:
        if instance_type or count:
            fail(
                ctx,
                "--config: use either --config or --instance-type/--count, not both",
                code=ExitCode.USAGE,
            )
        try:
            loaded = load_file(config)
        except ConfigError as error:
            fail(ctx, *error.located_lines(), code=ExitCode.FAILED)
        layout = loaded.layout.as_dict()
        groups = {g.name: g for s in loaded.layout.cluster.values() for g in s.groups}
        layout["groups"] = [groups[name].as_dict() for name in sorted(groups)]
        layout["environment"] = loaded.config.environment
        if as_json:
            stdout.print_json(json.dumps(layout))
        else:
            _print_plan(config, layout)
        return
    if instance_type is None or count is None:
        fail(
            ctx,
            "--instance-type/--count: both are required (or pass --config FILE)",
            code=ExitCode.USAGE,
        )
    try:
        result = _single_group(ctx, instance_type, count, orchestrator, interface, headroom)
    except CapacityError as error:
        fail(ctx, str(error), code=ExitCode.USAGE)
    if as_json:
        print(json.dumps(result))
    else:
        _print_group(result)


@app.command("instance-types", cls=OneLineUsageErrors)
def instance_types(
    as_json: JsonListOption = False,
) -> None:
    """The instance types the planner and validation know, with their network figures."""
    rows = [
        {
            "name": t.name,
            "accelerator": t.accelerator,
            "accelerators": t.accelerator_count,
            "network_cards": t.network_cards,
            "efa_interfaces": t.efa_interfaces,
            "ipv4_per_eni": t.ipv4_per_eni,
            "efa_only": t.supports_efa_only,
        }
        for t in (INSTANCE_TYPES[n] for n in known_instance_types())
    ]
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(title="Known instance types")
    for column in rows[0]:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    stdout.print(table)
