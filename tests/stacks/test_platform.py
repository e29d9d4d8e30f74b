"""The app `build_app` assembles for every environment: stack names, account and Region, the
deploy order, tags, and an offline synth (no context lookups)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from config.names import STACK_UNITS
from stacks.platform import PlatformStacks
from tests.support import SYNTH_GROUP

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)

# Stacks only environments with that section get.
OPTIONAL_UNITS = {"governance": "governance", "observability": "observability"}


def test_every_stack_has_a_unit_in_deploy_order():
    assert list(STACK_UNITS) == [f.name for f in dataclasses.fields(PlatformStacks)]


def test_stacks_are_named_after_the_environment_and_deployed_into_its_account(env):
    names = env.config.names
    present = {s for s, section in OPTIONAL_UNITS.items() if getattr(env.config, section)}
    assert set(env.stacks) == {s for s in STACK_UNITS if s not in OPTIONAL_UNITS or s in present}
    for short, stack in env.stacks.items():
        # The construct ID too: it names the template file and the pipeline's artifacts.
        assert stack.stack_name == stack.node.id == names.stack(STACK_UNITS[short])
        assert (stack.account, stack.region) == (env.config.account, env.config.region)
        assert env.template_path(short).is_file()


def test_deploy_order_follows_what_each_stack_uses(env):
    stacks = env.stacks
    assert stacks["network"].dependencies == []
    assert set(stacks["storage"].dependencies) == {stacks["network"]}
    assert set(stacks["eks"].dependencies) == {stacks["network"]}
    assert set(stacks["hyperpod"].dependencies) == {
        stacks["network"],
        stacks["storage"],
        stacks["eks"],
    }
    assert set(stacks["cluster_addons"].dependencies) == {
        stacks["storage"],
        stacks["eks"],
        stacks["hyperpod"],
    }


def test_environment_tags_reach_the_resources(env):
    vpc = next(iter(env.resources("network", "AWS::EC2::VPC").values()))
    tags = {t["Key"]: t["Value"] for t in vpc["Properties"]["Tags"]}
    assert env.config.tags
    assert env.config.tags.items() <= tags.items()


def test_environment_tags_are_stack_tags(env):
    # CloudFormation copies stack tags to resources CDK cannot tag (the raw compute quota);
    # they live in the assembly's manifest, which no template snapshot covers.
    manifest = json.loads((env.outdir / "manifest.json").read_text())
    for stack in env.stacks.values():
        assert manifest["artifacts"][stack.artifact_id]["properties"]["tags"] == env.config.tags


def test_synth_needs_no_context_lookup(env):
    manifest = json.loads((env.outdir / "manifest.json").read_text())
    assert not manifest.get("missing"), manifest.get("missing")
