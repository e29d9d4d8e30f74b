"""`hpctl`: offline planning and validation for the platform's environment configs.

Every failure is one line per problem on stderr and a non-zero exit; no tracebacks.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from config.capacity import (
    AWS_RESERVED_PER_SUBNET,
    MIN_SUBNET_PREFIX,
    CapacityError,
    plan_group,
)
from config.instance_types import INSTANCE_TYPES, known_instance_types
from config.loader import ConfigError, load_file
from hpctl.cluster import app as cluster_app
from hpctl.job_cmd import app as job_app
from hpctl.plans import app as plans_app

app = typer.Typer(
    name="hpctl",
    help="Plan, validate and operate SageMaker HyperPod environments.",
    add_completion=False,
    pretty_exceptions_enable=False,
)
stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True, highlight=False)


class OrchestratorChoice(str, Enum):
    eks = "eks"
    slurm = "slurm"


class InterfaceChoice(str, Enum):
    efa = "efa"
    efa_only = "efa-only"


def fail(lines: list[str], code: int = 1) -> typer.Exit:
    for line in lines:
        stderr.print(line, markup=False)
    return typer.Exit(code)


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Environment files, e.g. config/prod.yaml")],
) -> None:
    """Run the same validation and capacity checks as `cdk synth`."""
    failed = False
    for path in files:
        try:
            loaded = load_file(path)
        except ConfigError as error:
            failed = True
            for line in error.lines:
                stderr.print(f"{error.source}: {line}", markup=False)
            continue
        groups = len(loaded.config.hyperpod.instance_groups)
        stdout.print(
            f"{path}: valid ({loaded.config.environment}, {loaded.config.region}, "
            f"{groups} instance group{'s' if groups != 1 else ''})",
            markup=False,
        )
    if failed:
        raise typer.Exit(1)


def _single_group(
    instance_type: str,
    count: int,
    orchestrator: OrchestratorChoice,
    interface: Optional[InterfaceChoice],
    headroom: int,
) -> dict[str, object]:
    if instance_type not in INSTANCE_TYPES:
        raise fail(
            [
                f"--instance-type: unknown instance type {instance_type!r}; known types: "
                f"{', '.join(known_instance_types())}"
            ],
            2,
        )
    figures = INSTANCE_TYPES[instance_type]
    chosen = interface.value if interface else None
    if chosen and not figures.supports_interface(chosen):  # type: ignore[arg-type]
        supported = [i for i in ("efa", "efa-only") if figures.supports_interface(i)]  # type: ignore[arg-type]
        fix = f"use --interface {' or '.join(supported)}" if supported else "omit --interface"
        raise fail([f"--interface: {instance_type} does not support {chosen!r}; {fix}"], 2)
    plan = plan_group(
        name=instance_type,
        instance_type=instance_type,
        count=count,
        orchestrator=orchestrator.value,  # type: ignore[arg-type]
        interface=chosen,  # type: ignore[arg-type]
        headroom_nodes=headroom,
    )
    result = plan.as_dict()
    del result["name"], result["availability_zone"]
    prefix = plan.subnet_prefix
    result["subnet_prefix_fits_aws_limits"] = prefix >= MIN_SUBNET_PREFIX
    size = 1 << (32 - max(prefix, 0))
    result["subnet_size"] = size
    result["growth_nodes_in_subnet"] = (
        (size - AWS_RESERVED_PER_SUBNET - plan.ips_total) // plan.ips_per_node
    )
    return result


def _print_group(result: dict[str, object]) -> None:
    table = Table(title=f"IP plan: {result['count']} x {result['instance_type']}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, str(value))
    stdout.print(table)


def _print_plan(source: Path, layout_dict: dict) -> None:
    groups = Table(title=f"Cluster subnets for {source}")
    for column in ("AZ", "CIDR", "usable", "required", "free", "groups", "room to grow"):
        groups.add_column(column, justify="right" if column in ("usable", "required", "free") else "left")
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
    for column in ("group", "type", "interface", "nodes", "headroom", "IPs/node", "IPs total", "min subnet"):
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


@app.command()
def capacity(
    instance_type: Annotated[
        Optional[str], typer.Option("--instance-type", help="e.g. ml.p5.48xlarge")
    ] = None,
    count: Annotated[Optional[int], typer.Option("--count", min=1, help="Nodes in the group")] = None,
    orchestrator: Annotated[
        OrchestratorChoice, typer.Option("--orchestrator", case_sensitive=False)
    ] = OrchestratorChoice.eks,
    interface: Annotated[
        Optional[InterfaceChoice],
        typer.Option("--interface", help="efa (an address per card) or efa-only (none)"),
    ] = None,
    headroom: Annotated[
        int, typer.Option("--headroom", min=0, help="Spare nodes for replacements and rolling updates")
    ] = 0,
    config: Annotated[
        Optional[Path], typer.Option("--config", help="Plan a whole environment file instead")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Addresses per node, per group and per subnet, with the smallest subnet that holds them."""
    if config is not None:
        if instance_type or count:
            raise fail(["--config: use either --config or --instance-type/--count, not both"], 2)
        try:
            loaded = load_file(config)
        except ConfigError as error:
            raise fail([f"{error.source}: {line}" for line in error.lines]) from None
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
        raise fail(
            ["--instance-type/--count: both are required (or pass --config FILE)"], 2
        )
    try:
        result = _single_group(instance_type, count, orchestrator, interface, headroom)
    except CapacityError as error:
        raise fail([str(error)], 2) from None
    if as_json:
        print(json.dumps(result))
    else:
        _print_group(result)


@app.command("instance-types")
def instance_types(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list")] = False,
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


app.add_typer(job_app, name="job", help="Render HyperPodPyTorchJob manifests.")
app.add_typer(plans_app, name="plans", help="Search and buy training plans (reserved capacity).")
app.add_typer(cluster_app, name="cluster", help="Cluster status, nodes, reboot and replace.")


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point; usage errors become one line and exit 2."""
    # typer vendors click; its exception classes are only reachable through the private module.
    from typer._click import exceptions as click_exceptions

    try:
        result = app(args=argv, standalone_mode=False)
    except click_exceptions.UsageError as error:
        where = f"{error.ctx.command_path}: " if error.ctx else ""
        stderr.print(f"{where}{error.format_message()}", markup=False)
        sys.exit(2)
    except click_exceptions.ClickException as error:
        stderr.print(error.format_message(), markup=False)
        sys.exit(error.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        stderr.print("aborted")
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
