"""How hpctl picks credentials: a named profile that assumes a role from credentials in the
environment (the pull-request workflow's lookup role) wins over those credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctl import aws
from hpctl.errors import ExitCode
from tests.cli.conftest import expect_failure, fake_aws_env

ROLE = "arn:aws:iam::111111111111:role/cdk-hnb659fds-lookup-role-111111111111-us-east-1"


def test_profile_in_aws_profile_assumes_its_role_over_environment_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    fake_aws_env(monkeypatch, tmp_path)
    config = tmp_path / "config"
    config.write_text(f"[profile target]\nrole_arn = {ROLE}\ncredential_source = Environment\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    assert aws.session().get_credentials().method == "env"
    monkeypatch.setenv("AWS_PROFILE", "target")
    # Deferred: nothing calls STS until the credentials are used.
    assert aws.session().get_credentials().method == "assume-role"


def test_unknown_profile_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    fake_aws_env(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_PROFILE", "nope")
    result = expect_failure(
        "cluster", "status", "--name", "hyperpod-prod",
        code=ExitCode.FAILED, starts_with="hpctl cluster status: ProfileNotFound",
    )  # fmt: skip
    assert result.stderr == (
        "hpctl cluster status: ProfileNotFound: The config profile (nope) could not be found; "
        "set AWS_PROFILE to one of `aws configure list-profiles`\n"
    )
