"""Storage stack of every environment: FSx for Lustre, its data repository association, the
buckets, the KMS key and removal policies. Templates come from the session fixtures (dev,
staging, prod); pinned logical IDs and replacement-only values are in tests/stability/."""

from __future__ import annotations

import json

import pytest
from aws_cdk import RemovalPolicy
from aws_cdk.assertions import Match, Template

from platform_constructs.retention import stateful_removal_policy
from tests.support import SYNTH_GROUP, SynthResult

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)

RETAINED = {"dev": False, "staging": True, "prod": True}
TRAINING_AZ = {"dev": "us-east-1a", "staging": "us-east-1b", "prod": "us-east-1a"}
FSX_UPDATABLE = {
    "dev": {"StorageCapacity": 1200, "PerUnitStorageThroughput": 125, "Weekly": "6:03:00"},
    "staging": {"StorageCapacity": 4800, "PerUnitStorageThroughput": 250, "Weekly": "6:03:00"},
    "prod": {"StorageCapacity": 24000, "PerUnitStorageThroughput": 500, "Weekly": "7:03:00"},
}
CHECKPOINT_NONCURRENT_DAYS = {"dev": 3, "staging": 7, "prod": 14}
ACCESS_LOG_DAYS = {"dev": 90, "staging": 365, "prod": 731}
BUCKET_PREFIX = {"dev": "", "staging": "", "prod": "datasets/"}
BUCKETS = ("access_log_bucket", "data_bucket", "checkpoint_bucket", "artifact_bucket")
# The buckets with a customer key of their own, and that key's attribute on the stack.
KEYED_BUCKETS = {"data_bucket": "data_key", "checkpoint_bucket": "checkpoint_key"}
LOGGED_BUCKETS = {
    "data_bucket": "DataBucket/",
    "checkpoint_bucket": "CheckpointBucket/",
    "artifact_bucket": "ArtifactBucket/",
}
STATEFUL_TYPES = (
    "AWS::FSx::FileSystem",
    "AWS::FSx::DataRepositoryAssociation",
    "AWS::S3::Bucket",
    "AWS::KMS::Key",
    "AWS::Logs::LogGroup",
)


def storage(result: SynthResult) -> Template:
    return result.template("storage")


def raw(result: SynthResult) -> dict:
    return result.templates["storage"]


def resources(result: SynthResult, type_: str) -> dict[str, dict]:
    return result.resources("storage", type_)


def storage_ids(result: SynthResult) -> dict[str, str]:
    """Logical IDs of the stack's stateful resources, by role."""
    stack = result.stacks["storage"]
    return {
        "kms_key": result.logical_id("storage", stack.kms_key),
        "file_system": result.logical_id("storage", stack.lustre.resource),
        "data_repository": result.logical_id("storage", stack.lustre.data_repository),
    } | {
        name: result.logical_id("storage", getattr(stack, name))
        for name in (*BUCKETS, *KEYED_BUCKETS.values())
    }


def file_system(result: SynthResult) -> dict:
    return raw(result)["Resources"][storage_ids(result)["file_system"]]


def bucket(result: SynthResult, name: str) -> dict:
    return raw(result)["Resources"][storage_ids(result)[name]]


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
    key = storage_ids(env)["kms_key"]
    assert file_system(env)["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
    # The file system's key and one per keyed bucket, all rotating, all recoverable alike.
    storage(env).resource_count_is("AWS::KMS::Key", 1 + len(KEYED_BUCKETS))
    for key in resources(env, "AWS::KMS::Key").values():
        assert key["Properties"]["EnableKeyRotation"] is True
        assert key["Properties"]["PendingWindowInDays"] == (30 if RETAINED[env.env_name] else 7)


def test_file_system_sits_in_the_training_azs_cluster_subnet(env):
    assert env.platform.storage is env.stacks["storage"]
    assert env.config.training_availability_zone == TRAINING_AZ[env.env_name]
    (subnet,) = file_system(env)["Properties"]["SubnetIds"]
    expected = env.stacks["network"].cluster_subnets[TRAINING_AZ[env.env_name]]
    assert env.exported(subnet) == ("network", {"Ref": env.logical_id("network", expected)})
    subnet_resource = env.templates["network"]["Resources"][env.logical_id("network", expected)]
    assert subnet_resource["Properties"]["AvailabilityZone"] == TRAINING_AZ[env.env_name]


def test_file_system_uses_the_efa_security_group(env):
    (group,) = file_system(env)["Properties"]["SecurityGroupIds"]
    efa = env.logical_id("network", env.stacks["network"].efa_security_group)
    assert env.exported(group) == ("network", {"Fn::GetAtt": [efa, "GroupId"]})


def test_data_repository_association_links_the_data_bucket(env):
    ids = storage_ids(env)
    storage(env).resource_count_is("AWS::FSx::DataRepositoryAssociation", 1)
    events = ["NEW", "CHANGED", "DELETED"]
    storage(env).has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {
            "FileSystemId": {"Ref": ids["file_system"]},
            "FileSystemPath": "/data",
            "BatchImportMetaDataOnCreate": True,
            "S3": {"AutoImportPolicy": {"Events": events}, "AutoExportPolicy": {"Events": events}},
        },
    )
    dra = raw(env)["Resources"][ids["data_repository"]]
    prefix = BUCKET_PREFIX[env.env_name]
    parts = ["s3://", {"Ref": ids["data_bucket"]}] + ([f"/{prefix}"] if prefix else [])
    assert dra["Properties"]["DataRepositoryPath"] == {"Fn::Join": ["", parts]}


def test_stack_exports_the_file_system_it_built(env):
    stack = env.stacks["storage"]
    resolve = stack.resolve
    file_system_id = storage_ids(env)["file_system"]
    file_system = stack.file_system
    assert resolve(file_system.file_system_id) == {"Ref": file_system_id}
    assert resolve(file_system.dns_name) == {"Fn::GetAtt": [file_system_id, "DNSName"]}
    assert resolve(file_system.mount_name) == {"Fn::GetAtt": [file_system_id, "LustreMountName"]}
    config = env.config
    assert file_system.capacity_gib == config.storage.fsx.storage_capacity_gib
    assert resolve(file_system.arn) == {
        "Fn::Join": [
            "",
            [f"arn:aws:fsx:{config.region}:{config.account}:file-system/", {"Ref": file_system_id}],
        ]
    }


# --------------------------------------------------------------------------- buckets


def test_four_buckets_and_no_auto_delete_handler(env):
    storage(env).resource_count_is("AWS::S3::Bucket", 4)
    storage(env).resource_count_is("Custom::S3AutoDeleteObjects", 0)
    storage(env).resource_count_is("AWS::Lambda::Function", 0)
    stack = env.stacks["storage"]
    for name in BUCKETS:
        assert stack.resolve(getattr(stack, name).bucket_name) == {"Ref": storage_ids(env)[name]}


@pytest.mark.parametrize("name", BUCKETS)
def test_bucket_baseline(env, name):
    props = bucket(env, name)["Properties"]
    if name in KEYED_BUCKETS:
        key = env.logical_id("storage", getattr(env.stacks["storage"], KEYED_BUCKETS[name]))
        assert props["BucketEncryption"] == {
            "ServerSideEncryptionConfiguration": [
                {
                    "BucketKeyEnabled": True,
                    "ServerSideEncryptionByDefault": {
                        "KMSMasterKeyID": {"Fn::GetAtt": [key, "Arn"]},
                        "SSEAlgorithm": "aws:kms",
                    },
                }
            ]
        }
    else:
        assert props["BucketEncryption"] == {
            "ServerSideEncryptionConfiguration": [
                {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
            ]
        }
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert "BucketName" not in props  # physical names are left to CloudFormation
    assert {
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
        "Id": "abort-incomplete-multipart-uploads",
        "Status": "Enabled",
    } in props["LifecycleConfiguration"]["Rules"]


@pytest.mark.parametrize("name", BUCKETS)
def test_bucket_policy_denies_plain_http_and_old_tls(env, name):
    logical = storage_ids(env)[name]
    arn = {"Fn::GetAtt": [logical, "Arn"]}
    resources_ = [arn, {"Fn::Join": ["", [arn, "/*"]]}]
    storage(env).has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": logical},
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
    assert {
        "ExpirationInDays": ACCESS_LOG_DAYS[env.env_name],
        "Id": "expire-access-logs",
        "Status": "Enabled",
    } in props["LifecycleConfiguration"]["Rules"]


def test_checkpoint_noncurrent_versions_expire_per_environment(env):
    rules = bucket(env, "checkpoint_bucket")["Properties"]["LifecycleConfiguration"]["Rules"]
    assert {
        "Id": "expire-noncurrent-checkpoints",
        "NoncurrentVersionExpiration": {"NoncurrentDays": CHECKPOINT_NONCURRENT_DAYS[env.env_name]},
        "Status": "Enabled",
    } in rules


def test_data_noncurrent_versions_expire(env):
    rules = bucket(env, "data_bucket")["Properties"]["LifecycleConfiguration"]["Rules"]
    assert {
        "Id": "expire-noncurrent-data",
        "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
        "Status": "Enabled",
    } in rules


def test_artifact_versions_are_kept(env):
    rules = bucket(env, "artifact_bucket")["Properties"]["LifecycleConfiguration"]["Rules"]
    assert all(
        "NoncurrentVersionExpiration" not in r and "ExpirationInDays" not in r for r in rules
    )


@pytest.mark.parametrize(("name", "prefix"), sorted(LOGGED_BUCKETS.items()))
def test_buckets_log_to_the_access_log_bucket(env, name, prefix):
    ids = storage_ids(env)
    assert bucket(env, name)["Properties"]["LoggingConfiguration"] == {
        "DestinationBucketName": {"Ref": ids["access_log_bucket"]},
        "LogFilePrefix": prefix,
    }
    log_bucket_arn = {"Fn::GetAtt": [ids["access_log_bucket"], "Arn"]}
    storage(env).has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": ids["access_log_bucket"]},
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
                                    "ArnLike": {
                                        "aws:SourceArn": {"Fn::GetAtt": [ids[name], "Arn"]}
                                    },
                                    "StringEquals": {
                                        "aws:SourceAccount": env.stacks["storage"].account
                                    },
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
    assert env.config.retain_stateful is RETAINED[env.env_name]
    assert stateful_removal_policy(env.config.retain_stateful) == (
        RemovalPolicy.RETAIN if RETAINED[env.env_name] else RemovalPolicy.DESTROY
    )
    found = 0
    for type_ in STATEFUL_TYPES:
        for logical, resource in resources(env, type_).items():
            found += 1
            assert resource.get("DeletionPolicy") == policy, logical
            assert resource.get("UpdateReplacePolicy") == policy, logical
    assert found == len(storage_ids(env))


@pytest.mark.parametrize("name", ["staging", "prod"])
def test_retaining_environments_retain_every_stateful_resource(synth_all, name):
    template = storage(synth_all[name])
    for type_ in STATEFUL_TYPES[:4]:
        template.all_resources(type_, {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"})


# --------------------------------------------------------------------------- bucket keys


def _key_policy(result: SynthResult, attribute: str) -> dict:
    key = result.logical_id("storage", getattr(result.stacks["storage"], attribute))
    resource = raw(result)["Resources"][key]
    assert resource["Properties"]["EnableKeyRotation"] is True
    policy: dict = resource["Properties"]["KeyPolicy"]
    return policy


def _arn_text(value: object) -> str:
    """An ARN written with Fn::Join around the partition, as text ("aws" for the token)."""
    if isinstance(value, dict):
        return "".join(p if isinstance(p, str) else "aws" for p in value["Fn::Join"][1])
    return str(value)


@pytest.mark.parametrize("attribute", sorted(KEYED_BUCKETS.values()))
def test_bucket_keys_name_their_users_and_are_used_only_through_s3(env, attribute):
    config = env.loaded.config
    admin, users = _key_policy(env, attribute)["Statement"]
    # The account administers the key but cannot use it through this statement.
    assert admin["Sid"] == "KeyAdministration"
    assert not {"kms:*", "kms:Decrypt", "kms:Encrypt"} & set(admin["Action"])
    assert users["Sid"] == "KeyUsersThroughS3"
    assert sorted(users["Action"]) == [
        "kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*",
    ]  # fmt: skip
    assert users["Condition"]["StringEquals"]["kms:CallerAccount"] == config.account
    via = _arn_text(users["Condition"]["StringEquals"]["kms:ViaService"])
    assert via.startswith(f"s3.{config.region}.")
    named = [_arn_text(a) for a in users["Condition"]["ArnLike"]["aws:PrincipalArn"]]
    own = f"arn:aws:iam::{config.account}:role/hyperpod-{config.environment}-*"
    assert named[0] == own
    fsx = (
        f"arn:aws:iam::{config.account}:role/aws-service-role/"
        "s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_*"
    )
    assert (fsx in named) == (attribute == "data_key")
    assert not any("kms:*" in json.dumps(s) for s in (admin, users))


def test_platform_roles_are_named_after_their_stacks(env):
    """The keys name the environment's roles by prefix: every role CloudFormation names is
    in a stack called <prefix>-<unit>, and none sets a name outside it."""
    prefix = f"hyperpod-{env.loaded.config.environment}-"
    for name, template in env.templates.items():
        assert env.stacks[name].stack_name.startswith(prefix)
        for role in [r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Role"]:
            explicit = role["Properties"].get("RoleName")
            assert explicit is None or str(explicit).startswith(prefix), explicit
