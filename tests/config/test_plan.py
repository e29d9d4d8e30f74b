"""config.plan: what the platform plan hands the stacks, worked out once from the config: the
add-on rows per stack, each group's device facts, the groups' tolerations, the teams' quotas."""

from __future__ import annotations

from typing import Any

from config.addons import ADDONS, COREDNS, TASK_GOVERNANCE
from config.kubernetes import NodeGroup
from config.teams import QuotaResource
from tests.support import environment, variant_of


def _without_governance(data: dict[str, Any]) -> None:
    data.pop("governance")
    data["observability"]["metrics"]["task_governance"] = "DISABLED"


def _tainted(data: dict[str, Any]) -> None:
    gpu, system = data["hyperpod"]["instance_groups"]
    gpu.pop("deep_health_checks")  # HyperPod taints nodes while it checks them
    gpu["taints"] = [
        {"key": "gpu", "effect": "NoSchedule"},
        {"key": "tier", "value": "a", "effect": "NoExecute"},
    ]
    # A taint a second group repeats is tolerated once.
    system["taints"] = [{"key": "gpu", "effect": "NoSchedule"}]


def test_each_stack_gets_its_installed_rows_at_the_environment_versions() -> None:
    plan = variant_of("dev", lambda d: d["eks"].update(addons={COREDNS: "v1.11.4-eksbuild.20"}))
    assert [a.name for a in plan.plan.addons_in("eks")] == [
        name for name, row in ADDONS.items() if row.stack == "eks"
    ]
    (coredns,) = (a for a in plan.plan.addons_in("eks") if a.name == COREDNS)
    assert coredns.version == "v1.11.4-eksbuild.20"
    # Without governance, its add-on is not installed: no stack gets it.
    bare = variant_of("dev", _without_governance)
    assert bare.plan.addons_in("governance") == ()
    assert [a.name for a in environment("dev").plan.addons_in("governance")] == [TASK_GOVERNANCE]


def test_node_groups_carry_type_efa_and_taints_by_group_name() -> None:
    plan = variant_of("dev", _tainted).plan
    assert plan.node_groups == (
        NodeGroup(
            instance_type="ml.g5.12xlarge",
            efa=True,
            taints=(("gpu", "NoSchedule"), ("tier", "NoExecute")),
        ),
        NodeGroup(instance_type="ml.m5.xlarge", efa=False, taints=(("gpu", "NoSchedule"),)),
    )


def test_taint_tolerations_tolerate_every_distinct_taint_once_in_config_order() -> None:
    plan = variant_of("dev", _tainted).plan
    assert plan.taint_tolerations == (
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "tier", "operator": "Equal", "value": "a", "effect": "NoExecute"},
    )
    assert environment("dev").plan.taint_tolerations == ()


def test_team_quotas_name_instance_types_not_groups() -> None:
    quotas = environment("prod").plan.team_quotas
    assert set(quotas) == {"evaluation", "foundation", "research"}
    research = quotas["research"]
    assert research.resources == (
        QuotaResource(instance_type="ml.p5.48xlarge", count=6),
        QuotaResource(instance_type="ml.m5.4xlarge", vcpu=16, memory_gib=64),
    )
    assert (research.sharing, research.borrow_limit_percent) == ("LendAndBorrow", 100)
    assert variant_of("dev", _without_governance).plan.team_quotas == {}
