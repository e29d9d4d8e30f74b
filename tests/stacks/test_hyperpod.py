"""The HyperPod stack of every environment: cluster, instance groups, node role and lifecycle
scripts, asserted on the synthesized templates (session fixtures from conftest)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Capture, Match

from config.instance_types import INSTANCE_TYPES
from platform_constructs.hyperpod_cluster import CLUSTER_LOGICAL_ID, LOG_RETENTION_HANDLER_ID
from platform_constructs.lifecycle_scripts import LifecycleSettings
from stacks.hyperpod_stack import LIFECYCLE_DIR, LIFECYCLE_PREFIX
from tests.support import SYNTH_GROUP, SynthResult

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)

# Actions AWS authorizes only on "*" (no resource types), each with a reason in the role.
STAR_RESOURCE_ACTIONS = {
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeTags",
    "ecr:GetAuthorizationToken",
}
ENI_ACTIONS = {
    "ec2:CreateNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:CreateTags",
}


# --------------------------------------------------------------------------- helpers


def hyperpod_resources(result: SynthResult) -> dict[str, dict]:
    return result.templates["hyperpod"]["Resources"]


def the_cluster(result: SynthResult) -> tuple[str, dict]:
    clusters = result.resources("hyperpod", "AWS::SageMaker::Cluster")
    assert len(clusters) == 1, sorted(clusters)
    return next(iter(clusters.items()))


def cluster_props(result: SynthResult) -> dict:
    return the_cluster(result)[1]["Properties"]


def groups_of(result: SynthResult) -> dict[str, dict]:
    return {g["InstanceGroupName"]: g for g in cluster_props(result)["InstanceGroups"]}


def subnet_az(result: SynthResult, value: Any) -> str:
    """The AvailabilityZone of the network subnet an imported subnet ID refers to."""
    short, output = result.exported(value)
    assert short == "network"
    subnet = result.templates["network"]["Resources"][output["Ref"]]
    assert subnet["Type"] == "AWS::EC2::Subnet"
    return subnet["Properties"]["AvailabilityZone"]


def efa_group_value(result: SynthResult) -> Any:
    return result.resolved("network", result.platform.network.efa_security_group.security_group_id)


def role_statements(result, role_id: str) -> list[dict]:
    """Every statement granted to the role: inline policies plus AWS::IAM::Policy resources."""
    resources = hyperpod_resources(result)
    statements = []
    for policy in resources[role_id]["Properties"].get("Policies", []):
        statements += policy["PolicyDocument"]["Statement"]
    for resource in resources.values():
        if (
            resource["Type"] == "AWS::IAM::Policy"
            and {"Ref": role_id} in resource["Properties"]["Roles"]
        ):
            statements += resource["Properties"]["PolicyDocument"]["Statement"]
    return statements


def listed(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def execution_role_id(result) -> str:
    groups = cluster_props(result)["InstanceGroups"]
    role_ids = {g["ExecutionRole"]["Fn::GetAtt"][0] for g in groups}
    assert len(role_ids) == 1
    return role_ids.pop()


def by_sid(statements: list[dict]) -> dict[str, dict]:
    return {s["Sid"]: s for s in statements if "Sid" in s}


# --------------------------------------------------------------------------- cluster


def test_one_cluster_with_pinned_logical_id_and_name(env):
    logical_id, cluster = the_cluster(env)
    # Renaming this logical ID would make CloudFormation replace the cluster.
    assert logical_id == CLUSTER_LOGICAL_ID == "HyperPodCluster"
    names = env.config.names
    assert (
        cluster["Properties"]["ClusterName"] == names.hyperpod_cluster == f"hyperpod-{env.env_name}"
    )
    assert env.stacks["hyperpod"].cluster_name == names.hyperpod_cluster


def test_cluster_is_retained_when_the_environment_retains_state(env):
    _, cluster = the_cluster(env)
    role = hyperpod_resources(env)[execution_role_id(env)]
    expected = "Retain" if env.config.retain_stateful else "Delete"
    assert cluster["DeletionPolicy"] == cluster["UpdateReplacePolicy"] == expected
    # The role and its policies outlive the stack with the cluster: a retained cluster still
    # replaces nodes, which assume the role.
    assert role["DeletionPolicy"] == expected
    role_id = execution_role_id(env)
    policies = [
        r
        for r in hyperpod_resources(env).values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"]["Roles"]
    ]
    assert policies
    assert {p["DeletionPolicy"] for p in policies} == {expected}


def test_prod_retains_the_cluster(prod):
    _, cluster = the_cluster(prod)
    assert cluster["DeletionPolicy"] == "Retain"


def test_orchestrator_is_the_projects_eks_cluster(env):
    arn = Capture()
    env.template("hyperpod").has_resource_properties(
        "AWS::SageMaker::Cluster", {"Orchestrator": {"Eks": {"ClusterArn": arn}}}
    )
    short, value = env.exported(arn.as_object())
    assert short == "eks"
    assert value == env.resolved("eks", env.platform.eks.cluster_arn)
    eks_id, attribute = value["Fn::GetAtt"]
    assert attribute == "Arn"
    assert env.templates["eks"]["Resources"][eks_id]["Type"] == "AWS::EKS::Cluster"


def test_cluster_vpc_is_every_cluster_subnet_with_the_efa_group(env):
    vpc = cluster_props(env)["VpcConfig"]
    azs = [subnet_az(env, s) for s in vpc["Subnets"]]
    assert azs == sorted(env.config.network.availability_zones)
    cluster_subnets = env.platform.network.cluster_subnets
    assert [env.exported(s)[1] for s in vpc["Subnets"]] == [
        env.resolved("network", cluster_subnets[az].subnet_id) for az in azs
    ]
    assert [env.exported(g)[1] for g in vpc["SecurityGroupIds"]] == [efa_group_value(env)]


def test_cluster_level_settings_follow_config(env):
    hyperpod = env.config.hyperpod
    props = cluster_props(env)
    assert props["NodeRecovery"] == hyperpod.node_recovery
    assert props["NodeProvisioningMode"] == hyperpod.node_provisioning_mode
    tiered = hyperpod.tiered_storage
    expected = (
        {"Mode": "Enable", "InstanceMemoryAllocationPercentage": tiered.memory_percent}
        if tiered.enabled
        else {"Mode": "Disable"}
    )
    assert props["TieredStorageConfig"] == expected
    assert ("AutoScaling" in props) == ("ClusterRole" in props) == hyperpod.autoscaling


def test_prod_recovers_nodes_and_keeps_checkpoints_in_memory(prod):
    props = cluster_props(prod)
    assert props["NodeRecovery"] == "Automatic"
    assert props["TieredStorageConfig"] == {
        "Mode": "Enable",
        "InstanceMemoryAllocationPercentage": 20,
    }


def test_dev_disables_tiered_storage_explicitly(dev):
    assert cluster_props(dev)["TieredStorageConfig"] == {"Mode": "Disable"}


# --------------------------------------------------------------------------- instance groups


def test_groups_in_name_order_with_their_config(env):
    config = env.config.hyperpod
    groups = cluster_props(env)["InstanceGroups"]
    assert [g["InstanceGroupName"] for g in groups] == sorted(
        g.name for g in config.instance_groups
    )
    for spec, group in zip(groups, config.groups_by_name(), strict=True):
        assert spec["InstanceType"] == group.instance_type
        assert spec["InstanceCount"] == group.count
        assert spec.get("MinInstanceCount") == group.min_count
        assert spec["ThreadsPerCore"] == group.threads_per_core
        # The shipped groups keep AWS's key (a running group's key cannot change; a group is
        # created on the customer key with volume_customer_key).
        assert not group.volume_customer_key
        (volume,) = spec["InstanceStorageConfigs"]
        assert volume["EbsVolumeConfig"] == {"VolumeSizeInGB": group.ebs_volume_gib}
        assert spec.get("OnStartDeepHealthChecks", []) == group.deep_health_checks
        kubernetes = spec.get("KubernetesConfig", {})
        assert kubernetes.get("Labels", {}) == group.labels
        assert kubernetes.get("Taints", []) == [
            {"Key": t.key, "Effect": t.effect, **({"Value": t.value} if t.value else {})}
            for t in group.taints
        ]
        assert spec.get("TrainingPlanArn") == (
            group.training_plan.arn if group.training_plan else None
        )
        updates = group.updates
        assert spec.get("ImageReleaseVersion") == (updates and updates.image_release_version)
        schedule = updates.scheduled_update if updates else None
        assert spec.get("ScheduledUpdateConfig", {}).get("ScheduleExpression") == (
            schedule.cron if schedule else None
        )
        assert spec.get("AutoPatchConfig", {}).get("PatchingStrategy") == (
            updates and updates.auto_patch
        )
        capacity = {"spot": {"Spot": {}}, "on-demand": {"OnDemand": {}}}.get(group.capacity or "")
        assert spec.get("CapacityRequirements") == capacity


def test_network_interface_is_what_the_capacity_plan_assumed(env):
    planned = {g.name: g.interface for s in env.layout.cluster.values() for g in s.groups}
    for name, spec in groups_of(env).items():
        interface = spec.get("NetworkInterface", {}).get("InterfaceType")
        assert interface == planned[name]
        instance = INSTANCE_TYPES[spec["InstanceType"]]
        assert (interface is not None) == instance.supports_efa


def test_prod_gpu_group(prod):
    gpu = groups_of(prod)["gpu-p5"]
    assert gpu["InstanceType"] == "ml.p5.48xlarge"
    assert gpu["InstanceCount"] == gpu["MinInstanceCount"] == 16
    assert gpu["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert gpu["NetworkInterface"] == {"InterfaceType": "efa"}
    assert gpu["TrainingPlanArn"] == (
        "arn:aws:sagemaker:us-east-1:333333333333:training-plan/p5-prod-2026h2"
    )
    assert gpu["KubernetesConfig"] == {"Labels": {"workload": "training"}}


def test_prod_takes_no_unvalidated_ami_and_staging_is_the_canary(prod, staging):
    # prod updates only once a release staging ran is pinned (a guessed pin would re-image
    # every node on the first deploy; a schedule without a pin would take any new AMI).
    for group in groups_of(prod).values():
        assert not {"ImageReleaseVersion", "ScheduledUpdateConfig", "AutoPatchConfig"} & set(group)
    groups = groups_of(staging)
    assert not [g for g in groups.values() if "AutoPatchConfig" in g]
    schedules = [g["ScheduledUpdateConfig"]["ScheduleExpression"] for g in groups.values()]
    # Overlapping schedules can fail: every group has its own window.
    assert len(set(schedules)) == len(schedules) == len(groups)
    for group in groups.values():
        policy = group["ScheduledUpdateConfig"]["DeploymentConfig"]["RollingUpdatePolicy"]
        assert policy["MaximumBatchSize"] == {"Type": "INSTANCE_COUNT", "Value": 1}


def test_no_alarm_grant_where_no_group_names_rollback_alarms(env):
    statements = role_statements(env, execution_role_id(env))
    alarms = {
        a
        for g in env.config.hyperpod.instance_groups
        if g.updates and g.updates.scheduled_update
        for a in g.updates.scheduled_update.rollback_alarms or ()
    }
    granted = [s for s in statements if s.get("Sid") == "ReadRollbackAlarms"]
    assert bool(granted) == bool(alarms)


@pytest.mark.parametrize("name", ["staging", "prod"])
def test_training_plan_groups_launch_only_in_the_plans_az(synth_all, name):
    result = synth_all[name]
    config = result.config
    planned = [g for g in config.hyperpod.instance_groups if g.training_plan is not None]
    assert planned, "this environment is expected to use a training plan"
    for group in planned:
        override = groups_of(result)[group.name]["OverrideVpcConfig"]
        azs = {subnet_az(result, s) for s in override["Subnets"]}
        assert azs == {group.training_plan.availability_zone}
        assert len(override["Subnets"]) == 1
        assert [result.exported(g)[1] for g in override["SecurityGroupIds"]] == [
            efa_group_value(result)
        ]
        # FSx sits in the same AZ, so training I/O never crosses AZs.
        assert config.training_availability_zone == group.training_plan.availability_zone


def test_groups_without_a_plan_use_the_cluster_subnets(env):
    for group in env.config.hyperpod.instance_groups:
        if group.training_plan is None:
            assert "OverrideVpcConfig" not in groups_of(env)[group.name]


def test_every_group_runs_the_lifecycle_scripts_with_the_execution_role(env):
    role_id = execution_role_id(env)
    assert hyperpod_resources(env)[role_id]["Type"] == "AWS::IAM::Role"
    artifact_bucket = env.resolved("storage", env.platform.storage.artifact_bucket.bucket_name)
    for spec in cluster_props(env)["InstanceGroups"]:
        lifecycle = spec["LifeCycleConfig"]
        assert lifecycle["OnCreate"] == "on_create.sh"
        head, bucket, tail = lifecycle["SourceS3Uri"]["Fn::Join"][1]
        assert (head, tail) == ("s3://", f"/{LIFECYCLE_PREFIX}")
        assert env.exported(bucket) == ("storage", artifact_bucket)


# --------------------------------------------------------------------------- lifecycle delivery


def deployment(result) -> tuple[str, dict]:
    found = {
        k: v
        for k, v in hyperpod_resources(result).items()
        if v["Type"] == "Custom::CDKBucketDeployment"
    }
    assert len(found) == 1
    return next(iter(found.items()))


def deployed_files(result) -> dict[str, Path]:
    """Relative path -> staged file, over every source the deployment copies."""
    _, resource = deployment(result)
    files: dict[str, Path] = {}
    for key in resource["Properties"]["SourceObjectKeys"]:
        staged = result.outdir / f"asset.{key.removesuffix('.zip')}"
        assert staged.is_dir(), staged
        for path in staged.rglob("*"):
            if path.is_file():
                files[path.relative_to(staged).as_posix()] = path
    return files


def test_lifecycle_deployment_ships_the_scripts_and_their_config(env):
    logical_id, resource = deployment(env)
    props = resource["Properties"]
    assert props["DestinationBucketKeyPrefix"] == LIFECYCLE_PREFIX
    assert props["Prune"] is True
    assert props["RetainOnDelete"] is True
    assert env.exported(props["DestinationBucketName"]) == (
        "storage",
        env.resolved("storage", env.platform.storage.artifact_bucket.bucket_name),
    )
    files = deployed_files(env)
    shipped = {p.relative_to(LIFECYCLE_DIR).as_posix() for p in LIFECYCLE_DIR.rglob("*.sh")}
    assert "on_create.sh" in files
    assert shipped <= set(files)
    assert "lib/read_config.py" in files
    assert not any(name.endswith(".example.json") or "__pycache__" in name for name in files)
    # Nodes download the prefix while the cluster is created: the upload comes first.
    assert logical_id in the_cluster(env)[1]["DependsOn"]


def test_lifecycle_config_carries_the_environments_values(env):
    config = env.config
    settings = json.loads(deployed_files(env)["lifecycle_config.json"].read_text())
    assert settings["fsx_efa_enabled"] is config.storage.fsx.efa_enabled
    assert settings == LifecycleSettings(fsx_efa_enabled=config.storage.fsx.efa_enabled).as_json()
    assert settings["containerd_on_data_volume"] is settings["kubelet_on_data_volume"] is True


def test_generated_lifecycle_config_is_accepted_by_the_scripts(prod):
    """The file contract with lifecycle/: its own reader accepts what the stack generates."""
    path = deployed_files(prod)["lifecycle_config.json"]
    reader = deployed_files(prod)["lib/read_config.py"]
    done = subprocess.run(
        [sys.executable, str(reader), str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CFG_FSX_EFA_ENABLED=false" in done.stdout
    assert "CFG_WARNINGS=()" in done.stdout


# --------------------------------------------------------------------------- execution role


def test_execution_role_is_narrow(env):
    role_id = execution_role_id(env)
    role = hyperpod_resources(env)[role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"Service": "sagemaker.amazonaws.com"},
        }
    ]
    # The one managed policy is the one AWS's HyperPod templates attach (and extend).
    assert role["ManagedPolicyArns"] == [
        {
            "Fn::Join": [
                "",
                [
                    "arn:",
                    {"Ref": "AWS::Partition"},
                    ":iam::aws:policy/AmazonSageMakerClusterInstanceRolePolicy",
                ],
            ]
        }
    ]
    statements = role_statements(env, role_id)
    assert statements
    for statement in statements:
        assert statement["Effect"] == "Allow"
        actions = listed(statement["Action"])
        assert not any("*" in a for a in actions), actions
        if "*" in listed(statement["Resource"]):
            assert listed(statement["Resource"]) == ["*"]
            assert set(actions) <= STAR_RESOURCE_ACTIONS, actions
        if set(actions) & ENI_ACTIONS:
            assert "ec2:Vpc" in statement["Condition"]["StringEquals"], statement
    sids = by_sid(statements)
    assert sids["DescribeNetwork"]["Condition"] == {
        "StringEquals": {"aws:RequestedRegion": env.config.region}
    }


def test_the_vpc_cni_reads_its_instance_its_limits_and_eni_tags(env):
    # What AWS's HyperPod templates grant the VPC CNI on the nodes (cluster-setup
    # sagemaker-iam-role-template.yaml AmazonEKSCNIDescribePolicy): describe calls, which
    # take no resource, kept to the environment's Region.
    describe = by_sid(role_statements(env, execution_role_id(env)))["DescribeNetwork"]
    assert {
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeTags",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSubnets",
    } <= set(listed(describe["Action"]))
    assert describe["Resource"] == "*"
    assert describe["Condition"] == {"StringEquals": {"aws:RequestedRegion": env.config.region}}


# What AWS's HyperPod EKS templates grant inline beside the managed policy
# (aws/sagemaker-hyperpod-cluster-setup eks/cloudformation/sagemaker-iam-role-template.yaml;
# awsome-distributed-training hyperpod-eks-tf sagemaker_iam_role), each action with the
# statement that grants it here. cloudwatch:DescribeAlarms is granted only on the rollback
# alarms groups name (test_no_alarm_grant_where_no_group_names_rollback_alarms).
AWS_TEMPLATE_GRANTS = {
    "ec2:AttachNetworkInterface": ("ManageNodeInterfaces", "NodeInterfaceAttachments"),
    "ec2:AssignPrivateIpAddresses": ("ManageNodeInterfaces",),
    "ec2:UnassignPrivateIpAddresses": ("ManageNodeInterfaces",),
    "ec2:CreateNetworkInterface": ("CreateNodeInterfaces",),
    "ec2:CreateNetworkInterfacePermission": ("ManageNodeInterfaces",),
    "ec2:DeleteNetworkInterface": ("ManageNodeInterfaces",),
    "ec2:DeleteNetworkInterfacePermission": ("ManageNodeInterfaces",),
    "ec2:DetachNetworkInterface": ("ManageNodeInterfaces", "NodeInterfaceAttachments"),
    "ec2:ModifyNetworkInterfaceAttribute": ("ManageNodeInterfaces", "NodeInterfaceAttachments"),
    "ec2:CreateTags": ("ManageNodeInterfaces",),
    "ec2:DescribeInstances": ("DescribeNetwork",),
    "ec2:DescribeTags": ("DescribeNetwork",),
    "ec2:DescribeNetworkInterfaces": ("DescribeNetwork",),
    "ec2:DescribeInstanceTypes": ("DescribeNetwork",),
    "ec2:DescribeSubnets": ("DescribeNetwork",),
    "ec2:DescribeVpcs": ("DescribeNetwork",),
    "ec2:DescribeDhcpOptions": ("DescribeNetwork",),
    "ec2:DescribeSecurityGroups": ("DescribeNetwork",),
    "ecr:BatchCheckLayerAvailability": ("PullImages",),
    "ecr:BatchGetImage": ("PullImages",),
    "ecr:GetDownloadUrlForLayer": ("PullImages",),
    "ecr:GetAuthorizationToken": ("RegistryLogin",),
    "eks-auth:AssumeRoleForPodIdentity": ("PodIdentity",),
    "s3:ListBucket": ("ListLifecycleScripts",),
    "s3:GetObject": ("ReadLifecycleScripts",),
}


def test_execution_role_grants_what_aws_templates_grant(prod):
    statements = by_sid(role_statements(prod, execution_role_id(prod)))
    for action, sids in AWS_TEMPLATE_GRANTS.items():
        for sid in sids:
            assert action in listed(statements[sid]["Action"]), (action, sid)


def test_the_managed_policys_grants_are_not_repeated_inline(prod):
    # Logs, metrics and Session Manager come with AmazonSageMakerClusterInstanceRolePolicy.
    actions = {
        a for s in role_statements(prod, execution_role_id(prod)) for a in listed(s["Action"])
    }
    assert not {a for a in actions if a.split(":")[0] in ("logs", "ssmmessages")}
    assert "cloudwatch:PutMetricData" not in actions


def join_parts(value: Any) -> list[Any]:
    """An ARN as a list of parts, adjacent literal strings merged: the same list whether CDK
    writes the partition as a literal or as a reference (a feature flag decides)."""
    if isinstance(value, str):
        return [value]
    items = value["Fn::Join"][1] if isinstance(value, dict) and "Fn::Join" in value else [value]
    merged: list[Any] = []
    for item in items:
        if isinstance(item, dict) and item == {"Ref": "AWS::Partition"}:
            item = "aws"
        if isinstance(item, str) and merged and isinstance(merged[-1], str):
            merged[-1] += item
        else:
            merged.append(item)
    return merged


def test_eni_permissions_are_scoped_to_this_vpc_and_its_cluster_subnets(prod):
    statements = by_sid(role_statements(prod, execution_role_id(prod)))
    vpc_id = prod.resolved("network", prod.platform.network.vpc.vpc_id)
    for sid in ("CreateNodeInterfaces", "ManageNodeInterfaces"):
        vpc_arn = join_parts(statements[sid]["Condition"]["StringEquals"]["ec2:Vpc"])
        assert prod.exported(vpc_arn[-1]) == ("network", vpc_id)
        assert vpc_arn[-2] == "arn:aws:ec2:us-east-1:333333333333:vpc/"
    create = [join_parts(r) for r in statements["CreateNodeInterfaces"]["Resource"]]
    subnets = [parts for parts in create if len(parts) > 1 and parts[-2].endswith(":subnet/")]
    assert sorted(subnet_az(prod, parts[-1]) for parts in subnets) == [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
    ]
    groups = [
        parts for parts in create if len(parts) > 1 and parts[-2].endswith(":security-group/")
    ]
    assert [prod.exported(parts[-1])[1] for parts in groups] == [efa_group_value(prod)]


def test_pod_identity_and_images_are_scoped(prod):
    statements = by_sid(role_statements(prod, execution_role_id(prod)))
    assert prod.exported(statements["PodIdentity"]["Resource"]) == (
        "eks",
        prod.resolved("eks", prod.platform.eks.cluster_arn),
    )
    assert join_parts(statements["PullImages"]["Resource"]) == [
        "arn:aws:ecr:us-east-1:*:repository/*"
    ]


def test_role_reads_only_the_lifecycle_prefix_and_no_checkpoints(prod):
    statements = by_sid(role_statements(prod, execution_role_id(prod)))
    artifact_arn = prod.resolved("storage", prod.platform.storage.artifact_bucket.bucket_arn)

    read = statements["ReadLifecycleScripts"]
    assert read["Action"] == "s3:GetObject"
    bucket, suffix = read["Resource"]["Fn::Join"][1]
    assert prod.exported(bucket) == ("storage", artifact_arn)
    assert suffix == f"/{LIFECYCLE_PREFIX}*"
    listing = statements["ListLifecycleScripts"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [f"{LIFECYCLE_PREFIX}*"]}}
    assert prod.exported(listing["Resource"]) == ("storage", artifact_arn)

    # Checkpoints belong to the teams' pod identities, never to every node.
    assert not any("Checkpoint" in sid for sid in statements)


def test_no_other_principal_in_the_stack_gets_the_node_permissions(prod):
    """Only the execution role and CDK's two handlers (the lifecycle upload and the cluster
    log group's retention) have roles here (no autoscaling); the retention handler may only
    manage log retention."""
    resources = hyperpod_resources(prod)
    roles = [k for k, v in resources.items() if v["Type"] == "AWS::IAM::Role"]
    others = sorted(r for r in roles if r != execution_role_id(prod))
    assert execution_role_id(prod) in roles and len(others) == 2
    assert others[0].startswith("CustomCDKBucketDeployment")
    assert others[1].startswith(LOG_RETENTION_HANDLER_ID)
    policies = [
        v["Properties"]["PolicyDocument"]["Statement"]
        for v in resources.values()
        if v["Type"] == "AWS::IAM::Policy"
        and any(r.get("Ref") == others[1] for r in v["Properties"]["Roles"])
    ]
    actions = {a for statements in policies for s in statements for a in s["Action"]}
    assert actions and all(a.startswith("logs:") for a in actions), actions


# --------------------------------------------------------------------------- autoscaling


def test_autoscaling_off_means_no_cluster_role(prod):
    props = cluster_props(prod)
    assert "AutoScaling" not in props and "ClusterRole" not in props
    prod.template("hyperpod").resource_properties_count_is(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": Match.object_like(
                {
                    "Statement": [
                        Match.object_like(
                            {"Principal": {"Service": "hyperpod.sagemaker.amazonaws.com"}}
                        )
                    ]
                }
            )
        },
        0,
    )


def test_cluster_outputs_name_and_arn_for_operators(prod):
    outputs = prod.templates["hyperpod"]["Outputs"]
    assert outputs["ClusterName"]["Value"] == "hyperpod-prod"
    assert outputs["ClusterArn"]["Value"] == {"Fn::GetAtt": [CLUSTER_LOGICAL_ID, "ClusterArn"]}


def test_a_retained_cluster_keeps_its_autoscaling_role():
    # Karpenter goes on adding and removing nodes of a retained cluster after its stack is
    # deleted, with this role.
    import aws_cdk as cdk

    from platform_constructs.hyperpod_role import HyperPodAutoscalingRole
    from tests.support import bare_stack, template_of

    stack = bare_stack()
    HyperPodAutoscalingRole(
        stack, "Autoscaling", cluster_name="c", removal_policy=cdk.RemovalPolicy.RETAIN
    )
    template_of(stack).has_resource(
        "AWS::IAM::Role", {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}
    )
