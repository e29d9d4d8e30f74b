"""Shared helpers for the `hpctl` tests (this directory's and tests/job's): one way to run a
command in process and one check of the failure contract (exit code, a single
`hpctl <command>: ...` line on stderr, no traceback). Shared fixtures for the boto3-backed
commands: fake credentials, no network, and botocore Stubbers on real clients (one SageMaker
client per module for the SageMaker commands), with STS answering whose the credentials are."""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.stub import Stubber
from typer.testing import CliRunner, Result

from config.loader import CONFIG_DIR
from hpctl import aws, cli
from hpctl.errors import ExitCode


def hpctl(*args: str, input: str | None = None) -> Result:
    """`hpctl ARGS` in process, with every sub-app mounted as the console script mounts it;
    wide enough that tables never wrap."""
    runner = CliRunner(env={"COLUMNS": "200"})
    return runner.invoke(cli.app, list(args), input=input, prog_name="hpctl")


def error_line(result: Result | subprocess.CompletedProcess[str], code: ExitCode) -> str:
    """The one stderr line of a command that ended with `code`, checked to be a single
    newline-terminated line without a traceback (in process or from a subprocess)."""
    if isinstance(result, subprocess.CompletedProcess):
        exit_code, output = result.returncode, result.stdout + result.stderr
    else:
        exit_code, output = result.exit_code, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), output
    assert exit_code == code, (exit_code, output)
    assert "Traceback" not in output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and result.stderr.endswith("\n"), result.stderr
    return lines[0]


def expect_failure(*args: str, code: ExitCode, starts_with: str) -> Result:
    """Run `hpctl ARGS`; it must fail with `code` and one stderr line starting `starts_with`
    (which names the command: `hpctl plans search: --count: ...`). Nothing on stdout."""
    result = hpctl(*args)
    line = error_line(result, code)
    assert line.startswith(starts_with), line
    assert result.stdout == ""
    return result


FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    # One attempt: error tests need no retry back-off.
    "AWS_MAX_ATTEMPTS": "1",
}
UNSET_ENV = (
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)


def fake_aws_env(monkeypatch: pytest.MonkeyPatch, scratch: Path) -> None:
    """Fake credentials and region; no shared config files or instance metadata to find."""
    for name in UNSET_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(scratch / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(scratch / "no-credentials"))


def environment_account(name: str) -> str:
    """The account config/<name>.yaml deploys into."""
    data = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
    return str(data["account"])


def caller_identity(account: str) -> dict[str, str]:
    """A GetCallerIdentity response for credentials of `account`."""
    return {
        "UserId": "AROAEXAMPLE:me",
        "Account": account,
        "Arn": f"arn:aws:sts::{account}:assumed-role/Ops/me",
    }


def offline_clients(
    tmp_path_factory: pytest.TempPathFactory, region: str, services: tuple[str, ...]
) -> dict[str, Any]:
    """One client per service, and STS (every command that calls AWS asks it first), from
    the real factory (fake credentials, no network), for a module-scoped fixture: parsing a
    service model takes a while."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        fake_aws_env(monkeypatch, tmp_path_factory.mktemp("aws"))
        return {service: aws.client(service, region=region) for service in {"sts", *services}}


@pytest.fixture(autouse=True)
def offline_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_aws_env(monkeypatch, tmp_path)

    def refuse(*_: object, **__: object) -> None:
        raise RuntimeError("tests must not open network connections")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


@pytest.fixture(scope="module")
def sagemaker_clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """SageMaker and STS clients from the real factory for the module: building a client
    parses the whole SageMaker API model, a quarter second each time."""
    return offline_clients(tmp_path_factory, "us-east-1", ("sagemaker",))


@dataclass
class Stubs:
    """One Stubber per service, and (service, region) of every client a command asked for.
    STS answers each GetCallerIdentity with credentials of `caller`'s account (None: the
    test queues STS itself)."""

    stubbers: dict[str, Stubber]
    caller: str | None
    clients: list[tuple[str, str | None]] = field(default_factory=list)

    def __getitem__(self, service: str) -> Stubber:
        return self.stubbers[service]


@contextlib.contextmanager
def stubbed_clients(
    monkeypatch: pytest.MonkeyPatch, real_clients: dict[str, Any], caller: str | None
) -> Iterator[Stubs]:
    """Commands get the stubbed `real_clients` (from `offline_clients`); any call nobody
    queued fails the test, and every queued response must be consumed."""
    stubbed = Stubs({service: Stubber(client) for service, client in real_clients.items()}, caller)

    def factory(service: str, region: str | None = None, source: object = None) -> Any:
        stubbed.clients.append((service, region))
        if service == "sts" and stubbed.caller is not None:
            stubbed["sts"].add_response(
                "get_caller_identity", caller_identity(stubbed.caller), expected_params={}
            )
        return real_clients[service]

    monkeypatch.setattr(aws, "client", factory)
    with contextlib.ExitStack() as active:
        for stubber in stubbed.stubbers.values():
            active.enter_context(stubber)
        yield stubbed
    for stubber in stubbed.stubbers.values():
        stubber.assert_no_pending_responses()


@dataclass
class Stubbed:
    """The SageMaker commands' stubs: `stubber` for SageMaker, STS answering for prod."""

    stubs: Stubs

    @property
    def stubber(self) -> Stubber:
        return self.stubs["sagemaker"]

    @property
    def clients(self) -> list[tuple[str, str | None]]:
        return self.stubs.clients


@pytest.fixture
def sagemaker(
    monkeypatch: pytest.MonkeyPatch, sagemaker_clients: dict[str, Any]
) -> Iterator[Stubbed]:
    with stubbed_clients(monkeypatch, sagemaker_clients, environment_account("prod")) as stubs:
        yield Stubbed(stubs)
