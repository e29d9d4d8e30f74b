"""`hpctl cluster ...`: look at a HyperPod cluster's health and reboot or replace nodes.

`status`, `nodes`, `health` and `events` are read-only; `health` finds the cluster from an
environment's config (`--env`) and exits 1 when anything in it is unhealthy. `reboot` and
`replace` interrupt whatever runs on the nodes, and replacing also destroys every volume of
the old instances (root and secondary), so both refuse to run without `--yes`, and both exit
non-zero when the service rejects any node. The reports they print are built in
`hpctl.cluster`. `health-check` and `operations` are in `hpctl.cluster_operations_cmd`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table

from hpctl import aws, cluster_operations_cmd
from hpctl.cluster import (
    EVENTS_WINDOW,
    HEALTHY_NODE_STATUS,
    MAX_EVENTS,
    MAX_HISTORY,
    ClusterTarget,
    NameOption,
    NodeIdOption,
    YesOption,
    batch_outcome,
    checked_group,
    checked_history_window,
    checked_node_ids,
    cluster_report,
    cluster_target,
    events_unavailable,
    failure_rate_line,
    failure_rates,
    health_report,
    list_node_events,
    list_nodes,
    list_quotas,
    node_history,
    node_row,
    recent_events,
)
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.options import (
    EnvOption,
    JsonOption,
    RegionOption,
    duration_option,
    duration_text,
    minute_of,
    print_table,
    renamed_option,
    required_environment,
    utc_now,
)

app = typer.Typer(
    help="Inspect a HyperPod cluster and reboot or replace its nodes.",
    add_completion=False,
    no_args_is_help=True,
)
stdout = Console(soft_wrap=True, highlight=False)
# Progress while `health` gathers; a spinner on a terminal, nothing when stderr is a file.
stderr = Console(stderr=True, highlight=False)
# The clock `health` and `events` take their windows from; tests replace it.
clock: Callable[[], datetime] = utc_now


# ------------------------------------------------------------------ reading


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def print_nodes_table(rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=title)
    # UltraServers only where a node has one: most clusters have none.
    ultraservers = any(row["ultraserver_id"] for row in rows)
    columns = ["group", "instance id", "type", "status", "message", "launched (UTC)"]
    for column in columns + (["UltraServer"] if ultraservers else []):
        # Messages can be long sentences: let only them wrap.
        table.add_column(column, no_wrap=column != "message")
    for row in rows:
        cells = [
            row["instance_group"],
            row["instance_id"],
            row["instance_type"],
            row["status"],
            row["message"] or "-",
            minute_of(row["launch_time"]),
        ]
        table.add_row(*cells, *([row["ultraserver_id"] or "-"] if ultraservers else []))
    print_table(stdout, table)


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
    print_table(stdout, groups)


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


@app.command(cls=OneLineUsageErrors)
def status(
    ctx: typer.Context,
    name: NameOption = None,
    env: EnvOption = None,
    region: RegionOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cluster status, per instance group counts, and every node that is not Running."""
    target = cluster_target(ctx, name, env, region)
    sagemaker = target.connect(ctx).client("sagemaker")
    with aws.reported_errors(ctx):
        cluster = aws.call(sagemaker, "describe_cluster", ClusterName=target.name)
        members = list_nodes(sagemaker, target.name)
    report = cluster_report(cluster, members)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        print_report(report)


@app.command(cls=OneLineUsageErrors)
def nodes(
    ctx: typer.Context,
    name: NameOption = None,
    instance_group: Annotated[
        str | None,
        typer.Option("--instance-group", help="Only this instance group (exact name)"),
    ] = None,
    env: EnvOption = None,
    region: RegionOption = None,
    as_json: JsonOption = False,
    old_group: Annotated[str | None, typer.Option("--group", hidden=True)] = None,
) -> None:
    """Every node of the cluster with its status."""
    group = renamed_option(ctx, "--group", old_group, instance_group)
    target = cluster_target(ctx, name, env, region)
    if group is not None:
        checked_group(group)
    sagemaker = target.connect(ctx).client("sagemaker")
    with aws.reported_errors(ctx):
        rows = [node_row(n) for n in list_nodes(sagemaker, target.name, group)]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    where = f" in group {group}" if group else ""
    if not rows:
        typer.echo(f"No nodes{where} in cluster {target.name}.")
        return
    print_nodes_table(rows, f"{len(rows)} nodes{where} in {target.name}")


# ------------------------------------------------------------------ health


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
        print_table(stdout, counts)
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
                minute_of(event["time"]),
                event["level"] or "-",
                event["resource_type"],
                event["instance_group"] or "-",
                event["instance_id"] or "-",
                event["description"] or "-",
            )
        print_table(stdout, table)

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
        print_table(stdout, table)
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
    config = required_environment(ctx, env)
    name = config.names.hyperpod_cluster
    sagemaker = aws.connect_environment(ctx, config).client("sagemaker")
    with aws.reported_errors(ctx), _progress(not as_json) as step:
        step(f"{name}: describing the cluster")
        cluster = aws.call(sagemaker, "describe_cluster", ClusterName=name)
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


# ------------------------------------------------------------------ node history


def _replace_hint(target: ClusterTarget, nodes: list[str]) -> str:
    ids = " ".join(f"--node-id {n}" for n in nodes)
    return f"hpctl cluster replace {target.option()} {ids} --yes"


def print_history(report: dict[str, Any], target: ClusterTarget) -> None:
    window = f"the last {duration_text(timedelta(days=report['days']))}"
    if not report["nodes"]:
        typer.echo(f"No node events in {target.name} in {window}.")
        _print_failure_rates(report["failure_rates"])
        return
    table = Table(title=f"Node events in {target.name} in {window}, most failures first")
    columns = ("group", "instance id", "failures", "last cause", "health events", "events")
    for column in (*columns, "last (UTC)"):
        table.add_column(column, no_wrap=True)
    table.add_column("last event")
    for node in report["nodes"]:
        table.add_row(
            node["instance_group"] or "-",
            node["instance_id"],
            str(node["failures"]),
            node["last_cause"] or "-",
            str(node["health_events"]),
            str(node["events"]),
            minute_of(node["last_event_time"]),
            node["last_event"] or "-",
        )
    print_table(stdout, table)
    offenders = report["repeat_offenders"]
    if offenders:
        typer.echo(f"Failed more than once in {window}: {', '.join(offenders)}.")
        for cause, nodes in report["repeat_offenders_by_cause"].items():
            typer.echo(f"  {cause}, more than once: {', '.join(nodes)}")
        typer.echo(
            f"Replace them (drain first; README Operations): {_replace_hint(target, offenders)}"
        )
    else:
        typer.echo(f"No node failed more than once in {window}.")
    _print_failure_rates(report["failure_rates"])


def _print_failure_rates(rates: list[dict[str, Any]]) -> None:
    if not rates:
        return
    assumed = rates[0]["assumed_node_hours_per_failure"]
    typer.echo(
        f"Failure rate per group (the trainer assumes one failure per {assumed:,.0f} "
        "node-hours; checkpoint.mtbf_hours):"
    )
    for rate in rates:
        typer.echo(failure_rate_line(rate))


@app.command(cls=OneLineUsageErrors)
def events(
    ctx: typer.Context,
    since: Annotated[
        str,
        typer.Option(
            "--since",
            metavar="DURATION",
            help=f"How far back to look: 1h to {MAX_HISTORY.days}d, e.g. 36h, 7d or 2w",
        ),
    ] = "7d",
    name: NameOption = None,
    env: EnvOption = None,
    region: RegionOption = None,
    as_json: JsonOption = False,
) -> None:
    """Node health history: failures per node and the repeat offenders. Read-only.

    Every node's events of the last --since, how often each failed (Warn/Error events, one
    per operation), and the nodes that failed more than once (worth replacing)."""
    # A bare number was a count of days before durations carried their unit.
    window = checked_history_window(duration_option(ctx, "--since", since, bare_unit="d"))
    target = cluster_target(ctx, name, env, region)
    sagemaker = target.connect(ctx).client("sagemaker")
    start = clock() - window
    with aws.reported_errors(ctx):
        cluster = aws.call(sagemaker, "describe_cluster", ClusterName=target.name)
        note = events_unavailable(cluster)
        if note is not None:
            fail(ctx, f"{target.name}: {note}", code=ExitCode.FAILED)
        history = list_node_events(sagemaker, target.name, start)
    report = {"cluster": target.name, **node_history(history, start, window)}
    report["failure_rates"] = failure_rates(cluster, report["nodes"], window)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        print_history(report, target)


# ------------------------------------------------------------------ reboot / replace


def _run_batch(
    ctx: typer.Context,
    *,
    verb: str,
    why: str,
    name: str | None,
    env: str | None,
    node_ids: list[str],
    yes: bool,
    region: str | None,
) -> None:
    target = cluster_target(ctx, name, env, region)
    node_ids = checked_node_ids(node_ids)
    if not yes:
        fail(
            ctx,
            f"refusing to {verb} {len(node_ids)} node(s) of {target.name} without --yes: {why}; "
            "re-run with --yes",
            code=ExitCode.FAILED,
        )
    sagemaker = target.connect(ctx).client("sagemaker")
    with aws.reported_errors(ctx):
        response = aws.call(
            sagemaker, f"batch_{verb}_cluster_nodes", ClusterName=target.name, NodeIds=node_ids
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


@app.command(cls=OneLineUsageErrors)
def reboot(
    ctx: typer.Context,
    node_id: NodeIdOption,
    name: NameOption = None,
    env: EnvOption = None,
    yes: YesOption = False,
    region: RegionOption = None,
) -> None:
    """Reboot nodes in place (interrupts their jobs; requires --yes)."""
    _run_batch(
        ctx,
        verb="reboot",
        why="rebooting interrupts every job running on them",
        name=name,
        env=env,
        node_ids=node_id,
        yes=yes,
        region=region,
    )


@app.command(cls=OneLineUsageErrors)
def replace(
    ctx: typer.Context,
    node_id: NodeIdOption,
    name: NameOption = None,
    env: EnvOption = None,
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
        env=env,
        node_ids=node_id,
        yes=yes,
        region=region,
    )


# Deep health checks and the cluster operations API: their own module, mounted here.
app.command(cls=OneLineUsageErrors, name="health-check")(cluster_operations_cmd.health_check)
app.command(cls=OneLineUsageErrors)(cluster_operations_cmd.operations)
