"""Identity of every stateful resource: logical IDs pinned per environment, and the values
of the properties that would replace FSx if they changed. A diff here is a replacement
(data lost or orphaned): update these tables only together with a migration plan."""

from __future__ import annotations

import pytest

from platform_constructs.hyperpod_cluster import CLUSTER_LOGICAL_ID
from tests.stability.replacement import (
    DRA_REPLACEMENT_PATHS,
    FSX_REPLACEMENT_PATHS,
    create_only_paths,
    fsx_replacement_values,
)
from tests.support import ENVIRONMENTS, SYNTH_GROUP, SynthResult, cluster_network

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)

# The VPC, its secondary CIDR association, the internet gateway and every subnet (keyed by
# AZ name, never by list position). A subnet cannot be replaced while anything uses it, and
# its replacement would collide with its own CIDR.
# All environments run in us-east-1 (dev and staging moved there, with prod, while none held
# data: a Region change is a new deployment, not an update).
# Every environment's network is closed (egress: closed): no internet gateway, no public
# subnets (their ranges stay reserved in the plan, so a later NAT changes nothing here).
_US_EAST_1 = {
    "infra:us-east-1a": "NetworkInfraSubnetuseast1aSubnetCDC8D1A0",
    "infra:us-east-1b": "NetworkInfraSubnetuseast1bSubnetCA25B456",
    "infra:us-east-1c": "NetworkInfraSubnetuseast1cSubnet56631B8F",
    "cluster:us-east-1a": "NetworkClusterSubnetuseast1aSubnetBC60B358",
    "cluster:us-east-1b": "NetworkClusterSubnetuseast1bSubnet2ABC252B",
    "cluster:us-east-1c": "NetworkClusterSubnetuseast1cSubnet2C5E9783",
}
_COMMON = {"vpc": "NetworkVpc7FB7348F"}
_SECONDARY_CIDR = {"secondary-cidr": "NetworkClusterCidr94778D2C"}
NETWORK_LOGICAL_IDS: dict[str, dict[str, str]] = {
    "dev": _COMMON | {k: v for k, v in _US_EAST_1.items() if not k.endswith("1c")},
    "staging": _COMMON | _SECONDARY_CIDR | _US_EAST_1,
    "prod": _COMMON | _SECONDARY_CIDR | _US_EAST_1,
}

# Every stateful resource of the storage stack (the same in every environment): FSx data,
# bucket contents and the key that decrypts them.
STORAGE_LOGICAL_IDS: dict[str, str] = {
    "kms_key": "StorageKeyB6649B55",
    "file_system": "FsxFileSystem7053E557",
    "data_repository": "FsxDataRepositoryEF613421",
    "access_log_bucket": "AccessLogBucketDA470295",
    "data_bucket": "DataBucketE3889A50",
    "checkpoint_bucket": "CheckpointBucketDFE4871A",
    "artifact_bucket": "ArtifactBucket7410C9EF",
    "data_key": "DataKey17AFBB84",
    "checkpoint_key": "CheckpointKey6ED5B60F",
}
BUCKETS = ("access_log_bucket", "data_bucket", "checkpoint_bucket", "artifact_bucket")
STORAGE_STATEFUL_TYPES = (
    "AWS::FSx::FileSystem",
    "AWS::FSx::DataRepositoryAssociation",
    "AWS::S3::Bucket",
    "AWS::KMS::Key",
    "AWS::Logs::LogGroup",
)

TRAINING_AZ = {"dev": "us-east-1a", "staging": "us-east-1b", "prod": "us-east-1a"}
# The replacement-only values per environment, written out: a diff here is a replacement.
FSX_PINNED_VALUES: dict[str, dict[str, object]] = {
    env: {
        "FileSystemType": "LUSTRE",
        "FileSystemTypeVersion": "2.15",
        "StorageType": "SSD",
        "KmsKeyId": {"Fn::GetAtt": ["StorageKeyB6649B55", "Arn"]},
        "BackupId": None,
        "LustreConfiguration.DeploymentType": "PERSISTENT_2",
        "LustreConfiguration.EfaEnabled": False,
        "LustreConfiguration.DriveCacheType": None,
        "LustreConfiguration.ImportPath": None,
        "LustreConfiguration.ExportPath": None,
        "LustreConfiguration.ImportedFileChunkSize": None,
        "SubnetIds": f"cluster subnet {TRAINING_AZ[env]}",
        "SecurityGroupIds": "EFA security group",
    }
    for env in ENVIRONMENTS
}


def test_network_logical_ids_are_pinned(env: SynthResult):
    stack = env.stacks["network"]
    network = cluster_network(env)
    pinned = NETWORK_LOGICAL_IDS[env.env_name]
    actual = {"vpc": env.logical_id("network", stack.vpc)}
    if network.internet_gateway is not None:
        actual["igw"] = env.logical_id("network", network.internet_gateway)
    for kind, subnets in (
        ("public", network.public_subnets),
        ("infra", stack.infra_subnets),
        ("cluster", stack.cluster_subnets),
    ):
        actual |= {f"{kind}:{az}": env.logical_id("network", s) for az, s in subnets.items()}
    if network.secondary_cidr is not None:
        actual["secondary-cidr"] = env.logical_id("network", network.secondary_cidr)
    assert actual == pinned
    resources = env.templates["network"]["Resources"]
    for logical in pinned.values():
        assert logical in resources
    subnets = {k for k, v in resources.items() if v["Type"] == "AWS::EC2::Subnet"}
    assert {k for k in pinned.values() if resources[k]["Type"] == "AWS::EC2::Subnet"} == subnets


def test_storage_logical_ids_are_pinned(env: SynthResult):
    stack = env.stacks["storage"]
    actual = {
        "kms_key": env.logical_id("storage", stack.kms_key),
        "file_system": env.logical_id("storage", stack.lustre.resource),
        "data_repository": env.logical_id("storage", stack.lustre.data_repository),
    } | {
        name: env.logical_id("storage", getattr(stack, name))
        for name in (*BUCKETS, "data_key", "checkpoint_key")
    }
    assert actual == STORAGE_LOGICAL_IDS
    stateful = {k for t in STORAGE_STATEFUL_TYPES for k in env.resources("storage", t)}
    assert stateful == set(STORAGE_LOGICAL_IDS.values())


def test_hyperpod_cluster_logical_id_is_pinned(env: SynthResult):
    # Renaming it would make CloudFormation replace the cluster and its nodes.
    assert set(env.resources("hyperpod", "AWS::SageMaker::Cluster")) == {CLUSTER_LOGICAL_ID}
    assert CLUSTER_LOGICAL_ID == "HyperPodCluster"
    cluster = env.stacks["hyperpod"].cluster.resource
    assert env.resolved("hyperpod", cluster.ref) == {"Ref": CLUSTER_LOGICAL_ID}


def test_replacement_only_fsx_values_are_pinned_per_environment(env: SynthResult):
    assert fsx_replacement_values(env) == FSX_PINNED_VALUES[env.env_name]


def test_replacement_paths_cover_the_provider_schema():
    for type_, paths in (
        ("AWS::FSx::FileSystem", FSX_REPLACEMENT_PATHS),
        ("AWS::FSx::DataRepositoryAssociation", DRA_REPLACEMENT_PATHS),
    ):
        assert set(create_only_paths(type_)) <= set(paths), type_
