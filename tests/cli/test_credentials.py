"""Every command that calls AWS resolves its credentials once and asks STS whose they are
before anything else (`hpctl.aws.connect`): without credentials, with credentials STS
refuses, or with another account's than the environment deploys into, it ends with exactly
one stderr line that says how to fix it, and calls nothing else. STS runs under botocore's
Stubber on a real client; no test reaches the network."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from hpctl.errors import ExitCode
from tests.cli.conftest import (
    Stubs,
    environment_account,
    error_line,
    hpctl,
    offline_clients,
    stubbed_clients,
)

NODE = "i-0123456789abcdef0"
OFFERING = "tpo-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
PROD = environment_account("prod")
OTHER = "999999999999"

# Every command that calls AWS, with the arguments it needs to get that far.
WITH_ENV = {
    "preflight": ["preflight", "--env", "prod"],
    "cluster health": ["cluster", "health", "--env", "prod"],
    "kubeconfig": ["kubeconfig", "--env", "prod", "--output", "-"],
    "zones": ["zones", "--env", "prod"],
    "plans search": [
        "plans", "search", "--env", "prod", "--instance-type", "ml.p5.48xlarge",
        "--count", "16", "--start", "2099-01-01", "--duration", "14d",
    ],
    "guard": ["guard", "--env", "prod"],
    "cluster status --env": ["cluster", "status", "--env", "prod"],
    "cluster replace --env": ["cluster", "replace", "--env", "prod", "--node-id", NODE, "--yes"],
    "plans buy": [
        "plans", "buy", "--offering-id", OFFERING, "--name", "p5-2099", "--env", "prod", "--yes",
    ],
}  # fmt: skip
WITHOUT_ENV = {
    "cluster status": ["cluster", "status", "--name", "hyperpod-prod"],
    "cluster nodes": ["cluster", "nodes", "--name", "hyperpod-prod"],
    "cluster reboot": ["cluster", "reboot", "--name", "hyperpod-prod", "--node-id", NODE, "--yes"],
    "cluster replace": [
        "cluster", "replace", "--name", "hyperpod-prod", "--node-id", NODE, "--yes",
    ],
}  # fmt: skip
EVERY = {**WITH_ENV, **WITHOUT_ENV}


@pytest.fixture(scope="module")
def sts_only(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return offline_clients(tmp_path_factory, "us-east-1", ())


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch, sts_only: dict[str, Any]) -> Iterator[Stubs]:
    """Only STS exists: a command that went on to another service would fail the test."""
    with stubbed_clients(monkeypatch, sts_only, caller=None) as stubbed:
        yield stubbed


@pytest.mark.parametrize("command", EVERY.values(), ids=EVERY.keys())
def test_without_credentials_one_line_says_how_to_get_them(
    monkeypatch: pytest.MonkeyPatch, command: list[str]
):
    name = " ".join(itertools.takewhile(lambda arg: not arg.startswith("--"), command))
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(variable)
    result = hpctl(*command)
    assert error_line(result, ExitCode.FAILED) == (
        f"hpctl {name}: no AWS credentials found; set AWS_PROFILE or run `aws sso login`"
    )
    assert result.stdout == ""


@pytest.mark.parametrize("command", WITH_ENV.values(), ids=WITH_ENV.keys())
def test_credentials_of_another_account_are_refused_before_any_other_call(
    stubs: Stubs, command: list[str]
):
    stubs.caller = OTHER
    result = hpctl(*command)
    line = error_line(result, ExitCode.USAGE)
    assert line.endswith(
        f"--env: prod deploys into account {PROD}, the credentials are of {OTHER} "
        f"(arn:aws:sts::{OTHER}:assumed-role/Ops/me); use credentials of {PROD} (AWS_PROFILE)"
    ), line
    assert stubs.clients == [("sts", "us-east-1")]
    assert result.stdout == ""


@pytest.mark.parametrize("command", EVERY.values(), ids=EVERY.keys())
def test_credentials_sts_refuses_are_one_line_with_the_fix(stubs: Stubs, command: list[str]):
    stubs["sts"].add_client_error(
        "get_caller_identity",
        service_error_code="ExpiredToken",
        service_message="The security token included in the request is expired",
        http_status_code=403,
    )
    result = hpctl(*command)
    assert error_line(result, ExitCode.FAILED).endswith(
        ": ExpiredToken: The security token included in the request is expired; refresh the "
        "credentials (`aws sso login`) or set AWS_PROFILE"
    )
    assert stubs.clients == [("sts", "us-east-1")]


def test_the_environment_region_wins_over_the_configured_one(
    stubs: Stubs, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    stubs.caller = OTHER
    error_line(hpctl(*WITH_ENV["preflight"]), ExitCode.USAGE)
    assert stubs.clients == [("sts", "us-east-1")]
