"""What the operations commands (`hpctl plans ...`, `hpctl cluster ...`) share.

One way to build AWS clients, one way to turn any AWS failure into a single stderr line
(`hpctl <command>: <Code>: <message>`, exit 1, through `hpctl.errors`) instead of a
traceback, and one way to print tables of ids people copy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import boto3
import typer
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from hpctl.errors import ExitCode, fail, one_line

# Standard retry mode backs off on throttling and transient errors. The attempt count is
# left unset so AWS_MAX_ATTEMPTS / the profile's max_attempts still apply.
_CLIENT_CONFIG = Config(
    retries={"mode": "standard"},
    user_agent_extra="hpctl",
    connect_timeout=10,
    read_timeout=60,
)


def session(region: str | None = None) -> boto3.session.Session:
    """A session from the usual credential chain; `region` overrides the configured one.

    AWS_PROFILE is passed explicitly: botocore only lets a named profile (e.g. one that
    assumes a role with `credential_source = Environment`) win over credentials in the
    environment when the profile is given to the session, not read from the environment."""
    return boto3.session.Session(
        profile_name=os.environ.get("AWS_PROFILE") or None, region_name=region
    )


def client(service: str, region: str | None = None) -> BaseClient:
    """A client for `service`. Commands call this through the module (`aws.client`) so tests
    can hand them a stubbed client."""
    return session(region).client(service, config=_CLIENT_CONFIG)


def error_line(error: ClientError | BotoCoreError) -> tuple[str, str]:
    """(code, message) for an AWS failure: the service's error code for ClientError, the
    exception class for local botocore failures (no credentials, no endpoint, bad params)."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        code = details.get("Code") or "ClientError"
        message = details.get("Message") or str(error)
        return code, one_line(message)
    return type(error).__name__, one_line(str(error))


@contextmanager
def reported_errors(ctx: typer.Context) -> Iterator[None]:
    """Run AWS calls; any botocore failure ends the command with one line and exit 1.

    BotoCoreError covers NoCredentialsError, NoRegionError, EndpointConnectionError,
    ParamValidationError and PaginationError, so none of them escape as a traceback.
    """
    try:
        yield
    except (ClientError, BotoCoreError) as error:
        error_code, message = error_line(error)
        fail(ctx, f"{error_code}: {message}", code=ExitCode.FAILED)


def print_table(console: Console, table: Table) -> None:
    """Print `table` at its natural width even when the terminal (or the 80 columns assumed
    for a pipe) is narrower: squeezed columns would truncate the offering and instance ids
    people paste into the next command. A narrow terminal wraps the lines instead."""
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if natural > console.width:
        # A fixed table width overrides the console's; crop=False keeps the long lines whole.
        table.width = natural
    console.print(table, crop=False)
