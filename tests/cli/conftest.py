"""Shared fixtures for the boto3-backed `hpctl` commands: fake credentials, no network, and
a botocore Stubber on one real SageMaker client per module."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest
from botocore.stub import Stubber
from typer.testing import Result

from hpctl import aws


def one_error_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    # One attempt: error tests need no retry back-off.
    "AWS_MAX_ATTEMPTS": "1",
}
UNSET_ENV = ("AWS_PROFILE", "AWS_REGION", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
             "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE")


def fake_aws_env(monkeypatch: pytest.MonkeyPatch, scratch: Path) -> None:
    """Fake credentials and region; no shared config files or instance metadata to find."""
    for name in UNSET_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(scratch / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(scratch / "no-credentials"))


@pytest.fixture(autouse=True)
def offline_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_aws_env(monkeypatch, tmp_path)

    def refuse(*_: object, **__: object) -> None:
        raise RuntimeError("tests must not open network connections")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


@pytest.fixture(scope="module")
def shared_client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One client from the real factory for the module: building a client parses the whole
    SageMaker API model, a quarter second each time."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        fake_aws_env(monkeypatch, tmp_path_factory.mktemp("aws"))
        return aws.client("sagemaker")


@dataclass
class Stubbed:
    stubber: Stubber
    # (service, region) for every client a command asked for.
    clients: list[tuple[str, str | None]] = field(default_factory=list)


@pytest.fixture
def sagemaker(monkeypatch: pytest.MonkeyPatch, shared_client: Any) -> Iterator[Stubbed]:
    """Commands get the stubbed client; every queued response must be consumed."""
    stubbed = Stubbed(Stubber(shared_client))

    def factory(service: str, region: str | None = None) -> Any:
        stubbed.clients.append((service, region))
        return shared_client

    monkeypatch.setattr(aws, "client", factory)
    with stubbed.stubber:
        yield stubbed
    stubbed.stubber.assert_no_pending_responses()
