"""`hpctl cluster health-check` and `hpctl cluster operations` (mounted by
`hpctl.cluster_cmd`): on-demand deep health checks of instance groups, and HyperPod's record
of the cluster's scaling and health-check operations.

`health-check` (StartClusterHealthCheck) takes the checked nodes out of scheduling while the
checks run (label `sagemaker.amazonaws.com/node-health-status: Unschedulable`) and HyperPod
reboots or replaces the nodes that fail ("Resilience-related Kubernetes labels by SageMaker
HyperPod"), so it refuses to run without `--yes`. `operations` is read-only:
ListClusterOperations, or DescribeClusterOperation for one `--operation-id`. The requests and
reports are built in `hpctl.cluster_operations`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from hpctl import aws
from hpctl.cluster import NameOption, NodeIdOption, YesOption, cluster_target
from hpctl.cluster_operations import (
    DEFAULT_HEALTH_CHECKS,
    HEALTH_CHECKS,
    OPERATION_STATUSES,
    OPERATION_TYPES,
    checked_check_nodes,
    checked_checks,
    checked_groups,
    checked_operation_filters,
    checked_operation_id,
    health_check_request,
    list_operations,
    operation_report,
    operation_row,
)
from hpctl.errors import ExitCode, fail
from hpctl.options import (
    EnvOption,
    JsonOption,
    RegionOption,
    duration_option,
    minute_of,
    print_table,
    utc_now,
)

stdout = Console(soft_wrap=True, highlight=False)
# The clock `operations --since` counts back from; tests replace it.
clock: Callable[[], datetime] = utc_now

GroupsOption = Annotated[
    list[str],
    typer.Option("--instance-group", help="Instance group to check (exact name); repeatable"),
]
CheckOption = Annotated[
    list[str],
    typer.Option(
        "--check",
        help=f"Deep health check: {', '.join(sorted(HEALTH_CHECKS))}; repeatable "
        f"(default: {' and '.join(DEFAULT_HEALTH_CHECKS)})",
    ),
]


def health_check(
    ctx: typer.Context,
    instance_group: GroupsOption,
    check: CheckOption = [],  # noqa: B006 - typer's default for a repeatable option
    node_id: NodeIdOption = [],  # noqa: B006
    name: NameOption = None,
    env: EnvOption = None,
    yes: YesOption = False,
    region: RegionOption = None,
    as_json: JsonOption = False,
) -> None:
    """Start deep health checks on instance groups (or some nodes of one); requires --yes.

    The nodes leave scheduling while the checks run; HyperPod reboots or replaces those that
    fail. Follow it with `hpctl cluster operations --type DeepHealthCheck`."""
    target = cluster_target(ctx, name, env, region)
    groups = checked_groups(instance_group, target.config)
    nodes = checked_check_nodes(node_id, groups)
    checks = checked_checks(check)
    scope = f"{len(nodes)} node(s) of {groups[0]}" if nodes else f"group(s) {', '.join(groups)}"
    if not yes:
        fail(
            ctx,
            f"refusing to check {scope} of {target.name} without --yes: the nodes stop taking "
            "jobs while the checks run and HyperPod reboots or replaces those that fail; "
            "re-run with --yes",
            code=ExitCode.FAILED,
        )
    sagemaker = target.connect(ctx).client("sagemaker")
    request = health_check_request(target.name, groups, nodes, checks)
    with aws.reported_errors(ctx):
        response = aws.call(sagemaker, "start_cluster_health_check", **request)
    report = {
        "cluster": target.name,
        "cluster_arn": response["ClusterArn"],
        "checks": checks,
        "instance_groups": groups,
        "node_ids": nodes,
    }
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    typer.echo(f"Deep health checks {', '.join(checks)} started on {scope} of {target.name}.")
    typer.echo(
        f"Follow them: hpctl cluster operations {target.option()} --type DeepHealthCheck "
        "--status InProgress"
    )


def _print_operations(rows: list[dict[str, Any]], cluster: str) -> None:
    if not rows:
        typer.echo(f"No operations of {cluster} match.")
        return
    table = Table(title=f"{len(rows)} operations of {cluster}, newest first")
    for column in ("operation id", "type", "status", "created (UTC)"):
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(row["operation_id"], row["type"], row["status"], minute_of(row["created"]))
    print_table(stdout, table)


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _print_operation(report: dict[str, Any]) -> None:
    typer.echo(
        f"Operation {report['operation_id']}: {report['type']}, {report['status']}, "
        f"created {minute_of(report['created'])} UTC"
    )
    if report["scaling"]:
        table = Table(title="Scaling per instance group (current/target/min)")
        for column in ("group", "status", "original", "desired"):
            table.add_column(column, no_wrap=True)
        for group in report["scaling"]:
            counts = [
                "/".join(_count(group[side][key]) for key in ("current", "target", "min"))
                for side in ("original", "desired")
            ]
            table.add_row(group["instance_group"] or "-", group["status"] or "-", *counts)
        print_table(stdout, table)
    if report["health_checks"]:
        table = Table(title="Deep health checks per instance group")
        for column in ("group", "checks", "nodes"):
            table.add_column(column, no_wrap=column != "nodes")
        for group in report["health_checks"]:
            nodes = ", ".join(group["node_ids"]) or "every node"
            table.add_row(group["instance_group"], ", ".join(group["checks"]), nodes)
        print_table(stdout, table)


def operations(
    ctx: typer.Context,
    operation_id: Annotated[
        str | None,
        typer.Option("--operation-id", help="Describe this operation (from the list)"),
    ] = None,
    operation_type: Annotated[
        str | None,
        typer.Option(
            "--type", help=f"Only operations of this type: {', '.join(sorted(OPERATION_TYPES))}"
        ),
    ] = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help=f"Only operations in this status: {', '.join(sorted(OPERATION_STATUSES))}",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="DURATION", help="Only operations created since, e.g. 7d"),
    ] = None,
    name: NameOption = None,
    env: EnvOption = None,
    region: RegionOption = None,
    as_json: JsonOption = False,
) -> None:
    """The cluster's scaling and health-check operations, or one in detail. Read-only.

    Newest first, filtered by --type, --status and --since; --operation-id describes one
    (per instance group: the scaling's counts, or the checks and nodes)."""
    if operation_id is not None and (operation_type, status, since) != (None, None, None):
        fail(
            ctx,
            "--operation-id: describes one operation; drop --type, --status and --since",
            code=ExitCode.USAGE,
        )
    checked_id = None if operation_id is None else checked_operation_id(operation_id)
    filters = checked_operation_filters(operation_type, status)
    start = None if since is None else clock() - duration_option(ctx, "--since", since)
    target = cluster_target(ctx, name, env, region)
    sagemaker = target.connect(ctx).client("sagemaker")
    with aws.reported_errors(ctx):
        if checked_id is not None:
            described = aws.call(
                sagemaker,
                "describe_cluster_operation",
                ClusterName=target.name,
                OperationId=checked_id,
            )
        else:
            summaries = list_operations(sagemaker, target.name, filters, start)
    if checked_id is not None:
        report = operation_report(described)
        if as_json:
            typer.echo(json.dumps(report, indent=2))
        else:
            _print_operation(report)
        return
    rows = [operation_row(s) for s in summaries]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        _print_operations(rows, target.name)
