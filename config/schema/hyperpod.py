"""The `hyperpod` section: the cluster, its instance groups and their training plans."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from config.errors import FieldError
from config.instance_types import INSTANCE_TYPES, InterfaceType, unknown_instance_type
from config.kubernetes import (
    INSTANCE_GROUP_NAME_PATTERN,
    LABEL_KEY_RULE,
    LABEL_VALUE_RULE,
    Taint,
    is_label_key,
    is_label_value,
    reserved_label_domain,
)
from config.model import Strict
from config.schema.base import PARTITION, Zone, log_retention, unique

_TRAINING_PLAN_ARN = re.compile(
    rf"^arn:{PARTITION}:sagemaker:(?P<region>[a-z0-9-]+):(?P<account>\d{{12}}):"
    r"training-plan/[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}$"
)
GroupName = Annotated[str, StringConstraints(pattern=INSTANCE_GROUP_NAME_PATTERN)]
# HyperPod's KubernetesConfig accepts at most 50 taints per group.
_MAX_TAINTS = 50

# AWS::SageMaker::Cluster ClusterInstanceGroup.ImageReleaseVersion (CloudFormation resource
# schema, as cfn-lint 1.58 ships it): "semantic version format MAJOR.MINOR.PATCH (for
# example, 1.2.3)", pattern ^[0-9]+\.[0-9]+\.[0-9]+$, length 5-64.
_RELEASE_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
_RELEASE_VERSION_LENGTH = (5, 64)
# ScheduledUpdateConfig.ScheduleExpression, the resource schema's pattern verbatim (six
# fields: minutes, hours, day of month, month, day of week, year), matched whole.
_SCHEDULE_EXPRESSION = re.compile(
    r"cron\((?:[0-5][0-9]|[0-9]|) (?:[01][0-9]|2[0-3]|[0-9]) "
    r"(?:[1-9]|0[1-9]|[12][0-9]|3[01]|\?) (?:[1-9]|0[1-9]|1[0-2]|\*|\*/(?:[1-9]|1[0-2])|) "
    r"(?:MON|TUE|WED|THU|FRI|SAT|SUN|[1-7]|\?|L|(?:[1-7]#[1-5])|(?:[1-7]L)) "
    r"(?:20[2-9][0-9]|\*|)\)"
)
_SCHEDULE_EXAMPLE = "cron(0 4 ? * SUN *)"
# DeploymentConfig.WaitIntervalInSeconds: 0-3600. AutoRollbackConfiguration: 1-10 alarms;
# AlarmName 1-256 in the resource schema, 1-255 in the SageMaker API: the tighter one.
_MAX_WAIT_SECONDS = 3600
_MAX_ROLLBACK_ALARMS = 10
_MAX_ALARM_NAME = 255
_PERCENT = re.compile(r"([0-9]+)%")
# ClusterInstanceGroupSpecification.ImageId (botocore's SageMaker model): pattern
# (ami-[0-9a-fA-F]{8,17}|default), length 7-21. `default` (HyperPod's latest image) is what an
# unset image_id already means, so config takes an AMI ID only.
_AMI_ID = re.compile(r"ami-[0-9a-fA-F]{8,17}")
_AMI_EXAMPLE = "ami-0123456789abcdef0"


def _reserved_key(key: str, example: str) -> str | None:
    """Why `key` is not ours to set, if it is not."""
    domain = reserved_label_domain(key)
    if domain is None:
        return None
    return (
        f"{key!r} uses the reserved prefix {domain}/ (set by HyperPod or Kubernetes itself); "
        f"use a key under your own domain, e.g. {example}"
    )


class TrainingPlanConfig(Strict):
    arn: str
    availability_zone: Zone

    @field_validator("arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        if not _TRAINING_PLAN_ARN.match(value):
            raise ValueError(
                f"{value!r} is not a training plan ARN "
                "(arn:aws:sagemaker:<region>:<account>:training-plan/<name>)"
            )
        return value

    @property
    def region(self) -> str:
        return self._arn_part("region")

    @property
    def account(self) -> str:
        return self._arn_part("account")

    def _arn_part(self, name: str) -> str:
        match = _TRAINING_PLAN_ARN.match(self.arn)
        if match is None:  # the field validator rejects such an ARN first
            raise ValueError(f"{self.arn!r} is not a training plan ARN")
        return match[name]


def _own_taint(taint: Taint) -> Taint:
    problem = _reserved_key(taint.key, "example.com/dedicated")
    if problem is not None:
        raise FieldError("key", problem)
    return taint


# A group's taint: a Kubernetes taint under a key HyperPod and Kubernetes leave to us.
GroupTaint = Annotated[Taint, AfterValidator(_own_taint)]


def _batch_size(value: object) -> object:
    """A rolling-update batch: a whole number of instances (2) or a share of the group
    ("25%"); CapacitySizeConfig Value is at least 1 (INSTANCE_COUNT or CAPACITY_PERCENTAGE)."""
    fix = 'write a number of instances (e.g. 2) or a percentage of the group (e.g. "25%")'
    if value is None:
        return value
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is not a batch size; {fix}")
    if not isinstance(value, int | str):
        raise ValueError(f"{value!r} is not a batch size; {fix}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"{value} instances is too small; use 1 or more")
        return value
    match = _PERCENT.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"{value!r} is not a batch size; {fix}")
    percent = int(match[1])
    if not 1 <= percent <= 100:
        raise ValueError(f"{value} is outside 1%-100%; use a percentage in that range")
    return f"{percent}%"


# The validator takes the whole optional value, so a wrong one is one problem, not one per
# member of the union.
BatchSize = Annotated[int | str | None, BeforeValidator(_batch_size)]


def batch_size_parts(value: int | str) -> tuple[str, int]:
    """(CapacitySizeConfig Type, Value) for a validated batch size."""
    if isinstance(value, int):
        return "INSTANCE_COUNT", value
    return "CAPACITY_PERCENTAGE", int(value.removesuffix("%"))


class ScheduledUpdateConfig(Strict):
    """ScheduledUpdateConfig: when HyperPod rolls AMI updates onto the group, and how."""

    cron: str = Field(
        description="When updates start: the documented six-field form "
        f'"{_SCHEDULE_EXAMPLE}" (minutes hours day-of-month month day-of-week year).'
    )
    max_batch: BatchSize = Field(
        default=None,
        description='Instances updated at a time: a count (2) or a share of the group ("25%"); '
        "without it HyperPod updates the whole group at once.",
    )
    rollback_batch: BatchSize = Field(
        default=None, description="Instances rolled back at a time (needs max_batch)."
    )
    wait_s: int | None = Field(
        default=None,
        ge=0,
        le=_MAX_WAIT_SECONDS,
        description="Seconds to wait between batches, while the alarms are watched (needs "
        "max_batch).",
    )
    rollback_alarms: list[str] | None = Field(
        default=None,
        description="CloudWatch alarm names; any in ALARM during a wait rolls the update "
        "back (needs max_batch). The node role may read these alarms.",
    )

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        if not _SCHEDULE_EXPRESSION.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a schedule HyperPod accepts; write "
                "cron(minutes hours day-of-month month day-of-week year), e.g. "
                f'"{_SCHEDULE_EXAMPLE}"'
            )
        return value

    @field_validator("rollback_alarms")
    @classmethod
    def _alarms(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("lists no alarm; name 1 to 10 alarms or remove rollback_alarms")
        if len(value) > _MAX_ROLLBACK_ALARMS:
            raise ValueError(
                f"{len(value)} alarms; HyperPod watches at most {_MAX_ROLLBACK_ALARMS}, "
                "combine them into a composite alarm"
            )
        for name in value:
            if not name.strip() or len(name) > _MAX_ALARM_NAME:
                raise ValueError(
                    f"{name!r} is not a CloudWatch alarm name; use 1-{_MAX_ALARM_NAME} "
                    "characters, not only spaces"
                )
        unique(value, "alarm")
        return value

    @model_validator(mode="after")
    def _batches(self) -> ScheduledUpdateConfig:
        # RollingUpdatePolicy requires MaximumBatchSize; the wait and the alarms act between
        # batches ("Update your AMI version in your SageMaker HyperPod cluster").
        if self.max_batch is None:
            for name in ("rollback_batch", "wait_s", "rollback_alarms"):
                if getattr(self, name) is not None:
                    raise FieldError(
                        name,
                        "applies between batches of a rolling update; set max_batch "
                        f"(e.g. 1) or remove {name}",
                    )
        return self


class UpdatesConfig(Strict):
    """How the group's HyperPod AMI moves: a pinned release, a rolling schedule, or
    automatic patching."""

    image_release_version: str | None = Field(
        default=None,
        description="The HyperPod AMI release the group runs (MAJOR.MINOR.PATCH); changing it "
        "updates the group's software. Unset: the latest release when the group is created.",
    )
    scheduled_update: ScheduledUpdateConfig | None = None
    auto_patch: Literal["WhenIdle", "WhenAllIdle"] | None = Field(
        default=None,
        description="Patch the AMI automatically: as each node becomes idle (WhenIdle) or once "
        "all are (WhenAllIdle). Cannot be combined with image_release_version.",
    )

    @field_validator("image_release_version")
    @classmethod
    def _release(cls, value: str | None) -> str | None:
        shortest, longest = _RELEASE_VERSION_LENGTH
        if value is not None and (
            not _RELEASE_VERSION.fullmatch(value) or not shortest <= len(value) <= longest
        ):
            raise ValueError(
                f"{value!r} is not a HyperPod AMI release version; write MAJOR.MINOR.PATCH in "
                'quotes, e.g. "1.2.3"'
            )
        return value

    @model_validator(mode="after")
    def _patching_moves_the_pin(self) -> UpdatesConfig:
        # The resource schema: "Automatic patching (AutoPatchConfig) ... can advance the
        # running version past this value; CloudFormation does not revert such changes and
        # may report the property as drifted."
        if self.auto_patch is not None and self.image_release_version is not None:
            raise FieldError(
                "auto_patch",
                f"would move the group past its pinned image_release_version "
                f"{self.image_release_version} (CloudFormation then reports drift); remove "
                "auto_patch or image_release_version",
            )
        return self


class InstanceGroupConfig(Strict):
    name: GroupName
    instance_type: str
    count: int = Field(ge=0, le=6758)
    min_count: int | None = Field(default=None, ge=0)
    threads_per_core: Literal[1, 2] = 1
    ebs_volume_gib: int = Field(
        default=500,
        ge=1,
        le=16384,
        description="The group's extra EBS volume, which HyperPod mounts at /opt/sagemaker; "
        "the lifecycle scripts put containerd's images and kubelet's data there "
        "(lifecycle/README.md).",
    )
    deep_health_checks: list[Literal["InstanceStress", "InstanceConnectivity"]] = Field(
        default_factory=list
    )
    volume_customer_key: bool = Field(
        default=False,
        description="The group's root and /opt/sagemaker volumes on the cluster's customer "
        "managed KMS key (continuous provisioning only). Set it when the group is created: "
        "HyperPod cannot change an existing group's key, so turning it on for a running group "
        "fails the update; add a new group with it instead.",
    )
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[GroupTaint] = Field(default_factory=list)
    training_plan: TrainingPlanConfig | None = None
    network_interface: InterfaceType | None = Field(
        default=None, description="efa or efa-only; default efa where the type has EFA."
    )
    headroom_nodes: int | None = Field(
        default=None,
        ge=0,
        description="Spare addresses for replacements and rolling updates, in nodes; default "
        "network.default_headroom_percent of count (at least 1).",
    )
    capacity: Literal["on-demand", "spot"] | None = Field(
        default=None,
        description="CapacityRequirements: on-demand or spot instances; unset: left to "
        "HyperPod. Not with a training plan, which is reserved capacity.",
    )
    updates: UpdatesConfig | None = None
    image_id: str | None = Field(
        default=None,
        description="The AMI the group's nodes boot from (ImageId): a custom AMI, "
        "unencrypted, owned by this account, with no volume but its root. Unset: HyperPod's "
        "own AMI (updates.image_release_version picks its release). Not with "
        "image_release_version, which names a HyperPod AMI.",
    )

    @field_validator("image_id")
    @classmethod
    def _ami_id(cls, value: str | None) -> str | None:
        if value is not None and not _AMI_ID.fullmatch(value):
            raise ValueError(
                f"{value!r} is not an AMI ID; write ami- and 8 to 17 hex digits, e.g. "
                f'"{_AMI_EXAMPLE}"'
            )
        return value

    @model_validator(mode="after")
    def _one_image(self) -> InstanceGroupConfig:
        # ImageReleaseVersion is "the version of the HyperPod-managed AMI"; a changed one
        # reaches the group through UpdateClusterSoftware, which for a group on a custom AMI
        # "must" be given an ImageId (botocore's SageMaker model): the pair names two images.
        release = self.updates.image_release_version if self.updates else None
        if self.image_id is not None and release is not None:
            raise FieldError(
                "image_id",
                f"{self.image_id} and updates.image_release_version {release} both choose the "
                "group's AMI; remove image_id (HyperPod's AMI at that release) or "
                "image_release_version (your AMI)",
            )
        return self

    @field_validator("instance_type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in INSTANCE_TYPES:
            raise ValueError(unknown_instance_type(value))
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            if not is_label_key(key):
                raise ValueError(f"{key!r} is not a valid Kubernetes label key; {LABEL_KEY_RULE}")
            if not is_label_value(label):
                raise ValueError(
                    f"{key}: {label!r} is not a valid Kubernetes label value; {LABEL_VALUE_RULE}"
                )
            if not label:
                # Kubernetes allows an empty label value; HyperPod's API does not
                # (ClusterKubernetesLabelValue has a minimum length of 1).
                raise ValueError(f"{key}: HyperPod needs a non-empty node label value; set one")
            problem = _reserved_key(key, "example.com/team")
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("taints", mode="before")
    @classmethod
    def _taint_count(cls, value: object) -> object:
        if isinstance(value, list) and len(value) > _MAX_TAINTS:
            raise ValueError(
                f"{len(value)} taints; HyperPod accepts at most {_MAX_TAINTS} per group"
            )
        return value

    @field_validator("taints")
    @classmethod
    def _unique_taints(cls, value: list[Taint]) -> list[Taint]:
        # Kubernetes rejects a node whose taints repeat a key with the same effect.
        seen: set[tuple[str, str]] = set()
        for taint in value:
            if (taint.key, taint.effect) in seen:
                raise ValueError(
                    f"{taint.key} with effect {taint.effect} appears more than once; "
                    "list each key/effect pair once"
                )
            seen.add((taint.key, taint.effect))
        return value

    @field_validator("deep_health_checks")
    @classmethod
    def _unique_checks(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists a check more than once; list each check once")
        return value

    @model_validator(mode="after")
    def _group_rules(self) -> InstanceGroupConfig:
        instance = INSTANCE_TYPES[self.instance_type]
        if self.min_count is not None and self.min_count > self.count:
            raise FieldError(
                "min_count",
                f"{self.min_count} is more than count {self.count}; lower min_count or raise count",
            )
        if self.network_interface is not None and not instance.supports_interface(
            self.network_interface
        ):
            supported = instance.supported_interfaces
            fix = f"use {' or '.join(supported)}" if supported else "remove network_interface"
            raise FieldError(
                "network_interface",
                f"{self.instance_type} does not support {self.network_interface!r}; {fix}",
            )
        if self.taints and self.deep_health_checks:
            raise FieldError(
                "taints",
                "custom taints cannot be combined with deep_health_checks (HyperPod "
                "taints nodes while it checks them); remove the taints or the checks",
            )
        if self.deep_health_checks and instance.accelerator == "none":
            raise FieldError(
                "deep_health_checks",
                f"{self.instance_type} has no accelerators to check; remove deep_health_checks",
            )
        if self.capacity is not None and self.training_plan is not None:
            raise FieldError(
                "capacity",
                f"{self.capacity!r} with a training_plan: the group runs on the plan's reserved "
                "capacity; remove capacity or training_plan",
            )
        return self

    @property
    def interface(self) -> InterfaceType | None:
        """The EFA interface type in effect (None for types without EFA)."""
        if self.network_interface is not None:
            return self.network_interface
        return INSTANCE_TYPES[self.instance_type].default_interface

    @property
    def availability_zone(self) -> str | None:
        return self.training_plan.availability_zone if self.training_plan else None


class TieredStorageConfig(Strict):
    enabled: bool = False
    # The API type accepts 0-100, but HyperPod's managed tiered checkpointing setup guide
    # gives 20-100 as the range for the in-memory tier: fail here, not mid-deploy.
    memory_percent: int = Field(
        default=20,
        ge=20,
        le=100,
        description="Share of each node's memory given to the in-memory checkpoint tier (20-100).",
    )

    @field_validator("memory_percent", mode="before")
    @classmethod
    def _memory_percent(cls, value: object) -> object:
        # Before the bounds above, so the message gives the range and the default.
        if isinstance(value, int) and not isinstance(value, bool) and not 20 <= value <= 100:
            raise ValueError(
                f"{value} is outside 20-100, the range managed tiered checkpointing accepts; "
                "use 20 (the default) or more"
            )
        return value


class HyperPodConfig(Strict):
    availability_zones: list[Zone] = Field(
        min_length=1,
        description="AZs of the cluster-level subnets, where groups without a training plan "
        "run. Fixed when the cluster is created (its VpcConfig cannot change); groups reach "
        "other AZs through their training plan's subnet.",
    )
    orchestrator: Literal["eks"] = "eks"
    node_recovery: Literal["Automatic", "None"] = "Automatic"
    node_provisioning_mode: Literal["Continuous"] | None = "Continuous"
    tiered_storage: TieredStorageConfig = Field(default_factory=TieredStorageConfig)
    autoscaling: bool = False
    log_retention_days: int = Field(
        default=365,
        description="Retention of the cluster's log group, which HyperPod creates and fills "
        "with node logs and the lifecycle scripts' output (/var/log/provision).",
    )
    instance_groups: list[InstanceGroupConfig] = Field(min_length=1, max_length=100)

    @field_validator("log_retention_days")
    @classmethod
    def _log_retention(cls, value: int) -> int:
        return log_retention(value)

    @field_validator("availability_zones")
    @classmethod
    def _unique_azs(cls, value: list[str]) -> list[str]:
        unique(value, "AZ")
        return value

    @field_validator("instance_groups")
    @classmethod
    def _unique_names(cls, value: list[InstanceGroupConfig]) -> list[InstanceGroupConfig]:
        names = [g.name for g in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(
                f"group names must be unique; {', '.join(duplicates)} appears more than once"
            )
        return value

    @model_validator(mode="after")
    def _autoscaling_needs_continuous(self) -> HyperPodConfig:
        # HyperPod's managed Karpenter autoscaling is built on continuous provisioning (its
        # setup guide creates the cluster with NodeProvisioningMode Continuous).
        if self.autoscaling and self.node_provisioning_mode != "Continuous":
            raise FieldError(
                "autoscaling",
                "needs node_provisioning_mode: Continuous; set it or turn autoscaling off",
            )
        return self

    @model_validator(mode="after")
    def _volume_key_needs_continuous(self) -> HyperPodConfig:
        # HyperPod takes a customer key for node volumes only under continuous provisioning
        # (AWS's "Customer managed AWS KMS key encryption for SageMaker HyperPod").
        if self.node_provisioning_mode == "Continuous":
            return self
        for index, group in enumerate(self.instance_groups):
            if group.volume_customer_key:
                raise FieldError(
                    f"instance_groups[{index}].volume_customer_key",
                    "needs node_provisioning_mode: Continuous; set it or leave the group on "
                    "AWS's key",
                )
        return self

    def groups_by_name(self) -> list[InstanceGroupConfig]:
        """Groups sorted by name: the order never depends on the order in the file."""
        return sorted(self.instance_groups, key=lambda g: g.name)
