"""`hpctl cluster ...`: look at a HyperPod cluster's health and reboot or replace nodes.

`status`, `nodes` and `health` are read-only; `health` finds the cluster from an
environment's config (`--env`) and exits 1 when anything in it is unhealthy. `reboot` and
`replace` interrupt whatever runs on the nodes, and replacing also destroys every volume of
the old instances (root and secondary), so both refuse to run without `--yes`, and both exit
non-zero when the service rejects any node.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table

from config.kubernetes import INSTANCE_GROUP_NAME
from config.schema import EnvironmentConfig
from hpctl import aws
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.job.environment import utc_now
from hpctl.job_cmd import load_environment_option

app = typer.Typer(
    help="Inspect a HyperPod cluster and reboot or replace its nodes.",
    add_completion=False,
    no_args_is_help=True,
)
stdout = Console(soft_wrap=True, highlight=False)
# Progress while `health` gathers; a spinner on a terminal, nothing when stderr is a file.
stderr = Console(stderr=True, highlight=False)
# The clock `health` takes the events window from; tests replace it.
clock: Callable[[], datetime] = utc_now

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


def print_groups(report: dict[str, Any]) -> None:
    """The cluster line (with its failure message) and the instance groups table."""
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


def print_unhealthy(report: dict[str, Any]) -> None:
    """The nodes that are not Running, or one line saying all are."""
    unhealthy = report["unhealthy_nodes"]
    if unhealthy:
        print_nodes_table(
            unhealthy,
            f"{len(unhealthy)} of {report['nodes_total']} nodes not {HEALTHY_NODE_STATUS}",
        )
    else:
        typer.echo(f"All {report['nodes_total']} nodes {HEALTHY_NODE_STATUS}.")


def print_report(report: dict[str, Any]) -> None:
    print_groups(report)
    print_unhealthy(report)


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


# ------------------------------------------------------------------ health

# The only ClusterStatus (API model) in which the cluster is fully usable; the others are
# Creating, Updating, SystemUpdating, RollingBack, Deleting and Failed.
HEALTHY_CLUSTER_STATUS = "InService"
# ListClusterEvents only answers for clusters with this NodeProvisioningMode (API model).
EVENTS_PROVISIONING_MODE = "Continuous"
EVENTS_WINDOW = timedelta(hours=24)
MAX_EVENTS = 20
# A quota in this status is gone: it neither covers a team nor shows in the report.
DELETED_QUOTA_STATUS = "Deleted"
# Neither ListComputeQuotas nor DescribeComputeQuota nor the scheduler config calls say what
# a team uses; Kueue (in the EKS cluster) does.
QUOTA_USAGE = "not in the SageMaker API; see the Kueue dashboard"

EnvOption = Annotated[
    str | None, typer.Option("--env", help="Environment (config/<env>.yaml), e.g. dev or prod.")
]


def node_counts(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """How many nodes each (instance group, status) pair has, sorted by both."""
    counts = Counter((n["InstanceGroupName"], n["InstanceStatus"]["Status"]) for n in nodes)
    return [
        {"instance_group": group, "status": status, "count": count}
        for (group, status), count in sorted(counts.items())
    ]


def event_row(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "time": _iso(event["EventTime"]),
        "level": event.get("EventLevel"),
        "resource_type": event["ResourceType"],
        "instance_group": event.get("InstanceGroupName"),
        "instance_id": event.get("InstanceId"),
        "description": event.get("Description") or None,
        "event_id": event["EventId"],
    }


def recent_events(
    sagemaker: Any, name: str, cluster: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """The newest `MAX_EVENTS` events of the last `EVENTS_WINDOW` (one call: the newest page
    is all a summary needs), or why there are none to read."""
    since = now - EVENTS_WINDOW
    section: dict[str, Any] = {"available": True, "note": None, "since": _iso(since)}
    mode = cluster.get("NodeProvisioningMode")
    if mode != EVENTS_PROVISIONING_MODE:
        section["available"] = False
        section["note"] = (
            f"ListClusterEvents needs NodeProvisioningMode {EVENTS_PROVISIONING_MODE}; "
            f"the cluster has {mode or 'none'}"
        )
        section["events"] = []
        return section
    response = sagemaker.list_cluster_events(
        ClusterName=name,
        EventTimeAfter=since,
        SortBy="EventTime",
        SortOrder="Descending",
        MaxResults=MAX_EVENTS,
    )
    events = sorted(response.get("Events", []), key=lambda e: e["EventTime"], reverse=True)
    section["events"] = [event_row(e) for e in events[:MAX_EVENTS]]
    return section


def list_quotas(sagemaker: Any, cluster_arn: str) -> list[dict[str, Any]]:
    """Every compute quota of the cluster (all pages)."""
    pages = sagemaker.get_paginator("list_compute_quotas").paginate(
        ClusterArn=cluster_arn, PaginationConfig={"PageSize": PAGE_SIZE}
    )
    return [quota for page in pages for quota in page["ComputeQuotaSummaries"]]


def quota_row(quota: dict[str, Any]) -> dict[str, Any]:
    settings = quota.get("ComputeQuotaConfig", {})
    return {
        "team": quota["ComputeQuotaTarget"]["TeamName"],
        "name": quota["Name"],
        "id": quota["ComputeQuotaId"],
        "status": quota["Status"],
        "activation_state": quota.get("ActivationState"),
        "sharing": settings.get("ResourceSharingConfig", {}).get("Strategy"),
        "resources": [
            {
                "instance_type": r["InstanceType"],
                "count": r.get("Count"),
                "accelerators": r.get("Accelerators"),
                "vcpu": r.get("VCpu"),
                "memory_gib": r.get("MemoryInGiB"),
            }
            for r in settings.get("ComputeQuotaResources", [])
        ],
    }


def quota_report(quotas: list[dict[str, Any]], config: EnvironmentConfig) -> dict[str, Any]:
    """The deployed quotas per team and, when the environment has a governance section,
    the configured teams without one (missing) and the quotas of teams it does not list
    (extra); both None without a governance section."""
    rows = sorted(
        (quota_row(q) for q in quotas if q["Status"] != DELETED_QUOTA_STATUS),
        key=lambda r: (r["team"], r["name"]),
    )
    configured = missing = extra = None
    if config.governance is not None:
        configured = [team.name for team in config.governance.teams_by_name()]
        deployed = {r["team"] for r in rows}
        missing = sorted(set(configured) - deployed)
        extra = sorted(deployed - set(configured))
    return {
        "configured_teams": configured,
        "missing_teams": missing,
        "extra_teams": extra,
        "usage": QUOTA_USAGE,
        "quotas": rows,
    }


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def health_problems(cluster: dict[str, Any], quotas: dict[str, Any]) -> list[str]:
    """What makes the cluster unhealthy, one phrase each: the cluster not InService, an
    instance group short of its target count, a node not Running, a configured team without
    a compute quota, a quota whose last change failed."""
    name = cluster["name"]
    problems = []
    if cluster["status"] != HEALTHY_CLUSTER_STATUS:
        problems.append(f"{name} is {cluster['status']}, not {HEALTHY_CLUSTER_STATUS}")
    for group in cluster["instance_groups"]:
        current, target = group["current_count"], group["target_count"]
        if current is not None and target is not None and current < target:
            problems.append(
                f"instance group {group['name']} of {name} has {current} of {target} nodes"
            )
    unhealthy = len(cluster["unhealthy_nodes"])
    if unhealthy:
        problems.append(
            f"{unhealthy} of {_plural(cluster['nodes_total'], 'node')} "
            f"{'is' if unhealthy == 1 else 'are'} not running in {name}"
        )
    if quotas["missing_teams"]:
        missing = quotas["missing_teams"]
        problems.append(
            f"no compute quota on {name} for configured team{'' if len(missing) == 1 else 's'} "
            + ", ".join(missing)
        )
    for quota in quotas["quotas"]:
        if quota["status"].endswith("Failed"):
            problems.append(
                f"compute quota {quota['name']} of team {quota['team']} is {quota['status']}"
            )
    return problems


def health_report(
    config: EnvironmentConfig,
    cluster: dict[str, Any],
    nodes: list[dict[str, Any]],
    events: dict[str, Any],
    quotas: list[dict[str, Any]],
) -> dict[str, Any]:
    """The `--json` object, keys in a fixed order."""
    summary = cluster_report(cluster, nodes)
    summary["node_counts"] = node_counts(nodes)
    teams = quota_report(quotas, config)
    problems = health_problems(summary, teams)
    return {
        "environment": config.environment,
        "region": config.region,
        "healthy": not problems,
        "problems": problems,
        "cluster": summary,
        "events": events,
        "quotas": teams,
    }


def _amounts(resource: dict[str, Any]) -> str:
    figures = [
        f"{value:g} {unit}"
        for key, unit in (
            ("count", "nodes"),
            ("accelerators", "accelerators"),
            ("vcpu", "vCPU"),
            ("memory_gib", "GiB memory"),
        )
        if (value := resource[key]) is not None
    ]
    return f"{resource['instance_type']} ({', '.join(figures) or 'no amount'})"


def print_health(report: dict[str, Any]) -> None:
    cluster = report["cluster"]
    print_groups(cluster)
    counts = Table(title="Nodes by group and status")
    for column in ("group", "status", "nodes"):
        counts.add_column(column, justify="right" if column == "nodes" else "left")
    for row in cluster["node_counts"]:
        counts.add_row(row["instance_group"], row["status"], str(row["count"]))
    if cluster["node_counts"]:
        aws.print_table(stdout, counts)
    print_unhealthy(cluster)

    events = report["events"]
    window = f"the last {EVENTS_WINDOW.total_seconds() / 3600:g} h"
    if not events["available"]:
        typer.echo(f"Events: not available ({events['note']}).")
    elif not events["events"]:
        typer.echo(f"No events in {window}.")
    else:
        table = Table(title=f"Events in {window}, newest first (at most {MAX_EVENTS})")
        for column in ("time (UTC)", "level", "resource", "group", "instance id", "description"):
            table.add_column(column, no_wrap=column != "description")
        for event in events["events"]:
            table.add_row(
                _when(event["time"]),
                event["level"] or "-",
                event["resource_type"],
                event["instance_group"] or "-",
                event["instance_id"] or "-",
                event["description"] or "-",
            )
        aws.print_table(stdout, table)

    quotas = report["quotas"]
    if quotas["quotas"]:
        table = Table(title="Compute quotas")
        for column in ("team", "quota", "resources", "sharing", "activation", "status"):
            table.add_column(column, no_wrap=column != "resources")
        for quota in quotas["quotas"]:
            table.add_row(
                quota["team"],
                quota["name"],
                "; ".join(_amounts(r) for r in quota["resources"]) or "-",
                quota["sharing"] or "-",
                quota["activation_state"] or "-",
                quota["status"],
            )
        aws.print_table(stdout, table)
    else:
        typer.echo(f"No compute quotas on {cluster['name']}.")
    if quotas["configured_teams"] is None:
        typer.echo(
            f"{report['environment']} has no governance section: no teams to compare the "
            "quotas with."
        )
    if quotas["missing_teams"]:
        typer.echo(
            f"Configured teams without a compute quota: {', '.join(quotas['missing_teams'])}"
        )
    if quotas["extra_teams"]:
        typer.echo(
            f"Quotas of teams not in the {report['environment']} config: "
            f"{', '.join(quotas['extra_teams'])}"
        )
    typer.echo(f"Usage per team: {quotas['usage']}.")
    if report["healthy"]:
        typer.echo(f"{cluster['name']} is healthy.")


@contextmanager
def _progress(shown: bool) -> Iterator[Callable[[str], None]]:
    """A spinner with the current step on stderr (rich draws it only on a terminal and
    clears it at the end), or nothing."""
    if not shown:
        yield lambda _text: None
        return
    spinner = Spinner("dots", style="status.spinner")
    with Live(spinner, console=stderr, transient=True, refresh_per_second=12.5) as live:

        def step(text: str) -> None:
            spinner.update(text=text)
            # Drawn at once: a step can take longer than the next automatic refresh.
            live.refresh()

        yield step


@app.command(cls=OneLineUsageErrors)
def health(ctx: typer.Context, env: EnvOption = None, as_json: JsonOption = False) -> None:
    """One-screen health summary of an environment's cluster; exit 1 when unhealthy.

    Cluster status and instance groups (current/target nodes), nodes by group and status
    with every node that is not Running, the cluster events of the last 24 h (newest 20),
    and each team's compute quota compared with the environment's governance teams.
    Unhealthy: the cluster is not InService, a group has fewer nodes than its target, a
    node is not Running, a configured team has no quota, or a quota's last change failed.
    Read-only."""
    if env is None:
        fail(ctx, "--env: missing; pass --env", code=ExitCode.USAGE)
    config = load_environment_option(ctx, env)
    name = config.names.hyperpod_cluster
    with aws.reported_errors(ctx), _progress(not as_json) as step:
        sagemaker = aws.client("sagemaker", region=config.region)
        step(f"{name}: describing the cluster")
        cluster = sagemaker.describe_cluster(ClusterName=name)
        step(f"{name}: listing nodes")
        members = list_nodes(sagemaker, name)
        step(f"{name}: reading the events of the last 24 h")
        events = recent_events(sagemaker, name, cluster, clock())
        step(f"{name}: listing compute quotas")
        quotas = list_quotas(sagemaker, cluster["ClusterArn"])
    report = health_report(config, cluster, members, events, quotas)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        print_health(report)
    problems = report["problems"]
    if problems:
        where = "the JSON" if as_json else "the table" if len(problems) == 1 else "the tables"
        fail(ctx, f"{'; '.join(problems)}; see {where}", code=ExitCode.FAILED)


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
