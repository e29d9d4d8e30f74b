"""Shared storage: S3 buckets with one secure baseline, and FSx for Lustre linked to the
data bucket.

The data and checkpoint buckets are encrypted with customer keys of their own (SSE-KMS with
S3 Bucket Keys, so the checkpoint path adds few KMS requests). Each key's policy lets the
account administer it and names its users: the environment's own roles (CloudFormation
names them after their stacks, `<environment prefix>-*`), the data bucket's FSx service-
linked role (created with the data repository association, so named by its documented path
and prefix: "Working with server-side encrypted Amazon S3 buckets", FSx for Lustre User
Guide), and the principals the config adds, each only through S3 in this account. Grants
on the buckets (`grant_read` and the like) carry the key grant with them. The artifact and
access log buckets stay SSE-S3 (server access log buckets must). The file system has its
own customer key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from platform_constructs.l1 import default_resource
from platform_constructs.nag import acknowledge

# Lustre 2.15: required for EFA and metadata configuration; pinned so a service default
# change never shows up as a diff.
LUSTRE_VERSION = "2.15"
# Abandoned multipart uploads (an interrupted checkpoint upload) are invisible but billed.
ABORT_INCOMPLETE_UPLOADS_DAYS = 7


@dataclass(frozen=True, kw_only=True)
class DataRepositoryProps:
    """Where the data bucket appears in the file system and which changes flow each way
    (NEW, CHANGED, DELETED; an empty tuple leaves that direction off)."""

    file_system_path: str
    bucket_prefix: str
    auto_import: tuple[str, ...]
    auto_export: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class FsxProps:
    """A PERSISTENT_2 file system. `metadata_iops` None: AUTOMATIC metadata mode."""

    storage_capacity_gib: int
    throughput_per_tib: int
    data_compression: str
    weekly_maintenance_start: str
    efa_enabled: bool
    metadata_iops: int | None
    data_repository: DataRepositoryProps


class StorageKey(kms.Key):
    """The customer key of the file system: rotated yearly; after deletion, recoverable for
    30 days where the environment retains state, 7 where nothing is retained."""

    def __init__(
        self, scope: Construct, construct_id: str, *, removal_policy: cdk.RemovalPolicy
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description="Encrypts the FSx for Lustre file system of "
            f"{cdk.Stack.of(scope).stack_name}",
            enable_key_rotation=True,
            removal_policy=removal_policy,
            pending_window=cdk.Duration.days(
                30 if removal_policy == cdk.RemovalPolicy.RETAIN else 7
            ),
        )


# What the account may do to a bucket key (administration), and what its users may do.
KEY_ADMIN_ACTIONS = (
    "kms:CancelKeyDeletion",
    "kms:Create*",
    "kms:Delete*",
    "kms:Describe*",
    "kms:Disable*",
    "kms:Enable*",
    "kms:Get*",
    "kms:List*",
    "kms:Put*",
    "kms:Revoke*",
    "kms:RotateKeyOnDemand",
    "kms:ScheduleKeyDeletion",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:Update*",
)
KEY_USER_ACTIONS = (
    "kms:Decrypt",
    "kms:DescribeKey",
    "kms:Encrypt",
    "kms:GenerateDataKey*",
    "kms:ReEncrypt*",
)
# FSx for Lustre's per-file-system role for a linked bucket (its path and name prefix).
FSX_S3_ACCESS_ROLE = (
    "aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_"
)


class BucketKey(kms.Key):
    """A bucket's customer key: rotated yearly, recoverable like the file system's key, and
    used only by `user_arns` (ARN patterns) through S3 in this account."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        purpose: str,
        user_arns: Sequence[str],
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        stack = cdk.Stack.of(scope)
        super().__init__(
            scope,
            construct_id,
            description=f"Encrypts the {purpose} bucket of {stack.stack_name}",
            enable_key_rotation=True,
            removal_policy=removal_policy,
            pending_window=cdk.Duration.days(
                30 if removal_policy == cdk.RemovalPolicy.RETAIN else 7
            ),
        )
        self.user_arns = tuple(user_arns)
        account = iam.AccountRootPrincipal()
        policy = iam.PolicyDocument(
            statements=[
                iam.PolicyStatement(
                    sid="KeyAdministration",
                    principals=[account],
                    actions=list(KEY_ADMIN_ACTIONS),
                    resources=["*"],
                ),
                iam.PolicyStatement(
                    sid="KeyUsersThroughS3",
                    principals=[account],
                    actions=list(KEY_USER_ACTIONS),
                    resources=["*"],
                    conditions={
                        "StringEquals": {
                            "kms:ViaService": f"s3.{stack.region}.{stack.url_suffix}",
                            "kms:CallerAccount": stack.account,
                        },
                        "ArnLike": {"aws:PrincipalArn": list(self.user_arns)},
                    },
                ),
            ]
        )
        # The whole policy, in place of CDK's default (the account may do anything, which
        # names no user). Grants to this account's roles still go to the roles' own
        # policies (CDK trusts account identities), so key and roles' stacks stay apart.
        default_resource(self, kms.CfnKey).add_property_override(
            "KeyPolicy", stack.resolve(policy.to_json())
        )


def environment_role_arns(scope: Construct, role_prefix: str) -> str:
    """Every IAM role of the environment: CloudFormation names a role after its stack."""
    return cdk.Stack.of(scope).format_arn(
        service="iam", region="", resource="role", resource_name=f"{role_prefix}-*"
    )


def fsx_s3_access_role_arns(scope: Construct) -> str:
    return cdk.Stack.of(scope).format_arn(
        service="iam", region="", resource="role", resource_name=f"{FSX_S3_ACCESS_ROLE}*"
    )


def expire_noncurrent_versions(purpose: str, days: int) -> s3.LifecycleRule:
    """Delete overwritten or deleted versions of a versioned bucket's objects after `days`."""
    return s3.LifecycleRule(
        id=f"expire-noncurrent-{purpose}",
        noncurrent_version_expiration=cdk.Duration.days(days),
    )


class SecureBucket(s3.Bucket):
    """An S3 bucket with the platform's baseline: SSE-S3 (SSE-KMS with a Bucket Key when
    given `encryption_key`), all public access blocked, TLS 1.2+ only, ACLs disabled, server
    access logs to `access_log_bucket`, incomplete multipart uploads aborted. Physical names
    are left to CloudFormation."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        removal_policy: cdk.RemovalPolicy,
        access_log_bucket: s3.Bucket | None,
        versioned: bool,
        lifecycle_rules: Sequence[s3.LifecycleRule] = (),
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            encryption=s3.BucketEncryption.KMS
            if encryption_key is not None
            else s3.BucketEncryption.S3_MANAGED,
            encryption_key=encryption_key,
            bucket_key_enabled=True if encryption_key is not None else None,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=versioned,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="abort-incomplete-multipart-uploads",
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(
                        ABORT_INCOMPLETE_UPLOADS_DAYS
                    ),
                ),
                *lifecycle_rules,
            ],
            # Destroy (dev) deletes an empty bucket only: auto-deleting objects would add a
            # Lambda-backed custom resource to every environment's template for dev's sake.
            removal_policy=removal_policy,
        )
        if access_log_bucket is not None:
            self._log_to(access_log_bucket, prefix=f"{construct_id}/")

    def _log_to(self, target: s3.Bucket, *, prefix: str) -> None:
        """Server access logs to `target` under `prefix`, granted by the target's bucket
        policy (its ACLs are disabled). Written out rather than left to the
        `server_access_logs_bucket` prop, whose grant (ACL or policy) depends on a feature
        flag: the template is the same however the app is built."""
        resource = default_resource(self, s3.CfnBucket)
        resource.logging_configuration = s3.CfnBucket.LoggingConfigurationProperty(
            destination_bucket_name=target.bucket_name, log_file_prefix=prefix
        )
        target.add_to_resource_policy(
            iam.PolicyStatement(
                sid=f"ServerAccessLogsFrom{self.node.id}",
                principals=[iam.ServicePrincipal("logging.s3.amazonaws.com")],
                actions=["s3:PutObject"],
                resources=[target.arn_for_objects(f"{prefix}*")],
                conditions={
                    "ArnLike": {"aws:SourceArn": self.bucket_arn},
                    "StringEquals": {"aws:SourceAccount": cdk.Stack.of(self).account},
                },
            )
        )


class AccessLogBucket(SecureBucket):
    """Target of the other buckets' server access logs, expired after `retention_days`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        removal_policy: cdk.RemovalPolicy,
        retention_days: int,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            removal_policy=removal_policy,
            access_log_bucket=None,
            # Log objects are written once and never overwritten: versions protect nothing.
            versioned=False,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-access-logs", expiration=cdk.Duration.days(retention_days)
                )
            ],
        )
        acknowledge(
            self,
            "S1",
            "This is the server access log bucket of the other buckets; logging it into "
            "itself would log its own log deliveries without end",
        )


def lustre_configuration(props: FsxProps) -> fsx.CfnFileSystem.LustreConfigurationProperty:
    """The LustreConfiguration of a PERSISTENT_2 file system for `props`."""
    if props.metadata_iops is None:
        metadata = fsx.CfnFileSystem.MetadataConfigurationProperty(mode="AUTOMATIC")
    else:
        metadata = fsx.CfnFileSystem.MetadataConfigurationProperty(
            mode="USER_PROVISIONED", iops=props.metadata_iops
        )
    return fsx.CfnFileSystem.LustreConfigurationProperty(
        deployment_type="PERSISTENT_2",
        per_unit_storage_throughput=props.throughput_per_tib,
        data_compression_type=props.data_compression,
        weekly_maintenance_start_time=props.weekly_maintenance_start,
        # EFA (and GPUDirect Storage) needs PERSISTENT_2, a metadata configuration and a
        # security group with all traffic to and from itself. It is fixed at creation.
        efa_enabled=props.efa_enabled,
        metadata_configuration=metadata,
    )


def data_repository_s3(
    props: DataRepositoryProps,
) -> fsx.CfnDataRepositoryAssociation.S3Property:
    """Auto import/export policies; an empty event list leaves that direction off."""
    return fsx.CfnDataRepositoryAssociation.S3Property(
        auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(
            events=list(props.auto_import)
        )
        if props.auto_import
        else None,
        auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(
            events=list(props.auto_export)
        )
        if props.auto_export
        else None,
    )


class FsxLustre(Construct):
    """FSx for Lustre (PERSISTENT_2, SSD, customer KMS key) in one subnet, with a data
    repository association to `data_bucket`.

    Exposes `file_system_id`, `dns_name` and `mount_name` (what a Lustre mount or a
    static CSI volume needs) and `resource` (the CfnFileSystem).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        props: FsxProps,
        subnet: ec2.ISubnet,
        security_group: ec2.ISecurityGroup,
        kms_key: kms.IKey,
        data_bucket: s3.IBucket,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.resource = fsx.CfnFileSystem(
            self,
            "FileSystem",
            file_system_type="LUSTRE",
            file_system_type_version=LUSTRE_VERSION,
            storage_type="SSD",
            storage_capacity=props.storage_capacity_gib,
            subnet_ids=[subnet.subnet_id],
            security_group_ids=[security_group.security_group_id],
            kms_key_id=kms_key.key_arn,
            lustre_configuration=lustre_configuration(props),
        )
        self.resource.apply_removal_policy(removal_policy)

        repository = props.data_repository
        self.data_repository = fsx.CfnDataRepositoryAssociation(
            self,
            "DataRepository",
            file_system_id=self.resource.ref,
            file_system_path=repository.file_system_path,
            data_repository_path=f"s3://{data_bucket.bucket_name}/{repository.bucket_prefix}"
            if repository.bucket_prefix
            else f"s3://{data_bucket.bucket_name}",
            # List what is already in the bucket when the association is created.
            batch_import_meta_data_on_create=True,
            s3=data_repository_s3(repository),
        )
        # Deleting the association would stop exporting pending changes of a retained file
        # system: it lives and dies with the file system.
        self.data_repository.apply_removal_policy(removal_policy)

        self.file_system_id: str = self.resource.ref
        self.dns_name: str = self.resource.attr_dns_name
        self.mount_name: str = self.resource.attr_lustre_mount_name
