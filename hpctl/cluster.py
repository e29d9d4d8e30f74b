"""`hpctl cluster ...`: look at a HyperPod cluster's health and reboot or replace nodes.

`status` and `nodes` are read-only. `reboot` and `replace` interrupt whatever runs on the
nodes, and replacing also destroys every volume of the old instances (root and secondary),
so both refuse to run without `--yes`, and both exit non-zero when the service rejects any
node.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from config.kubernetes import INSTANCE_GROUP_NAME
from hpctl import aws
from hpctl.errors import ExitCode, fail

app = typer.Typer(
    help="Inspect a HyperPod cluster and reboot or replace its nodes.",
    add_completion=False,
    no_args_is_help=True,
)
stdout = Console(soft_wrap=True, highlight=False)

HEALTHY_NODE_STATUS = "Running"
# Batch{Reboot,Replace}ClusterNodes take at most 25 node ids per call.
MAX_NODES_PER_CALL = 25
# ListClusterNodes returns at most 100 nodes a page: fewest round trips on large clusters.
PAGE_SIZE = 100
# Patterns from the SageMaker API model (ClusterNameOrArn, ClusterNodeId). A cluster name
# follows the instance group name rule (config.kubernetes.INSTANCE_GROUP_NAME).
_CLUSTER_ARN = re.compile(r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:cluster/[a-z0-9]{12}")
_NODE_ID = re.compile(r"i-[a-f0-9]{8}(?:[a-f0-9]{9})?")

NameOption = Annotated[str, typer.Option("--name", help="Cluster name or ARN")]
RegionOption = Annotated[
    str | None, typer.Option("--region", help="AWS Region (default: the configured one)")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON")]
NodeIdOption = Annotated[
    list[str], typer.Option("--node-id", help="EC2 instance id (i-...); repeat for several")
]
YesOption = Annotated[bool, typer.Option("--yes", help="Confirm the disruptive action")]


# ------------------------------------------------------------------ input validation


def check_cluster(ctx: typer.Context, value: str) -> str:
    if not (INSTANCE_GROUP_NAME.fullmatch(value) or _CLUSTER_ARN.fullmatch(value)):
        fail(
            ctx,
            f"--name: {value!r} is not a cluster name (letters, digits and '-', at most 63) "
            "or cluster ARN",
            code=ExitCode.USAGE,
        )
    return value


def check_group(ctx: typer.Context, value: str) -> str:
    if not INSTANCE_GROUP_NAME.fullmatch(value):
        fail(
            ctx,
            f"--group: {value!r} is not an instance group name (letters, digits and '-', "
            "at most 63)",
            code=ExitCode.USAGE,
        )
    return value


def check_node_ids(ctx: typer.Context, values: list[str]) -> list[str]:
    """Valid, de-duplicated (order kept) and few enough for one call. Larger batches are
    refused rather than split: disrupting more than 25 nodes deserves a deliberate step."""
    bad = [v for v in values if not _NODE_ID.fullmatch(v)]
    if bad:
        fail(
            ctx,
            f"--node-id: {', '.join(map(repr, bad))} is not an instance id "
            "(i- and 8 or 17 hex digits)",
            code=ExitCode.USAGE,
        )
    unique = list(dict.fromkeys(values))
    if len(unique) > MAX_NODES_PER_CALL:
        fail(
            ctx,
            f"--node-id: {len(unique)} nodes given; at most {MAX_NODES_PER_CALL} per call, "
            "run it in batches",
            code=ExitCode.USAGE,
        )
    return unique


# ------------------------------------------------------------------ reading


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value else None


def list_nodes(sagemaker: Any, cluster: str, group: str | None = None) -> list[dict[str, Any]]:
    """Every node of the cluster (all pages), optionally of one instance group."""
    params: dict[str, Any] = {"ClusterName": cluster}
    if group:
        params["InstanceGroupNameContains"] = group
    pages = sagemaker.get_paginator("list_cluster_nodes").paginate(
        **params, PaginationConfig={"PageSize": PAGE_SIZE}
    )
    nodes = [node for page in pages for node in page["ClusterNodeSummaries"]]
    if group:
        # The API filter is a substring match ("gpu" also matches "gpu-spare").
        nodes = [n for n in nodes if n["InstanceGroupName"] == group]
    return sorted(nodes, key=lambda n: (n["InstanceGroupName"], n["InstanceId"]))


def node_row(node: dict[str, Any]) -> dict[str, Any]:
    status = node["InstanceStatus"]
    return {
        "instance_group": node["InstanceGroupName"],
        "instance_id": node["InstanceId"],
        "instance_type": node["InstanceType"],
        "status": status["Status"],
        "message": status.get("Message") or None,
        "launch_time": _iso(node.get("LaunchTime")),
        "private_dns": node.get("PrivateDnsHostname"),
    }


def group_row(group: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": group.get("InstanceGroupName"),
        "instance_type": group.get("InstanceType"),
        "status": group.get("Status"),
        "current_count": group.get("CurrentCount"),
        "target_count": group.get("TargetCount"),
        "training_plan_arn": group.get("TrainingPlanArn"),
    }


def cluster_report(cluster: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [node_row(n) for n in nodes]
    return {
        "name": cluster.get("ClusterName"),
        "arn": cluster["ClusterArn"],
        "status": cluster["ClusterStatus"],
        "failure_message": cluster.get("FailureMessage") or None,
        "instance_groups": [group_row(g) for g in cluster.get("InstanceGroups", [])],
        "nodes_total": len(rows),
        "unhealthy_nodes": [r for r in rows if r["status"] != HEALTHY_NODE_STATUS],
    }


def _when(text: str | None) -> str:
    return datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M") if text else "-"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def print_nodes_table(rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=title)
    for column in ("group", "instance id", "type", "status", "message", "launched (UTC)"):
        # Messages can be long sentences: let only them wrap.
        table.add_column(column, no_wrap=column != "message")
    for row in rows:
        table.add_row(
            row["instance_group"],
            row["instance_id"],
            row["instance_type"],
            row["status"],
            row["message"] or "-",
            _when(row["launch_time"]),
        )
    aws.print_table(stdout, table)


def print_report(report: dict[str, Any]) -> None:
    typer.echo(f"Cluster {report['name']}: {report['status']}")
    if report["failure_message"]:
        typer.echo(f"Failure: {report['failure_message']}")
    groups = Table(title="Instance groups")
    for column in ("group", "type", "status", "current", "target"):
        groups.add_column(column, justify="right" if column in ("current", "target") else "left")
    for group in report["instance_groups"]:
        groups.add_row(
            group["name"] or "-",
            group["instance_type"] or "-",
            group["status"] or "-",
            _count(group["current_count"]),
            _count(group["target_count"]),
        )
    aws.print_table(stdout, groups)
    unhealthy = report["unhealthy_nodes"]
    if unhealthy:
        print_nodes_table(
            unhealthy,
            f"{len(unhealthy)} of {report['nodes_total']} nodes not {HEALTHY_NODE_STATUS}",
        )
    else:
        typer.echo(f"All {report['nodes_total']} nodes {HEALTHY_NODE_STATUS}.")


@app.command()
def status(
    ctx: typer.Context,
    name: NameOption,
    region: RegionOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cluster status, per instance group counts, and every node that is not Running."""
    check_cluster(ctx, name)
    with aws.reported_errors(ctx):
        sagemaker = aws.client("sagemaker", region)
        cluster = sagemaker.describe_cluster(ClusterName=name)
        members = list_nodes(sagemaker, name)
    report = cluster_report(cluster, members)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        print_report(report)


@app.command()
def nodes(
    ctx: typer.Context,
    name: NameOption,
    group: Annotated[
        str | None, typer.Option("--group", help="Only this instance group (exact name)")
    ] = None,
    region: RegionOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every node of the cluster with its status."""
    check_cluster(ctx, name)
    if group is not None:
        check_group(ctx, group)
    with aws.reported_errors(ctx):
        rows = [node_row(n) for n in list_nodes(aws.client("sagemaker", region), name, group)]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    where = f" in group {group}" if group else ""
    if not rows:
        typer.echo(f"No nodes{where} in cluster {name}.")
        return
    print_nodes_table(rows, f"{len(rows)} nodes{where} in {name}")


# ------------------------------------------------------------------ reboot / replace


def batch_outcome(
    requested: list[str], response: dict[str, Any]
) -> dict[str, tuple[str, str] | None]:
    """Per requested node: None when accepted, else (error code, message). A node the
    response does not mention counts as failed: silence is not a confirmation."""
    accepted = set(response.get("Successful", []))
    failed = {f["NodeId"]: (f["ErrorCode"], f["Message"]) for f in response.get("Failed", [])}
    return {
        node: None
        if node in accepted and node not in failed
        else failed.get(node, ("NotInResponse", "the service reported no result for this node"))
        for node in requested
    }


def _run_batch(
    ctx: typer.Context,
    *,
    verb: str,
    why: str,
    name: str,
    node_ids: list[str],
    yes: bool,
    region: str | None,
) -> None:
    check_cluster(ctx, name)
    node_ids = check_node_ids(ctx, node_ids)
    if not yes:
        fail(
            ctx,
            f"refusing to {verb} {len(node_ids)} node(s) of {name} without --yes: {why}; "
            "re-run with --yes",
            code=ExitCode.FAILED,
        )
    operation = f"batch_{verb}_cluster_nodes"
    with aws.reported_errors(ctx):
        response = getattr(aws.client("sagemaker", region), operation)(
            ClusterName=name, NodeIds=node_ids
        )
    failures = []
    for node, error in batch_outcome(node_ids, response).items():
        if error is None:
            typer.echo(f"{node}: {verb} requested")
        else:
            failures.append(f"{node}: {error[0]}: {error[1]}")
    if failures:
        fail(
            ctx,
            *failures,
            f"{len(failures)} of {len(node_ids)} node(s) failed",
            code=ExitCode.FAILED,
        )


@app.command()
def reboot(
    ctx: typer.Context,
    name: NameOption,
    node_id: NodeIdOption,
    yes: YesOption = False,
    region: RegionOption = None,
) -> None:
    """Reboot nodes in place (interrupts their jobs; requires --yes)."""
    _run_batch(
        ctx,
        verb="reboot",
        why="rebooting interrupts every job running on them",
        name=name,
        node_ids=node_id,
        yes=yes,
        region=region,
    )


@app.command()
def replace(
    ctx: typer.Context,
    name: NameOption,
    node_id: NodeIdOption,
    yes: YesOption = False,
    region: RegionOption = None,
) -> None:
    """Replace nodes with new instances (interrupts jobs, destroys their volumes; requires --yes)."""
    _run_batch(
        ctx,
        verb="replace",
        why="replacing terminates the instances and destroys all their volumes (root and "
        "secondary) with the data on them",
        name=name,
        node_ids=node_id,
        yes=yes,
        region=region,
    )
