"""`hpctl validate --env NAME` (or `--config FILE`): the same validation and capacity checks as
`cdk synth`, offline. Every environment and file given is checked, and every problem of each
is one line; `FILE` arguments are the previous release's spelling of `--config FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from config.errors import ConfigError
from config.loader import load_file
from hpctl.errors import ExitCode, OneLineUsageErrors, deprecated, fail
from hpctl.options import environment_file

app = typer.Typer()
stdout = Console(soft_wrap=True)


@app.command("validate", cls=OneLineUsageErrors)
def validate(
    ctx: typer.Context,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            metavar="NAME",
            help="Environment (config/<env>.yaml), e.g. dev or prod; repeatable.",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        list[Path] | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="An environment file elsewhere, instead of --env; repeatable.",
            show_default=False,
        ),
    ] = None,
    files: Annotated[
        list[Path] | None,
        typer.Argument(metavar="[FILE]...", hidden=True, show_default=False),
    ] = None,
) -> None:
    """Run the same validation and capacity checks as `cdk synth`."""
    if files:
        deprecated(ctx, "FILE without --config", "--config FILE (or --env NAME)")
    paths = [environment_file(name) for name in env or ()] + [*(config or ()), *(files or ())]
    if not paths:
        fail(ctx, "--env: missing; pass --env NAME (or --config FILE)", code=ExitCode.USAGE)
    problems: list[str] = []
    for path in paths:
        try:
            loaded = load_file(path)
        except ConfigError as error:
            problems += error.located_lines()
            continue
        groups = len(loaded.config.hyperpod.instance_groups)
        stdout.print(
            f"{path}: valid ({loaded.config.environment}, {loaded.config.region}, "
            f"{groups} instance group{'s' if groups != 1 else ''})",
            markup=False,
        )
    if problems:
        fail(ctx, *problems, code=ExitCode.FAILED)
