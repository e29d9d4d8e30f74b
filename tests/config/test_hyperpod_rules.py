"""One test per HyperPod validation rule: starting from config/prod.yaml, each mutation gives
exactly one line that names the field and says how to fix it (schema, then the platform plan)."""

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


def _no_system_nodes(data: dict) -> None:
    system(data).update(count=0, min_count=0)
    # The schema refuses a quota on an empty group before the plan counts the nodes.
    research = next(t for t in data["governance"]["teams"] if t["name"] == "research")
    research["quotas"] = [q for q in research["quotas"] if q["instance_group"] != "system"]


# The updates each prod group would carry once a release is pinned (the commented block in
# config/prod.yaml); rules are planted on it.
_PINNED_UPDATES = {
    "gpu-p5": {"cron": "cron(0 4 ? * SUN *)", "max_batch": 2, "rollback_batch": 4, "wait_s": 600},
    "system": {"cron": "cron(0 1 ? * SUN *)", "max_batch": 1, "wait_s": 300},
}


def updates(group: dict) -> dict:
    block: dict = group.setdefault(
        "updates",
        {
            "image_release_version": "1.4.2",
            "scheduled_update": dict(_PINNED_UPDATES[group["name"]]),
        },
    )
    return block


def schedule(group: dict) -> dict:
    return updates(group)["scheduled_update"]


UPDATES = f"{GPU}.updates"
SCHEDULE = f"{UPDATES}.scheduled_update"


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
        "taint-key-format",
        lambda d: system(d).update(taints=[{"key": "example.com/", "effect": "NoSchedule"}]),
        f"{SYSTEM}.taints[0].key",
        "not a valid Kubernetes taint key",
    ),
    (
        "taint-value-format",
        lambda d: system(d).update(
            taints=[{"key": "example.com/pool", "value": "a b", "effect": "NoSchedule"}]
        ),
        f"{SYSTEM}.taints[0].value",
        "not a valid Kubernetes taint value",
    ),
    (
        "taint-effect",
        lambda d: system(d).update(taints=[{"key": "example.com/pool", "effect": "NoWay"}]),
        f"{SYSTEM}.taints[0].effect",
        "'NoSchedule', 'PreferNoSchedule' or 'NoExecute'",
    ),
    (
        "label-key-format",
        lambda d: system(d).update(labels={"example.com/a/b": "x"}),
        f"{SYSTEM}.labels",
        "not a valid Kubernetes label key",
    ),
    (
        "label-value-format",
        lambda d: system(d).update(labels={"example.com/pool": "-x"}),
        f"{SYSTEM}.labels",
        "not a valid Kubernetes label value",
    ),
    (
        "label-value-non-empty",
        lambda d: system(d).update(labels={"example.com/pool": ""}),
        f"{SYSTEM}.labels",
        "HyperPod needs a non-empty node label value",
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
        "volume-key-needs-continuous-provisioning",
        lambda d: (
            d["hyperpod"].update(autoscaling=False, node_provisioning_mode=None),
            gpu(d).update(volume_customer_key=True),
        ),
        f"{GPU}.volume_customer_key",
        "node_provisioning_mode: Continuous",
    ),
    (
        "release-version-format",
        lambda d: updates(gpu(d)).update(image_release_version="v1.2"),
        f"{UPDATES}.image_release_version",
        'write MAJOR.MINOR.PATCH in quotes, e.g. "1.2.3"',
    ),
    (
        "release-version-is-text",
        lambda d: updates(gpu(d)).update(image_release_version=1.2),
        f"{UPDATES}.image_release_version",
        "is a number in YAML",
    ),
    (
        "auto-patch-excludes-pinned-release",
        lambda d: updates(gpu(d)).update(image_release_version="1.4.2", auto_patch="WhenIdle"),
        f"{UPDATES}.auto_patch",
        "remove auto_patch or image_release_version",
    ),
    (
        "auto-patch-strategy",
        lambda d: updates(system(d)).update(image_release_version=None, auto_patch="DrainFirst"),
        f"{SYSTEM}.updates.auto_patch",
        "'WhenIdle' or 'WhenAllIdle'",
    ),
    (
        "schedule-expression-format",
        lambda d: schedule(gpu(d)).update(cron="0 4 * * 0"),
        f"{SCHEDULE}.cron",
        'e.g. "cron(0 4 ? * SUN *)"',
    ),
    (
        "schedule-expression-fields",
        lambda d: schedule(gpu(d)).update(cron="cron(0 24 ? * SUN *)"),
        f"{SCHEDULE}.cron",
        "not a schedule HyperPod accepts",
    ),
    (
        "max-batch-count-at-least-1",
        lambda d: schedule(gpu(d)).update(max_batch=0),
        f"{SCHEDULE}.max_batch",
        "use 1 or more",
    ),
    (
        "max-batch-percent-range",
        lambda d: schedule(gpu(d)).update(max_batch="150%"),
        f"{SCHEDULE}.max_batch",
        "outside 1%-100%",
    ),
    (
        "max-batch-count-or-percent",
        lambda d: schedule(gpu(d)).update(max_batch="two"),
        f"{SCHEDULE}.max_batch",
        'a percentage of the group (e.g. "25%")',
    ),
    (
        "rollback-batch-count-or-percent",
        lambda d: schedule(gpu(d)).update(rollback_batch=True),
        f"{SCHEDULE}.rollback_batch",
        "true is not a batch size",
    ),
    (
        "rollback-batch-needs-max-batch",
        lambda d: schedule(gpu(d)).update(max_batch=None, wait_s=None),
        f"{SCHEDULE}.rollback_batch",
        "set max_batch",
    ),
    (
        "wait-needs-max-batch",
        lambda d: schedule(system(d)).pop("max_batch"),
        f"{SYSTEM}.updates.scheduled_update.wait_s",
        "set max_batch",
    ),
    (
        "rollback-alarms-need-max-batch",
        lambda d: schedule(system(d)).update(max_batch=None, wait_s=None, rollback_alarms=["a"]),
        f"{SYSTEM}.updates.scheduled_update.rollback_alarms",
        "set max_batch",
    ),
    (
        "wait-at-most-an-hour",
        lambda d: schedule(gpu(d)).update(wait_s=3601),
        f"{SCHEDULE}.wait_s",
        "use 3600 or less",
    ),
    (
        "rollback-alarms-not-empty",
        lambda d: schedule(gpu(d)).update(rollback_alarms=[]),
        f"{SCHEDULE}.rollback_alarms",
        "name 1 to 10 alarms",
    ),
    (
        "rollback-alarms-at-most-10",
        lambda d: schedule(gpu(d)).update(rollback_alarms=[f"alarm-{i}" for i in range(11)]),
        f"{SCHEDULE}.rollback_alarms",
        "at most 10",
    ),
    (
        "rollback-alarms-unique",
        lambda d: schedule(gpu(d)).update(rollback_alarms=["gpu-errors", "gpu-errors"]),
        f"{SCHEDULE}.rollback_alarms",
        "list each alarm once",
    ),
    (
        "rollback-alarm-name-length",
        lambda d: schedule(gpu(d)).update(rollback_alarms=["a" * 256]),
        f"{SCHEDULE}.rollback_alarms",
        "1-255 characters",
    ),
    (
        "schedule-needs-cron",
        lambda d: schedule(gpu(d)).pop("cron"),
        f"{SCHEDULE}.cron",
        "required field is missing",
    ),
    (
        "capacity-type",
        lambda d: system(d).update(capacity="reserved"),
        f"{SYSTEM}.capacity",
        "'on-demand' or 'spot'",
    ),
    (
        "capacity-excludes-training-plan",
        lambda d: gpu(d).update(capacity="spot"),
        f"{GPU}.capacity",
        "remove capacity or training_plan",
    ),
    (
        "tiered-storage-leaves-jobs-memory",
        lambda d: d["hyperpod"]["tiered_storage"].update(memory_percent=100),
        "hyperpod.tiered_storage.memory_percent",
        "use a lower percentage",
    ),
    (
        "system-pods-fit-on-system-nodes",
        _no_system_nodes,
        f"{SYSTEM}.instance_type",
        "the platform's system pods need",
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


def test_an_empty_taint_value_is_read_as_no_value() -> None:
    # Kubernetes makes no difference between the two; HyperPod's API refuses an empty value,
    # so the group's nodes are tainted without one.
    data = environment_data("prod")
    system(data).update(
        taints=[{"key": "example.com/dedicated", "value": "", "effect": "NoSchedule"}]
    )
    (taint,) = next(
        g for g in parse_config(data, "x").hyperpod.instance_groups if g.name == "system"
    ).taints
    assert taint.value is None


def test_tiered_storage_bounds_are_accepted() -> None:
    # Up to 100 by the API's bounds; 50 still leaves every prod node room for its pods
    # (config.node_model), which 100 does not (rule tiered-storage-leaves-jobs-memory).
    for percent in (20, 50):
        data = environment_data("prod")
        data["hyperpod"]["tiered_storage"]["memory_percent"] = percent
        assert parse_config(data, "x").hyperpod.tiered_storage.memory_percent == percent


def test_updates_accept_percentages_alarms_and_auto_patch() -> None:
    data = environment_data("prod")
    schedule(gpu(data)).update(
        max_batch="25%", rollback_batch="50%", rollback_alarms=["hyperpod-prod-gpu-errors"]
    )
    updates(system(data)).update(image_release_version=None, scheduled_update=None)
    updates(system(data))["auto_patch"] = "WhenAllIdle"
    system(data)["capacity"] = "spot"
    groups = {g.name: g for g in parse_config(data, "x").hyperpod.instance_groups}
    gpu_schedule = groups["gpu-p5"].updates.scheduled_update
    assert (gpu_schedule.max_batch, gpu_schedule.rollback_batch) == ("25%", "50%")
    assert groups["system"].updates.auto_patch == "WhenAllIdle"
    assert groups["system"].capacity == "spot"


@pytest.mark.parametrize(
    "cron",
    [
        "cron(0 4 ? * SUN *)",
        "cron(30 23 ? * 6L *)",
        "cron(0 2 ? */3 2#1 2027)",
        "cron(5 0 15 1 ? *)",
    ],
)
def test_documented_schedule_forms_are_accepted(cron: str) -> None:
    data = environment_data("prod")
    schedule(gpu(data))["cron"] = cron
    assert parse_config(data, "x").hyperpod.instance_groups[0].updates.scheduled_update.cron == cron


def test_prod_never_auto_patches_and_pins_no_guessed_release() -> None:
    # A release is pinned once the cluster exists (describe-cluster); a guessed one would
    # update every node on the first deploy. staging takes new AMIs on its schedule first.
    prod = parse_config(environment_data("prod"), "x")
    assert all(g.updates is None for g in prod.hyperpod.instance_groups)
    staging = parse_config(environment_data("staging"), "x")
    for group in staging.hyperpod.instance_groups:
        assert group.updates is not None and group.updates.auto_patch is None, group.name
        assert group.updates.image_release_version is None, group.name
        assert group.updates.scheduled_update is not None, group.name


def test_rule_cluster_log_retention_is_a_cloudwatch_period():
    line = one_error_on(
        "hyperpod.log_retention_days", lambda d: d["hyperpod"].update(log_retention_days=42)
    )
    assert "42 is not a CloudWatch Logs retention period" in line
