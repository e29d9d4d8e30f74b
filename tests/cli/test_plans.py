"""`hpctl plans search|buy` against botocore's Stubber, which checks every request against
the real SageMaker API model, so a misspelt or mistyped parameter fails here. No test
reaches the network: credentials are fake and sockets refuse to connect."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from config.instance_types import INSTANCE_TYPES, ULTRASERVER_TYPES, unknown_instance_type
from config.schema import TrainingPlanConfig
from hpctl import aws
from hpctl.errors import ExitCode
from hpctl.plans import reservable_instance_types
from tests.cli.conftest import Stubbed, error_line, expect_failure, hpctl

ACCOUNT = "123456789012"
PLAN_ARN = f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:training-plan/p5-prod-2027q1"
OFFERING_ID = "tpo-0f1e2d3c4b5a69788796a5b4c3d2e1f0"


def in_days(days: int) -> str:
    return (datetime.now(UTC).date() + timedelta(days=days)).isoformat()


def midnight(iso_date: str) -> datetime:
    return datetime.fromisoformat(iso_date).replace(tzinfo=UTC)


def search_args(**overrides: str) -> list[str]:
    options = {
        "--instance-type": "ml.p5.48xlarge",
        "--count": "16",
        "--start": in_days(10),
        "--duration": "14d",
        "--env": "prod",
        **overrides,
    }
    options = {option: value for option, value in options.items() if value}
    return ["plans", "search", *(item for pair in options.items() for item in pair)]


def offering(offering_id: str, parts: list[tuple[str, int, datetime]], fee: str) -> dict:
    """An offering bundling reserved capacities (AZ, count, start) of 14 days each."""
    return {
        "TrainingPlanOfferingId": offering_id,
        "TargetResources": ["hyperpod-cluster"],
        "RequestedStartTimeAfter": parts[0][2],
        "DurationHours": 336,
        "DurationMinutes": 0,
        "UpfrontFee": fee,
        "CurrencyCode": "USD",
        "ReservedCapacityOfferings": [
            {
                "InstanceType": "ml.p5.48xlarge",
                "InstanceCount": count,
                "AvailabilityZone": az,
                "DurationHours": 336,
                "StartTime": start,
                "EndTime": start + timedelta(days=14),
            }
            for az, count, start in parts
        ],
    }


# ------------------------------------------------------------------ search


def test_search_sends_the_request_the_api_model_expects_and_prints_a_table(sagemaker: Stubbed):
    start = in_days(10)
    first = midnight(start) + timedelta(days=2)
    sagemaker.stubber.add_response(
        "search_training_plan_offerings",
        {
            "TrainingPlanOfferings": [
                offering(OFFERING_ID, [("us-east-1a", 16, first)], "1234567.89"),
                offering(
                    "tpo-second", [("us-east-1b", 16, first + timedelta(days=7))], "1250000.00"
                ),
            ]
        },
        expected_params={
            "InstanceType": "ml.p5.48xlarge",
            "InstanceCount": 16,
            "StartTimeAfter": midnight(start),
            "DurationHours": 14 * 24,
            "TargetResources": ["hyperpod-cluster"],
        },
    )
    result = hpctl(*search_args(**{"--start": start}))
    assert result.exit_code == 0, result.output
    # The full id must survive the table layout: it is what `plans buy` needs.
    assert OFFERING_ID in result.stdout
    for text in (
        "tpo-second",
        "us-east-1a",
        "us-east-1b",
        "1234567.89",
        "USD",
        "14d",
        first.strftime("%Y-%m-%d %H:%M"),
        "plans buy --offering-id ID --name NAME --env prod --yes",
    ):
        assert text in result.stdout
    assert sagemaker.clients == [("sts", "us-east-1"), ("sagemaker", "us-east-1")]


def test_search_json_sums_and_spans_the_reserved_capacities_of_an_offering(
    sagemaker: Stubbed, monkeypatch: pytest.MonkeyPatch
):
    # Another configured Region: the environment's (us-east-1) is the one searched.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    start = midnight(in_days(30))
    sagemaker.stubber.add_response(
        "search_training_plan_offerings",
        {
            "TrainingPlanOfferings": [
                offering(
                    OFFERING_ID,
                    [("us-west-2a", 8, start + timedelta(days=1)), ("us-west-2a", 8, start)],
                    "99.50",
                )
            ]
        },
        expected_params={
            "InstanceType": "ml.p5.48xlarge",
            "InstanceCount": 16,
            "StartTimeAfter": start,
            "DurationHours": 14 * 24,
            "TargetResources": ["training-job"],
        },
    )
    result = hpctl(
        *search_args(**{"--start": in_days(30), "--target": "training-job"}),
        "--json",
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row == {
        "offering_id": OFFERING_ID,
        "availability_zones": ["us-west-2a"],
        "instance_types": ["ml.p5.48xlarge"],
        "instance_count": 16,
        "start": start.isoformat(),
        "end": (start + timedelta(days=15)).isoformat(),
        "duration_hours": 336,
        "duration_minutes": 0,
        "upfront_fee": "99.50",
        "currency": "USD",
        "target_resources": ["hyperpod-cluster"],
        "ultraserver_types": [],
        "ultraserver_count": 0,
    }
    # The environment's Region reaches the client factory.
    assert sagemaker.clients == [("sts", "us-east-1"), ("sagemaker", "us-east-1")]


def ultraserver_offering(offering_id: str, ultraservers: int, start: datetime) -> dict:
    """An offering of whole GB200 UltraServers (18 instances each), as the API model has it."""
    return {
        "TrainingPlanOfferingId": offering_id,
        "TargetResources": ["hyperpod-cluster"],
        "DurationHours": 336,
        "UpfrontFee": "2000000.00",
        "CurrencyCode": "USD",
        "ReservedCapacityOfferings": [
            {
                "ReservedCapacityType": "UltraServer",
                "UltraServerType": "ml.u-p6e-gb200x72",
                "UltraServerCount": ultraservers,
                "InstanceType": "ml.p6e-gb200.36xlarge",
                "InstanceCount": 18 * ultraservers,
                "AvailabilityZone": "us-east-1a",
                "DurationHours": 336,
                "StartTime": start,
                "EndTime": start + timedelta(days=14),
            }
        ],
    }


def test_search_for_ultraservers_sends_their_type_and_count(sagemaker: Stubbed):
    start = in_days(10)
    sagemaker.stubber.add_response(
        "search_training_plan_offerings",
        {"TrainingPlanOfferings": [ultraserver_offering(OFFERING_ID, 2, midnight(start))]},
        expected_params={
            "UltraServerType": "ml.u-p6e-gb200x72",
            "UltraServerCount": 2,
            "StartTimeAfter": midnight(start),
            "DurationHours": 14 * 24,
            "TargetResources": ["hyperpod-cluster"],
        },
    )
    args = search_args(
        **{"--instance-type": "", "--count": "2", "--start": start},
    )
    result = hpctl(*args, "--ultraserver-type", "ml.u-p6e-gb200x72", "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert (row["ultraserver_types"], row["ultraserver_count"]) == (["ml.u-p6e-gb200x72"], 2)
    assert (row["instance_types"], row["instance_count"]) == (["ml.p6e-gb200.36xlarge"], 36)


def test_search_table_shows_the_ultraservers_of_an_offering(sagemaker: Stubbed):
    start = in_days(10)
    sagemaker.stubber.add_response(
        "search_training_plan_offerings",
        {"TrainingPlanOfferings": [ultraserver_offering(OFFERING_ID, 1, midnight(start))]},
    )
    args = search_args(**{"--instance-type": "", "--count": "1", "--start": start})
    result = hpctl(*args, "--ultraserver-type", "ml.u-p6e-gb200x72")
    assert result.exit_code == 0, result.output
    assert "1 x ml.u-p6e-gb200x72" in result.stdout
    assert "Training plan offerings: 1 x ml.u-p6e-gb200x72, 14 days" in result.stdout


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            ["--ultraserver-type", "ml.u-p5x8"],
            "--ultraserver-type: unknown UltraServer type 'ml.u-p5x8'; use one of "
            "ml.u-p6e-gb200x36, ml.u-p6e-gb200x72",
        ),
        (["--ultraserver-type", "ml.u-p6e-gb200x72", "--count", "0"], "--count: 0 UltraServers"),
        (
            ["--ultraserver-type", "ml.u-p6e-gb200x72", "--instance-type", "ml.p5.48xlarge"],
            "--instance-type: give exactly one of --instance-type (instances) and "
            "--ultraserver-type",
        ),
        ([], "--instance-type: give exactly one of"),
    ],
)
def test_search_for_ultraservers_rejects_bad_input_before_any_call(
    sagemaker: Stubbed, extra: list[str], expected: str
):
    expect_failure(
        *search_args(**{"--instance-type": "", "--count": "1"}),
        *extra,
        code=ExitCode.USAGE,
        starts_with=f"hpctl plans search: {expected}",
    )
    assert sagemaker.clients == []


def test_every_ultraserver_type_names_an_instance_type_the_api_reserves():
    for ultraserver in ULTRASERVER_TYPES.values():
        assert ultraserver.instance_type in reservable_instance_types()
        domain = INSTANCE_TYPES[ultraserver.instance_type].nvlink_domain_instances
        assert ultraserver.instances <= domain


def test_client_factory_uses_the_given_region_else_the_configured_one():
    assert aws.client("sagemaker", "eu-west-1").meta.region_name == "eu-west-1"
    assert aws.client("sagemaker").meta.region_name == "us-east-1"


def test_search_without_offerings_says_so(sagemaker: Stubbed):
    sagemaker.stubber.add_response("search_training_plan_offerings", {"TrainingPlanOfferings": []})
    result = hpctl(*search_args())
    assert result.exit_code == 0
    assert "No offerings for 16 x ml.p5.48xlarge" in result.stdout


@pytest.mark.parametrize(
    ("count", "days", "start_in_days"),
    [("1", "1", 0), ("64", "182", 90)],
    ids=["smallest-today", "largest"],
)
def test_search_accepts_the_limits(sagemaker: Stubbed, count: str, days: str, start_in_days: int):
    start = in_days(start_in_days)
    sagemaker.stubber.add_response(
        "search_training_plan_offerings",
        {"TrainingPlanOfferings": []},
        expected_params={
            "InstanceType": "ml.p5.48xlarge",
            "InstanceCount": int(count),
            "StartTimeAfter": midnight(start),
            "DurationHours": int(days) * 24,
            "TargetResources": ["hyperpod-cluster"],
        },
    )
    result = hpctl(*search_args(**{"--count": count, "--duration": f"{days}d", "--start": start}))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("duration", ["2w", "336h", "20160m"])
def test_search_reads_any_unit_of_whole_days(sagemaker: Stubbed, duration: str):
    sagemaker.stubber.add_response(
        "search_training_plan_offerings",
        {"TrainingPlanOfferings": []},
        expected_params={
            "InstanceType": "ml.p5.48xlarge",
            "InstanceCount": 16,
            "StartTimeAfter": midnight(in_days(10)),
            "DurationHours": 14 * 24,
            "TargetResources": ["hyperpod-cluster"],
        },
    )
    result = hpctl(*search_args(**{"--duration": duration}))
    assert result.exit_code == 0, result.output
    assert "for 14 days" in result.stdout


def test_search_still_reads_duration_days_with_one_deprecation_line(sagemaker: Stubbed):
    sagemaker.stubber.add_response(
        "search_training_plan_offerings",
        {"TrainingPlanOfferings": []},
        expected_params={
            "InstanceType": "ml.p5.48xlarge",
            "InstanceCount": 16,
            "StartTimeAfter": midnight(in_days(10)),
            "DurationHours": 30 * 24,
            "TargetResources": ["hyperpod-cluster"],
        },
    )
    result = hpctl(*search_args(**{"--duration": "", "--duration-days": "30"}))
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "hpctl plans search: --duration-days is deprecated and goes in the next release; "
        "use --duration\n"
    )


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"--instance-type": "ml.p9.96xlarge"},
            f"--instance-type: {unknown_instance_type('ml.p9.96xlarge')}",
        ),
        (
            {"--instance-type": "ml.g5.48xlarge"},
            "--instance-type: ml.g5.48xlarge cannot be reserved",
        ),
        (
            {"--count": "3"},
            "--count: 3 instances are not offered; use one of 1, 2, 4, 8, 16, 32, 64",
        ),
        ({"--count": "128"}, "--count: 128 instances are not offered"),
        ({"--count": "0"}, "--count: 0 instances are not offered"),
        ({"--duration": "0d"}, "--duration: 0 days is out of range; plans last 1 to 182 days"),
        ({"--duration": "183d"}, "--duration: 183 days is out of range"),
        ({"--duration": "36h"}, "--duration: 36 hours is not whole days; plans last whole days"),
        ({"--duration": "14"}, "--duration: '14' is not a duration; write a number and a unit"),
        ({"--duration": ""}, "--duration: missing; pass e.g. --duration 14d"),
        (
            {"--duration-days": "14"},
            "--duration-days: the old spelling of --duration; give --duration only",
        ),
        ({"--start": "2026/12/01"}, "--start: '2026/12/01' is not a date; use YYYY-MM-DD"),
        ({"--start": "2027-02-30"}, "--start: '2027-02-30' is not a date"),
        (
            {"--start": in_days(-1)},
            f"--start: {in_days(-1)} is in the past; use {in_days(0)} or later",
        ),
        ({"--env": ""}, "--env: missing; pass --env"),
        ({"--env": "nope"}, "--env: unknown environment 'nope'"),
        ({"--region": "us-west-2"}, "No such option: --region"),
    ],
    ids=[
        "unknown-type",
        "type-not-reservable",
        "count-not-power-of-two",
        "count-too-large",
        "count-zero",
        "duration-zero",
        "duration-too-long",
        "duration-not-whole-days",
        "duration-without-unit",
        "duration-missing",
        "duration-under-both-spellings",
        "start-format",
        "start-no-such-day",
        "start-in-past",
        "env-missing",
        "env-unknown",
        "region-is-the-environments",
    ],
)
def test_search_rejects_bad_input_before_any_call(
    sagemaker: Stubbed, overrides: dict[str, str], expected: str
):
    expect_failure(
        *search_args(**overrides),
        code=ExitCode.USAGE,
        starts_with=f"hpctl plans search: {expected}",
    )
    assert sagemaker.clients == []


def test_search_reports_a_service_error_in_one_line(sagemaker: Stubbed):
    sagemaker.stubber.add_client_error(
        "search_training_plan_offerings",
        service_error_code="ThrottlingException",
        service_message="Rate exceeded",
        http_status_code=400,
    )
    result = hpctl(*search_args())
    assert (
        error_line(result, ExitCode.FAILED)
        == "hpctl plans search: ThrottlingException: Rate exceeded"
    )


def test_search_without_credentials_is_one_line(monkeypatch: pytest.MonkeyPatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    result = hpctl(*search_args())
    assert error_line(result, ExitCode.FAILED) == (
        "hpctl plans search: no AWS credentials found; set AWS_PROFILE or run `aws sso login`"
    )


# ------------------------------------------------------------------ buy


def buy_args(*extra: str) -> list[str]:
    return [
        "plans", "buy", "--offering-id", OFFERING_ID, "--name", "p5-prod-2027q1", "--env", "prod",
        *extra,
    ]  # fmt: skip


def describe_plan(summaries: list[dict]) -> dict:
    return {
        "TrainingPlanArn": PLAN_ARN,
        "TrainingPlanName": "p5-prod-2027q1",
        "Status": "Scheduled",
        "UpfrontFee": "1234567.89",
        "CurrencyCode": "USD",
        "TotalInstanceCount": 16,
        "TargetResources": ["hyperpod-cluster"],
        "ReservedCapacitySummaries": summaries,
    }


def capacity(az: str) -> dict:
    return {
        "ReservedCapacityArn": f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:reserved-capacity/rc-{az}",
        "InstanceType": "ml.p5.48xlarge",
        "TotalInstanceCount": 16,
        "Status": "Scheduled",
        "AvailabilityZone": az,
    }


def test_buy_without_yes_refuses_and_calls_nothing(sagemaker: Stubbed):
    # The stubber has no responses: any API call would fail the fixture's teardown check.
    expect_failure(
        *buy_args(),
        code=ExitCode.FAILED,
        starts_with=(
            f"hpctl plans buy: refusing to buy offering {OFFERING_ID} without --yes: a training "
            "plan charges its upfront fee when bought; check the offering with `hpctl plans "
            "search` and re-run with --yes"
        ),
    )
    assert sagemaker.clients == []


def test_buy_never_prompts_even_with_input_waiting(sagemaker: Stubbed):
    result = hpctl(*buy_args(), input="y\nyes\n")
    assert "refusing to buy" in error_line(result, ExitCode.FAILED)
    assert sagemaker.clients == []


def test_buy_creates_the_plan_and_prints_a_snippet_the_config_accepts(sagemaker: Stubbed):
    sagemaker.stubber.add_response(
        "create_training_plan",
        {"TrainingPlanArn": PLAN_ARN},
        expected_params={
            "TrainingPlanName": "p5-prod-2027q1",
            "TrainingPlanOfferingId": OFFERING_ID,
        },
    )
    sagemaker.stubber.add_response(
        "describe_training_plan",
        describe_plan([capacity("us-east-1a")]),
        expected_params={"TrainingPlanName": PLAN_ARN},
    )
    result = hpctl(*buy_args("--yes"))
    assert result.exit_code == 0, result.output
    assert f"Bought training plan p5-prod-2027q1: {PLAN_ARN}" in result.stdout
    snippet = result.stdout.split("Add to the instance group that uses it:\n", 1)[1]
    snippet = snippet.split("\nnetwork.availability_zones", 1)[0]
    parsed = yaml.safe_load(snippet)
    assert parsed == {"training_plan": {"arn": PLAN_ARN, "availability_zone": "us-east-1a"}}
    # The block pastes into an environment file as is.
    TrainingPlanConfig.model_validate(parsed["training_plan"])
    assert "network.availability_zones must include us-east-1a" in result.stdout


def test_buy_leaves_the_az_out_while_the_plan_reports_none(sagemaker: Stubbed):
    sagemaker.stubber.add_response("create_training_plan", {"TrainingPlanArn": PLAN_ARN})
    sagemaker.stubber.add_response("describe_training_plan", describe_plan([]))
    result = hpctl(*buy_args("--yes"))
    assert f"training_plan:\n  arn: {PLAN_ARN}\n" in result.stdout
    assert "availability_zone:" not in result.stdout
    assert error_line(result, ExitCode.OK).startswith(
        "hpctl plans buy: the plan reports no Availability Zone yet (status Scheduled)"
    )


def test_buy_does_not_guess_between_several_azs(sagemaker: Stubbed):
    sagemaker.stubber.add_response("create_training_plan", {"TrainingPlanArn": PLAN_ARN})
    sagemaker.stubber.add_response(
        "describe_training_plan", describe_plan([capacity("us-east-1b"), capacity("us-east-1a")])
    )
    result = hpctl(*buy_args("--yes"))
    assert "availability_zone:" not in result.stdout
    assert error_line(result, ExitCode.OK).startswith(
        "hpctl plans buy: the plan spans us-east-1a, us-east-1b; "
    )


def test_buy_keeps_the_arn_when_describing_the_new_plan_fails(sagemaker: Stubbed):
    sagemaker.stubber.add_response("create_training_plan", {"TrainingPlanArn": PLAN_ARN})
    sagemaker.stubber.add_client_error(
        "describe_training_plan", "AccessDeniedException", "not authorized: DescribeTrainingPlan"
    )
    result = hpctl(*buy_args("--yes"))
    assert PLAN_ARN in result.stdout
    assert error_line(result, ExitCode.FAILED) == (
        "hpctl plans buy: AccessDeniedException: not authorized: DescribeTrainingPlan"
    )


def test_buy_reports_a_refused_purchase_in_one_line(sagemaker: Stubbed):
    sagemaker.stubber.add_client_error(
        "create_training_plan",
        "ResourceLimitExceeded",
        "You have reached the limit of training plans\n  Request a quota increase",
    )
    result = hpctl(*buy_args("--yes"))
    assert error_line(result, ExitCode.FAILED) == (
        "hpctl plans buy: ResourceLimitExceeded: You have reached the limit of training "
        "plans; Request a quota increase"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--offering-id", "TPO_Upper", "--name", "ok"],
            "--offering-id: 'TPO_Upper' is not an offering id",
        ),
        (
            ["--offering-id", "tpo-1", "--name", "-leading-dash"],
            "--name: '-leading-dash' is not a valid plan name",
        ),
        (
            ["--offering-id", "tpo-1", "--name", "a" * 65],
            f"--name: '{'a' * 65}' is not a valid plan name",
        ),
    ],
    ids=["offering-id-pattern", "name-pattern", "name-too-long"],
)
def test_buy_rejects_bad_input_before_any_call(sagemaker: Stubbed, args: list[str], expected: str):
    expect_failure(
        "plans",
        "buy",
        *args,
        "--yes",
        code=ExitCode.USAGE,
        starts_with=f"hpctl plans buy: {expected}",
    )
    assert sagemaker.clients == []
