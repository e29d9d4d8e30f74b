"""Scheduler config and compute quotas on a bare stack, fed props."""

from __future__ import annotations

import aws_cdk as cdk

from config.teams import QuotaResource, TeamQuota
from platform_constructs.task_governance import (
    COMPUTE_QUOTA_TYPE,
    KUEUE_CONTROLLER,
    KUEUE_NAMESPACE,
    ComputeQuota,
    PriorityClass,
    SchedulerConfig,
    kueue_controller_available,
)
from tests.stability.replacement import create_only_paths, dig
from tests.support import bare_stack, imported_cluster, only, resources_of, template_of

CLUSTER_ARN = "arn:aws:sagemaker:us-east-1:111111111111:cluster/abcdef012345"


def _quota(**overrides: object) -> TeamQuota:
    fields: dict[str, object] = {
        "team": "research",
        "resources": (
            QuotaResource(instance_type="ml.p5.48xlarge", count=6),
            QuotaResource(instance_type="ml.m5.4xlarge", vcpu=16, memory_gib=64),
        ),
        "sharing": "LendAndBorrow",
        "borrow_limit_percent": 100,
        "preempt_lower_priority": True,
        "fair_share_weight": 30,
    }
    fields.update(overrides)
    return TeamQuota(**fields)  # type: ignore[arg-type]


def _quota_properties(quota: TeamQuota) -> dict:
    stack = bare_stack()
    ComputeQuota(
        stack, "Quota", name="hyperpod-prod-research", cluster_arn=CLUSTER_ARN, quota=quota
    )
    return only(resources_of(template_of(stack), COMPUTE_QUOTA_TYPE))["Properties"]


def test_scheduler_config_lists_priority_classes_by_name_and_sharing_flags():
    stack = bare_stack()
    SchedulerConfig(
        stack,
        "Scheduler",
        name="hyperpod-prod-scheduler",
        cluster_arn=CLUSTER_ARN,
        priority_classes=[
            PriorityClass(name="training", weight=50),
            PriorityClass(name="a", weight=1),
        ],
        fair_share=False,
        idle_resource_sharing=True,
    )
    template_of(stack).has_resource_properties(
        "AWS::SageMaker::ClusterSchedulerConfig",
        {
            "Name": "hyperpod-prod-scheduler",
            "ClusterArn": CLUSTER_ARN,
            "SchedulerConfig": {
                "PriorityClasses": [{"Name": "a", "Weight": 1}, {"Name": "training", "Weight": 50}],
                "FairShare": "Disabled",
                "IdleResourceSharing": "Enabled",
            },
        },
    )


def test_compute_quota_writes_the_api_shape():
    assert _quota_properties(_quota()) == {
        "Name": "hyperpod-prod-research",
        "ClusterArn": CLUSTER_ARN,
        "ActivationState": "Enabled",
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": [
                {"InstanceType": "ml.m5.4xlarge", "VCpu": 16, "MemoryInGiB": 64},
                {"InstanceType": "ml.p5.48xlarge", "Count": 6},
            ],
            "ResourceSharingConfig": {"Strategy": "LendAndBorrow", "BorrowLimit": 100},
            "PreemptTeamTasks": "LowerPriority",
        },
        "ComputeQuotaTarget": {"TeamName": "research", "FairShareWeight": 30},
    }


def test_no_borrow_limit_and_no_preemption_are_written_as_the_api_expects():
    properties = _quota_properties(
        _quota(sharing="Lend", borrow_limit_percent=None, preempt_lower_priority=False)
    )
    assert properties["ComputeQuotaConfig"]["ResourceSharingConfig"] == {"Strategy": "Lend"}
    assert properties["ComputeQuotaConfig"]["PreemptTeamTasks"] == "Never"


def test_editing_a_quota_changes_no_create_only_property():
    before = _quota_properties(_quota())
    after = _quota_properties(
        _quota(
            resources=(QuotaResource(instance_type="ml.p5.48xlarge", count=2),),
            sharing="DontLend",
            borrow_limit_percent=None,
            fair_share_weight=5,
        )
    )
    paths = create_only_paths(COMPUTE_QUOTA_TYPE)
    assert ("ComputeQuotaTarget", "TeamName") in paths
    assert before != after
    assert [dig(before, p) for p in paths] == [dig(after, p) for p in paths]


def test_kueue_wait_polls_the_controllers_available_replicas_after_the_add_on():
    stack = bare_stack()
    addon = cdk.CfnWaitConditionHandle(stack, "Addon")
    kueue_controller_available(stack, cluster=imported_cluster(stack), after=[addon])
    wait = only(resources_of(template_of(stack), "Custom::AWSCDK-EKS-KubernetesObjectValue"))
    assert wait["DependsOn"] == ["Addon"]
    assert wait["Properties"] | {"ClusterName": None, "ServiceToken": None} == {
        "ClusterName": None,
        "ServiceToken": None,
        "ObjectType": "deployment",
        "ObjectName": KUEUE_CONTROLLER,
        "ObjectNamespace": KUEUE_NAMESPACE,
        # Empty until a replica is available, so the handler keeps polling until then.
        "JsonPath": ".status.availableReplicas",
        # Longer than the 300 s AWS's Terraform module waits (its nodes already run), within
        # the kubectl handler's 15-minute Lambda.
        "TimeoutSeconds": 840,
    }
