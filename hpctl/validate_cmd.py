"""`hpctl validate FILE...`: the same validation and capacity checks as `cdk synth`, offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from config.errors import ConfigError
from config.loader import load_file
from hpctl.errors import ExitCode, OneLineUsageErrors, fail

app = typer.Typer()
stdout = Console(soft_wrap=True)


@app.command("validate", cls=OneLineUsageErrors)
def validate(
    ctx: typer.Context,
    files: Annotated[list[Path], typer.Argument(help="Environment files, e.g. config/prod.yaml")],
) -> None:
    """Run the same validation and capacity checks as `cdk synth`."""
    problems: list[str] = []
    for path in files:
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
