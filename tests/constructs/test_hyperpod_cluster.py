"""The HyperPod cluster construct and the autoscaler's role on a bare stack, fed props."""

from __future__ import annotations

import dataclasses

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from config.kubernetes import Taint
from config.regions import LOG_RETENTION_DAYS
from platform_constructs.hyperpod_cluster import (
    CLUSTER_LOGICAL_ID,
    BatchSize,
    HyperPodCluster,
    HyperPodClusterProps,
    InstanceGroupProps,
    ScheduledUpdate,
    TrainingPlan,
)
from platform_constructs.hyperpod_role import HyperPodAutoscalingRole
from platform_constructs.lifecycle_scripts import LifecycleScripts, LifecycleSettings
from platform_constructs.retention import RETENTION_DAYS
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


def cluster_stack(props: HyperPodClusterProps, stack: cdk.Stack | None = None) -> cdk.Stack:
    stack = stack or bare_stack("HyperPod", account=ACCOUNT, region=REGION)
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
        bucket=s3.Bucket(stack, "Artifacts"),
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


def autoscaling_props(groups: tuple[InstanceGroupProps, ...] = GROUPS) -> HyperPodClusterProps:
    """Continuous provisioning with autoscaling, over `groups`."""
    return HyperPodClusterProps(
        availability_zones=AZS,
        node_recovery="Automatic",
        node_provisioning_mode="Continuous",
        tiered_storage_percent=None,
        autoscaling=True,
        log_retention_days=30,
        instance_groups=groups,
    )


@pytest.fixture(scope="module")
def autoscaling_template() -> dict:
    return template_of(cluster_stack(autoscaling_props())).to_json()


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
        log_retention_days=30,
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
    assert system["InstanceStorageConfigs"][0]["EbsVolumeConfig"]["VolumeSizeInGB"] == 200
    for key in ("TrainingPlanArn", "OverrideVpcConfig", "NetworkInterface"):
        assert key not in system, key
    assert gpu["ExecutionRole"] == system["ExecutionRole"]
    assert gpu["LifeCycleConfig"]["OnCreate"] == "on_create.sh"


# --------------------------------------------------------------------------- AMI updates

RELEASE = "1.2.3"
UPDATED_GROUPS = (
    InstanceGroupProps(
        name="gpu-p5",
        instance_type="ml.p5.48xlarge",
        count=16,
        ebs_volume_gib=1000,
        interface="efa",
        training_plan=PLAN,
        image_release_version=RELEASE,
        scheduled_update=ScheduledUpdate(
            schedule_expression="cron(0 4 ? * SUN *)",
            max_batch=BatchSize(kind="INSTANCE_COUNT", value=2),
            rollback_batch=BatchSize(kind="CAPACITY_PERCENTAGE", value=50),
            wait_seconds=600,
            rollback_alarms=("gpu-xid-errors", "gpu-nodes-not-ready"),
        ),
    ),
    InstanceGroupProps(
        name="system",
        instance_type="ml.m5.4xlarge",
        count=3,
        ebs_volume_gib=200,
        scheduled_update=ScheduledUpdate(schedule_expression="cron(0 1 ? * SUN *)"),
        auto_patch="WhenIdle",
        capacity="on-demand",
    ),
    InstanceGroupProps(
        name="spot-cpu",
        instance_type="ml.c5.4xlarge",
        count=2,
        ebs_volume_gib=100,
        capacity="spot",
    ),
)


def updates_props(groups: tuple[InstanceGroupProps, ...]) -> HyperPodClusterProps:
    return HyperPodClusterProps(
        availability_zones=AZS,
        node_recovery="Automatic",
        node_provisioning_mode="Continuous",
        tiered_storage_percent=None,
        autoscaling=False,
        log_retention_days=30,
        instance_groups=groups,
    )


@pytest.fixture(scope="module")
def updates_template() -> dict:
    return template_of(cluster_stack(updates_props(UPDATED_GROUPS))).to_json()


def groups_by_name(template: dict) -> dict[str, dict]:
    return {g["InstanceGroupName"]: g for g in cluster(template)["InstanceGroups"]}


def test_pinned_release_and_rolling_schedule_render(updates_template):
    gpu = groups_by_name(updates_template)["gpu-p5"]
    assert gpu["ImageReleaseVersion"] == RELEASE
    assert gpu["ScheduledUpdateConfig"] == {
        "ScheduleExpression": "cron(0 4 ? * SUN *)",
        "DeploymentConfig": {
            "RollingUpdatePolicy": {
                "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 2},
                "RollbackMaximumBatchSize": {"Type": "CAPACITY_PERCENTAGE", "Value": 50},
            },
            "WaitIntervalInSeconds": 600,
            "AutoRollbackConfiguration": [
                {"AlarmName": "gpu-xid-errors"},
                {"AlarmName": "gpu-nodes-not-ready"},
            ],
        },
    }
    for key in ("AutoPatchConfig", "CapacityRequirements"):
        assert key not in gpu, key


def test_schedule_without_batches_auto_patch_and_capacity_render(updates_template):
    groups = groups_by_name(updates_template)
    system, spot = groups["system"], groups["spot-cpu"]
    # No max_batch: no DeploymentConfig (HyperPod's default, the whole group at once).
    assert system["ScheduledUpdateConfig"] == {"ScheduleExpression": "cron(0 1 ? * SUN *)"}
    assert system["AutoPatchConfig"] == {"PatchingStrategy": "WhenIdle"}
    assert system["CapacityRequirements"] == {"OnDemand": {}}
    assert "ImageReleaseVersion" not in system
    assert spot["CapacityRequirements"] == {"Spot": {}}
    for key in ("ImageReleaseVersion", "ScheduledUpdateConfig", "AutoPatchConfig"):
        assert key not in spot, key


def test_groups_without_updates_render_none_of_the_update_properties(autoscaling_template):
    for group in cluster(autoscaling_template)["InstanceGroups"]:
        for key in (
            "ImageReleaseVersion",
            "ScheduledUpdateConfig",
            "AutoPatchConfig",
            "CapacityRequirements",
        ):
            assert key not in group, (group["InstanceGroupName"], key)


def test_the_node_role_may_read_exactly_the_rollback_alarms(updates_template):
    resources = updates_template["Resources"]
    policies = [r for r in resources.values() if r["Type"] == "AWS::IAM::Policy"]
    statements = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]
    (alarms,) = [s for s in statements if s.get("Sid") == "ReadRollbackAlarms"]
    assert alarms["Action"] == "cloudwatch:DescribeAlarms"
    arns = [a["Fn::Join"][1] for a in alarms["Resource"]]
    assert [arn[-1] for arn in arns] == [
        f":cloudwatch:{REGION}:{ACCOUNT}:alarm:gpu-nodes-not-ready",
        f":cloudwatch:{REGION}:{ACCOUNT}:alarm:gpu-xid-errors",
    ]
    (policy_id,) = [
        k
        for k, r in resources.items()
        if r["Type"] == "AWS::IAM::Policy"
        and alarms in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    (role_ref,) = resources[policy_id]["Properties"]["Roles"]
    node_role = cluster(updates_template)["InstanceGroups"][0]["ExecutionRole"]
    assert node_role == {"Fn::GetAtt": [role_ref["Ref"], "Arn"]}
    # The grant exists before HyperPod can start an update that reads the alarms.
    assert policy_id in updates_template["Resources"][CLUSTER_LOGICAL_ID]["DependsOn"]


def test_no_alarm_grant_without_rollback_alarms(autoscaling_template):
    statements = [
        s
        for r in autoscaling_template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert not [s for s in statements if "cloudwatch:DescribeAlarms" in str(s["Action"])]


def test_a_pinned_release_synthesizes_under_cdks_template_validation():
    # cdk.json turns CDK's built-in validation findings into errors; its bundled schema
    # predates ImageReleaseVersion, so a pinned release is acknowledged (F3002), only then.
    def acknowledged(groups: tuple[InstanceGroupProps, ...]) -> set[str]:
        app = cdk.App(context={"@aws-cdk/core:validateAgainstDefaultRules": True})
        stack = cluster_stack(
            updates_props(groups),
            cdk.Stack(app, "HyperPod", env=cdk.Environment(account=ACCOUNT, region=REGION)),
        )
        app.synth()
        resource = stack.node.find_child("Cluster").node.find_child("Resource")
        key = cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
        return {rule for m in resource.node.metadata if m.type == key for rule in m.data}

    assert acknowledged(UPDATED_GROUPS) == {"CloudFormation-Validate::F3002"}
    assert acknowledged(UPDATED_GROUPS[1:]) == set()


def test_batch_settings_without_max_batch_are_refused():
    group = InstanceGroupProps(
        name="system",
        instance_type="ml.m5.4xlarge",
        count=3,
        ebs_volume_gib=200,
        scheduled_update=ScheduledUpdate(
            schedule_expression="cron(0 1 ? * SUN *)", rollback_alarms=("a",)
        ),
    )
    with pytest.raises(ValueError, match="need max_batch"):
        cluster_stack(updates_props((group,)))


def test_the_cluster_log_group_gets_a_retention_once_the_cluster_exists(autoscaling_template):
    # HyperPod creates /aws/sagemaker/Clusters/<name>/<id> (node and lifecycle-script logs)
    # without a retention; the ID is the last part of the cluster ARN.
    (retention,) = [
        r for r in autoscaling_template["Resources"].values() if r["Type"] == "Custom::LogRetention"
    ]
    props = retention["Properties"]
    assert props["RetentionInDays"] == 30
    (separator, parts) = props["LogGroupName"]["Fn::Join"]
    assert separator == "" and parts[0] == "/aws/sagemaker/Clusters/hyperpod-test/"
    assert parts[1] == {
        "Fn::Select": [1, {"Fn::Split": ["/", {"Fn::GetAtt": [CLUSTER_LOGICAL_ID, "ClusterArn"]}]}]
    }


def test_every_cloudwatch_retention_period_maps_to_cdk():
    assert tuple(RETENTION_DAYS) == LOG_RETENTION_DAYS


# --------------------------------------------------------------------------- volume key


def _volume_key(template: dict) -> str:
    (key_id,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key"]
    return key_id


@pytest.fixture(scope="module")
def volume_key_template() -> dict:
    """Continuous provisioning with the GPU group created on the customer key."""
    groups = tuple(dataclasses.replace(g, volume_customer_key=g.name == "gpu-p5") for g in GROUPS)
    return template_of(cluster_stack(autoscaling_props(groups))).to_json()


def test_no_volume_key_unless_a_group_is_created_on_it(autoscaling_template):
    # A running group's key cannot change: groups keep AWS's key unless they ask for it.
    assert not [
        r for r in autoscaling_template["Resources"].values() if r["Type"] == "AWS::KMS::Key"
    ]
    for group in cluster(autoscaling_template)["InstanceGroups"]:
        (storage,) = group["InstanceStorageConfigs"]
        assert "VolumeKmsKeyId" not in storage["EbsVolumeConfig"]


def test_node_volumes_are_on_the_clusters_customer_key(volume_key_template):
    key_id = _volume_key(volume_key_template)
    key = {"Fn::GetAtt": [key_id, "Arn"]}
    groups = {g["InstanceGroupName"]: g for g in cluster(volume_key_template)["InstanceGroups"]}
    size = groups["gpu-p5"]["InstanceStorageConfigs"][0]["EbsVolumeConfig"]["VolumeSizeInGB"]
    # The /opt/sagemaker volume and the root volume (whose size is HyperPod's).
    assert groups["gpu-p5"]["InstanceStorageConfigs"] == [
        {"EbsVolumeConfig": {"VolumeSizeInGB": size, "VolumeKmsKeyId": key}},
        {"EbsVolumeConfig": {"RootVolume": True, "VolumeKmsKeyId": key}},
    ]
    (system,) = groups["system"]["InstanceStorageConfigs"]
    assert "VolumeKmsKeyId" not in system["EbsVolumeConfig"]
    properties = volume_key_template["Resources"][key_id]["Properties"]
    assert properties["EnableKeyRotation"] is True
    # The key policy names its one user: the node role, for what HyperPod documents.
    (user,) = [
        s for s in properties["KeyPolicy"]["Statement"] if s.get("Sid") == "HyperPodNodeVolumes"
    ]
    assert sorted(user["Action"]) == ["kms:CreateGrant", "kms:DescribeKey"]
    node_role = cluster(volume_key_template)["InstanceGroups"][0]["ExecutionRole"]
    assert user["Principal"] == {"AWS": node_role}
    assert volume_key_template["Resources"][key_id]["DeletionPolicy"] == "Retain"


def test_the_node_role_may_grant_the_volume_key_before_the_cluster_exists(volume_key_template):
    resources = volume_key_template["Resources"]
    key_id = _volume_key(volume_key_template)
    (policy_id, statement) = next(
        (k, s)
        for k, r in resources.items()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if s["Resource"] == {"Fn::GetAtt": [key_id, "Arn"]}
    )
    assert sorted(statement["Action"]) == ["kms:CreateGrant", "kms:DescribeKey"]
    assert "Condition" not in statement  # HyperPod passes no encryption context
    (role_ref,) = resources[policy_id]["Properties"]["Roles"]
    node_role = cluster(volume_key_template)["InstanceGroups"][0]["ExecutionRole"]
    assert node_role == {"Fn::GetAtt": [role_ref["Ref"], "Arn"]}
    assert policy_id in resources[CLUSTER_LOGICAL_ID]["DependsOn"]


def test_no_volume_key_without_continuous_provisioning():
    # HyperPod takes customer keys for node volumes only under continuous provisioning.
    props = HyperPodClusterProps(
        availability_zones=AZS,
        node_recovery="Automatic",
        node_provisioning_mode=None,
        tiered_storage_percent=None,
        autoscaling=False,
        log_retention_days=30,
        instance_groups=tuple(dataclasses.replace(g, volume_customer_key=True) for g in GROUPS),
    )
    template = template_of(cluster_stack(props)).to_json()
    assert not [r for r in template["Resources"].values() if r["Type"] == "AWS::KMS::Key"]
    for group in cluster(template)["InstanceGroups"]:
        (storage,) = group["InstanceStorageConfigs"]
        assert set(storage["EbsVolumeConfig"]) == {"VolumeSizeInGB"}
