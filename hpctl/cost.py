"""`hpctl teams --cost`: each team's GPU-hours over a window, read from the environment's
managed Prometheus workspace, priced by `config.pricing` (training plan fees from
DescribeTrainingPlan, configured on-demand rates). An estimate; every line names its rate.

GPU-hours come from the GPU accounting's recording rule `namespace:gpus_allocated:count`
(platform_constructs/observability/rules/teams.yaml): the window's mean of the GPUs a team's
pods held, times the window's hours, as `namespace:gpu_hours:sum1d` does for a day. The
workspace is the observability stack's AWS::APS::Workspace; the query goes to its
`prometheusEndpoint` (Amazon Managed Service for Prometheus query API, `api/v1/query`,
signed with SigV4 for the service `aps`; needs `aps:QueryMetrics`).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from config.instance_types import lookup
from config.kubernetes import team_namespace
from config.plan import PlatformPlan
from config.pricing import Rate, on_demand_rates, plan_rate, team_cost
from config.schema import EnvironmentConfig
from hpctl import aws
from hpctl.errors import InputError
from hpctl.options import text_table

WORKSPACE_RESOURCE_TYPE = "AWS::APS::Workspace"
GPUS_HELD_SERIES = "namespace:gpus_allocated:count"

# A PromQL query -> the `result` of its instant-vector answer.
Query = Callable[[str], list[dict[str, Any]]]


def gpu_hours_query(window: timedelta) -> str:
    seconds = int(window.total_seconds())
    return f"avg_over_time({GPUS_HELD_SERIES}[{seconds}s]) * {seconds / 3600:g}"


def workspace_endpoint(connection: aws.Connection, config: EnvironmentConfig) -> str:
    """The query endpoint of the observability stack's Prometheus workspace."""
    stack = config.names.stack("observability")
    cloudformation = connection.client("cloudformation")
    resources = aws.paginate(
        cloudformation, "list_stack_resources", "StackResourceSummaries", StackName=stack
    )
    ids = [
        r["PhysicalResourceId"] for r in resources if r["ResourceType"] == WORKSPACE_RESOURCE_TYPE
    ]
    if not ids:
        raise InputError(f"--env: stack {stack} has no Prometheus workspace; deploy it first")
    # The workspace's physical id is its ARN (…:workspace/ws-…) or its id.
    workspace_id = ids[0].rsplit("/", 1)[-1]
    described = aws.call(connection.client("amp"), "describe_workspace", workspaceId=workspace_id)
    return str(described["workspace"]["prometheusEndpoint"])


def prometheus_query(connection: aws.Connection, endpoint: str) -> Query:
    """A `Query` against `endpoint`, signed with the connection's credentials."""

    def run(promql: str) -> list[dict[str, Any]]:
        url = f"{endpoint.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        if not url.startswith("https://"):
            raise InputError(f"--env: the workspace endpoint {endpoint} is not https")
        request = AWSRequest(method="GET", url=url)
        credentials = connection.session.get_credentials()
        SigV4Auth(credentials, "aps", connection.region).add_auth(request)
        signed = urllib.request.Request(url, headers=dict(request.headers.items()))  # noqa: S310 (https only, checked above)
        with urllib.request.urlopen(signed, timeout=60) as answer:  # noqa: S310
            return list(json.load(answer)["data"]["result"])

    return run


def training_plan_rates(connection: aws.Connection, config: EnvironmentConfig) -> dict[str, Rate]:
    """Instance type -> the rate of the training plan its groups run on (DescribeTrainingPlan)."""
    sagemaker = connection.client("sagemaker")
    rates: dict[str, Rate] = {}
    arns = {g.training_plan.arn for g in config.hyperpod.instance_groups if g.training_plan}
    for arn in sorted(arns):
        rate = plan_rate(aws.call(sagemaker, "describe_training_plan", TrainingPlanName=arn))
        if rate is not None:
            rates[rate.instance_type] = rate
    return rates


def cost_report(
    config: EnvironmentConfig,
    plan: PlatformPlan,
    window: timedelta,
    query: Query,
    plan_rates: dict[str, Rate],
) -> dict[str, Any]:
    """Per team: GPU-hours over `window` and their estimated cost (the `--json` object)."""
    governance = config.governance
    if governance is None:
        raise InputError(f"--env: {config.environment} has no governance section, so no teams")
    rates = {**on_demand_rates(governance.on_demand_usd_per_hour), **plan_rates}
    held = {
        str(sample["metric"].get("namespace")): float(sample["value"][1])
        for sample in query(gpu_hours_query(window))
    }
    teams = []
    for team in governance.teams_by_name():
        types = sorted(
            {
                c.instance_type
                for c in plan.team_capacity[team.name]
                if (c.guaranteed > 0 or c.borrowable > 0)
                and lookup(c.instance_type).accelerator == "nvidia"
            }
        )
        cost = team_cost(team.name, held.get(team_namespace(team.name), 0.0), types, rates)
        teams.append(
            {
                "team": team.name,
                "gpu_hours": round(cost.gpu_hours, 2),
                "cost": None if cost.cost is None else round(cost.cost, 2),
                "currency": cost.currency,
                "rate_source": cost.source,
            }
        )
    return {
        "environment": config.environment,
        "window_hours": round(window.total_seconds() / 3600, 2),
        "estimate": True,
        "teams": teams,
    }


def format_cost(report: dict[str, Any]) -> str:
    lines = [
        f"Estimated cost per team in {report['environment']}, the last "
        f"{report['window_hours']:g} hours (GPU-hours from Prometheus; an estimate)",
    ]
    lines += text_table(
        ["team", "GPU-hours", "cost", "rate source"],
        [
            [
                t["team"],
                f"{t['gpu_hours']:.2f}",
                "-" if t["cost"] is None else f"{t['cost']:.2f} {t['currency']}",
                t["rate_source"],
            ]
            for t in report["teams"]
        ],
    )
    return "\n".join(lines) + "\n"
