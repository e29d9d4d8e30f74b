"""The HyperPod cluster construct and the autoscaler's role on a bare stack, fed props."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from platform_constructs.hyperpod_cluster import (
    CLUSTER_LOGICAL_ID,
    HyperPodCluster,
    HyperPodClusterProps,
    InstanceGroupProps,
    Taint,
    TrainingPlan,
)
from platform_constructs.hyperpod_role import HyperPodAutoscalingRole
from platform_constructs.lifecycle_scripts import LifecycleScripts, LifecycleSettings
from stacks.hyperpod_stack import LIFECYCLE_DIR, LIFECYCLE_PREFIX
from tests.support import bare_stack, template_of

ACCOUNT, REGION = "333333333333", "us-east-1"
AZS = ("us-east-1c", "us-east-1a", "us-east-1b")
PLAN = TrainingPlan(
    arn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/p5", availability_zone="us-east-1b"
)
GROUPS = (
    InstanceGroupProps(
        name="system",
        instance_type="ml.m5.4xlarge",
        count=3,
        min_count=2,
        ebs_volume_gib=200,
        labels={"workload": "system", "example.com/team": "platform"},
        taints=(Taint(key="example.com/dedicated", effect="NoSchedule", value="system"),),
    ),
    InstanceGroupProps(
        name="gpu-p5",
        instance_type="ml.p5.48xlarge",
        count=16,
        ebs_volume_gib=1000,
        deep_health_checks=("InstanceStress",),
        interface="efa",
        training_plan=PLAN,
    ),
)


def cluster_stack(props: HyperPodClusterProps) -> cdk.Stack:
    stack = bare_stack("HyperPod", account=ACCOUNT, region=REGION)
    subnets = {
        az: ec2.Subnet.from_subnet_attributes(
            stack, f"Subnet{az}", subnet_id=f"subnet-{index:017x}", availability_zone=az
        )
        for index, az in enumerate(sorted(AZS))
    }
    lifecycle = LifecycleScripts(
        stack,
        "Lifecycle",
        source_dir=LIFECYCLE_DIR,
        bucket=s3.Bucket.from_bucket_name(stack, "Artifacts", "artifacts"),
        prefix=LIFECYCLE_PREFIX,
        settings=LifecycleSettings(fsx_efa_enabled=False),
    )
    HyperPodCluster(
        stack,
        "Cluster",
        cluster_name="hyperpod-test",
        props=props,
        eks_cluster_arn=f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/hyperpod-test",
        subnets_by_az=subnets,
        security_group=ec2.SecurityGroup.from_security_group_id(
            stack, "Efa", "sg-0123456789abcdef0"
        ),
        execution_role=iam.Role(
            stack, "Nodes", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com")
        ),
        lifecycle=lifecycle,
        removal_policy=cdk.RemovalPolicy.RETAIN,
        autoscaling_role=HyperPodAutoscalingRole(
            stack, "Autoscaling", cluster_name="hyperpod-test"
        ).role
        if props.autoscaling
        else None,
    )
    return stack


@pytest.fixture(scope="module")
def autoscaling_template() -> dict:
    props = HyperPodClusterProps(
        availability_zones=AZS,
        node_recovery="Automatic",
        node_provisioning_mode="Continuous",
        tiered_storage_percent=None,
        autoscaling=True,
        instance_groups=GROUPS,
    )
    return template_of(cluster_stack(props)).to_json()


def cluster(template: dict) -> dict:
    return template["Resources"][CLUSTER_LOGICAL_ID]["Properties"]


def test_autoscaling_uses_karpenter_with_a_narrow_cluster_role(autoscaling_template):
    props = cluster(autoscaling_template)
    assert props["AutoScaling"] == {"Mode": "Enable", "AutoScalerType": "Karpenter"}
    assert props["NodeProvisioningMode"] == "Continuous"
    (role_id, attribute) = props["ClusterRole"]["Fn::GetAtt"]
    assert attribute == "Arn"
    role = autoscaling_template["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "hyperpod.sagemaker.amazonaws.com"
    }
    (statement,) = role["Policies"][0]["PolicyDocument"]["Statement"]
    assert statement["Action"] == [
        "sagemaker:BatchAddClusterNodes",
        "sagemaker:BatchDeleteClusterNodes",
    ]
    assert statement["Resource"]["Fn::Join"][1][-1] == f":sagemaker:{REGION}:{ACCOUNT}:cluster/*"


def test_autoscaling_needs_its_role():
    props = HyperPodClusterProps(
        availability_zones=AZS,
        node_recovery="Automatic",
        node_provisioning_mode="Continuous",
        tiered_storage_percent=None,
        autoscaling=True,
        instance_groups=GROUPS,
    )
    with pytest.raises(ValueError, match="no autoscaling role"):
        HyperPodCluster(
            bare_stack(),
            "Cluster",
            cluster_name="c",
            props=props,
            eks_cluster_arn="arn",
            subnets_by_az={},
            security_group=None,
            execution_role=None,
            lifecycle=None,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )


def test_pinned_logical_id_and_retention(autoscaling_template):
    resource = autoscaling_template["Resources"][CLUSTER_LOGICAL_ID]
    assert resource["Type"] == "AWS::SageMaker::Cluster"
    assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain"


def test_groups_in_name_order_and_cluster_subnets_in_az_order(autoscaling_template):
    props = cluster(autoscaling_template)
    assert [g["InstanceGroupName"] for g in props["InstanceGroups"]] == ["gpu-p5", "system"]
    assert props["VpcConfig"]["Subnets"] == [f"subnet-{index:017x}" for index in range(len(AZS))]
    # Off is stated, so turning it off in config turns it off in the cluster.
    assert props["TieredStorageConfig"] == {"Mode": "Disable"}


def test_each_group_carries_exactly_its_props(autoscaling_template):
    gpu, system = cluster(autoscaling_template)["InstanceGroups"]
    assert gpu["TrainingPlanArn"] == PLAN.arn
    # Reserved capacity exists in one AZ: the group launches in that AZ's subnet only.
    assert gpu["OverrideVpcConfig"] == {
        "Subnets": ["subnet-00000000000000001"],
        "SecurityGroupIds": ["sg-0123456789abcdef0"],
    }
    assert gpu["NetworkInterface"] == {"InterfaceType": "efa"}
    assert gpu["OnStartDeepHealthChecks"] == ["InstanceStress"]
    assert "KubernetesConfig" not in gpu and "MinInstanceCount" not in gpu
    assert system["KubernetesConfig"] == {
        "Labels": {"example.com/team": "platform", "workload": "system"},
        "Taints": [{"Key": "example.com/dedicated", "Effect": "NoSchedule", "Value": "system"}],
    }
    assert (system["InstanceCount"], system["MinInstanceCount"]) == (3, 2)
    assert system["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 200}}]
    for key in ("TrainingPlanArn", "OverrideVpcConfig", "NetworkInterface"):
        assert key not in system, key
    assert gpu["ExecutionRole"] == system["ExecutionRole"]
    assert gpu["LifeCycleConfig"]["OnCreate"] == "on_create.sh"
