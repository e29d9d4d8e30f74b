"""`hpctl preflight --env NAME`: run the registered checks (`hpctl.preflight.registry`) against
the environment's account, with credentials checked first, and print one table (or JSON).
What the checks do is described in `hpctl.preflight`."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from config.schema import EnvironmentConfig
from hpctl import aws
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.options import EnvOption, JsonObjectOption, print_table, required_environment
from hpctl.preflight.context import OK, PROBLEM, SKIPPED, WARNING, CheckContext, Row
from hpctl.preflight.registry import preflight_report, run_checks

app = typer.Typer()
stdout = Console(soft_wrap=True, highlight=False)


_STATUS_STYLE = {OK: "green", PROBLEM: "bold red", WARNING: "bold yellow", SKIPPED: "yellow"}


def print_rows(config: EnvironmentConfig, rows: list[Row]) -> None:
    table = Table(title=f"Preflight: {config.environment} ({config.account}, {config.region})")
    table.add_column("check", no_wrap=True)
    table.add_column("subject", no_wrap=True)
    table.add_column("status", no_wrap=True)
    # Sentences wrap inside their cells; names and ARNs stay whole.
    table.add_column("detail", max_width=70)
    table.add_column("fix", max_width=70)
    for row in rows:
        table.add_row(
            Text(row.check),
            Text(row.subject),
            Text(row.status, style=_STATUS_STYLE[row.status]),
            Text(row.detail),
            Text(row.fix or "-"),
        )
    print_table(stdout, table)
    counts = preflight_report(config, rows)["counts"]
    stdout.print(
        f"{counts[OK]} ok, {counts[PROBLEM]} problem{'s' if counts[PROBLEM] != 1 else ''}, "
        f"{counts[WARNING]} warning{'s' if counts[WARNING] != 1 else ''}, "
        f"{counts[SKIPPED]} skipped",
        markup=False,
    )


@app.command("preflight", cls=OneLineUsageErrors)
def preflight(
    ctx: typer.Context,
    env: EnvOption = None,
    as_json: JsonObjectOption = False,
) -> None:
    """Check the AWS account before deploying an environment; exit 1 on any problem.

    It checks training plans, service quotas, Availability Zones, EKS admin roles, image
    overrides in ECR, the Kubernetes version and the data bucket's key users. Read-only;
    warnings do not fail."""
    config = required_environment(ctx, env)
    rows = run_checks(CheckContext(config, aws.connect_environment(ctx, config)))
    if as_json:
        typer.echo(json.dumps(preflight_report(config, rows), indent=2))
    else:
        print_rows(config, rows)
    problems = sum(r.status == PROBLEM for r in rows)
    if problems:
        fail(
            ctx,
            f"{problems} of {len(rows)} checks found a problem in {config.account} "
            f"({config.region}); fix them before deploying {config.environment}",
            code=ExitCode.FAILED,
        )
