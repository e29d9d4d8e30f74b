"""Storage stack: FSx for Lustre, its KMS key, and the S3 buckets. Everything here is
stateful: retained when the environment says so (always in prod)."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config.schema import BucketsConfig, StorageConfig
from config.schema.storage import DATA_BUCKET_OUTPUT
from platform_constructs.eks_fsx_volume import LustreFileSystem
from platform_constructs.mlflow import MlflowServerProps, MlflowTrackingServer
from platform_constructs.storage import (
    AccessLogBucket,
    BucketKey,
    DataRepositoryProps,
    FsxLustre,
    FsxProps,
    SecureBucket,
    StorageKey,
    environment_role_arns,
    expire_noncurrent_versions,
    fsx_s3_access_role_arns,
)


def fsx_props(storage: StorageConfig) -> FsxProps:
    fsx = storage.fsx
    repository = fsx.data_repository
    return FsxProps(
        storage_capacity_gib=fsx.storage_capacity_gib,
        throughput_per_tib=fsx.throughput_per_tib,
        data_compression=fsx.data_compression,
        weekly_maintenance_start=fsx.weekly_maintenance_start,
        efa_enabled=fsx.efa_enabled,
        metadata_iops=fsx.metadata_iops,
        data_repository=DataRepositoryProps(
            file_system_path=repository.file_system_path,
            bucket_prefix=repository.bucket_prefix,
            auto_import=tuple(repository.auto_import),
            auto_export=tuple(repository.auto_export),
        ),
    )


class StorageStack(cdk.Stack):
    """Exports `file_system` (what mounts, volumes, grants and alarms need of the Lustre
    file system), `lustre` (its construct), `kms_key`, `data_bucket`, `checkpoint_bucket`,
    `artifact_bucket`, `access_log_bucket` and `mlflow_server_arn` (None unless
    storage.mlflow is enabled)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        storage: StorageConfig,
        role_prefix: str,
        subnet: ec2.ISubnet,
        security_group: ec2.ISecurityGroup,
        removal_policy: cdk.RemovalPolicy,
        mlflow_server_name: str,
        **kwargs: Any,
    ) -> None:
        """`subnet`: the cluster subnet of the training AZ (training I/O stays in-AZ: no
        cross-AZ latency or charges). `role_prefix`: the environment's stack name prefix, which
        every role CloudFormation names here starts with (the bucket keys' users).
        `removal_policy` applies to every resource here. `mlflow_server_name`: the tracking
        server's name where storage.mlflow is enabled."""
        super().__init__(scope, construct_id, **kwargs)
        buckets = storage.buckets
        self.kms_key: kms.IKey = StorageKey(self, "StorageKey", removal_policy=removal_policy)

        access_log_bucket = AccessLogBucket(
            self,
            "AccessLogBucket",
            removal_policy=removal_policy,
            retention_days=buckets.access_log_retention_days,
        )
        self.access_log_bucket: s3.IBucket = access_log_bucket
        self.data_key, self.checkpoint_key = self._bucket_keys(buckets, role_prefix, removal_policy)
        self.data_bucket, self.checkpoint_bucket, self.artifact_bucket = self._buckets(
            buckets, access_log_bucket, removal_policy
        )
        self.mlflow_server_arn = self._mlflow(storage, mlflow_server_name)
        self.lustre = FsxLustre(
            self,
            "Fsx",
            props=fsx_props(storage),
            subnet=subnet,
            security_group=security_group,
            kms_key=self.kms_key,
            data_bucket=self.data_bucket,
            removal_policy=removal_policy,
        )
        self.file_system = LustreFileSystem(
            file_system_id=self.lustre.file_system_id,
            arn=self.format_arn(
                service="fsx", resource="file-system", resource_name=self.lustre.file_system_id
            ),
            dns_name=self.lustre.dns_name,
            mount_name=self.lustre.mount_name,
            capacity_gib=storage.fsx.storage_capacity_gib,
            data_path=storage.fsx.data_repository.file_system_path,
        )

        self._outputs()

    def _bucket_keys(
        self, buckets: BucketsConfig, role_prefix: str, removal_policy: cdk.RemovalPolicy
    ) -> tuple[BucketKey, BucketKey]:
        """The data and checkpoint buckets' keys, each for the environment's roles and the
        configured users (the data key also for FSx's data repository role)."""
        own_roles = environment_role_arns(self, role_prefix)
        data_key = BucketKey(
            self,
            "DataKey",
            purpose="data",
            user_arns=[own_roles, fsx_s3_access_role_arns(self), *buckets.key_user_arns],
            removal_policy=removal_policy,
        )
        checkpoint_key = BucketKey(
            self,
            "CheckpointKey",
            purpose="checkpoint",
            user_arns=[own_roles, *buckets.key_user_arns],
            removal_policy=removal_policy,
        )
        return data_key, checkpoint_key

    def _buckets(
        self,
        buckets: BucketsConfig,
        access_log_bucket: AccessLogBucket,
        removal_policy: cdk.RemovalPolicy,
    ) -> tuple[s3.IBucket, s3.IBucket, s3.IBucket]:
        """The data, checkpoint and artifact buckets."""
        data_bucket = SecureBucket(
            self,
            "DataBucket",
            removal_policy=removal_policy,
            access_log_bucket=access_log_bucket,
            encryption_key=self.data_key,
            versioned=True,
            lifecycle_rules=[expire_noncurrent_versions("data", buckets.data_noncurrent_days)],
        )
        checkpoint_bucket = SecureBucket(
            self,
            "CheckpointBucket",
            removal_policy=removal_policy,
            access_log_bucket=access_log_bucket,
            encryption_key=self.checkpoint_key,
            # An overwritten or deleted checkpoint stays recoverable for a while.
            versioned=True,
            lifecycle_rules=[
                expire_noncurrent_versions("checkpoints", buckets.checkpoint_noncurrent_days)
            ],
        )
        # Lifecycle scripts and other deploy artifacts: small, and every version is the
        # record of what the nodes ran, so versions are kept.
        artifact_bucket = SecureBucket(
            self,
            "ArtifactBucket",
            removal_policy=removal_policy,
            access_log_bucket=access_log_bucket,
            versioned=True,
        )
        return data_bucket, checkpoint_bucket, artifact_bucket

    def _mlflow(self, storage: StorageConfig, server_name: str) -> str | None:
        """The MLflow tracking server's ARN, where storage.mlflow is enabled."""
        if not storage.mlflow.enabled:
            return None
        # Run artifacts beside the platform's other artifacts, under their own prefix.
        mlflow = MlflowTrackingServer(
            self,
            "Mlflow",
            props=MlflowServerProps(
                name=server_name,
                artifact_prefix=storage.mlflow.artifact_prefix,
                size=storage.mlflow.size,
                weekly_maintenance_window_start=storage.mlflow.weekly_maintenance_window_start,
                mlflow_version=storage.mlflow.mlflow_version,
            ),
            bucket=self.artifact_bucket,
        )
        cdk.CfnOutput(self, "MlflowTrackingServerArn", value=mlflow.arn)
        return mlflow.arn

    def _outputs(self) -> None:
        cdk.CfnOutput(self, "FileSystemId", value=self.file_system.file_system_id)
        cdk.CfnOutput(self, "FileSystemDnsName", value=self.file_system.dns_name)
        cdk.CfnOutput(self, "FileSystemMountName", value=self.file_system.mount_name)
        cdk.CfnOutput(self, DATA_BUCKET_OUTPUT, value=self.data_bucket.bucket_name)
        cdk.CfnOutput(self, "CheckpointBucketName", value=self.checkpoint_bucket.bucket_name)
        cdk.CfnOutput(self, "ArtifactBucketName", value=self.artifact_bucket.bucket_name)
