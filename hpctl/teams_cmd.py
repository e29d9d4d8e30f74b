"""`hpctl teams --env ENV`: the task-governance teams of an environment and what each may run.

Per team: its namespace and queue, how it shares capacity, and for every instance group it
holds a guarantee on or may borrow on, its guaranteed and borrowable nodes and the largest
job it can submit there (`config.teams.team_capacity`, the figure `hpctl job render` checks).
Then the priority classes, highest weight first. Offline: it reads config/<env>.yaml only.

`--cost [--since 30d]`: instead, each team's GPU-hours over the window from the
environment's Prometheus workspace and their estimated cost (`hpctl.cost`); this reads AWS.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Annotated

import typer

from hpctl import aws, cost
from hpctl.errors import InputError, OneLineUsageErrors
from hpctl.options import (
    EnvOption,
    JsonObjectOption,
    duration_option,
    duration_text,
    loaded_environment_option,
    required_env,
)
from hpctl.teams import format_report, teams_report

app = typer.Typer()

# The longest window the cost reads: Prometheus keeps 150 days by default
# (observability.prometheus_retention_days).
MAX_COST_WINDOW = timedelta(days=150)


@app.command("teams", cls=OneLineUsageErrors)
def teams(
    ctx: typer.Context,
    env: EnvOption = None,
    show_cost: Annotated[
        bool,
        typer.Option("--cost", help="Each team's GPU-hours and estimated cost (reads AWS)."),
    ] = False,
    since: Annotated[
        str,
        typer.Option("--since", metavar="DURATION", help="With --cost: the window, e.g. 7d."),
    ] = "30d",
    as_json: JsonObjectOption = False,
) -> None:
    """Teams, quotas (guaranteed, borrowable, largest job) and priority classes; with --cost,
    each team's GPU-hours and estimated cost."""
    loaded = loaded_environment_option(ctx, required_env(ctx, env))
    if show_cost:
        window = duration_option(ctx, "--since", since)
        if not timedelta(hours=1) <= window <= MAX_COST_WINDOW:
            raise InputError(
                f"--since: {duration_text(window)} is out of range; use 1h to "
                f"{MAX_COST_WINDOW.days}d"
            )
        connection = aws.connect_environment(ctx, loaded.config)
        with aws.reported_errors(ctx):
            endpoint = cost.workspace_endpoint(connection, loaded.config)
            plan_rates = cost.training_plan_rates(connection, loaded.config)
            query = cost.prometheus_query(connection, endpoint)
            report = cost.cost_report(loaded.config, loaded.plan, window, query, plan_rates)
        text = cost.format_cost(report)
    else:
        report = teams_report(loaded.config, loaded.plan)
        text = format_report(report)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(text, nl=False)
