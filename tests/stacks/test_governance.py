"""Governance stack of prod (the environments in Regions where CloudFormation offers the
task governance resources): the add-on, one scheduler config, one quota per team, in order."""

from __future__ import annotations

import pytest

from config.addons import ADDONS, TASK_GOVERNANCE
from platform_constructs.task_governance import COMPUTE_QUOTA_TYPE
from tests.support import SYNTH_GROUP, SynthResult, only

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)


def test_only_environments_with_governance_get_the_stack(synth_all):
    with_stack = {name for name, result in synth_all.items() if "governance" in result.stacks}
    assert with_stack == {n for n, r in synth_all.items() if r.config.governance is not None}
    assert "prod" in with_stack


def test_task_governance_add_on_at_its_pin(prod: SynthResult):
    addon = only(prod.resources("governance", "AWS::EKS::Addon"))
    assert addon["Properties"]["AddonName"] == TASK_GOVERNANCE
    assert addon["Properties"]["AddonVersion"] == ADDONS[TASK_GOVERNANCE].version
    assert prod.exported(addon["Properties"]["ClusterName"])[0] == "eks"


def test_one_scheduler_config_after_the_add_on(prod: SynthResult):
    [(logical_id, config)] = prod.resources(
        "governance", "AWS::SageMaker::ClusterSchedulerConfig"
    ).items()
    (addon_id,) = prod.resources("governance", "AWS::EKS::Addon")
    assert config["DependsOn"] == [addon_id]
    assert config["Properties"]["Name"] == prod.config.names.scheduler_config
    classes = {
        c["Name"]: c["Weight"] for c in config["Properties"]["SchedulerConfig"]["PriorityClasses"]
    }
    assert classes == {c.name: c.weight for c in prod.config.governance.priority_classes}
    assert prod.exported(config["Properties"]["ClusterArn"]) == (
        "hyperpod",
        {"Fn::GetAtt": ["HyperPodCluster", "ClusterArn"]},
    )
    assert logical_id.startswith("SchedulerConfig")


def test_one_quota_per_team_after_the_scheduler_config(prod: SynthResult):
    quotas = prod.resources("governance", COMPUTE_QUOTA_TYPE)
    (scheduler_id,) = prod.resources("governance", "AWS::SageMaker::ClusterSchedulerConfig")
    teams = {q["Properties"]["ComputeQuotaTarget"]["TeamName"]: q for q in quotas.values()}
    assert sorted(teams) == sorted(t.name for t in prod.config.governance.teams)
    for team, quota in teams.items():
        assert quota["DependsOn"] == [scheduler_id]
        assert quota["Properties"]["Name"] == prod.config.names.compute_quota(team)
        assert prod.exported(quota["Properties"]["ClusterArn"])[0] == "hyperpod"
    p5 = [
        r["Count"]
        for q in quotas.values()
        for r in q["Properties"]["ComputeQuotaConfig"]["ComputeQuotaResources"]
        if r["InstanceType"] == "ml.p5.48xlarge"
    ]
    assert sum(p5) == 16


def test_governance_deploys_after_the_cluster_add_ons(prod: SynthResult):
    dependencies = {s.stack_name for s in prod.stacks["governance"].dependencies}
    assert prod.stacks["cluster_addons"].stack_name in dependencies
    assert prod.stacks["hyperpod"].stack_name in dependencies
