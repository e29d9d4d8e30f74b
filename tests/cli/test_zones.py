"""`hpctl zones --env NAME [--write]`: the account's AZ names and zone IDs from
ec2:DescribeAvailabilityZones, recorded in a context file only with --write and only for the
environment's own account. Real boto3 clients under botocore's Stubber; no network."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from config.zones import record_zones, recorded_zone_ids
from hpctl.errors import ExitCode
from tests.cli.conftest import Stubs, expect_failure, hpctl, offline_clients, stubbed_clients

REGION = "us-east-1"
PROD_ACCOUNT = "333333333333"


@pytest.fixture(scope="module")
def real_clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return offline_clients(tmp_path_factory, REGION, ("ec2",))


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch, real_clients: dict[str, Any]) -> Iterator[Stubs]:
    with stubbed_clients(monkeypatch, real_clients, PROD_ACCOUNT) as stubbed:
        yield stubbed


def _zone(name: str, zone_id: str, zone_type: str = "availability-zone") -> dict[str, Any]:
    return {
        "ZoneName": name,
        "ZoneId": zone_id,
        "State": "available",
        "ZoneType": zone_type,
        "RegionName": REGION,
    }


def queue(stubs: Stubs, zones: list[dict[str, Any]]) -> None:
    stubs["ec2"].add_response(
        "describe_availability_zones", {"AvailabilityZones": zones}, expected_params={}
    )


ZONES = [
    _zone("us-east-1a", "use1-az4"),
    _zone("us-east-1b", "use1-az6"),
    _zone("us-east-1c", "use1-az1"),
    _zone("us-east-1-bos-1a", "use1-bos1-az1", zone_type="local-zone"),
]


def test_write_records_the_account_zones_and_keeps_other_entries(stubs, tmp_path: Path):
    context = tmp_path / "cdk.context.json"
    context.write_text(json.dumps({"other": "kept"}))
    queue(stubs, ZONES)
    result = hpctl("zones", "--env", "prod", "--write", "--context-file", str(context))
    assert result.exit_code == 0, result.output
    assert recorded_zone_ids(PROD_ACCOUNT, REGION, context) == {
        "us-east-1a": "use1-az4",
        "us-east-1b": "use1-az6",
        "us-east-1c": "use1-az1",
    }
    written = json.loads(context.read_text())
    assert written["other"] == "kept"
    # CDK's own AZ list for the account, without the Local Zone.
    assert written[f"availability-zones:account={PROD_ACCOUNT}:region={REGION}"] == [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
    ]
    assert "recorded 3 zones of 333333333333/us-east-1" in result.stdout


def test_without_write_it_only_shows_what_differs(stubs, tmp_path: Path):
    context = tmp_path / "cdk.context.json"
    queue(stubs, ZONES)
    result = hpctl("zones", "--env", "prod", "--json", "--context-file", str(context))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(z["name"], z["zone_id"], z["recorded"]) for z in report["zones"]] == [
        ("us-east-1a", "use1-az4", "-"),
        ("us-east-1b", "use1-az6", "-"),
        ("us-east-1c", "use1-az1", "-"),
    ]
    assert report["differs"] == ["us-east-1a", "us-east-1b", "us-east-1c"]
    assert report["written"] is False
    assert not context.exists()
    queue(stubs, ZONES)
    table = hpctl("zones", "--env", "prod", "--context-file", str(context))
    assert "use1-az6" in table.stdout
    assert "run with --write and commit it" in table.stdout


def test_credentials_of_another_account_record_nothing(stubs, tmp_path: Path):
    context = tmp_path / "cdk.context.json"
    # STS answers for another account: no zone is even asked for.
    stubs.caller = "111111111111"
    expect_failure(
        "zones", "--env", "prod", "--write", "--context-file", str(context),
        code=ExitCode.USAGE,
        starts_with="hpctl zones: --env: prod deploys into account 333333333333, the credentials are of 111111111111",
    )  # fmt: skip
    assert not context.exists()


def test_aws_failure_is_one_line(stubs):
    stubs.caller = None
    stubs["sts"].add_client_error(
        "get_caller_identity", service_error_code="ExpiredToken", service_message="token expired"
    )
    expect_failure(
        "zones",
        "--env",
        "prod",
        code=ExitCode.FAILED,
        starts_with="hpctl zones: ExpiredToken: token expired",
    )


def test_unknown_environment_is_one_line():
    expect_failure(
        "zones",
        "--env",
        "nope",
        code=ExitCode.USAGE,
        starts_with="hpctl zones: --env: unknown environment 'nope'",
    )


def test_write_refuses_to_move_a_recorded_zone_without_force(stubs, tmp_path: Path):
    # The file says us-east-1b is use1-az6; an account answering otherwise (wrong account
    # behind the profile, or a mistyped record) would move what was placed by ID.
    context = tmp_path / "cdk.context.json"
    record_zones(PROD_ACCOUNT, REGION, {"us-east-1b": "use1-az2"}, ["us-east-1b"], context)
    before = context.read_text()
    queue(stubs, ZONES)
    expect_failure(
        "zones", "--env", "prod", "--write", "--context-file", str(context),
        code=ExitCode.USAGE,
        starts_with="hpctl zones: --write: cdk.context.json maps us-east-1b use1-az2 -> use1-az6 differently",
    )  # fmt: skip
    assert context.read_text() == before
    queue(stubs, ZONES)
    forced = hpctl("zones", "--env", "prod", "--write", "--force", "--context-file", str(context))
    assert forced.exit_code == 0, forced.output
    assert recorded_zone_ids(PROD_ACCOUNT, REGION, context)["us-east-1b"] == "use1-az6"


def test_a_damaged_context_file_is_one_line(stubs, tmp_path: Path):
    context = tmp_path / "cdk.context.json"
    context.write_text("{not json")
    queue(stubs, ZONES)
    expect_failure(
        "zones", "--env", "prod", "--context-file", str(context),
        code=ExitCode.USAGE,
        starts_with="hpctl zones: cdk.context.json: line 1 column 2: ",
    )  # fmt: skip
