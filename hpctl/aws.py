"""The one AWS-call layer of `hpctl`: every session, client, call and page goes through here.

- `connect` resolves a command's credentials once and checks them with
  sts:GetCallerIdentity before anything else: no credentials, expired ones or another
  account's than the environment deploys into end the command with one line that says how to
  fix it. Its `Connection` makes the command's clients, all from that one session.
- `call` and `paginate` make a call (every page of it) and turn any botocore failure into an
  `AwsCallError` that knows its error code and the IAM action the call needs.
- `reported_errors` ends a command on such a failure with one stderr line
  (`hpctl <command>: <Code>: <message>`, exit 1, through `hpctl.errors`), never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.session
import typer
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from config.schema import EnvironmentConfig
from hpctl.errors import ExitCode, fail, one_line

# Standard retry mode backs off on throttling and transient errors. The attempt count is
# left unset so AWS_MAX_ATTEMPTS / the profile's max_attempts still apply.
_CLIENT_CONFIG = Config(
    retries={"mode": "standard"},
    user_agent_extra="hpctl",
    connect_timeout=10,
    read_timeout=60,
)

# Error codes AWS services use for a missing permission and for throttling.
ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException"}
)
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "SlowDown",
    }
)
# Failures of the credentials themselves (missing, expired, unknown), not of one permission.
CREDENTIAL_CODES = frozenset(
    {
        "NoCredentialsError",
        "PartialCredentialsError",
        "ProfileNotFound",
        "TokenRetrievalError",
        "SSOTokenLoadError",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
    }
)
NO_CREDENTIALS = "no AWS credentials found; set AWS_PROFILE or run `aws sso login`"
REFRESH_CREDENTIALS = "refresh the credentials (`aws sso login`) or set AWS_PROFILE"
PICK_PROFILE = "set AWS_PROFILE to one of `aws configure list-profiles`"
NO_REGION = "no AWS Region; pass --region or set AWS_REGION"


def session(region: str | None = None) -> boto3.session.Session:
    """A session from the usual credential chain; `region` overrides the configured one.

    AWS_PROFILE is passed explicitly: botocore only lets a named profile (e.g. one that
    assumes a role with `credential_source = Environment`) win over credentials in the
    environment when the profile is given to the session, not read from the environment."""
    return boto3.session.Session(
        profile_name=os.environ.get("AWS_PROFILE") or None, region_name=region
    )


def client(
    service: str, region: str | None = None, source: boto3.session.Session | None = None
) -> BaseClient:
    """A client for `service` from `source` (a new session when None). Everything calls
    this through the module (`aws.client`) so tests can hand them a stubbed client."""
    return (source or session(region)).client(service, region_name=region, config=_CLIENT_CONFIG)


def api_enum(service: str, shape: str) -> frozenset[str]:
    """The values an enum shape of `service`'s API model (as botocore ships it) allows;
    offline, no credentials."""
    model = botocore.session.get_session().get_service_model(service)
    return frozenset(model.shape_for(shape).enum)


# ------------------------------------------------------------------ calls and failures


def error_line(error: ClientError | BotoCoreError) -> tuple[str, str]:
    """(code, message) for an AWS failure: the service's error code for ClientError, the
    exception class for local botocore failures (no credentials, no endpoint, bad params)."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        code = details.get("Code") or "ClientError"
        message = details.get("Message") or str(error)
        return code, one_line(message)
    return type(error).__name__, one_line(str(error))


class AwsCallError(Exception):
    """An AWS call failed; knows the error code and the IAM action the call needs."""

    def __init__(self, action: str, error: ClientError | BotoCoreError) -> None:
        self.action = action
        self.code, self.message = error_line(error)
        super().__init__(f"{self.code}: {self.message}")


def action(client: Any, method: str) -> str:
    """`sagemaker:DescribeTrainingPlan` for `describe_training_plan` on a SageMaker client."""
    operation = client.meta.method_to_api_mapping.get(method, method)
    return f"{client.meta.service_model.signing_name}:{operation}"


def call(client: Any, method: str, **params: Any) -> dict[str, Any]:
    """`client.<method>(**params)`; any botocore failure raises `AwsCallError`."""
    try:
        response: dict[str, Any] = getattr(client, method)(**params)
    except (ClientError, BotoCoreError) as error:
        raise AwsCallError(action(client, method), error) from error
    return response


def paginate(client: Any, method: str, result_key: str, **params: Any) -> list[Any]:
    """Every item of `result_key` over all pages; failures raise `AwsCallError`."""
    try:
        pages = client.get_paginator(method).paginate(**params)
        return [item for page in pages for item in page.get(result_key, [])]
    except (ClientError, BotoCoreError) as error:
        raise AwsCallError(action(client, method), error) from error


@contextmanager
def reported_errors(ctx: typer.Context) -> Iterator[None]:
    """Run AWS calls; any botocore failure ends the command with one line and exit 1.

    BotoCoreError covers NoCredentialsError, NoRegionError, EndpointConnectionError,
    ParamValidationError and PaginationError, so none of them escape as a traceback.
    """
    try:
        yield
    except AwsCallError as failure:
        fail(ctx, str(failure), code=ExitCode.FAILED)
    except (ClientError, BotoCoreError) as error:
        error_code, message = error_line(error)
        fail(ctx, f"{error_code}: {message}", code=ExitCode.FAILED)


# ------------------------------------------------------------------ credentials


@dataclass(frozen=True)
class Connection:
    """A command's credentials, resolved once and checked: the session every client of the
    command comes from, its Region, and the account and identity STS says they are."""

    session: boto3.session.Session
    region: str
    account: str
    arn: str

    def client(self, service: str) -> BaseClient:
        return client(service, self.region, self.session)


def _credential_problem(code: str, message: str) -> str:
    """The one line for credentials that could not be used, with how to fix them."""
    if code == "NoCredentialsError":
        return NO_CREDENTIALS
    if code == "ProfileNotFound":
        return f"{code}: {message}; {PICK_PROFILE}"
    fix = f"; {REFRESH_CREDENTIALS}" if code in CREDENTIAL_CODES else ""
    return f"{code}: {message}{fix}"


class CredentialsError(Exception):
    """The credentials could not be used for the command: the one line that says how to fix
    it, and the exit code a command that cannot go on without them ends with."""

    def __init__(self, line: str, code: ExitCode) -> None:
        self.line, self.code = line, code
        super().__init__(line)


def resolve(
    region: str | None = None, *, account: str | None = None, environment: str | None = None
) -> Connection:
    """`connect` without ending the command: each problem raises `CredentialsError`, for
    a command whose AWS part is optional (`hpctl job describe`'s dashboard link)."""
    try:
        resolved = session(region)
    except BotoCoreError as error:  # an AWS_PROFILE that names no profile
        raise CredentialsError(_credential_problem(*error_line(error)), ExitCode.FAILED) from None
    where = resolved.region_name
    if where is None:
        raise CredentialsError(NO_REGION, ExitCode.FAILED)
    try:
        identity = call(client("sts", where, resolved), "get_caller_identity")
    except AwsCallError as failure:
        raise CredentialsError(
            _credential_problem(failure.code, failure.message), ExitCode.FAILED
        ) from None
    caller = str(identity["Account"])
    if account is not None and caller != account:
        raise CredentialsError(
            f"--env: {environment} deploys into account {account}, the credentials are of "
            f"{caller} ({identity.get('Arn', 'unknown identity')}); use credentials of "
            f"{account} (AWS_PROFILE)",
            ExitCode.USAGE,
        )
    return Connection(resolved, where, caller, str(identity.get("Arn", "")))


def connect(
    ctx: typer.Context,
    region: str | None = None,
    *,
    account: str | None = None,
    environment: str | None = None,
) -> Connection:
    """Resolve the credentials once and ask STS whose they are, before any other call.

    `region` is the Region every client uses (an environment's, or --region; None: the
    profile's or AWS_REGION). With `account` (the one `environment` deploys into) the
    credentials must be of that account. Each failure ends the command with one line: no
    credentials or Region (exit 1), credentials STS refuses (exit 1), another account's
    credentials (exit 2: the --env given cannot be used with them).
    """
    try:
        return resolve(region, account=account, environment=environment)
    except CredentialsError as problem:
        fail(ctx, problem.line, code=problem.code)


def connect_environment(ctx: typer.Context, config: EnvironmentConfig) -> Connection:
    """`connect` for an environment's config: its Region, and credentials of its account."""
    return connect(ctx, config.region, account=config.account, environment=config.environment)


def resolve_environment(config: EnvironmentConfig) -> Connection:
    """`resolve` for an environment's config; problems raise `CredentialsError`."""
    return resolve(config.region, account=config.account, environment=config.environment)


# ------------------------------------------------------------------ stack outputs


def stack_output(connection: Connection, stack: str, key: str) -> str | None:
    """The value of output `key` of CloudFormation stack `stack` (DescribeStacks), None
    when the stack has no such output; a failure (no such stack, no permission) raises
    `AwsCallError`. Needs `cloudformation:DescribeStacks` on the stack."""
    cloudformation = connection.client("cloudformation")
    stacks = call(cloudformation, "describe_stacks", StackName=stack)["Stacks"]
    for output in stacks[0].get("Outputs", []) if stacks else []:
        if output.get("OutputKey") == key:
            return str(output["OutputValue"])
    return None
