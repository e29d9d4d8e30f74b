"""The whole environment file: the sections and the rules that span them."""

from __future__ import annotations

import re
import unicodedata

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from config.capacity import MAX_AZ_LETTER
from config.errors import FieldError
from config.images import image_problems
from config.instance_types import INSTANCE_TYPES
from config.model import Strict
from config.names import PlatformNames
from config.regions import EKS_UNSUPPORTED_ZONE_IDS, availability_zones
from config.schema.base import REGION_PATTERN, ZONE_IDS_CONTEXT, AccountId, Name
from config.schema.eks import EksConfig
from config.schema.governance import (
    GOVERNANCE_REGIONS,
    MAX_RESOURCE_NAME,
    GovernanceConfig,
    quota_problems,
)
from config.schema.hyperpod import HyperPodConfig
from config.schema.network import PROMETHEUS_ENDPOINT, NetworkConfig
from config.schema.observability import GRAFANA_REGIONS, ObservabilityConfig
from config.schema.storage import StorageConfig

_REGION = re.compile(REGION_PATTERN)
# Characters AWS tag keys and values take: the pattern of the Resource Groups Tagging API
# and most services' Tag shapes, ^([\p{L}\p{Z}\p{N}_.:/=+\-@]*)$ (Unicode letters,
# separators such as spaces, and numbers, plus these). Some services take more; the stack
# tags land on every resource, so the common set is the one that deploys everywhere.
_TAG_PUNCTUATION = "_.:/=+-@"
_TAG_CHARACTERS = "letters, digits, spaces and _ . : / = + - @"


def _tag_refusal(text: str) -> str | None:
    """The first character of `text` AWS tags refuse, as the message shows it."""
    for char in text:
        if unicodedata.category(char)[0] not in "LZN" and char not in _TAG_PUNCTUATION:
            return repr(char)
    return None


class EnvironmentConfig(Strict):
    environment: Name
    account: AccountId
    region: str
    retain_stateful: bool = Field(
        description="Keep FSx, buckets and the cluster when the stack is deleted. Required in prod."
    )
    tags: dict[str, str] = Field(default_factory=dict)
    require_image_digest: bool = Field(
        default=False,
        description="`hpctl job render` accepts only a training image named by digest "
        "(REPOSITORY@sha256:...): every pod of every job runs exactly the reviewed image.",
    )
    network: NetworkConfig
    storage: StorageConfig
    eks: EksConfig
    hyperpod: HyperPodConfig
    governance: GovernanceConfig | None = Field(
        default=None,
        description="Task governance: priority classes and the teams sharing the cluster. "
        "Without it, every job runs unqueued and unprioritised.",
    )
    observability: ObservabilityConfig | None = Field(
        default=None,
        description="Managed Prometheus, the HyperPod observability add-on and CloudWatch "
        "alarms. Without it, nothing watches the cluster.",
    )
    # This account's AZ name -> zone ID mapping, as recorded in cdk.context.json (empty when
    # none is): zones written by ID are already names here.
    _zone_ids: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 40:
            raise ValueError(
                f"{len(value)} tags; keep at most 40 (AWS allows 50 and CDK adds its own)"
            )
        for key, tag in value.items():
            if key.lower().startswith("aws:"):
                raise ValueError(f"{key!r}: the aws: prefix is reserved for AWS; drop it")
            if not 1 <= len(key) <= 128 or len(tag) > 256:
                raise ValueError(f"{key!r}: keys take 1-128 characters and values at most 256")
            for what, refused in (
                (f"key {key!r}", _tag_refusal(key)),
                (f"{key!r}: value {tag!r}", _tag_refusal(tag)),
            ):
                if refused is not None:
                    raise ValueError(
                        f"{what} has {refused}, which AWS tags do not take; use only "
                        f"{_TAG_CHARACTERS}"
                    )
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not _REGION.match(value):
            raise ValueError(f"{value!r} is not an AWS region name (e.g. us-east-1)")
        return value

    @model_validator(mode="after")
    def _physical_zones(self, info: ValidationInfo) -> EnvironmentConfig:
        recorded = (info.context or {}).get(ZONE_IDS_CONTEXT, {})
        self._zone_ids = {
            az: recorded[az] for az in self.network.availability_zones if az in recorded
        }
        # Every network AZ holds an infrastructure subnet, and those carry the control plane.
        for index, az in enumerate(self.network.availability_zones):
            zone_id = self._zone_ids.get(az)
            if zone_id in EKS_UNSUPPORTED_ZONE_IDS:
                raise FieldError(
                    f"network.availability_zones[{index}]",
                    f"{az} is {zone_id} in account {self.account}, where EKS cannot place its "
                    "control plane (every network AZ holds a control-plane subnet); use "
                    "another zone",
                )
        return self

    def _one_access_entry_per_principal(self) -> None:
        """EKS keeps one access entry per principal: an admin or another team's principal
        cannot also get a team's namespace access."""
        owners = {arn: "eks.admin_role_arns" for arn in self.eks.admin_role_arns}
        teams = self.governance.teams if self.governance is not None else []
        for t_index, team in enumerate(teams):
            for index, arn in enumerate(team.access_principal_arns):
                where = f"governance.teams[{t_index}].access_principal_arns[{index}]"
                if arn in owners:
                    raise FieldError(
                        where,
                        f"{arn} already has cluster access through {owners[arn]} (one access "
                        "entry per principal); give the team its own role",
                    )
                owners[arn] = f"governance.teams[{t_index}]"

    @model_validator(mode="after")
    def _cross_checks(self) -> EnvironmentConfig:
        network_azs = self.network.availability_zones
        self._check_network_availability_zones()
        for index, az in enumerate(self.hyperpod.availability_zones):
            if az not in network_azs:
                raise FieldError(
                    f"hyperpod.availability_zones[{index}]",
                    f"{az} has no cluster subnet; add it to network.availability_zones "
                    f"({', '.join(network_azs)}) or remove it",
                )
        fsx_az = self.storage.fsx.availability_zone
        if fsx_az not in network_azs:
            raise FieldError(
                "storage.fsx.availability_zone",
                f"{fsx_az} has no cluster subnet; use one of {', '.join(network_azs)}",
            )
        self._one_access_entry_per_principal()
        if self.environment == "prod" and not self.retain_stateful:
            raise FieldError(
                "retain_stateful", "prod must retain FSx, buckets and the cluster; set it to true"
            )
        self._check_training_plans(fsx_az)
        for path, message in image_problems(
            region=self.region,
            accelerators={
                INSTANCE_TYPES[g.instance_type].accelerator for g in self.hyperpod.instance_groups
            },
            efa=any(g.interface is not None for g in self.hyperpod.instance_groups),
            overrides=dict(self.eks.image_overrides),
            https_egress=bool(self.network.https_egress_cidrs),
            teams=self.governance is not None,
            account=self.account,
        ):
            raise FieldError(path, message)
        if self.governance is not None:
            self._check_governance(self.governance)
        if self.observability is not None:
            self._check_observability(self.observability)
        return self

    def _check_network_availability_zones(self) -> None:
        """Each network AZ is one of the region's, with a letter that owns a subnet slot."""
        network_azs = self.network.availability_zones
        for index, az in enumerate(network_azs):
            if not re.fullmatch(rf"{re.escape(self.region)}[a-z]", az):
                raise FieldError(
                    f"network.availability_zones[{index}]",
                    f"{az!r} is not an AZ of region "
                    f"{self.region} (expected {self.region}a, {self.region}b, ...)",
                )
            if az[-1] > MAX_AZ_LETTER:
                raise FieldError(
                    f"network.availability_zones[{index}]",
                    f"{az}: AZ letters a-{MAX_AZ_LETTER} own the fixed subnet slots; use an AZ "
                    f"from {self.region}a to {self.region}{MAX_AZ_LETTER}",
                )
            region_azs = availability_zones(self.region)
            if region_azs is not None and az not in region_azs:
                raise FieldError(
                    f"network.availability_zones[{index}]",
                    f"{az} does not exist: {self.region} has {', '.join(region_azs)}; "
                    "use one of those",
                )

    def _check_training_plans(self, fsx_az: str) -> None:
        """A group's training plan is of this account and region, in a network AZ, and in
        the file system's AZ."""
        network_azs = self.network.availability_zones
        for index, group in enumerate(self.hyperpod.instance_groups):
            where = f"hyperpod.instance_groups[{index}]"
            plan = group.training_plan
            if plan is None:
                continue
            if plan.availability_zone not in network_azs:
                raise FieldError(
                    f"{where}.training_plan.availability_zone",
                    f"{plan.availability_zone} (group {group.name}) has no "
                    f"cluster subnet; add it to network.availability_zones "
                    f"({', '.join(network_azs)})",
                )
            if plan.region != self.region or plan.account != self.account:
                raise FieldError(
                    f"{where}.training_plan.arn",
                    f"plan is in {plan.account}/{plan.region}, the "
                    f"environment in {self.account}/{self.region}; use a plan of this account and region",
                )
            # FSx for Lustre lives in one AZ and EFA does not cross AZs: capacity bought
            # elsewhere would read its data cross-AZ and could not join the other groups' jobs.
            if plan.availability_zone != fsx_az:
                raise FieldError(
                    f"{where}.training_plan.availability_zone",
                    f"{plan.availability_zone} (group {group.name}) differs from "
                    f"storage.fsx.availability_zone {fsx_az} (FSx and EFA stay in one AZ); "
                    f"buy the plan in {fsx_az}",
                )

    def _check_observability(self, observability: ObservabilityConfig) -> None:
        # Nodes have no internet egress: remote write goes through the workspace endpoint.
        if PROMETHEUS_ENDPOINT not in self.network.interface_endpoints:
            raise FieldError(
                "network.interface_endpoints",
                f"observability writes to Amazon Managed Prometheus through the "
                f"{PROMETHEUS_ENDPOINT} endpoint; add {PROMETHEUS_ENDPOINT}",
            )
        if observability.metrics.task_governance == "ADVANCED" and self.governance is None:
            raise FieldError(
                "observability.metrics.task_governance",
                "Kueue metrics need task governance; add a governance section or set DISABLED",
            )
        if observability.grafana and self.region not in GRAFANA_REGIONS:
            raise FieldError(
                "observability.grafana",
                f"Amazon Managed Grafana is not offered in {self.region} (it is in "
                f"{', '.join(sorted(GRAFANA_REGIONS))}); set grafana: false",
            )

    def _check_governance(self, governance: GovernanceConfig) -> None:
        if self.region not in GOVERNANCE_REGIONS:
            raise FieldError(
                "governance",
                f"CloudFormation in {self.region} does not offer AWS::SageMaker::"
                "ClusterSchedulerConfig and AWS::SageMaker::ComputeQuota together yet (it does "
                f"in {', '.join(sorted(GOVERNANCE_REGIONS))}); remove the section here",
            )
        for index, team in enumerate(governance.teams):
            name = self.names.compute_quota(team.name)
            if len(name) > MAX_RESOURCE_NAME:
                raise FieldError(
                    f"governance.teams[{index}].name",
                    f"the quota would be named {name!r} ({len(name)} characters, at most "
                    f"{MAX_RESOURCE_NAME}); use a shorter team name",
                )
        for path, message in quota_problems(governance, self.hyperpod.instance_groups):
            raise FieldError(path, message)

    def zone_id(self, availability_zone: str) -> str | None:
        """The zone ID of one of the network's AZs in this account, when recorded."""
        return self._zone_ids.get(availability_zone)

    @property
    def training_availability_zone(self) -> str:
        """Where FSx and all training-plan capacity live (storage.fsx.availability_zone)."""
        return self.storage.fsx.availability_zone

    @property
    def names(self) -> PlatformNames:
        """Stack and cluster names of this environment."""
        return PlatformNames(self.environment)
