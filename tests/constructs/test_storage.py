"""Storage constructs on a bare stack, fed props: the Lustre configuration, the data
repository association, the file system's key and bucket lifecycle rules."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3

from platform_constructs.storage import (
    DataRepositoryProps,
    FsxLustre,
    FsxProps,
    StorageKey,
    data_repository_s3,
    expire_noncurrent_versions,
    lustre_configuration,
)
from tests.support import bare_stack, only, resources_of, template_of

ALL_EVENTS = ("NEW", "CHANGED", "DELETED")
REPOSITORY = DataRepositoryProps(
    file_system_path="/data", bucket_prefix="", auto_import=ALL_EVENTS, auto_export=ALL_EVENTS
)


def fsx_props(**changes) -> FsxProps:
    values = {
        "storage_capacity_gib": 1200,
        "throughput_per_tib": 125,
        "data_compression": "LZ4",
        "weekly_maintenance_start": "7:03:00",
        "efa_enabled": False,
        "metadata_iops": None,
        "data_repository": REPOSITORY,
    }
    return FsxProps(**(values | changes))


def test_efa_enabled_file_system_gets_efa_and_provisioned_metadata():
    lustre = lustre_configuration(
        fsx_props(
            storage_capacity_gib=4800,
            throughput_per_tib=1000,
            efa_enabled=True,
            metadata_iops=12000,
        )
    )
    assert lustre.efa_enabled is True
    assert lustre.deployment_type == "PERSISTENT_2"
    assert lustre.metadata_configuration.mode == "USER_PROVISIONED"
    assert lustre.metadata_configuration.iops == 12000


def test_default_file_system_has_automatic_metadata_and_no_efa():
    lustre = lustre_configuration(fsx_props())
    assert lustre.efa_enabled is False
    assert lustre.metadata_configuration.mode == "AUTOMATIC"
    assert lustre.metadata_configuration.iops is None


def test_empty_event_lists_leave_that_direction_off():
    s3_policy = data_repository_s3(
        DataRepositoryProps(
            file_system_path="/data", bucket_prefix="", auto_import=(), auto_export=("NEW",)
        )
    )
    assert s3_policy.auto_import_policy is None
    assert s3_policy.auto_export_policy.events == ["NEW"]


def test_expire_noncurrent_versions_names_its_purpose():
    rule = expire_noncurrent_versions("checkpoints", 14)
    assert rule.id == "expire-noncurrent-checkpoints"
    assert rule.noncurrent_version_expiration.to_days() == 14


@pytest.mark.parametrize(
    ("policy", "window", "deletion"),
    [(cdk.RemovalPolicy.RETAIN, 30, "Retain"), (cdk.RemovalPolicy.DESTROY, 7, "Delete")],
)
def test_storage_key_rotates_and_waits_longer_where_state_is_retained(policy, window, deletion):
    stack = bare_stack()
    StorageKey(stack, "Key", removal_policy=policy)
    key = only(resources_of(template_of(stack), "AWS::KMS::Key"))
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["Properties"]["PendingWindowInDays"] == window
    assert key["DeletionPolicy"] == deletion


@pytest.fixture(scope="module")
def lustre_template() -> dict:
    stack = bare_stack()
    FsxLustre(
        stack,
        "Fsx",
        props=fsx_props(
            metadata_iops=3000,
            data_repository=DataRepositoryProps(
                file_system_path="/datasets",
                bucket_prefix="raw/",
                auto_import=("NEW",),
                auto_export=(),
            ),
        ),
        subnet=ec2.Subnet.from_subnet_attributes(
            stack, "Subnet", subnet_id="subnet-0123456789abcdef0", availability_zone="us-west-2a"
        ),
        security_group=ec2.SecurityGroup.from_security_group_id(
            stack, "Group", "sg-0123456789abcdef0"
        ),
        kms_key=StorageKey(stack, "Key", removal_policy=cdk.RemovalPolicy.RETAIN),
        data_bucket=s3.Bucket.from_bucket_name(stack, "Data", "data-bucket"),
        removal_policy=cdk.RemovalPolicy.RETAIN,
    )
    return template_of(stack).to_json()


def test_file_system_follows_its_props(lustre_template):
    file_system = only(resources_of(lustre_template, "AWS::FSx::FileSystem"))
    props = file_system["Properties"]
    assert (props["FileSystemType"], props["FileSystemTypeVersion"], props["StorageType"]) == (
        "LUSTRE",
        "2.15",
        "SSD",
    )
    assert props["StorageCapacity"] == 1200
    assert props["SubnetIds"] == ["subnet-0123456789abcdef0"]
    assert props["SecurityGroupIds"] == ["sg-0123456789abcdef0"]
    assert props["LustreConfiguration"]["MetadataConfiguration"] == {
        "Mode": "USER_PROVISIONED",
        "Iops": 3000,
    }
    assert file_system["DeletionPolicy"] == file_system["UpdateReplacePolicy"] == "Retain"


def test_data_repository_lives_and_dies_with_the_file_system(lustre_template):
    association = only(resources_of(lustre_template, "AWS::FSx::DataRepositoryAssociation"))
    props = association["Properties"]
    assert props["DataRepositoryPath"] == "s3://data-bucket/raw/"
    assert props["FileSystemPath"] == "/datasets"
    assert props["BatchImportMetaDataOnCreate"] is True
    assert props["S3"] == {"AutoImportPolicy": {"Events": ["NEW"]}}
    assert association["DeletionPolicy"] == "Retain"
