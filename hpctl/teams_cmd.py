"""`hpctl teams --env ENV`: the task-governance teams of an environment and what each may run.

Per team: its namespace and queue, how it shares capacity, and for every instance group it
holds a guarantee on or may borrow on, its guaranteed and borrowable nodes and the largest
job it can submit there (`config.teams.team_capacity`, the figure `hpctl job render` checks).
Then the priority classes, highest weight first. Offline: it reads config/<env>.yaml only.
"""

from __future__ import annotations

import json

import typer

from hpctl.errors import OneLineUsageErrors
from hpctl.options import EnvOption, JsonObjectOption, loaded_environment_option, required_env
from hpctl.teams import format_report, teams_report

app = typer.Typer()


@app.command("teams", cls=OneLineUsageErrors)
def teams(
    ctx: typer.Context,
    env: EnvOption = None,
    as_json: JsonObjectOption = False,
) -> None:
    """Teams, quotas (guaranteed, borrowable, largest job) and priority classes."""
    loaded = loaded_environment_option(ctx, required_env(ctx, env))
    report = teams_report(loaded.config, loaded.plan)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(format_report(report), nl=False)
