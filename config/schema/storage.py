"""The `storage` section: FSx for Lustre and the S3 buckets."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from config.model import Strict
from config.schema.base import Zone, principal_arns, unique

RepositoryEvent = Literal["NEW", "CHANGED", "DELETED"]

# The storage stack's output naming the data bucket (CloudFormation names the bucket);
# `hpctl preflight` reads it.
DATA_BUCKET_OUTPUT = "DataBucketName"
_ALL_EVENTS: tuple[RepositoryEvent, ...] = ("NEW", "CHANGED", "DELETED")
# FSx for Lustre metadata IOPS (SSD): 1500, 3000, 6000, then multiples of 12000 to 192000.
_METADATA_IOPS = (1500, 3000, 6000, *range(12000, 192001, 12000))


class DataRepositoryConfig(Strict):
    file_system_path: str = Field(default="/data", pattern=r"^/[A-Za-z0-9_./-]*$")
    bucket_prefix: str = Field(default="", pattern=r"^([A-Za-z0-9_.-]+/)*$")
    auto_import: list[RepositoryEvent] = Field(default_factory=lambda: list(_ALL_EVENTS))
    auto_export: list[RepositoryEvent] = Field(default_factory=lambda: list(_ALL_EVENTS))

    @field_validator("file_system_path")
    @classmethod
    def _normalized_path(cls, value: str) -> str:
        if "//" in value or "/../" in f"{value}/" or "/./" in f"{value}/":
            raise ValueError(
                f"{value!r} is not a normalized path; write it without '//', '.' or '..' "
                "(e.g. /data)"
            )
        return value

    @field_validator("auto_import", "auto_export")
    @classmethod
    def _unique_events(cls, value: list[str]) -> list[str]:
        unique(value, "event")
        return value


class FsxConfig(Strict):
    availability_zone: Zone = Field(
        description="The AZ of the file system: fixed at creation (moving it replaces the file "
        "system). Training plans must be in this AZ so training I/O and EFA stay in one AZ."
    )
    storage_capacity_gib: int = Field(ge=1200, le=2_000_000)
    throughput_per_tib: Literal[125, 250, 500, 1000]
    data_compression: Literal["LZ4", "NONE"] = "LZ4"
    weekly_maintenance_start: str = Field(
        default="7:03:00",
        pattern=r"^[1-7]:([01]\d|2[0-3]):[0-5]\d$",
        description="d:HH:MM in UTC, 1 = Monday.",
    )
    efa_enabled: bool = Field(
        default=False,
        description="EFA and GPUDirect Storage. Fixed at creation (changing it replaces the "
        "file system) and, once on, throughput_per_tib can no longer change.",
    )
    metadata_iops: int | None = Field(
        default=None,
        description="Provisioned metadata IOPS; default: AUTOMATIC mode (scales with capacity).",
    )
    data_repository: DataRepositoryConfig = Field(default_factory=DataRepositoryConfig)

    @field_validator("metadata_iops")
    @classmethod
    def _metadata_iops(cls, value: int | None) -> int | None:
        if value is not None and value not in _METADATA_IOPS:
            raise ValueError(
                f"{value} is not an FSx for Lustre metadata IOPS value; use 1500, 3000, 6000 "
                "or a multiple of 12000 up to 192000 (or leave it out for AUTOMATIC)"
            )
        return value

    @field_validator("storage_capacity_gib")
    @classmethod
    def _persistent2_capacity(cls, value: int) -> int:
        if value != 1200 and value % 2400 != 0:
            raise ValueError(
                f"{value} GiB is not a PERSISTENT_2 size; use 1200 or a multiple of 2400"
            )
        return value


class BucketsConfig(Strict):
    checkpoint_noncurrent_days: int = Field(default=7, ge=1, le=365)
    data_noncurrent_days: int = Field(
        default=30,
        ge=1,
        le=3653,
        description="Days an overwritten or deleted data object (e.g. re-exported by FSx) "
        "stays recoverable.",
    )
    access_log_retention_days: int = Field(default=365, ge=1, le=3653)
    key_user_arns: list[str] = Field(
        default_factory=list,
        description="IAM roles or users outside the platform that read or write the data and "
        "checkpoint buckets (e.g. a data-ingest role): their keys name them as users. The "
        "platform's own roles and FSx are named already; anyone else is refused the key.",
    )

    @field_validator("key_user_arns")
    @classmethod
    def _key_users(cls, value: list[str]) -> list[str]:
        return principal_arns(value)


class MlflowConfig(Strict):
    """A SageMaker managed MLflow tracking server for the environment's training runs."""

    enabled: bool = Field(
        default=False,
        description="Create the server; the teams' training jobs log to it (their identities "
        "alone may use it) through the team ConfigMap.",
    )
    # AWS::SageMaker::MlflowTrackingServer TrackingServerSize (cfn-lint's schema).
    size: Literal["Small", "Medium", "Large"] = "Small"
    artifact_prefix: str = Field(
        default="mlflow/",
        description="Key prefix of the artifact bucket the server stores artifacts under.",
    )
    weekly_maintenance_window_start: str = Field(default="Sun:03:00", description="Ddd:HH:MM, UTC.")
    mlflow_version: str | None = Field(
        default=None,
        description="MLflow version of the server; default: the service's current one.",
    )

    @field_validator("artifact_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not re.fullmatch(r"([A-Za-z0-9_.-]+/)+", value):
            raise ValueError(
                f"{value!r} is not a key prefix; write segments of letters, digits, '_', '.' "
                "or '-', each ending in '/' (e.g. mlflow/)"
            )
        return value

    @field_validator("weekly_maintenance_window_start")
    @classmethod
    def _window(cls, value: str) -> str:
        # TrackingServer's WeeklyMaintenanceWindowStart pattern (cfn-lint's schema).
        if not re.fullmatch(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun):([01]\d|2[0-3]):[0-5]\d", value):
            raise ValueError(f"{value!r} is not Ddd:HH:MM in UTC; write e.g. Sun:03:00")
        return value

    @field_validator("mlflow_version")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"\d+(\.\d+)+", value):
            raise ValueError(f"{value!r} is not an MLflow version; write e.g. 3.0 or leave it out")
        return value


class StorageConfig(Strict):
    fsx: FsxConfig
    buckets: BucketsConfig = Field(default_factory=BucketsConfig)
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig)
