"""A group's own AMI on the synthesized cluster: `ImageId` lands on that group alone, every
other group renders exactly as before, and the template passes cfn-lint's resource schema and
CDK's built-in validation without an acknowledgment."""

from __future__ import annotations

import dataclasses
import json

import aws_cdk as cdk
import pytest

from config.schema import InstanceGroupConfig
from platform_constructs.hyperpod_cluster import CLUSTER_LOGICAL_ID, InstanceGroupProps
from stacks.hyperpod_stack import instance_group_props
from tests.constructs.test_hyperpod_cluster import (
    ACCOUNT,
    GROUPS,
    REGION,
    cluster_stack,
    updates_props,
)
from tests.support import cfn_lint, environment, template_of

AMI = "ami-0123456789abcdef0"


def with_ami(groups: tuple[InstanceGroupProps, ...], name: str) -> tuple[InstanceGroupProps, ...]:
    return tuple(dataclasses.replace(g, image_id=AMI) if g.name == name else g for g in groups)


def groups_in(template: dict) -> dict[str, dict]:
    groups = template["Resources"][CLUSTER_LOGICAL_ID]["Properties"]["InstanceGroups"]
    return {g["InstanceGroupName"]: g for g in groups}


@pytest.fixture(scope="module")
def plain() -> dict:
    return template_of(cluster_stack(updates_props(GROUPS))).to_json()


@pytest.fixture(scope="module")
def pinned() -> dict:
    return template_of(cluster_stack(updates_props(with_ami(GROUPS, "gpu-p5")))).to_json()


def test_the_ami_lands_on_its_group_and_changes_nothing_else(plain, pinned):
    before, after = groups_in(plain), groups_in(pinned)
    assert after["gpu-p5"]["ImageId"] == AMI
    assert {k: v for k, v in after["gpu-p5"].items() if k != "ImageId"} == before["gpu-p5"]
    assert after["system"] == before["system"]
    # Nothing else in the template moves: no grant, no acknowledgment, no other resource.
    without_groups = [
        json.dumps({**t, "Resources": {**t["Resources"], CLUSTER_LOGICAL_ID: None}}, sort_keys=True)
        for t in (plain, pinned)
    ]
    assert without_groups[0] == without_groups[1]


def test_groups_without_an_ami_render_no_image_id(plain):
    for name, group in groups_in(plain).items():
        assert "ImageId" not in group, name


def test_no_environment_sets_an_ami_so_no_group_props_carry_one():
    # What keeps the committed snapshots byte-identical.
    for name in ("dev", "staging", "prod"):
        groups: list[InstanceGroupConfig] = environment(name).config.hyperpod.instance_groups
        assert [instance_group_props(g).image_id for g in groups] == [None] * len(groups), name


def test_cfn_lint_accepts_the_image_id(pinned):
    findings = [
        f"{m.rule.id} {m.message}"
        for m in cfn_lint(json.dumps(pinned), REGION)
        if CLUSTER_LOGICAL_ID in "/".join(map(str, m.path))
    ]
    assert findings == []


def test_cfn_lint_refuses_what_the_schema_refuses(pinned):
    # The resource schema's pattern, the same the config rule follows: a bad ID is caught.
    planted = json.loads(json.dumps(pinned))
    groups = planted["Resources"][CLUSTER_LOGICAL_ID]["Properties"]["InstanceGroups"]
    next(g for g in groups if g["InstanceGroupName"] == "gpu-p5")["ImageId"] = "img-0123"
    matches = cfn_lint(json.dumps(planted), REGION)
    assert any(
        m.rule.id.startswith("E") and "ImageId" in "/".join(map(str, m.path)) for m in matches
    ), [str(m) for m in matches]


def test_an_ami_synthesizes_under_cdks_template_validation_unacknowledged():
    # cdk.json makes CDK's built-in validation findings errors; its bundled schema knows
    # ImageId, so unlike ImageReleaseVersion nothing is acknowledged for it.
    app = cdk.App(context={"@aws-cdk/core:validateAgainstDefaultRules": True})
    stack = cluster_stack(
        updates_props(with_ami(GROUPS, "gpu-p5")),
        cdk.Stack(app, "HyperPod", env=cdk.Environment(account=ACCOUNT, region=REGION)),
    )
    app.synth()
    resource = stack.node.find_child("Cluster").node.find_child("Resource")
    key = cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    assert not [m for m in resource.node.metadata if m.type == key]
