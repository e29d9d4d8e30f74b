"""A job's per-job Grafana dashboard: its link on the environment's Grafana workspace, or why
there is none (`hpctl job describe`)."""

from __future__ import annotations

from typing import Any

from config.dashboards import JOB_DASHBOARD_UID, job_dashboard_url
from config.schema import EnvironmentConfig
from config.schema.observability import GRAFANA_ENDPOINT_OUTPUT
from hpctl import aws
from hpctl.job import lifecycle


def dashboard_link(config: EnvironmentConfig, job: dict[str, Any]) -> dict[str, Any]:
    """The job's per-job Grafana dashboard: its URL, from the job's creation time, on the
    environment's Grafana workspace (the observability stack's output, read with credentials
    of the environment's account), or why there is none. AWS is only asked where the
    environment has a workspace, and no failure there fails the caller."""
    meta = job["metadata"]
    link: dict[str, Any] = {"uid": JOB_DASHBOARD_UID, "url": None, "unavailable": None}
    if config.observability is None or not config.observability.grafana:
        link["unavailable"] = (
            f"{config.environment} has no Grafana workspace (observability.grafana); open "
            f"dashboard {JOB_DASHBOARD_UID} on a Grafana that reads its Prometheus workspace"
        )
        return link
    stack = config.names.stack("observability")
    try:
        endpoint = aws.stack_output(aws.resolve_environment(config), stack, GRAFANA_ENDPOINT_OUTPUT)
    except aws.CredentialsError as problem:
        link["unavailable"] = problem.line
        return link
    except aws.AwsCallError as failure:
        link["unavailable"] = f"cannot read stack {stack} ({failure})"
        return link
    if endpoint is None:
        link["unavailable"] = (
            f"stack {stack} has no {GRAFANA_ENDPOINT_OUTPUT} output (deploy the observability "
            "stack)"
        )
        return link
    link["url"] = job_dashboard_url(
        endpoint,
        namespace=meta["namespace"],
        job=meta["name"],
        start=lifecycle.parse_time(meta.get("creationTimestamp")),
    )
    return link
