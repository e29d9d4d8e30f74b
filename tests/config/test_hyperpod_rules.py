"""One test per HyperPod validation rule: starting from config/prod.yaml, each mutation gives
exactly one line that names the field and says how to fix it (schema, then capacity plan)."""

from __future__ import annotations

import copy

import pytest

from config.loader import parse_config
from tests.support import Mutation, environment_data, one_error_on, variant_of


def group(data: dict, name: str) -> dict:
    return next(g for g in data["hyperpod"]["instance_groups"] if g["name"] == name)


def gpu(data: dict) -> dict:
    return group(data, "gpu-p5")


def system(data: dict) -> dict:
    return group(data, "system")


def index_of(name: str) -> int:
    names = [g["name"] for g in environment_data("prod")["hyperpod"]["instance_groups"]]
    return names.index(name)


GPU = f"hyperpod.instance_groups[{index_of('gpu-p5')}]"
SYSTEM = f"hyperpod.instance_groups[{index_of('system')}]"


def second_plan_in(az: str) -> Mutation:
    """Add a second training-plan group whose plan is in `az`."""

    def mutate(data: dict) -> None:
        extra = copy.deepcopy(gpu(data))
        extra.update(name="gpu-p5-extra", count=2, min_count=2, headroom_nodes=1)
        extra["training_plan"] = {
            "arn": "arn:aws:sagemaker:us-east-1:333333333333:training-plan/p5-extra",
            "availability_zone": az,
        }
        data["hyperpod"]["instance_groups"].append(extra)

    return mutate


# (rule id, mutation, field path the line starts with, words the message contains)
RULES: list[tuple[str, Mutation, str, str]] = [
    (
        "training-plan-az-has-cluster-subnet",
        lambda d: gpu(d)["training_plan"].update(availability_zone="us-east-1f"),
        f"{GPU}.training_plan.availability_zone",
        "has no cluster subnet",
    ),
    (
        "training-plans-share-one-az",
        second_plan_in("us-east-1b"),
        "hyperpod.instance_groups[2].training_plan.availability_zone",
        "differs from storage.fsx.availability_zone us-east-1a",
    ),
    (
        "training-plan-account-and-region",
        lambda d: gpu(d)["training_plan"].update(
            arn="arn:aws:sagemaker:us-east-1:999999999999:training-plan/p5"
        ),
        f"{GPU}.training_plan.arn",
        "this account and region",
    ),
    (
        "training-plan-arn-format",
        lambda d: gpu(d)["training_plan"].update(arn="p5-prod-2026h2"),
        f"{GPU}.training_plan.arn",
        "not a training plan ARN",
    ),
    (
        "instance-type-known",
        lambda d: gpu(d).update(instance_type="ml.p7.48xlarge"),
        f"{GPU}.instance_type",
        "unknown instance type",
    ),
    (
        "interface-supported-by-type",
        lambda d: system(d).update(network_interface="efa-only"),
        f"{SYSTEM}.network_interface",
        "does not support 'efa-only'",
    ),
    (
        "interface-needs-efa",
        lambda d: system(d).update(network_interface="efa"),
        f"{SYSTEM}.network_interface",
        "remove network_interface",
    ),
    (
        "group-names-unique",
        lambda d: system(d).update(name="gpu-p5"),
        "hyperpod.instance_groups",
        "must be unique",
    ),
    (
        "group-name-format",
        lambda d: system(d).update(name="system_pool"),
        f"{SYSTEM}.name",
        "wrong format",
    ),
    (
        "group-name-length",
        lambda d: system(d).update(name="s" * 64),
        f"{SYSTEM}.name",
        "up to 63",
    ),
    (
        "min-count-at-most-count",
        lambda d: system(d).update(min_count=4),
        f"{SYSTEM}.min_count",
        "more than count 3",
    ),
    (
        "taints-exclude-deep-health-checks",
        lambda d: gpu(d).update(taints=[{"key": "example.com/gpu", "effect": "NoSchedule"}]),
        f"{GPU}.taints",
        "cannot be combined with deep_health_checks",
    ),
    (
        "deep-health-checks-need-accelerators",
        lambda d: system(d).update(deep_health_checks=["InstanceStress"]),
        f"{SYSTEM}.deep_health_checks",
        "no accelerators to check",
    ),
    (
        "taint-key-not-reserved",
        lambda d: system(d).update(
            taints=[{"key": "sagemaker.amazonaws.com/node-health-status", "effect": "NoSchedule"}]
        ),
        f"{SYSTEM}.taints[0].key",
        "reserved prefix sagemaker.amazonaws.com/",
    ),
    (
        "taint-key-not-kubernetes-reserved",
        lambda d: system(d).update(
            taints=[{"key": "node.kubernetes.io/special", "effect": "NoExecute"}]
        ),
        f"{SYSTEM}.taints[0].key",
        "reserved prefix kubernetes.io/",
    ),
    (
        "taints-unique",
        lambda d: system(d).update(
            taints=[
                {"key": "example.com/pool", "value": "a", "effect": "NoSchedule"},
                {"key": "example.com/pool", "value": "b", "effect": "NoSchedule"},
            ]
        ),
        f"{SYSTEM}.taints",
        "appears more than once",
    ),
    (
        "taints-at-most-50",
        lambda d: system(d).update(
            taints=[{"key": f"example.com/t{i}", "effect": "NoSchedule"} for i in range(51)]
        ),
        f"{SYSTEM}.taints",
        "at most 50",
    ),
    (
        "label-key-not-reserved",
        lambda d: system(d).update(labels={"sagemaker.amazonaws.com/instance-group-name": "x"}),
        f"{SYSTEM}.labels",
        "reserved prefix sagemaker.amazonaws.com/",
    ),
    (
        "label-key-not-kubernetes-reserved",
        lambda d: system(d).update(labels={"k8s.io/role": "system"}),
        f"{SYSTEM}.labels",
        "reserved prefix k8s.io/",
    ),
    (
        "tiered-storage-percent-minimum",
        lambda d: d["hyperpod"]["tiered_storage"].update(memory_percent=10),
        "hyperpod.tiered_storage.memory_percent",
        "10 is outside 20-100",
    ),
    (
        "tiered-storage-percent-maximum",
        lambda d: d["hyperpod"]["tiered_storage"].update(memory_percent=101),
        "hyperpod.tiered_storage.memory_percent",
        "101 is outside 20-100",
    ),
    (
        "autoscaling-needs-continuous-provisioning",
        lambda d: d["hyperpod"].update(autoscaling=True, node_provisioning_mode=None),
        "hyperpod.autoscaling",
        "node_provisioning_mode: Continuous",
    ),
    (
        "counts-within-capacity-plan",
        lambda d: gpu(d).update(count=400, min_count=400),
        "network.cluster_cidr",
        "usable addresses but the plan needs",
    ),
]


@pytest.mark.parametrize(("rule", "mutate", "field", "words"), RULES, ids=[r[0] for r in RULES])
def test_rule_gives_one_line_naming_the_field(
    rule: str, mutate: Mutation, field: str, words: str
) -> None:
    line = one_error_on(field, mutate, base="prod")
    assert words in line, line


def test_rule_ids_are_unique() -> None:
    ids = [r[0] for r in RULES]
    assert len(ids) == len(set(ids))


def test_second_plan_in_the_same_az_is_accepted() -> None:
    loaded = variant_of("prod", second_plan_in("us-east-1a"))
    assert loaded.config.training_availability_zone == "us-east-1a"


def test_own_domain_keys_are_accepted() -> None:
    data = environment_data("prod")
    system(data).update(
        labels={"example.com/team": "platform", "workload": "system"},
        taints=[{"key": "example.com/dedicated", "value": "system", "effect": "NoSchedule"}],
    )
    parse_config(data, "x")


def test_tiered_storage_bounds_are_accepted() -> None:
    for percent in (20, 100):
        data = environment_data("prod")
        data["hyperpod"]["tiered_storage"]["memory_percent"] = percent
        assert parse_config(data, "x").hyperpod.tiered_storage.memory_percent == percent
