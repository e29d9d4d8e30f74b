"""`hpctl guard`: the command that compares two cloud assemblies, or an environment synthesized
now with what is deployed, and refuses a change that deletes or replaces a stateful resource
(the comparison and its inputs are in `hpctl.guard`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from hpctl import aws
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.guard import (
    Assembly,
    GuardInputError,
    GuardReport,
    compare,
    deployed_templates,
    read_assembly,
    synthesized_templates,
)
from hpctl.options import JsonObjectOption, loaded_environment_option

app = typer.Typer()


def _from_environment(ctx: typer.Context, name: str) -> tuple[Assembly, Assembly, list[str]]:
    import jsii.errors

    loaded = loaded_environment_option(ctx, name)
    # Checked before synthesis: a minute of synth should not end in "no credentials".
    connection = aws.connect_environment(ctx, loaded.config)
    try:
        new, stack_names = synthesized_templates(loaded)
    except jsii.errors.JSIIError as error:
        fail(ctx, f"--env {name}: synthesis failed: {error}", code=ExitCode.FAILED)
    with aws.reported_errors(ctx):
        try:
            old, missing = deployed_templates(connection.client("cloudformation"), stack_names)
        except GuardInputError as error:
            fail(ctx, str(error), code=ExitCode.FAILED)
    return old, new, missing


def _assemblies(
    ctx: typer.Context, old: Path | None, new: Path | None, env: str | None
) -> tuple[Assembly, Assembly, list[str]]:
    """(before, after, stacks not deployed) from OLD NEW or from --env."""
    if env is not None:
        if old is not None or new is not None:
            fail(
                ctx,
                "--env: compares with the deployed templates; pass either --env NAME or "
                "OLD NEW, not both",
                code=ExitCode.USAGE,
            )
        return _from_environment(ctx, env)
    if old is None or new is None:
        fail(
            ctx,
            "OLD NEW: pass two cloud assembly directories (before and after), or "
            "--env NAME to compare with what is deployed",
            code=ExitCode.USAGE,
        )
    try:
        return read_assembly("OLD", old), read_assembly("NEW", new), []
    except GuardInputError as error:
        fail(ctx, str(error), code=ExitCode.USAGE)


def _print_report(report: GuardReport) -> None:
    for finding in report.findings:
        typer.echo(finding.line())
    for unused in report.unused_allow:
        typer.echo(f"--allow {unused}: matches no deleted or replaced resource")
    if not report.blocking:
        typer.echo(report.summary())


@app.command("guard", cls=OneLineUsageErrors)
def guard(
    ctx: typer.Context,
    old: Annotated[
        Path | None,
        typer.Argument(
            metavar="OLD",
            help="Cloud assembly before the change: a directory of *.template.json "
            "(cdk synth --output DIR).",
            show_default=False,
        ),
    ] = None,
    new: Annotated[
        Path | None,
        typer.Argument(metavar="NEW", help="Cloud assembly after the change.", show_default=False),
    ] = None,
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            metavar="NAME",
            help="Instead of OLD NEW: synthesize config/<env>.yaml and compare it with the "
            "templates deployed in its account and Region.",
            show_default=False,
        ),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            metavar="LOGICAL_ID",
            help="Accept the deletion or replacement of this resource (LogicalId or "
            "stack/LogicalId); repeatable. It is still listed.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonObjectOption = False,
) -> None:
    """Refuse a change that deletes or replaces a stateful resource.

    Compares OLD and NEW cloud assemblies, or (--env) the environment
    synthesized now with the templates deployed in its account and Region.
    One line per cluster, file system, bucket, key, subnet, VPC, EKS cluster,
    log group, quota or scheduler config the change deletes or replaces,
    naming the create-only property; exit 1 if any is not --allow'ed.
    """
    before, after, missing = _assemblies(ctx, old, new, env)
    report = compare(before, after, allow=allow or (), not_deployed=missing)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        _print_report(report)
    blocking = len(report.blocking)
    if blocking:
        fail(
            ctx,
            f"{blocking} stateful resource{'s' if blocking != 1 else ''} would be deleted or "
            "replaced; keep their logical IDs and create-only properties, or pass --allow "
            "LOGICAL_ID for each deliberate one",
            code=ExitCode.FAILED,
        )
