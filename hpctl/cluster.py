"""A HyperPod cluster as `hpctl cluster` reads it: the cluster a command addresses and the
checks of its input, its nodes (every page), instance groups, recent events and compute
quotas turned into plain rows and reports, what makes it unhealthy, and what a batch reboot
or replace answered. The commands are in `hpctl.cluster_cmd`."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any

import typer

from config.failures import classify_failure
from config.kubernetes import INSTANCE_GROUP_NAME
from config.schema import EnvironmentConfig
from hpctl import aws
from hpctl.errors import ExitCode, InputError, fail
from hpctl.options import duration_text, required_environment, utc_iso
from training.checkpoint.interval import NODE_HOURS_PER_FAILURE

HEALTHY_NODE_STATUS = "Running"


# Batch{Reboot,Replace}ClusterNodes take at most 25 node ids per call.
MAX_NODES_PER_CALL = 25


# ListClusterNodes returns at most 100 nodes a page: fewest round trips on large clusters.
PAGE_SIZE = 100


# Patterns from the SageMaker API model (ClusterNameOrArn, ClusterNodeId). A cluster name
# follows the instance group name rule (config.kubernetes.INSTANCE_GROUP_NAME).
CLUSTER_ARN = re.compile(r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:cluster/[a-z0-9]{12}")


NODE_ID = re.compile(r"i-[a-f0-9]{8}(?:[a-f0-9]{9})?")


@dataclass(frozen=True)
class ClusterTarget:
    """The cluster a command acts on: an environment's (--env: credentials of its account,
    in its Region) or any cluster by name or ARN (--name, with --region or the profile's)."""

    name: str
    config: EnvironmentConfig | None = None
    region: str | None = None

    def connect(self, ctx: typer.Context) -> aws.Connection:
        if self.config is not None:
            return aws.connect_environment(ctx, self.config)
        return aws.connect(ctx, self.region)

    def option(self) -> str:
        """How a command line names this cluster: `--env NAME` or `--name NAME`."""
        return f"--env {self.config.environment}" if self.config else f"--name {self.name}"


NameOption = Annotated[
    str | None,
    typer.Option("--name", help="Cluster name or ARN (or --env for an environment's cluster)"),
]
NodeIdOption = Annotated[
    list[str], typer.Option("--node-id", help="EC2 instance id (i-...); repeat for several")
]
YesOption = Annotated[bool, typer.Option("--yes", help="Confirm the disruptive action")]


def cluster_target(
    ctx: typer.Context, name: str | None, env: str | None, region: str | None
) -> ClusterTarget:
    if name is not None and env is None:
        return ClusterTarget(checked_cluster(name), region=region)
    if name is not None or env is None:
        fail(
            ctx,
            "--name/--env: give one (the cluster's name or ARN, or an environment)",
            code=ExitCode.USAGE,
        )
    if region is not None:
        fail(ctx, "--region: --env decides the Region; drop --region", code=ExitCode.USAGE)
    config = required_environment(ctx, env)
    return ClusterTarget(config.names.hyperpod_cluster, config=config)


def checked_cluster(value: str) -> str:
    if not (INSTANCE_GROUP_NAME.fullmatch(value) or CLUSTER_ARN.fullmatch(value)):
        raise InputError(
            f"--name: {value!r} is not a cluster name (letters, digits and '-', at most 63) "
            "or cluster ARN"
        )
    return value


def checked_group(value: str) -> str:
    if not INSTANCE_GROUP_NAME.fullmatch(value):
        raise InputError(
            f"--instance-group: {value!r} is not an instance group name (letters, digits "
            "and '-', at most 63)"
        )
    return value


def checked_node_ids(values: list[str]) -> list[str]:
    """Valid, de-duplicated (order kept) and few enough for one call. Larger batches are
    refused rather than split: disrupting more than 25 nodes deserves a deliberate step."""
    bad = [v for v in values if not NODE_ID.fullmatch(v)]
    if bad:
        raise InputError(
            f"--node-id: {', '.join(map(repr, bad))} is not an instance id "
            "(i- and 8 or 17 hex digits)"
        )
    unique = list(dict.fromkeys(values))
    if len(unique) > MAX_NODES_PER_CALL:
        raise InputError(
            f"--node-id: {len(unique)} nodes given; at most {MAX_NODES_PER_CALL} per call, "
            "run it in batches"
        )
    return unique


def list_nodes(sagemaker: Any, cluster: str, group: str | None = None) -> list[dict[str, Any]]:
    """Every node of the cluster (all pages), optionally of one instance group."""
    params: dict[str, Any] = {"ClusterName": cluster}
    if group:
        params["InstanceGroupNameContains"] = group
    nodes = aws.paginate(
        sagemaker,
        "list_cluster_nodes",
        "ClusterNodeSummaries",
        **params,
        PaginationConfig={"PageSize": PAGE_SIZE},
    )
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
        "launch_time": utc_iso(node.get("LaunchTime")),
        "private_dns": node.get("PrivateDnsHostname"),
        # The UltraServer (one NVLink domain) an UltraServer instance belongs to; the same id
        # is its node label topology.k8s.aws/ultraserver-id. None for other instances.
        "ultraserver_id": node.get("UltraServerInfo", {}).get("Id"),
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


def node_counts(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """How many nodes each (instance group, status) pair has, sorted by both."""
    counts = Counter((n["InstanceGroupName"], n["InstanceStatus"]["Status"]) for n in nodes)
    return [
        {"instance_group": group, "status": status, "count": count}
        for (group, status), count in sorted(counts.items())
    ]


def event_row(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "time": utc_iso(event["EventTime"]),
        "level": event.get("EventLevel"),
        "resource_type": event["ResourceType"],
        "instance_group": event.get("InstanceGroupName"),
        "instance_id": event.get("InstanceId"),
        "description": event.get("Description") or None,
        "event_id": event["EventId"],
    }


def events_unavailable(cluster: dict[str, Any]) -> str | None:
    """Why ListClusterEvents has nothing to say about `cluster` (a DescribeCluster
    response), or None when it answers."""
    mode = cluster.get("NodeProvisioningMode")
    if mode == EVENTS_PROVISIONING_MODE:
        return None
    return (
        f"ListClusterEvents needs NodeProvisioningMode {EVENTS_PROVISIONING_MODE}; "
        f"the cluster has {mode or 'none'}"
    )


def recent_events(
    sagemaker: Any, name: str, cluster: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """The newest `MAX_EVENTS` events of the last `EVENTS_WINDOW` (one call: the newest page
    is all a summary needs), or why there are none to read."""
    since = now - EVENTS_WINDOW
    section: dict[str, Any] = {"available": True, "note": None, "since": utc_iso(since)}
    note = events_unavailable(cluster)
    if note is not None:
        section["available"] = False
        section["note"] = note
        section["events"] = []
        return section
    response = aws.call(
        sagemaker,
        "list_cluster_events",
        ClusterName=name,
        EventTimeAfter=since,
        SortBy="EventTime",
        SortOrder="Descending",
        MaxResults=MAX_EVENTS,
    )
    events = sorted(response.get("Events", []), key=lambda e: e["EventTime"], reverse=True)
    section["events"] = [event_row(e) for e in events[:MAX_EVENTS]]
    return section


# --- node history -----------------------------------------------------------------------

# ListClusterEvents' ResourceType of events about one node (API model: Cluster,
# InstanceGroup, Instance).
NODE_RESOURCE_TYPE = "Instance"
# EventLevel (API model: Info, Warn, Error). HyperPod reports what goes wrong with a node (a
# failed health check, the reboot or replacement it starts) at Warn or Error; Info is routine.
HEALTH_EVENT_LEVELS = ("Warn", "Error")
# How far back `hpctl cluster events --since` may look, and the shortest window it reads.
MAX_HISTORY = timedelta(days=365)
MIN_HISTORY = timedelta(hours=1)


def checked_history_window(window: timedelta) -> timedelta:
    if not MIN_HISTORY <= window <= MAX_HISTORY:
        raise InputError(
            f"--since: {duration_text(window)} is out of range; use 1h to {MAX_HISTORY.days}d"
        )
    return window


def list_node_events(sagemaker: Any, name: str, since: datetime) -> list[dict[str, Any]]:
    """Every node event of the cluster since `since` (all pages), oldest first."""
    events = aws.paginate(
        sagemaker,
        "list_cluster_events",
        "Events",
        ClusterName=name,
        ResourceType=NODE_RESOURCE_TYPE,
        EventTimeAfter=since,
        SortBy="EventTime",
        SortOrder="Ascending",
        PaginationConfig={"PageSize": PAGE_SIZE},
    )
    return sorted(events, key=lambda e: (e["EventTime"], e["EventId"]))


def _incident(event: dict[str, Any]) -> str:
    """One failure may be reported by several events of one operation (a health check
    failing, then the reboot it starts): they count once."""
    return str(event.get("OperationId") or event["EventId"])


def _classified_row(event: dict[str, Any]) -> dict[str, Any]:
    """`event_row` with the cause of a health event (config.failures), None for Info."""
    health = event.get("EventLevel") in HEALTH_EVENT_LEVELS
    cause = classify_failure([event.get("Description") or ""]).cause if health else None
    return {**event_row(event), "cause": cause}


def _incident_causes(health: list[dict[str, Any]]) -> list[str]:
    """The cause of each failure (incident) in time order, from all its events' text."""
    by_incident: dict[str, list[str]] = {}
    for event in health:
        by_incident.setdefault(_incident(event), []).append(event.get("Description") or "")
    return [classify_failure(texts).cause for texts in by_incident.values()]


def _offenders_by_cause(nodes: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Cause -> the repeat offenders that failed from it more than once, so a node that
    keeps losing a GPU reads apart from one that hit two unrelated faults."""
    by_cause: dict[str, list[str]] = {}
    for node in nodes:
        for cause, count in node["failures_by_cause"].items():
            if count > 1:
                by_cause.setdefault(cause, []).append(node["instance_id"])
    return dict(sorted(by_cause.items()))


def node_history(
    events: list[dict[str, Any]], since: datetime, window: timedelta
) -> dict[str, Any]:
    """Per node: its health events (Warn/Error) and how many failures they are, every event
    in time order, and the repeat offenders (nodes that failed more than once). A replaced
    node comes back with a new instance id, so a repeat offender is a node that HyperPod
    rebooted or recovered in place and that failed again: replace it."""
    by_node: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for event in events:
        if event.get("InstanceId"):
            key = (event.get("InstanceGroupName") or "", event["InstanceId"])
            by_node.setdefault(key, []).append(event)
    nodes: list[dict[str, Any]] = []
    for (group, instance), history in by_node.items():
        health = [e for e in history if e.get("EventLevel") in HEALTH_EVENT_LEVELS]
        causes = _incident_causes(health)
        last = history[-1]
        nodes.append(
            {
                "instance_group": group or None,
                "instance_id": instance,
                "failures": len({_incident(e) for e in health}),
                "failures_by_cause": dict(sorted(Counter(causes).items())),
                "last_cause": causes[-1] if causes else None,
                "health_events": len(health),
                "events": len(history),
                "last_event_time": utc_iso(last["EventTime"]),
                "last_event": last.get("Description") or None,
                "history": [_classified_row(e) for e in history],
            }
        )
    nodes.sort(key=lambda n: (-n["failures"], n["instance_group"] or "", n["instance_id"]))
    return {
        "since": utc_iso(since),
        # The window in days (a fraction for one given in hours), as before units existed.
        "days": _days(window),
        "nodes": nodes,
        "repeat_offenders": [n["instance_id"] for n in nodes if n["failures"] > 1],
        "repeat_offenders_by_cause": _offenders_by_cause(nodes),
    }


def failure_rates(
    cluster: dict[str, Any], nodes: list[dict[str, Any]], window: timedelta
) -> list[dict[str, Any]]:
    """Per instance group, the node failure rate the window shows, as the trainer's
    checkpoint planning reads it (training/checkpoint/interval.py): node-hours per failure,
    beside the figure it assumes by default. A job runs in one group, and types fail at
    their own rates. Node-hours count the group's current nodes over the whole window, an
    estimate where the group grew or shrank within it. `nodes`: node_history's."""
    failures = Counter[str]()
    for node in nodes:
        failures[node["instance_group"] or ""] += node["failures"]
    rates = []
    for group in cluster.get("InstanceGroups") or []:
        count = int(group.get("CurrentCount") or 0)
        node_hours = count * (window / timedelta(hours=1))
        failed = failures[group["InstanceGroupName"]]
        rates.append(
            {
                "instance_group": group["InstanceGroupName"],
                "nodes": count,
                "node_hours": round(node_hours, 1),
                "failures": failed,
                "node_hours_per_failure": round(node_hours / failed, 1) if failed else None,
                "assumed_node_hours_per_failure": NODE_HOURS_PER_FAILURE,
            }
        )
    return rates


def failure_rate_line(rate: dict[str, Any]) -> str:
    """What a group's rate means for a job's `checkpoint.mtbf_hours` (a job of N nodes
    fails N times as often as one node)."""
    head = (
        f"  {rate['instance_group']}: {rate['nodes']} nodes, {rate['node_hours']:,.0f} node-hours"
    )
    if rate["node_hours_per_failure"] is None:
        return f"{head}, no failure"
    observed = rate["node_hours_per_failure"]
    return (
        f"{head}, {rate['failures']} failures: one per {observed:,.0f} node-hours; a job of N "
        f"nodes: --set checkpoint.mtbf_hours=<{observed:,.0f} / N>"
    )


def _days(window: timedelta) -> int | float:
    days = window / timedelta(days=1)
    return int(days) if days.is_integer() else round(days, 4)


def list_quotas(sagemaker: Any, cluster_arn: str) -> list[dict[str, Any]]:
    """Every compute quota of the cluster (all pages)."""
    return aws.paginate(
        sagemaker,
        "list_compute_quotas",
        "ComputeQuotaSummaries",
        ClusterArn=cluster_arn,
        PaginationConfig={"PageSize": PAGE_SIZE},
    )


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
