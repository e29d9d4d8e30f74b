"""How every `hpctl` command fails: one exit-code table and one line format.

Each problem is one line on stderr, `hpctl <command>: <message>`, and the command exits with
an `ExitCode`; no tracebacks, no usage boxes. `hpctl validate: config/dev.yaml: network...`,
`hpctl job render: --nodes: 0 is too small; use 1 or more` and
`hpctl plans search: ThrottlingException: Rate exceeded` all read the same way.
"""

from __future__ import annotations

import re
from enum import IntEnum
from typing import Any, NoReturn

import typer

# typer vendors click; its base context and exceptions are only reachable through the
# private module (typer.Context is a subclass, UsageError carries the base class).
from typer._click.core import Context
from typer._click.exceptions import UsageError
from typer.core import TyperCommand

PROGRAM = "hpctl"


class ExitCode(IntEnum):
    """The exit status of every `hpctl` command."""

    OK = 0
    # The command ran and found a problem: an invalid configuration, an AWS call that failed,
    # a node the service rejected, a disruptive action refused without --yes.
    FAILED = 1
    # Bad input caught before any work: an unknown option, a value the command cannot use.
    USAGE = 2
    # Interrupted (Ctrl-C): 128 + SIGINT, as shells report it.
    INTERRUPTED = 130


def command_name(ctx: Context | None) -> str:
    """`hpctl plans search`, whatever the program was invoked as: the root context's name
    depends on argv[0] (a console script, `python -m`, a test runner)."""
    names: list[str] = []
    current = ctx
    while current is not None and current.parent is not None:
        names.append(current.info_name or "")
        current = current.parent
    return " ".join([PROGRAM, *reversed(names)])


def one_line(text: str) -> str:
    """Fold a multi-line message (botocore's parameter validation report) into one line."""
    parts = [line.strip() for line in text.splitlines() if line.strip()]
    joined = ""
    for part in parts:
        if joined:
            # A heading that ends in ":" introduces the next line; anything else is a list.
            joined += " " if joined.endswith(":") else "; "
        joined += part
    return re.sub(r"\s+", " ", joined)


def report(ctx: Context | None, *problems: str) -> None:
    """Print each problem as `hpctl <command>: <problem>` on stderr, one line each."""
    prefix = command_name(ctx)
    for problem in problems:
        typer.echo(f"{prefix}: {one_line(problem)}", err=True)


def fail(ctx: Context | None, problem: str, *more: str, code: ExitCode) -> NoReturn:
    """Report every problem (one line each) and end the command with `code`."""
    report(ctx, problem, *more)
    raise typer.Exit(code)


def deprecated(ctx: Context | None, old: str, new: str) -> None:
    """The one stderr line for a spelling kept for one release: `old` still works, `new` is
    what to write instead."""
    report(ctx, f"{old} is deprecated and goes in the next release; use {new}")


class InputError(ValueError):
    """Bad input found by the logic a command calls, before any work; the message is the one
    line to print (naming the option and the fix). A command raising it exits 2."""


class OneLineUsageErrors(TyperCommand):
    """A command whose parse errors (unknown option, missing value) and `InputError`s are one
    `fail` line with exit 2 instead of a usage box or a traceback, also when its app is
    mounted under another CLI."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except UsageError as error:
            fail(ctx, error.format_message(), code=ExitCode.USAGE)

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except InputError as error:
            fail(ctx, str(error), code=ExitCode.USAGE)
