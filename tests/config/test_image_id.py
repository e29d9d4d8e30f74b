"""An instance group's own AMI (`image_id`): one test per rule, from config/prod.yaml, each
mutation giving exactly one line that names the field and says how to fix it; and what a
valid one becomes."""

from __future__ import annotations

import pytest

from config.loader import parse_config
from stacks.hyperpod_stack import instance_group_props
from tests.support import Mutation, environment_data, one_error_on

AMI = "ami-0123456789abcdef0"


def group(data: dict, name: str) -> dict:
    return next(g for g in data["hyperpod"]["instance_groups"] if g["name"] == name)


def gpu(data: dict) -> dict:
    return group(data, "gpu-p5")


GPU = "hyperpod.instance_groups[{}]".format(
    [g["name"] for g in environment_data("prod")["hyperpod"]["instance_groups"]].index("gpu-p5")
)


def _pinned_release_and_ami(data: dict) -> None:
    gpu(data).update(image_id=AMI, updates={"image_release_version": "1.4.2"})


RULES: list[tuple[str, Mutation, str, str]] = [
    (
        "ami-id-prefix",
        lambda d: gpu(d).update(image_id="img-0123456789abcdef0"),
        f"{GPU}.image_id",
        f'is not an AMI ID; write ami- and 8 to 17 hex digits, e.g. "{AMI}"',
    ),
    (
        "ami-id-hex-digits",
        lambda d: gpu(d).update(image_id="ami-0123456789abcdefg"),
        f"{GPU}.image_id",
        "write ami- and 8 to 17 hex digits",
    ),
    (
        "ami-id-at-least-8-digits",
        lambda d: gpu(d).update(image_id="ami-0123456"),
        f"{GPU}.image_id",
        "write ami- and 8 to 17 hex digits",
    ),
    (
        "ami-id-at-most-17-digits",
        lambda d: gpu(d).update(image_id="ami-0123456789abcdef01"),
        f"{GPU}.image_id",
        "write ami- and 8 to 17 hex digits",
    ),
    (
        "ami-id-not-hyperpods-default",
        # The API's `default` is what leaving image_id out already means.
        lambda d: gpu(d).update(image_id="default"),
        f"{GPU}.image_id",
        "'default' is not an AMI ID",
    ),
    (
        "ami-id-excludes-pinned-release",
        _pinned_release_and_ami,
        f"{GPU}.image_id",
        "remove image_id (HyperPod's AMI at that release) or image_release_version (your AMI)",
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


@pytest.mark.parametrize("ami", ["ami-12345678", AMI, "ami-0123456789ABCDEF0", "ami-" + "f" * 17])
def test_the_apis_ami_ids_are_accepted_and_reach_the_group_props(ami: str) -> None:
    data = environment_data("prod")
    gpu(data)["image_id"] = ami
    groups = {g.name: g for g in parse_config(data, "x").hyperpod.instance_groups}
    assert groups["gpu-p5"].image_id == ami
    assert instance_group_props(groups["gpu-p5"]).image_id == ami
    assert instance_group_props(groups["system"]).image_id is None


def test_an_ami_goes_with_a_rolling_schedule_and_no_release() -> None:
    # The schedule's deployment settings (batches, wait, rollback alarms) are the group's;
    # only the release pin names an image.
    data = environment_data("prod")
    gpu(data).update(
        image_id=AMI,
        updates={"scheduled_update": {"cron": "cron(0 4 ? * SUN *)", "max_batch": 2}},
    )
    (parsed,) = [g for g in parse_config(data, "x").hyperpod.instance_groups if g.name == "gpu-p5"]
    props = instance_group_props(parsed)
    assert props.image_id == AMI
    assert props.image_release_version is None
    assert props.scheduled_update is not None
    assert props.scheduled_update.max_batch is not None
