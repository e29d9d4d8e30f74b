"""Tables print whole at any width: every rich table an `hpctl` module builds goes through
`hpctl.options.print_table` (checked in the source), and at 60 columns (a narrow terminal,
or less than the 80 a pipe is given) the key column of each table still holds every value
whole: the instance types, AZs, instance ids and offering ids people paste into the next
command."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from config.instance_types import INSTANCE_TYPES
from config.loader import load_environment
from hpctl import cli
from tests.cli.conftest import Stubbed

HPCTL_SOURCE = Path(cli.__file__).resolve().parent
NARROW = 60


def narrow(*args: str) -> Result:
    """`hpctl ARGS` in a terminal NARROW columns wide."""
    runner = CliRunner(env={"COLUMNS": str(NARROW)})
    return runner.invoke(cli.app, list(args), prog_name="hpctl")


def _function_tables(function: ast.FunctionDef) -> tuple[set[str], set[str]]:
    """(names bound to `Table(...)`, names passed to `print_table`) in `function`."""
    tables: set[str] = set()
    printed: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = node.value.func
            if isinstance(called, ast.Name) and called.id == "Table":
                tables |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        if isinstance(node, ast.Call):
            called = node.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            if name == "print_table":
                printed |= {a.id for a in node.args if isinstance(a, ast.Name)}
    return tables, printed


def unprinted_tables(source: str) -> list[str]:
    """`function: name` for every rich Table a function builds but does not hand to
    print_table (a console's own print squeezes and cuts columns)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            tables, printed = _function_tables(node)
            found += [f"{node.name}: {name}" for name in sorted(tables - printed)]
    return found


@pytest.mark.parametrize(
    "module",
    sorted(str(p.relative_to(HPCTL_SOURCE)) for p in HPCTL_SOURCE.rglob("*.py")),
)
def test_every_table_goes_through_print_table(module: str) -> None:
    assert unprinted_tables((HPCTL_SOURCE / module).read_text(encoding="utf-8")) == []


def test_the_source_check_sees_a_table_printed_another_way() -> None:
    source = (
        "def show(console):\n"
        "    table = Table('name')\n"
        "    wide = Table('id')\n"
        "    console.print(table)\n"
        "    print_table(console, wide)\n"
    )
    assert unprinted_tables(source) == ["show: table"]


def _whole(values: set[str], text: str) -> set[str]:
    """The values that do not appear whole in `text`."""
    return {value for value in values if value not in text}


def test_instance_types_keep_every_name_whole() -> None:
    # The names were cut to `ml.p5.4…` and `ml.p5e.…` at 80 columns.
    result = narrow("instance-types")
    assert result.exit_code == 0, result.output
    assert _whole(set(INSTANCE_TYPES), result.stdout) == set()


def test_capacity_keeps_azs_cidrs_and_groups_whole() -> None:
    layout = load_environment("prod").layout
    subnets = layout.cluster
    keys = {*subnets, *(str(s.cidr) for s in subnets.values())}
    keys |= {g.name for s in subnets.values() for g in s.groups}
    result = narrow("capacity", "--env", "prod")
    assert result.exit_code == 0, result.output
    assert _whole(keys, result.stdout) == set()


def test_cluster_nodes_keep_instance_ids_whole(sagemaker: Stubbed) -> None:
    ids = {f"i-0123456789abcde{n:02x}" for n in range(3)}
    launched = datetime(2026, 11, 1, tzinfo=UTC)
    nodes = [
        {
            "InstanceGroupName": "gpu-p5-reserved-capacity",
            "InstanceId": node_id,
            "InstanceType": "ml.p5.48xlarge",
            "LaunchTime": launched,
            "InstanceStatus": {"Status": "Running"},
        }
        for node_id in sorted(ids)
    ]
    sagemaker.stubber.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": nodes},
        {"ClusterName": "hyperpod-prod", "MaxResults": 100},
    )
    result = narrow("cluster", "nodes", "--env", "prod")
    assert result.exit_code == 0, result.output
    assert _whole({*ids, "gpu-p5-reserved-capacity"}, result.stdout) == set()


def test_plan_offerings_keep_their_ids_whole(sagemaker: Stubbed) -> None:
    offering_id = "tpo-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    start = datetime.now(UTC).date() + timedelta(days=10)
    begins = datetime(start.year, start.month, start.day, tzinfo=UTC)
    offering = {
        "TrainingPlanOfferingId": offering_id,
        "TargetResources": ["hyperpod-cluster"],
        "DurationHours": 336,
        "UpfrontFee": "1250000.00",
        "CurrencyCode": "USD",
        "ReservedCapacityOfferings": [
            {
                "InstanceType": "ml.p5.48xlarge",
                "InstanceCount": 16,
                "AvailabilityZone": "us-east-1a",
                "StartTime": begins,
                "EndTime": begins + timedelta(days=14),
            }
        ],
    }
    sagemaker.stubber.add_response(
        "search_training_plan_offerings", {"TrainingPlanOfferings": [offering]}
    )
    result = narrow(
        *("plans", "search", "--env", "prod", "--instance-type", "ml.p5.48xlarge"),
        *("--count", "16", "--start", start.isoformat(), "--duration", "14d"),
    )
    assert result.exit_code == 0, result.output
    assert _whole({offering_id, "us-east-1a"}, result.stdout) == set()
