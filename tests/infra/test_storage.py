"""Storage stack: FSx for Lustre, its data repository association, the buckets, the KMS key,
removal policies, pinned logical IDs, replacement-only properties, and the storage config
rules.

Templates come from the session fixtures (dev, staging, prod). Two extra apps, each built
once for this module, prove that config changes replace nothing in the network and storage
stacks and leave the HyperPod cluster's create-only properties alone: everyday changes
(counts, a new group, the GPU group's training plan removed, ...) and an AZ list that is
reordered and grows by one AZ.
"""

from __future__ import annotations

import copy

import pytest
import yaml
from aws_cdk import RemovalPolicy
from aws_cdk.assertions import Match, Template

from config.loader import CONFIG_DIR, ConfigError, parse_config
from config.schema import DataRepositoryConfig, FsxConfig
from platform_constructs.storage import data_repository_s3, lustre_configuration
from tests.conftest import ENVIRONMENTS, SynthResult, synthesize

RETAINED = {"dev": False, "staging": True, "prod": True}
TRAINING_AZ = {"dev": "us-west-2a", "staging": "us-west-2b", "prod": "us-east-1a"}

# Logical IDs of every stateful resource of the storage stack (the same in every
# environment). Changing one replaces the resource: FSx data, bucket contents and the key
# that decrypts them are lost or orphaned. Update only together with a migration plan.
PINNED_LOGICAL_IDS: dict[str, str] = {
    "kms_key": "StorageKeyB6649B55",
    "file_system": "FsxFileSystem7053E557",
    "data_repository": "FsxDataRepositoryEF613421",
    "access_log_bucket": "AccessLogBucketDA470295",
    "data_bucket": "DataBucketE3889A50",
    "checkpoint_bucket": "CheckpointBucketDFE4871A",
    "artifact_bucket": "ArtifactBucket7410C9EF",
}
STATEFUL_TYPES = (
    "AWS::FSx::FileSystem",
    "AWS::FSx::DataRepositoryAssociation",
    "AWS::S3::Bucket",
    "AWS::KMS::Key",
    "AWS::Logs::LogGroup",
)

# AWS::FSx::FileSystem properties whose change replaces the file system (CloudFormation
# reference, "Update requires: Replacement"), plus FileSystemTypeVersion, treated the same
# here: a Lustre version change is an operation to plan, never a side effect of a deploy.
# The provider schema's createOnlyProperties lists only the top-level ones; the test below
# checks this list still covers them.
FSX_REPLACEMENT_PATHS: tuple[tuple[str, ...], ...] = (
    ("FileSystemType",),
    ("FileSystemTypeVersion",),
    ("StorageType",),
    ("SubnetIds",),
    ("SecurityGroupIds",),
    ("KmsKeyId",),
    ("BackupId",),
    ("LustreConfiguration", "DeploymentType"),
    ("LustreConfiguration", "EfaEnabled"),
    ("LustreConfiguration", "DriveCacheType"),
    ("LustreConfiguration", "ImportPath"),
    ("LustreConfiguration", "ExportPath"),
    ("LustreConfiguration", "ImportedFileChunkSize"),
)
DRA_REPLACEMENT_PATHS: tuple[tuple[str, ...], ...] = (
    ("FileSystemId",),
    ("FileSystemPath",),
    ("DataRepositoryPath",),
    ("BatchImportMetaDataOnCreate",),
)

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
FSX_UPDATABLE = {
    "dev": {"StorageCapacity": 1200, "PerUnitStorageThroughput": 125, "Weekly": "6:03:00"},
    "staging": {"StorageCapacity": 4800, "PerUnitStorageThroughput": 250, "Weekly": "6:03:00"},
    "prod": {"StorageCapacity": 24000, "PerUnitStorageThroughput": 500, "Weekly": "7:03:00"},
}
CHECKPOINT_NONCURRENT_DAYS = {"dev": 3, "staging": 7, "prod": 14}
ACCESS_LOG_DAYS = {"dev": 90, "staging": 365, "prod": 731}
BUCKET_PREFIX = {"dev": "", "staging": "", "prod": "datasets/"}


@pytest.fixture(params=ENVIRONMENTS)
def env(request) -> SynthResult:
    return request.getfixturevalue(request.param)


def storage(result: SynthResult) -> Template:
    return result.template("storage")


def raw(result: SynthResult, stack: str = "storage") -> dict:
    return result.templates[stack]


def resources(result: SynthResult, type_: str, stack: str = "storage") -> dict[str, dict]:
    return {k: v for k, v in raw(result, stack)["Resources"].items() if v["Type"] == type_}


def file_system(result: SynthResult) -> dict:
    return raw(result)["Resources"][PINNED_LOGICAL_IDS["file_system"]]


def bucket(result: SynthResult, name: str) -> dict:
    return raw(result)["Resources"][PINNED_LOGICAL_IDS[name]]


def dig(properties: dict, path: tuple[str, ...]) -> object:
    value: object = properties
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def imported(result: SynthResult, value: object) -> object:
    """The network template's value behind an Fn::ImportValue of the storage template."""
    assert isinstance(value, dict) and set(value) == {"Fn::ImportValue"}, value
    name = value["Fn::ImportValue"]
    outputs = raw(result, "network")["Outputs"].values()
    (output,) = [o for o in outputs if o.get("Export", {}).get("Name") == name]
    return output["Value"]


def network_logical_id(result: SynthResult, construct) -> str:
    stack = result.stacks["network"]
    return stack.get_logical_id(construct.node.default_child)


def replacement_values(result: SynthResult) -> dict[str, object]:
    """The FSx replacement-only values, references resolved to what they name."""
    props = file_system(result)["Properties"]
    network = result.stacks["network"]
    subnet_by_id = {network_logical_id(result, s): az for az, s in network.cluster_subnets.items()}
    values: dict[str, object] = {}
    for path in FSX_REPLACEMENT_PATHS:
        values[".".join(path)] = dig(props, path)
    (subnet,) = values["SubnetIds"]  # type: ignore[misc]
    values["SubnetIds"] = f"cluster subnet {subnet_by_id[imported(result, subnet)['Ref']]}"
    (group,) = values["SecurityGroupIds"]  # type: ignore[misc]
    efa = network_logical_id(result, network.efa_security_group)
    assert imported(result, group) == {"Fn::GetAtt": [efa, "GroupId"]}
    values["SecurityGroupIds"] = "EFA security group"
    return values


# --------------------------------------------------------------------------- FSx


def test_one_persistent2_lustre_file_system(env):
    storage(env).resource_count_is("AWS::FSx::FileSystem", 1)
    updatable = FSX_UPDATABLE[env.env_name]
    storage(env).has_resource_properties(
        "AWS::FSx::FileSystem",
        {
            "FileSystemType": "LUSTRE",
            "FileSystemTypeVersion": "2.15",
            "StorageType": "SSD",
            "StorageCapacity": updatable["StorageCapacity"],
            "LustreConfiguration": {
                "DeploymentType": "PERSISTENT_2",
                "PerUnitStorageThroughput": updatable["PerUnitStorageThroughput"],
                "DataCompressionType": "LZ4",
                "WeeklyMaintenanceStartTime": updatable["Weekly"],
                "EfaEnabled": False,
                "MetadataConfiguration": {"Mode": "AUTOMATIC"},
            },
        },
    )


def test_file_system_uses_the_rotating_customer_key(env):
    key = PINNED_LOGICAL_IDS["kms_key"]
    assert file_system(env)["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
    storage(env).resource_count_is("AWS::KMS::Key", 1)
    storage(env).has_resource_properties(
        "AWS::KMS::Key",
        {"EnableKeyRotation": True, "PendingWindowInDays": 30 if RETAINED[env.env_name] else 7},
    )


def test_file_system_sits_in_the_training_azs_cluster_subnet(env):
    assert env.platform.storage is env.stacks["storage"]
    from config.loader import load_environment

    assert load_environment(env.env_name).config.training_availability_zone == TRAINING_AZ[env.env_name]
    (subnet,) = file_system(env)["Properties"]["SubnetIds"]
    expected = env.stacks["network"].cluster_subnets[TRAINING_AZ[env.env_name]]
    assert imported(env, subnet) == {"Ref": network_logical_id(env, expected)}
    subnet_resource = raw(env, "network")["Resources"][network_logical_id(env, expected)]
    assert subnet_resource["Properties"]["AvailabilityZone"] == TRAINING_AZ[env.env_name]


def test_file_system_uses_the_efa_security_group(env):
    (group,) = file_system(env)["Properties"]["SecurityGroupIds"]
    efa = network_logical_id(env, env.stacks["network"].efa_security_group)
    assert imported(env, group) == {"Fn::GetAtt": [efa, "GroupId"]}


def test_data_repository_association_links_the_data_bucket(env):
    storage(env).resource_count_is("AWS::FSx::DataRepositoryAssociation", 1)
    events = ["NEW", "CHANGED", "DELETED"]
    storage(env).has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {
            "FileSystemId": {"Ref": PINNED_LOGICAL_IDS["file_system"]},
            "FileSystemPath": "/data",
            "BatchImportMetaDataOnCreate": True,
            "S3": {"AutoImportPolicy": {"Events": events}, "AutoExportPolicy": {"Events": events}},
        },
    )
    dra = raw(env)["Resources"][PINNED_LOGICAL_IDS["data_repository"]]
    prefix = BUCKET_PREFIX[env.env_name]
    parts = ["s3://", {"Ref": PINNED_LOGICAL_IDS["data_bucket"]}] + ([f"/{prefix}"] if prefix else [])
    assert dra["Properties"]["DataRepositoryPath"] == {"Fn::Join": ["", parts]}


def test_stack_exposes_file_system_attributes_for_mounts(env):
    stack = env.stacks["storage"]
    resolve = stack.resolve
    assert resolve(stack.file_system_id) == {"Ref": PINNED_LOGICAL_IDS["file_system"]}
    assert resolve(stack.dns_name) == {"Fn::GetAtt": [PINNED_LOGICAL_IDS["file_system"], "DNSName"]}
    assert resolve(stack.mount_name) == {
        "Fn::GetAtt": [PINNED_LOGICAL_IDS["file_system"], "LustreMountName"]
    }
    assert stack.file_system.file_system_id == stack.file_system_id
    assert stack.file_system.dns_name == stack.dns_name
    assert stack.file_system.mount_name == stack.mount_name


# --------------------------------------------------------------------------- buckets

BUCKETS = ("access_log_bucket", "data_bucket", "checkpoint_bucket", "artifact_bucket")
LOGGED_BUCKETS = {"data_bucket": "DataBucket/", "checkpoint_bucket": "CheckpointBucket/",
                  "artifact_bucket": "ArtifactBucket/"}


def test_four_buckets_and_no_auto_delete_handler(env):
    storage(env).resource_count_is("AWS::S3::Bucket", 4)
    storage(env).resource_count_is("Custom::S3AutoDeleteObjects", 0)
    storage(env).resource_count_is("AWS::Lambda::Function", 0)
    stack = env.stacks["storage"]
    for name in BUCKETS:
        assert stack.resolve(getattr(stack, name).bucket_name) == {"Ref": PINNED_LOGICAL_IDS[name]}


@pytest.mark.parametrize("name", BUCKETS)
def test_bucket_baseline(env, name):
    props = bucket(env, name)["Properties"]
    assert props["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
    }
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert "BucketName" not in props  # physical names are left to CloudFormation
    assert {"AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
            "Id": "abort-incomplete-multipart-uploads", "Status": "Enabled"} in props[
        "LifecycleConfiguration"
    ]["Rules"]


@pytest.mark.parametrize("name", BUCKETS)
def test_bucket_policy_denies_plain_http_and_old_tls(env, name):
    arn = {"Fn::GetAtt": [PINNED_LOGICAL_IDS[name], "Arn"]}
    resources_ = [arn, {"Fn::Join": ["", [arn, "/*"]]}]
    storage(env).has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": PINNED_LOGICAL_IDS[name]},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        {
                            "Action": "s3:*",
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            "Effect": "Deny",
                            "Principal": {"AWS": "*"},
                            "Resource": resources_,
                        },
                        {
                            "Action": "s3:*",
                            "Condition": {"NumericLessThan": {"s3:TlsVersion": 1.2}},
                            "Effect": "Deny",
                            "Principal": {"AWS": "*"},
                            "Resource": resources_,
                        },
                    ]
                )
            },
        },
    )


@pytest.mark.parametrize("name", ["data_bucket", "checkpoint_bucket", "artifact_bucket"])
def test_data_checkpoint_and_artifact_buckets_are_versioned(env, name):
    assert bucket(env, name)["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}


def test_access_log_bucket_is_not_versioned_and_expires_logs(env):
    props = bucket(env, "access_log_bucket")["Properties"]
    assert "VersioningConfiguration" not in props
    assert "LoggingConfiguration" not in props  # it does not log into itself
    assert {"ExpirationInDays": ACCESS_LOG_DAYS[env.env_name], "Id": "expire-access-logs",
            "Status": "Enabled"} in props["LifecycleConfiguration"]["Rules"]


def test_checkpoint_noncurrent_versions_expire_per_environment(env):
    rules = bucket(env, "checkpoint_bucket")["Properties"]["LifecycleConfiguration"]["Rules"]
    assert {"Id": "expire-noncurrent-checkpoints", "NoncurrentVersionExpiration":
            {"NoncurrentDays": CHECKPOINT_NONCURRENT_DAYS[env.env_name]}, "Status": "Enabled"} in rules


def test_data_noncurrent_versions_expire(env):
    rules = bucket(env, "data_bucket")["Properties"]["LifecycleConfiguration"]["Rules"]
    assert {"Id": "expire-noncurrent-data", "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
            "Status": "Enabled"} in rules


def test_artifact_versions_are_kept(env):
    rules = bucket(env, "artifact_bucket")["Properties"]["LifecycleConfiguration"]["Rules"]
    assert all("NoncurrentVersionExpiration" not in r and "ExpirationInDays" not in r for r in rules)


@pytest.mark.parametrize("name,prefix", sorted(LOGGED_BUCKETS.items()))
def test_buckets_log_to_the_access_log_bucket(env, name, prefix):
    assert bucket(env, name)["Properties"]["LoggingConfiguration"] == {
        "DestinationBucketName": {"Ref": PINNED_LOGICAL_IDS["access_log_bucket"]},
        "LogFilePrefix": prefix,
    }
    log_bucket_arn = {"Fn::GetAtt": [PINNED_LOGICAL_IDS["access_log_bucket"], "Arn"]}
    storage(env).has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": PINNED_LOGICAL_IDS["access_log_bucket"]},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": "s3:PutObject",
                                "Effect": "Allow",
                                "Principal": {"Service": "logging.s3.amazonaws.com"},
                                "Resource": {"Fn::Join": ["", [log_bucket_arn, f"/{prefix}*"]]},
                                "Condition": {
                                    "ArnLike": {"aws:SourceArn": {"Fn::GetAtt": [PINNED_LOGICAL_IDS[name], "Arn"]}},
                                    "StringEquals": {"aws:SourceAccount": env.stacks["storage"].account},
                                },
                            }
                        )
                    ]
                )
            },
        },
    )


# --------------------------------------------------------------------------- removal


def test_stateful_resources_are_retained_or_deleted_per_environment(env):
    policy = "Retain" if RETAINED[env.env_name] else "Delete"
    assert env.stacks["storage"].removal_policy == (
        RemovalPolicy.RETAIN if RETAINED[env.env_name] else RemovalPolicy.DESTROY
    )
    found = 0
    for type_ in STATEFUL_TYPES:
        for logical, resource in resources(env, type_).items():
            found += 1
            assert resource.get("DeletionPolicy") == policy, logical
            assert resource.get("UpdateReplacePolicy") == policy, logical
    assert found == len(PINNED_LOGICAL_IDS)


@pytest.mark.parametrize("name", ["staging", "prod"])
def test_retaining_environments_retain_every_stateful_resource(request, name):
    template = storage(request.getfixturevalue(name))
    for type_ in STATEFUL_TYPES[:4]:
        template.all_resources(type_, {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"})


# --------------------------------------------------------------------------- identity


def test_stateful_logical_ids_are_pinned(env):
    stack = env.stacks["storage"]
    actual = {
        "kms_key": stack.get_logical_id(stack.kms_key.node.default_child),
        "file_system": stack.get_logical_id(stack.file_system.resource),
        "data_repository": stack.get_logical_id(stack.file_system.data_repository),
    } | {name: stack.get_logical_id(getattr(stack, name).node.default_child) for name in BUCKETS}
    assert actual == PINNED_LOGICAL_IDS
    stateful = {k for t in STATEFUL_TYPES for k in resources(env, t)}
    assert stateful == set(PINNED_LOGICAL_IDS.values())


def test_replacement_only_fsx_values_are_pinned_per_environment(env):
    assert replacement_values(env) == FSX_PINNED_VALUES[env.env_name]


def test_replacement_paths_cover_the_provider_schema():
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    for type_, paths in (
        ("AWS::FSx::FileSystem", FSX_REPLACEMENT_PATHS),
        ("AWS::FSx::DataRepositoryAssociation", DRA_REPLACEMENT_PATHS),
    ):
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region="us-east-1", resource_type=type_)
        create_only = {
            tuple(p.removeprefix("/properties/").split("/"))
            for p in schema.schema.get("createOnlyProperties", [])
        }
        assert create_only <= set(paths), type_


# --------------------------------------------------------------------------- config changes

VARIANT_GROUP = {
    "name": "gpu-g5-eval",
    "instance_type": "ml.g5.12xlarge",
    "count": 2,
    "labels": {"workload": "evaluation"},
}


def _synthesize_prod_variant(tmp_path_factory: pytest.TempPathFactory, name: str, mutate) -> SynthResult:
    """prod.yaml changed by `mutate`, loaded and planned by the same loader as `cdk synth`
    (parse_config, plan_layout) and synthesized like the session apps."""
    data = yaml.safe_load((CONFIG_DIR / "prod.yaml").read_text())
    mutate(data)
    config_dir = tmp_path_factory.mktemp(f"{name}-config")
    (config_dir / "prod.yaml").write_text(yaml.safe_dump(data))
    return synthesize("prod", tmp_path_factory.mktemp(f"cdk-{name}"), config_dir=config_dir)


def _everyday_changes(data: dict) -> None:
    data["storage"]["fsx"]["throughput_per_tib"] = 1000
    data["storage"]["fsx"]["weekly_maintenance_start"] = "6:05:30"
    data["storage"]["buckets"]["checkpoint_noncurrent_days"] = 30
    groups = data["hyperpod"]["instance_groups"]
    groups[0]["count"] += 2
    groups[1]["count"] += 1
    # The plan ended: the group now lands in any cluster-level subnet. FSx stays where
    # storage.fsx.availability_zone puts it.
    assert groups[0]["name"] == GPU_GROUP
    del groups[0]["training_plan"]
    groups.append(VARIANT_GROUP)
    data["network"]["https_egress_cidrs"] = ["203.0.113.10/32"]


# Reordered, with us-east-1d added between existing AZs. The cluster-level AZs (HyperPod's
# VpcConfig, fixed at creation) are reordered but not extended.
CHANGED_NETWORK_AZS = ["us-east-1c", "us-east-1a", "us-east-1d", "us-east-1b"]
CHANGED_HYPERPOD_AZS = ["us-east-1c", "us-east-1a", "us-east-1b"]
ADDED_AZ = "us-east-1d"
GPU_GROUP = "gpu-p5"


def _az_changes(data: dict) -> None:
    assert sorted(data["network"]["availability_zones"]) == sorted(CHANGED_HYPERPOD_AZS)
    data["network"]["availability_zones"] = list(CHANGED_NETWORK_AZS)
    data["hyperpod"]["availability_zones"] = list(CHANGED_HYPERPOD_AZS)


@pytest.fixture(scope="module")
def variant(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    """prod with everyday changes: FSx throughput and maintenance window, bucket retention,
    node counts, the GPU group's training plan removed, a new instance group, a deliberate
    HTTPS egress CIDR."""
    return _synthesize_prod_variant(tmp_path_factory, "variant", _everyday_changes)


@pytest.fixture(scope="module")
def az_variant(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    """prod with its AZs reordered and one AZ added."""
    return _synthesize_prod_variant(tmp_path_factory, "az-variant", _az_changes)


@pytest.fixture(params=["variant", "az_variant"])
def changed(request) -> SynthResult:
    return request.getfixturevalue(request.param)


def _create_only_paths(type_: str) -> list[tuple[str, ...]]:
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region="us-east-1", resource_type=type_)
    paths = schema.schema.get("createOnlyProperties") or []
    return [tuple(p.removeprefix("/properties/").split("/")) for p in paths]


def _replacement_paths(type_: str) -> list[tuple[str, ...]]:
    """The provider schema's create-only properties, plus the nested FSx ones it omits."""
    extra = {
        "AWS::FSx::FileSystem": FSX_REPLACEMENT_PATHS,
        "AWS::FSx::DataRepositoryAssociation": DRA_REPLACEMENT_PATHS,
    }.get(type_, ())
    return sorted(set(_create_only_paths(type_)) | set(extra))


def test_config_changes_keep_every_network_and_storage_logical_id(prod, changed):
    # Every resource survives under its logical ID: the VPC, its CIDR association, every
    # subnet, route table, NAT gateway and EIP, the security groups and endpoints, FSx, the
    # DRA, the buckets and the keys (a new logical ID is a replacement).
    for stack in ("network", "storage"):
        after = raw(changed, stack)["Resources"]
        for logical, resource in raw(prod, stack)["Resources"].items():
            assert logical in after, (stack, logical)
            assert after[logical]["Type"] == resource["Type"], (stack, logical)
    covered = {r["Type"] for stack in ("network", "storage") for r in raw(prod, stack)["Resources"].values()}
    assert {*STATEFUL_TYPES, "AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::VPCCidrBlock"} <= covered


def test_config_changes_leave_create_only_properties_unchanged(prod, changed):
    assert replacement_values(changed) == replacement_values(prod)
    checked: set[str] = set()
    for stack in ("network", "storage"):
        for logical, resource in raw(prod, stack)["Resources"].items():
            after = raw(changed, stack)["Resources"][logical].get("Properties", {})
            for path in _replacement_paths(resource["Type"]):
                assert dig(after, path) == dig(resource.get("Properties", {}), path), (logical, path)
            checked.add(resource["Type"])
    assert {
        "AWS::EC2::VPC", "AWS::EC2::VPCCidrBlock", "AWS::EC2::Subnet", "AWS::EC2::NatGateway",
        "AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation", "AWS::S3::Bucket", "AWS::KMS::Key",
    } <= checked


def test_config_changes_leave_the_hyperpod_clusters_create_only_properties_unchanged(prod, changed):
    before = resources(prod, "AWS::SageMaker::Cluster", "hyperpod")
    after = resources(changed, "AWS::SageMaker::Cluster", "hyperpod")
    assert len(before) == 1 and set(after) == set(before)
    paths = _create_only_paths("AWS::SageMaker::Cluster")
    assert {("ClusterName",), ("VpcConfig",)} <= set(paths)
    for logical, resource in before.items():
        assert dig(resource["Properties"], ("VpcConfig", "Subnets")), logical
        for path in paths:
            assert dig(after[logical]["Properties"], path) == dig(resource["Properties"], path), path


def test_the_changes_took_effect(variant, az_variant):
    """The variants differ from prod where intended (else the tests above prove nothing)."""
    assert az_variant.stacks["network"].availability_zones == CHANGED_NETWORK_AZS
    assert ADDED_AZ in az_variant.stacks["network"].cluster_subnets
    (cluster,) = resources(variant, "AWS::SageMaker::Cluster", "hyperpod").values()
    (gpu,) = [g for g in cluster["Properties"]["InstanceGroups"] if g["InstanceGroupName"] == GPU_GROUP]
    assert "TrainingPlanArn" not in gpu and "OverrideVpcConfig" not in gpu


def test_an_added_az_gets_its_planned_subnets_and_routes_to_the_lowest_letter_nat(prod, az_variant):
    network = az_variant.stacks["network"]
    layout = network.network.layout
    before = prod.stacks["network"].network.layout
    for kind in ("public", "infra"):
        assert {az: c for az, c in getattr(layout, kind).items() if az != ADDED_AZ} == getattr(before, kind)
    assert {az: p.cidr for az, p in layout.cluster.items() if az != ADDED_AZ} == {
        az: p.cidr for az, p in before.cluster.items()
    }
    templates = raw(az_variant, "network")["Resources"]
    for kind, subnet, cidr in (
        ("public", network.network.public_subnets[ADDED_AZ], layout.public[ADDED_AZ]),
        ("infra", network.infra_subnets[ADDED_AZ], layout.infra[ADDED_AZ]),
        ("cluster", network.cluster_subnets[ADDED_AZ], layout.cluster[ADDED_AZ].cidr),
    ):
        props = templates[network_logical_id(az_variant, subnet)]["Properties"]
        assert (props["AvailabilityZone"], props["CidrBlock"]) == (ADDED_AZ, str(cidr)), kind
    # nat_gateways is 3: they stay in a, b and c; d's private subnets use a's.
    assert sorted(network.network.nat_gateways) == ["us-east-1a", "us-east-1b", "us-east-1c"]
    assert set(resources(az_variant, "AWS::EC2::NatGateway", "network")) == set(
        resources(prod, "AWS::EC2::NatGateway", "network")
    )
    lowest = network.resolve(network.network.nat_gateways["us-east-1a"].ref)
    for subnet in (network.infra_subnets[ADDED_AZ], network.cluster_subnets[ADDED_AZ]):
        table = network.resolve(subnet.route_table.route_table_id)
        (route,) = [
            r["Properties"]
            for r in resources(az_variant, "AWS::EC2::Route", "network").values()
            if r["Properties"]["RouteTableId"] == table
        ]
        assert route["NatGatewayId"] == lowest


def test_reordering_and_adding_azs_only_extends_the_endpoints_subnet_lists(prod, az_variant):
    """Every prod resource is unchanged except the endpoints, which also list the new AZ's
    subnets (interface endpoints) or route tables (S3 gateway endpoint): no route moves
    to another NAT gateway, and the storage stack does not change at all."""
    assert raw(az_variant, "storage")["Resources"] == raw(prod, "storage")["Resources"]
    after = raw(az_variant, "network")["Resources"]
    changed = {k for k, v in raw(prod, "network")["Resources"].items() if after[k] != v}
    assert changed == set(resources(prod, "AWS::EC2::VPCEndpoint", "network"))
    for logical in changed:
        before_props = raw(prod, "network")["Resources"][logical]["Properties"]
        after_props = after[logical]["Properties"]
        key = "SubnetIds" if "SubnetIds" in before_props else "RouteTableIds"
        assert {k: v for k, v in after_props.items() if k != key} == {
            k: v for k, v in before_props.items() if k != key
        }, logical
        assert len(after_props[key]) == len(before_props[key]) + (1 if key == "SubnetIds" else 2), logical
        assert all(ref in after_props[key] for ref in before_props[key]), logical


def test_config_changes_reach_the_updatable_properties(variant):
    storage(variant).has_resource_properties(
        "AWS::FSx::FileSystem",
        {"LustreConfiguration": Match.object_like(
            {"PerUnitStorageThroughput": 1000, "WeeklyMaintenanceStartTime": "6:05:30"}
        )},
    )
    rules = bucket(variant, "checkpoint_bucket")["Properties"]["LifecycleConfiguration"]["Rules"]
    assert {"Id": "expire-noncurrent-checkpoints", "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
            "Status": "Enabled"} in rules


def test_https_egress_cidr_becomes_one_narrow_rule_on_the_efa_group(variant):
    network = variant.stacks["network"]
    efa = network.get_logical_id(network.efa_security_group.node.default_child)
    variant.template("network").has_resource_properties(
        "AWS::EC2::SecurityGroup",
        {
            "GroupDescription": Match.string_like_regexp("^HyperPod nodes"),
            "SecurityGroupEgress": Match.array_with(
                [Match.object_like({"CidrIp": "203.0.113.10/32", "IpProtocol": "tcp",
                                    "FromPort": 443, "ToPort": 443})]
            ),
        },
    )
    inline = raw(variant, "network")["Resources"][efa]["Properties"]["SecurityGroupEgress"]
    assert sorted(r.get("CidrIp", "prefix-list") for r in inline) == ["203.0.113.10/32", "prefix-list"]


# --------------------------------------------------------------------------- pure functions


def test_efa_enabled_file_system_gets_efa_and_provisioned_metadata():
    config = FsxConfig(
        availability_zone="us-east-1a",
        storage_capacity_gib=4800,
        throughput_per_tib=1000,
        efa_enabled=True,
        metadata_iops=12000,
    )
    lustre = lustre_configuration(config)
    assert lustre.efa_enabled is True
    assert lustre.deployment_type == "PERSISTENT_2"
    assert lustre.metadata_configuration.mode == "USER_PROVISIONED"
    assert lustre.metadata_configuration.iops == 12000


def test_default_file_system_has_automatic_metadata_and_no_efa():
    lustre = lustre_configuration(
        FsxConfig(availability_zone="us-east-1a", storage_capacity_gib=1200, throughput_per_tib=125)
    )
    assert lustre.efa_enabled is False
    assert lustre.metadata_configuration.mode == "AUTOMATIC"
    assert lustre.metadata_configuration.iops is None


def test_empty_event_lists_leave_that_direction_off():
    s3 = data_repository_s3(DataRepositoryConfig(auto_import=[], auto_export=["NEW"]))
    assert s3.auto_import_policy is None
    assert s3.auto_export_policy.events == ["NEW"]


# --------------------------------------------------------------------------- config rules


def _dev_data() -> dict:
    return yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())


def _error_lines(mutate) -> list[str]:
    data = copy.deepcopy(_dev_data())
    mutate(data)
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "test")
    return caught.value.lines


@pytest.mark.parametrize("iops", [1000, 2000, 13000, 204000])
def test_rule_metadata_iops_must_be_a_valid_value(iops):
    lines = _error_lines(lambda d: d["storage"]["fsx"].__setitem__("metadata_iops", iops))
    assert len(lines) == 1
    assert lines[0].startswith("storage.fsx.metadata_iops: ")
    assert f"{iops} is not an FSx for Lustre metadata IOPS value" in lines[0]


@pytest.mark.parametrize("iops", [1500, 3000, 6000, 12000, 24000, 192000])
def test_valid_metadata_iops_are_accepted(iops):
    data = copy.deepcopy(_dev_data())
    data["storage"]["fsx"]["metadata_iops"] = iops
    assert parse_config(data, "test").storage.fsx.metadata_iops == iops


@pytest.mark.parametrize("path", ["/data//raw", "/data/../etc", "/./data", "/data/."])
def test_rule_file_system_path_must_be_normalized(path):
    lines = _error_lines(
        lambda d: d["storage"]["fsx"].__setitem__("data_repository", {"file_system_path": path})
    )
    assert len(lines) == 1
    assert lines[0].startswith("storage.fsx.data_repository.file_system_path: ")
    assert "not a normalized path" in lines[0]


@pytest.mark.parametrize("field", ["auto_import", "auto_export"])
def test_rule_repository_events_listed_once(field):
    lines = _error_lines(
        lambda d: d["storage"]["fsx"].__setitem__("data_repository", {field: ["NEW", "NEW"]})
    )
    assert lines == [
        f"storage.fsx.data_repository.{field}: listed more than once: NEW; list each event once"
    ]


def test_data_noncurrent_days_is_bounded():
    lines = _error_lines(lambda d: d["storage"]["buckets"].__setitem__("data_noncurrent_days", 0))
    assert len(lines) == 1 and lines[0].startswith("storage.buckets.data_noncurrent_days: ")
