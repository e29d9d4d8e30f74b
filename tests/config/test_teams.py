"""Team capacity: guaranteed and borrowable nodes per instance group (config/teams.py)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from config.kubernetes import FSX_MOUNT
from config.teams import (
    SERVICE_DEFAULT_BORROW_LIMIT_PERCENT,
    TEAMS_ROOT,
    checkpoint_prefix,
    managed_tier_prefix,
    team_capacity,
    team_checkpoints_directory,
    team_directories,
    team_directory,
    team_runs_directory,
)
from tests.support import environment_data, loaded_from


def _capacity(mutate: Any, team: str) -> dict[str, tuple[Fraction, Fraction, int]]:
    data = environment_data("prod")
    mutate(data)
    config = loaded_from(data).config
    (chosen,) = [t for t in config.governance.teams if t.name == team]
    return {
        c.instance_group: (c.guaranteed, c.borrowable, c.max_job_nodes)
        for c in team_capacity(config.governance, chosen, config.hyperpod.instance_groups)
    }


def _team(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in data["governance"]["teams"] if t["name"] == name)


def test_prod_figures():
    def unchanged(d: dict[str, Any]) -> None:
        pass

    assert _capacity(unchanged, "foundation") == {
        "gpu-p5": (8, 4, 12),
        "system": (0, 0, 0),
    }
    # vCPU 16 of three 16-vCPU nodes: a third of the type, one node's worth.
    assert _capacity(unchanged, "research") == {"gpu-p5": (6, 6, 12), "system": (1, 1, 2)}
    # Lend: never borrows.
    assert _capacity(unchanged, "evaluation")["gpu-p5"] == (2, 0, 2)


def test_borrow_limit_defaults_to_the_service_default():
    def no_limit(d: dict[str, Any]) -> None:
        del _team(d, "research")["borrow_limit_percent"]

    guaranteed, borrowable, _ = _capacity(no_limit, "research")["gpu-p5"]
    assert borrowable == guaranteed * SERVICE_DEFAULT_BORROW_LIMIT_PERCENT / 100


def test_no_borrowing_without_idle_resource_sharing():
    def off(d: dict[str, Any]) -> None:
        d["governance"]["idle_resource_sharing"] = False

    assert _capacity(off, "foundation")["gpu-p5"] == (8, 0, 8)


def test_borrowing_stops_at_what_other_teams_hold():
    def greedy(d: dict[str, Any]) -> None:
        _team(d, "foundation")["borrow_limit_percent"] = 500

    # 8 guaranteed, 5 x 8 allowed, but only 8 other p5 nodes exist.
    assert _capacity(greedy, "foundation")["gpu-p5"] == (8, 8, 16)


def test_accelerator_quota_counts_in_nodes():
    def in_gpus(d: dict[str, Any]) -> None:
        _team(d, "evaluation")["quotas"] = [{"instance_group": "gpu-p5", "accelerators": 12}]

    # 12 H100s of 8 per node: a node and a half guaranteed, one whole node per job.
    assert _capacity(in_gpus, "evaluation")["gpu-p5"] == (Fraction(3, 2), 0, 1)


def test_team_prefixes_nest():
    assert managed_tier_prefix("research").startswith(checkpoint_prefix("research"))
    assert checkpoint_prefix("research").endswith("/")
    assert not checkpoint_prefix("research").startswith(checkpoint_prefix("re"))


def test_groups_of_one_type_pool_their_nodes():
    """Quotas are per instance type: a second m5.4xlarge group adds to what others lend."""

    def second_cpu_group(d: dict[str, Any]) -> None:
        d["hyperpod"]["instance_groups"].append(
            {
                "name": "cpu-extra",
                "instance_type": "ml.m5.4xlarge",
                "count": 5,
                "ebs_volume_gib": 200,
                "min_count": 1,
            }
        )
        _team(d, "research")["borrow_limit_percent"] = 500

    data = environment_data("prod")
    second_cpu_group(data)
    config = loaded_from(data).config
    (research,) = [t for t in config.governance.teams if t.name == "research"]
    capacity = team_capacity(config.governance, research, config.hyperpod.instance_groups)
    # One node's worth guaranteed of 3 + 5 = 8 m5.4xlarge; 5 may be borrowed of 7 idle.
    assert [
        (c.instance_group, c.instance_type, c.group_nodes, c.guaranteed, c.borrowable)
        for c in capacity
    ] == [
        ("cpu-extra", "ml.m5.4xlarge", 5, 1, 5),
        ("gpu-p5", "ml.p5.48xlarge", 16, 6, 10),
        ("system", "ml.m5.4xlarge", 3, 1, 5),
    ]
    # A job stops at its group's size.
    assert [c.max_job_nodes for c in capacity] == [5, 16, 3]


def test_team_directories_parents_first():
    assert team_directories("research") == (
        f"{FSX_MOUNT}/teams/research",
        f"{FSX_MOUNT}/teams/research/runs",
        f"{FSX_MOUNT}/teams/research/checkpoints",
    )
    assert team_directory("research") == f"{TEAMS_ROOT}/research"
    assert team_runs_directory("a") == f"{FSX_MOUNT}/teams/a/runs"
    assert team_checkpoints_directory("a") == f"{FSX_MOUNT}/teams/a/checkpoints"
    assert managed_tier_prefix("a") == "teams/a/managed-tier"
    assert checkpoint_prefix("a") == "teams/a/"
