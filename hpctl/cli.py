"""`hpctl`: plan, validate and operate the platform's environments.

Every command module defines a `typer.Typer` named `app` holding its commands, each with
`cls=OneLineUsageErrors`; this module mounts them all the same way, a group's under its name.
Every failure is one line per problem on stderr (`hpctl <command>: <problem>`) and an exit
code from `hpctl.errors.ExitCode`; no tracebacks.
"""

from __future__ import annotations

import sys

import typer

from hpctl import (
    capacity_cmd,
    cluster_cmd,
    errors,
    guard_cmd,
    job_cmd,
    kubeconfig_cmd,
    nodes_cmd,
    plans_cmd,
    preflight_cmd,
    teams_cmd,
    validate_cmd,
    zones_cmd,
)
from hpctl.errors import ExitCode

app = typer.Typer(
    name="hpctl",
    help="Plan, validate and operate SageMaker HyperPod environments.",
    add_completion=False,
    pretty_exceptions_enable=False,
)

# (group name or None for top-level commands, the module's app), in `hpctl --help` order.
COMMAND_MODULES: tuple[tuple[str | None, typer.Typer], ...] = (
    (None, validate_cmd.app),
    (None, capacity_cmd.app),
    (None, teams_cmd.app),
    (None, nodes_cmd.app),
    (None, guard_cmd.app),
    (None, preflight_cmd.app),
    (None, kubeconfig_cmd.app),
    (None, zones_cmd.app),
    ("job", job_cmd.app),
    ("plans", plans_cmd.app),
    ("cluster", cluster_cmd.app),
)
for group, commands in COMMAND_MODULES:
    app.add_typer(commands, name=group)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point; usage errors become one line and exit 2."""
    # typer vendors click; its exception classes are only reachable through the private module.
    from typer._click import exceptions as click_exceptions

    try:
        result = app(args=argv, standalone_mode=False)
    except click_exceptions.NoArgsIsHelpError as error:
        # A group called without a command: its help is the message (typer's rich help has
        # already printed itself and leaves the message empty).
        if error.format_message():
            typer.echo(error.format_message(), err=True)
        sys.exit(ExitCode.USAGE)
    except click_exceptions.UsageError as error:
        errors.report(error.ctx, error.format_message())
        sys.exit(ExitCode.USAGE)
    except click_exceptions.ClickException as error:
        errors.report(None, error.format_message())
        sys.exit(error.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        errors.report(None, "aborted")
        sys.exit(ExitCode.INTERRUPTED)
    sys.exit(result if isinstance(result, int) else ExitCode.OK)


if __name__ == "__main__":
    main()
