"""Task governance rules: one test per rule, each a planted violation in prod's file that
must come back as exactly one line naming the field."""

from __future__ import annotations

import importlib.util
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.kubernetes import MAX_PRIORITY_LENGTH, MAX_TEAM_LENGTH
from config.schema.governance import (
    GOVERNANCE_REGIONS,
    QuotaConfig,
    quota_problems,
    quota_share,
)
from config.team_groups import team_gid
from tests.support import (
    environment,
    environment_data,
    loaded_from,
    one_error_on,
)


def _team(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in data["governance"]["teams"] if t["name"] == name)


def test_prod_ships_three_teams_sharing_the_p5_group():
    governance = environment("prod").config.governance
    assert [t.name for t in governance.teams_by_name()] == ["evaluation", "foundation", "research"]
    p5 = [q.count for t in governance.teams for q in t.quotas if q.instance_group == "gpu-p5"]
    assert sum(p5) == 16


def test_priority_classes_are_at_most_ten():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["priority_classes"] = [{"name": f"c{i}", "weight": i} for i in range(11)]

    assert "at most 10" in one_error_on("governance.priority_classes", mutate, base="prod")


def test_priority_weight_is_0_to_100():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["priority_classes"][0]["weight"] = 101

    line = one_error_on("governance.priority_classes[0].weight", mutate, base="prod")
    assert "101 is too large; use 100 or less" in line


def test_priority_class_names_are_unique():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["priority_classes"][1]["name"] = d["governance"]["priority_classes"][0][
            "name"
        ]

    assert "list each priority class once" in one_error_on(
        "governance.priority_classes", mutate, base="prod"
    )


def test_team_names_are_unique():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][1]["name"] = d["governance"]["teams"][0]["name"]

    assert "list each team once" in one_error_on("governance.teams", mutate, base="prod")


def test_teams_of_one_group_are_refused_before_synth():
    # Two names whose hashes fall on one group (found by search; team_gid is the rule).
    first, second = "team-1152", "team-2081"
    assert team_gid(first) == team_gid(second)

    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][0]["name"] = first
        d["governance"]["teams"][1]["name"] = second

    line = one_error_on("governance.teams", mutate, base="prod")
    assert f"teams {first} and {second} hash to the same group" in line
    assert "rename one" in line


@pytest.mark.parametrize("name", ["Research", "team_a", "-research"])
def test_team_name_follows_the_namespace_rule(name):
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][0]["name"] = name

    assert "wrong format" in one_error_on("governance.teams[0].name", mutate, base="prod")


def test_team_name_fits_the_queue_label():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][0]["name"] = "a" * 41

    line = one_error_on("governance.teams[0].name", mutate, base="prod")
    assert "-localqueue" in line and "at most 40 characters" in line


def test_priority_class_name_fits_the_priority_label():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["priority_classes"][0]["name"] = "p" * 55

    line = one_error_on("governance.priority_classes[0].name", mutate, base="prod")
    assert "-priority" in line and "at most 54 characters" in line


def test_team_name_keeps_the_quota_name_within_63_characters():
    def mutate(d: dict[str, Any]) -> None:
        d["environment"] = "p" * 30
        d["governance"]["teams"][0]["name"] = "t" * 30

    line = one_error_on("governance.teams[0].name", mutate, base="prod")
    assert "at most 63" in line and "shorter team name" in line


def test_sharing_strategy_is_an_api_value():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][0]["sharing"] = "Borrow"

    one_error_on("governance.teams[0].sharing", mutate, base="prod")


def test_borrow_limit_needs_lend_and_borrow():
    def mutate(d: dict[str, Any]) -> None:
        team = _team(d, "evaluation")
        team["borrow_limit_percent"] = 50

    index = [t["name"] for t in environment_teams()].index("evaluation")
    line = one_error_on(f"governance.teams[{index}].borrow_limit_percent", mutate, base="prod")
    assert "LendAndBorrow" in line


def test_fair_share_weight_is_0_to_100():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][0]["fair_share_weight"] = -1

    one_error_on("governance.teams[0].fair_share_weight", mutate, base="prod")


def test_quota_names_a_real_group():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][0]["quotas"][0]["instance_group"] = "gpu-p4"

    line = one_error_on("governance.teams[0].quotas[0].instance_group", mutate, base="prod")
    assert "gpu-p4" in line and "gpu-p5, system" in line


def test_quota_needs_an_amount():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][0]["quotas"][0] = {"instance_group": "gpu-p5"}

    assert "needs an amount" in one_error_on(
        "governance.teams[0].quotas[0].count", mutate, base="prod"
    )


def test_a_team_names_each_group_once():
    def mutate(d: dict[str, Any]) -> None:
        team = d["governance"]["teams"][0]
        team["quotas"] = [team["quotas"][0], dict(team["quotas"][0])]

    one_error_on("governance.teams[0].quotas", mutate, base="prod")


def test_guaranteed_nodes_never_exceed_the_cluster():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][-1]["quotas"][0]["count"] = 3  # 8 + 6 + 3 > 16

    line = one_error_on("governance.teams[2].quotas[0]", mutate, base="prod")
    assert "17 nodes' worth of ml.p5.48xlarge" in line and "has 16" in line


def test_guarantees_in_other_units_count_against_the_same_nodes():
    # 8 + 6 nodes are promised; 17 GPUs are more than the 2 nodes (16 GPUs) left.
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][-1]["quotas"][0] = {"instance_group": "gpu-p5", "accelerators": 17}

    line = one_error_on("governance.teams[2].quotas[0]", mutate, base="prod")
    assert "16.12 nodes' worth" in line


def test_a_quota_takes_its_largest_share():
    # 2 nodes but 24 GPUs (3 nodes' worth) on the 2 nodes left: over by one node.
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][-1]["quotas"][0] = {
            "instance_group": "gpu-p5",
            "count": 2,
            "accelerators": 24,
        }

    line = one_error_on("governance.teams[2].quotas[0]", mutate, base="prod")
    assert "17 nodes' worth" in line


def test_quotas_are_checked_per_instance_type_across_groups():
    # A second p5 group of 8 nodes makes room for a 16-node quota on the first group.
    def mutate(d: dict[str, Any]) -> None:
        groups = d["hyperpod"]["instance_groups"]
        twin = dict(groups[0], name="gpu-p5b", count=8, min_count=8)
        twin.pop("training_plan")
        groups.append(twin)
        d["governance"]["teams"][0]["quotas"][0]["count"] = 16  # 16 + 6 + 2 <= 24

    assert loaded_from(mutated("prod", mutate)).config.governance is not None


def test_accelerators_only_on_groups_that_have_them():
    def mutate(d: dict[str, Any]) -> None:
        _team(d, "research")["quotas"][1] = {"instance_group": "system", "accelerators": 1}

    index = [t["name"] for t in environment_teams()].index("research")
    line = one_error_on(f"governance.teams[{index}].quotas[1].accelerators", mutate, base="prod")
    assert "no accelerators" in line


def test_a_quota_is_per_instance_type():
    def mutate(d: dict[str, Any]) -> None:
        groups = d["hyperpod"]["instance_groups"]
        twin = dict(groups[0], name="gpu-p5b", count=2, min_count=2)
        twin.pop("training_plan")
        groups.append(twin)
        d["governance"]["teams"][0]["quotas"].append({"instance_group": "gpu-p5b", "count": 1})

    line = one_error_on("governance.teams[0].quotas[1].instance_group", mutate, base="prod")
    assert "per instance type" in line


def test_governance_only_where_cloudformation_offers_it():
    def move_to_us_west_2(d: dict[str, Any]) -> None:
        # dev, keeping its governance section, in a Region that lacks the scheduler config.
        moved = yaml.safe_load(yaml.safe_dump(d).replace("us-east-1", "us-west-2"))
        d.clear()
        d.update(moved)

    line = one_error_on("governance", move_to_us_west_2, base="dev")
    assert "us-west-2" in line and "us-east-1" in line and "remove the section" in line


def test_every_environment_has_teams():
    for name in ("dev", "staging", "prod"):
        governance = environment(name).config.governance
        assert governance is not None and governance.teams, name
    assert [t.name for t in environment("dev").config.governance.teams] == ["sandbox"]


def test_governance_regions_match_the_cloudformation_specifications():
    # The pinned cfn-lint carries CloudFormation's resource specification per Region.
    # Found without importing cfnlint, whose import takes seconds.
    package = importlib.util.find_spec("cfnlint")
    assert package is not None and package.origin is not None
    providers = Path(package.origin).parent / "data" / "schemas" / "providers"
    offered = None
    for type_name in ("AWS::SageMaker::ClusterSchedulerConfig", "AWS::SageMaker::ComputeQuota"):
        regions = {
            path.stem
            for path in providers.glob("*.json")
            if type_name in json.loads(path.read_text())
        }
        offered = regions if offered is None else offered & regions
    assert offered == set(GOVERNANCE_REGIONS)


def environment_teams() -> list[dict[str, Any]]:
    return environment_data_prod()["governance"]["teams"]


def environment_data_prod() -> dict[str, Any]:
    return environment_data("prod")


def mutated(name: str, mutate: Any) -> dict[str, Any]:
    data = environment_data(name)
    mutate(data)
    return data


TEAM_ROLE = "arn:aws:iam::333333333333:role/research-engineers"


def test_team_access_principals_default_to_none():
    governance = environment("prod").config.governance
    assert all(t.access_principal_arns == [] for t in governance.teams)


def test_team_access_principals_are_iam_role_or_user_arns():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][0]["access_principal_arns"] = ["research-engineers"]

    line = one_error_on("governance.teams[0].access_principal_arns", mutate, base="prod")
    assert "is not an IAM role or user ARN" in line


def test_team_access_principals_are_listed_once():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][0]["access_principal_arns"] = [TEAM_ROLE, TEAM_ROLE]

    line = one_error_on("governance.teams[0].access_principal_arns", mutate, base="prod")
    assert "list each principal once" in line


def test_a_principal_has_one_access_entry_admin_or_team():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][1]["access_principal_arns"] = [d["eks"]["admin_role_arns"][0]]

    line = one_error_on("governance.teams[1].access_principal_arns[0]", mutate, base="prod")
    assert "one access entry per principal" in line


def test_a_principal_belongs_to_one_team():
    def mutate(d: dict[str, Any]) -> None:
        d["governance"]["teams"][0]["access_principal_arns"] = [TEAM_ROLE]
        d["governance"]["teams"][2]["access_principal_arns"] = [TEAM_ROLE]

    line = one_error_on("governance.teams[2].access_principal_arns[0]", mutate, base="prod")
    assert "governance.teams[0]" in line


def test_every_quota_of_a_team_is_checked_after_a_refused_one():
    """One problem per quota: a bad quota never hides the next one's (the loader reports the
    first; `hpctl validate` fixes come one at a time, so each must be right)."""
    config = environment("prod").config
    assert config.governance is not None
    groups = list(config.hyperpod.instance_groups)
    groups.append(groups[0].model_copy(update={"name": "gpu-p5b", "count": 2}))
    quotas = [
        QuotaConfig(instance_group="nope", count=1),
        QuotaConfig(instance_group="system", accelerators=1),
        QuotaConfig(instance_group="gpu-p5", count=1),
        QuotaConfig(instance_group="gpu-p5b", count=1),
        QuotaConfig(instance_group="gone", count=1),
    ]
    teams = [
        t.model_copy(update={"quotas": quotas}) if t.name == "research" else t
        for t in config.governance.teams
    ]
    governance = config.governance.model_copy(update={"teams": teams})
    index = [t.name for t in teams].index("research")
    where = f"governance.teams[{index}].quotas"
    assert list(quota_problems(governance, groups)) == [
        (
            f"{where}[0].instance_group",
            "no instance group 'nope' (team research); use one of gpu-p5, gpu-p5b, system",
        ),
        (
            f"{where}[1].accelerators",
            "ml.m5.4xlarge (group system) has no accelerators; "
            "set count, vcpu or memory_gib instead",
        ),
        (
            f"{where}[3].instance_group",
            "gpu-p5b and gpu-p5 are both ml.p5.48xlarge, and a quota is per instance type; "
            "give team research one quota for the two",
        ),
        (
            f"{where}[4].instance_group",
            "no instance group 'gone' (team research); use one of gpu-p5, gpu-p5b, system",
        ),
    ]


def test_a_one_node_group_is_wholly_guaranteed_by_a_one_node_quota():
    quota = QuotaConfig(instance_group="system", count=1)
    assert quota_share(quota, "ml.m5.4xlarge", 1) == 1
    assert quota_share(quota, "ml.m5.4xlarge", 4) == Fraction(1, 4)
    # Of a type the cluster has none of, the amount itself (never a division by zero).
    assert quota_share(quota, "ml.m5.4xlarge", 0) == 1
    both = QuotaConfig(instance_group="system", count=1, vcpu=32, memory_gib=8)
    assert quota_share(both, "ml.m5.4xlarge", 4) == Fraction(32, 64)


@pytest.mark.parametrize(
    ("kind", "longest"), [("priority class", MAX_PRIORITY_LENGTH), ("team", MAX_TEAM_LENGTH)]
)
def test_names_fit_their_label_value_to_the_character(kind: str, longest: int):
    def named(length: int) -> Any:
        def mutate(d: dict[str, Any]) -> None:
            name = "a" * length
            if kind == "team":
                d["governance"]["teams"][0]["name"] = name
            else:
                d["governance"]["priority_classes"][0]["name"] = name

        return mutate

    where = "governance.teams[0].name" if kind == "team" else "governance.priority_classes[0].name"
    line = one_error_on(where, named(longest + 1), base="dev")
    assert f"use a {kind} name of at most {longest} characters" in line
    data = environment_data("dev")
    named(longest)(data)
    config = loaded_from(data).config
    assert config.governance is not None
