"""The shipped environment files: valid, shaped as documented, named consistently, and
listed in the committed CDK context (synth stays offline)."""

from __future__ import annotations

import json

import pytest

from config.instance_types import INSTANCE_TYPES
from config.kubernetes import INSTANCE_GROUP_NAME
from config.loader import parse_config
from config.plan import plan
from config.schema import EnvironmentConfig
from config.zones import zone_ids_key, zone_names_key
from tests.support import ENVIRONMENTS, REPO, environment, environment_data


@pytest.mark.parametrize("env_name", ENVIRONMENTS)
def test_shipped_environments_are_valid(env_name):
    loaded = environment(env_name)
    assert isinstance(loaded.config, EnvironmentConfig)
    assert loaded.config.environment == env_name
    # The same data through the loader's two steps, as `hpctl validate` runs them.
    plan(parse_config(environment_data(env_name), "x"), "x")


def test_prod_is_the_documented_shape():
    config = environment("prod").config
    groups = {g.name: g for g in config.hyperpod.instance_groups}
    assert groups["gpu-p5"].instance_type == "ml.p5.48xlarge"
    assert groups["gpu-p5"].count == 16
    assert groups["gpu-p5"].training_plan is not None
    assert config.training_availability_zone == groups["gpu-p5"].training_plan.availability_zone
    assert INSTANCE_TYPES[groups["system"].instance_type].accelerator == "none"
    assert config.retain_stateful is True


@pytest.mark.parametrize("env_name", ENVIRONMENTS)
def test_physical_names_derive_from_the_environment_name(env_name):
    names = environment(env_name).config.names
    assert names.stack("network") == f"hyperpod-{env_name}-network"
    assert names.stack("cluster-addons") == f"hyperpod-{env_name}-cluster-addons"
    assert names.eks_cluster == f"hyperpod-{env_name}-eks"
    assert names.hyperpod_cluster == f"hyperpod-{env_name}"
    # SageMaker's cluster name rule is the instance-group name rule.
    assert INSTANCE_GROUP_NAME.match(names.hyperpod_cluster)


def test_cdk_context_lists_the_azs_of_every_environment_with_their_zone_ids():
    context = json.loads((REPO / "cdk.context.json").read_text())
    for name in ENVIRONMENTS:
        config = environment(name).config
        names = context[zone_names_key(config.account, config.region)]
        ids = context[zone_ids_key(config.account, config.region)]
        assert set(config.network.availability_zones) <= set(names), name
        assert sorted(ids) == names, name
        assert all(config.zone_id(az) == ids[az] for az in config.network.availability_zones)
