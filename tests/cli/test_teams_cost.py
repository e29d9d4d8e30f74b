"""`hpctl teams --cost --since DURATION`: each team's GPU-hours from the environment's
Prometheus workspace (a stubbed query), priced at its training plan's upfront fee over the
plan's GPU-hours (DescribeTrainingPlan on botocore's Stubber) or at a configured on-demand
rate, every line naming its rate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config.errors import ConfigError
from config.loader import load_environment
from config.pricing import on_demand_rates, plan_rate, team_cost
from hpctl import aws, cost
from tests.cli.conftest import Stubs, environment_account, hpctl, offline_clients, stubbed_clients
from tests.support import environment_data, loaded_from

STACK = "hyperpod-prod-observability"
WORKSPACE_ID = "ws-12345678-abcd-ef01-2345-6789abcdef01"
ENDPOINT = f"https://aps-workspaces.us-east-1.amazonaws.com/workspaces/{WORKSPACE_ID}/"
PLAN_ARN = "arn:aws:sagemaker:us-east-1:333333333333:training-plan/p5-prod-2026h2"
START = datetime(2026, 9, 1, tzinfo=UTC)
# 12 weeks (2016 h) of 16 p5 instances, 8 GPUs each: 258048 GPU-hours for 1290240 USD, 5 USD
# per GPU-hour.
PLAN = {
    "TrainingPlanArn": PLAN_ARN,
    "TrainingPlanName": "p5-prod-2026h2",
    "Status": "Active",
    "DurationHours": 2016,
    "DurationMinutes": 0,
    "StartTime": START,
    "EndTime": START + timedelta(hours=2016),
    "UpfrontFee": "1290240",
    "CurrencyCode": "USD",
    "TotalInstanceCount": 16,
    "ReservedCapacitySummaries": [
        {
            "ReservedCapacityArn": "arn:aws:sagemaker:us-east-1:333333333333:reserved-capacity/rc-1",
            "InstanceType": "ml.p5.48xlarge",
            "TotalInstanceCount": 16,
            "Status": "Active",
        }
    ],
}
HELD = {"hyperpod-ns-foundation": 1000.0, "hyperpod-ns-research": 250.5}


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return offline_clients(tmp_path_factory, "us-east-1", ("sagemaker", "cloudformation", "amp"))


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch, clients: dict[str, Any]) -> Iterator[Stubs]:
    with stubbed_clients(monkeypatch, clients, environment_account("prod")) as stubbed:
        yield stubbed


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The PromQL each command sent; the answer is HELD, as the query API gives it."""
    sent: list[str] = []

    def query_for(connection: aws.Connection, endpoint: str) -> cost.Query:
        assert endpoint == ENDPOINT

        def run(promql: str) -> list[dict[str, Any]]:
            sent.append(promql)
            return [
                {"metric": {"namespace": ns}, "value": [1764300000, str(hours)]}
                for ns, hours in HELD.items()
            ]

        return run

    monkeypatch.setattr(cost, "prometheus_query", query_for)
    return sent


def queue(stubs: Stubs) -> None:
    stubs["cloudformation"].add_response(
        "list_stack_resources",
        {
            "StackResourceSummaries": [
                {
                    "LogicalResourceId": "MonitoringWorkspaceABCD1234",
                    "PhysicalResourceId": f"arn:aws:aps:us-east-1:333333333333:workspace/{WORKSPACE_ID}",
                    "ResourceType": "AWS::APS::Workspace",
                    "LastUpdatedTimestamp": START,
                    "ResourceStatus": "CREATE_COMPLETE",
                }
            ]
        },
        {"StackName": STACK},
    )
    stubs["amp"].add_response(
        "describe_workspace",
        {
            "workspace": {
                "workspaceId": WORKSPACE_ID,
                "arn": f"arn:aws:aps:us-east-1:333333333333:workspace/{WORKSPACE_ID}",
                "status": {"statusCode": "ACTIVE"},
                "prometheusEndpoint": ENDPOINT,
                "createdAt": START,
            }
        },
        {"workspaceId": WORKSPACE_ID},
    )
    stubs["sagemaker"].add_response("describe_training_plan", PLAN, {"TrainingPlanName": PLAN_ARN})


def test_json_prices_each_teams_gpu_hours_at_the_plans_rate(
    stubs: Stubs, queries: list[str]
) -> None:
    queue(stubs)
    result = hpctl("teams", "--env", "prod", "--cost", "--since", "7d", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert queries == ["avg_over_time(namespace:gpus_allocated:count[604800s]) * 168"]
    assert (report["window_hours"], report["estimate"]) == (168, True)
    source = "training plan p5-prod-2026h2: upfront fee 1290240.00 over 2016 h x 16 instances"
    assert report["teams"] == [
        {
            "team": "evaluation",
            "gpu_hours": 0.0,
            "cost": 0.0,
            "currency": "USD",
            "rate_source": source,
        },
        {
            "team": "foundation",
            "gpu_hours": 1000.0,
            "cost": 5000.0,
            "currency": "USD",
            "rate_source": source,
        },
        {
            "team": "research",
            "gpu_hours": 250.5,
            "cost": 1252.5,
            "currency": "USD",
            "rate_source": source,
        },
    ]


def test_the_table_has_a_line_per_team_with_its_rate_source(
    stubs: Stubs, queries: list[str]
) -> None:
    queue(stubs)
    result = hpctl("teams", "--env", "prod", "--cost")
    assert result.exit_code == 0, result.output
    assert queries == ["avg_over_time(namespace:gpus_allocated:count[2592000s]) * 720"]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Estimated cost per team in prod, the last 720 hours")
    assert any(line.split()[:4] == ["foundation", "1000.00", "5000.00", "USD"] for line in lines)


def test_a_window_out_of_range_is_one_line() -> None:
    result = hpctl("teams", "--env", "prod", "--cost", "--since", "400d")
    assert result.exit_code != 0
    assert "--since: 400 days is out of range; use 1h to 150d" in result.stderr


def test_configured_on_demand_rates_are_per_gpu_and_a_missing_rate_says_so() -> None:
    rates = on_demand_rates({"ml.p5.48xlarge": 80.0})
    assert rates["ml.p5.48xlarge"].per_gpu_hour == 10.0
    priced = team_cost("a", 3.0, ["ml.p5.48xlarge"], rates)
    assert (priced.cost, priced.source) == (
        30.0,
        "governance.on_demand_usd_per_hour[ml.p5.48xlarge]",
    )
    unpriced = team_cost("b", 3.0, ["ml.p4d.24xlarge"], rates)
    assert unpriced.cost is None
    assert unpriced.source == "no rate for ml.p4d.24xlarge; set governance.on_demand_usd_per_hour"
    mixed = team_cost("c", 1.0, ["ml.p4d.24xlarge", "ml.p5.48xlarge"], rates)
    assert mixed.cost == 10.0 and "upper bound" in mixed.source


def test_a_plan_without_a_fee_has_no_rate() -> None:
    assert plan_rate({**PLAN, "UpfrontFee": "0"}) is None
    rate = plan_rate(PLAN)
    assert rate is not None and rate.per_gpu_hour == 5.0


def test_the_query_is_signed_for_aps_and_sent_to_the_workspace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[Any] = []

    class Answer:
        def __enter__(self) -> Answer:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def read(self) -> bytes:
            return json.dumps(
                {"status": "success", "data": {"result": [{"metric": {}, "value": [0, "1"]}]}}
            ).encode()

    def urlopen(request: Any, timeout: float) -> Answer:
        sent.append(request)
        return Answer()

    monkeypatch.setattr(cost.urllib.request, "urlopen", urlopen)
    connection = aws.Connection(aws.session("us-east-1"), "us-east-1", "333333333333", "arn")
    assert cost.prometheus_query(connection, ENDPOINT)("up") == [{"metric": {}, "value": [0, "1"]}]
    assert sent[0].full_url == f"{ENDPOINT}api/v1/query?query=up"
    authorization = sent[0].get_header("Authorization")
    assert (
        authorization.startswith("AWS4-HMAC-SHA256")
        and "/us-east-1/aps/aws4_request" in authorization
    )


def test_the_shipped_environments_set_no_rate_so_nothing_is_guessed() -> None:
    governance = load_environment("prod").config.governance
    assert governance is not None and governance.on_demand_usd_per_hour == {}


def test_a_configured_rate_prices_the_teams_and_an_unknown_type_is_refused() -> None:
    data = environment_data("prod")
    data["governance"]["on_demand_usd_per_hour"] = {"ml.p5.48xlarge": 80.0}
    loaded = loaded_from(data)
    held = [{"metric": {"namespace": "hyperpod-ns-foundation"}, "value": [0, "2"]}]
    report = cost.cost_report(loaded.config, loaded.plan, timedelta(days=1), lambda _: held, {})
    foundation = next(t for t in report["teams"] if t["team"] == "foundation")
    assert (foundation["cost"], foundation["rate_source"]) == (
        20.0,
        "governance.on_demand_usd_per_hour[ml.p5.48xlarge]",
    )
    data["governance"]["on_demand_usd_per_hour"] = {"ml.p9.huge": 1.0}
    with pytest.raises(ConfigError, match=r"on_demand_usd_per_hour.*not an instance type"):
        loaded_from(data)
