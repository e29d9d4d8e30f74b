"""Storage stack: FSx for Lustre, its KMS key, and the S3 buckets. Everything here is
stateful: retained when the environment says so (always in prod)."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config.schema import EnvironmentConfig
from platform_constructs.storage import AccessLogBucket, FsxLustre, SecureBucket
from stacks.network_stack import NetworkStack
from platform_constructs.retention import stateful_removal_policy


class StorageStack(cdk.Stack):
    """Owns `file_system` (with `file_system_id`, `dns_name`, `mount_name`), `kms_key`,
    `data_bucket`, `checkpoint_bucket`, `artifact_bucket` and `access_log_bucket`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        network: NetworkStack,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        storage = config.storage
        # The one place this stack maps `retain_stateful`: every resource here takes it.
        self.removal_policy = stateful_removal_policy(config.retain_stateful)

        self.kms_key: kms.IKey = kms.Key(
            self,
            "StorageKey",
            description=f"Encrypts the FSx for Lustre file system of {self.stack_name}",
            enable_key_rotation=True,
            removal_policy=self.removal_policy,
            # Shortest window where nothing is retained (dev: short-lived file systems).
            pending_window=cdk.Duration.days(
                30 if self.removal_policy == cdk.RemovalPolicy.RETAIN else 7
            ),
        )

        access_log_bucket = AccessLogBucket(
            self,
            "AccessLogBucket",
            removal_policy=self.removal_policy,
            retention_days=storage.buckets.access_log_retention_days,
        )
        self.access_log_bucket: s3.IBucket = access_log_bucket
        self.data_bucket: s3.IBucket = SecureBucket(
            self,
            "DataBucket",
            removal_policy=self.removal_policy,
            access_log_bucket=access_log_bucket,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-noncurrent-data",
                    noncurrent_version_expiration=cdk.Duration.days(
                        storage.buckets.data_noncurrent_days
                    ),
                )
            ],
        )
        self.checkpoint_bucket: s3.IBucket = SecureBucket(
            self,
            "CheckpointBucket",
            removal_policy=self.removal_policy,
            access_log_bucket=access_log_bucket,
            # An overwritten or deleted checkpoint stays recoverable for a while.
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-noncurrent-checkpoints",
                    noncurrent_version_expiration=cdk.Duration.days(
                        storage.buckets.checkpoint_noncurrent_days
                    ),
                )
            ],
        )
        # Lifecycle scripts and other deploy artifacts: small, and every version is the
        # record of what the nodes ran, so versions are kept.
        self.artifact_bucket: s3.IBucket = SecureBucket(
            self,
            "ArtifactBucket",
            removal_policy=self.removal_policy,
            access_log_bucket=access_log_bucket,
            versioned=True,
        )

        # In the training AZ: training I/O stays in-AZ (no cross-AZ latency or charges).
        self.file_system = FsxLustre(
            self,
            "Fsx",
            config=storage.fsx,
            subnet=network.cluster_subnets[config.training_availability_zone],
            security_group=network.efa_security_group,
            kms_key=self.kms_key,
            data_bucket=self.data_bucket,
            removal_policy=self.removal_policy,
        )
        self.file_system_id: str = self.file_system.file_system_id
        self.dns_name: str = self.file_system.dns_name
        self.mount_name: str = self.file_system.mount_name

        cdk.CfnOutput(self, "FileSystemId", value=self.file_system_id)
        cdk.CfnOutput(self, "FileSystemDnsName", value=self.dns_name)
        cdk.CfnOutput(self, "FileSystemMountName", value=self.mount_name)
        cdk.CfnOutput(self, "DataBucketName", value=self.data_bucket.bucket_name)
        cdk.CfnOutput(self, "CheckpointBucketName", value=self.checkpoint_bucket.bucket_name)
        cdk.CfnOutput(self, "ArtifactBucketName", value=self.artifact_bucket.bucket_name)
