"""The `governance` section: HyperPod task governance (priority classes, fair share, idle
resource sharing) and the teams that share the cluster, each with a compute quota.

Names and ranges follow the CloudFormation schemas of AWS::SageMaker::ClusterSchedulerConfig
and AWS::SageMaker::ComputeQuota: at most 10 priority classes, weights and fair-share weights
0-100, team and class names of up to 40 lowercase letters, digits and dashes (a team becomes
the namespace hyperpod-ns-<team>), sharing strategies Lend, DontLend and LendAndBorrow.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from config.errors import FieldError
from config.instance_types import INSTANCE_TYPES
from config.kubernetes import (
    LABEL_VALUE_MAX,
    MAX_PRIORITY_LENGTH,
    MAX_TEAM_LENGTH,
    local_queue,
    priority_class,
)
from config.model import Strict
from config.schema.base import principal_arns, unique
from config.schema.hyperpod import InstanceGroupConfig
from config.team_groups import team_gids

# TeamName and PriorityClass.Name patterns of the two CloudFormation schemas.
GOVERNANCE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9]){0,39}?$"
GovernanceName = Annotated[str, StringConstraints(pattern=GOVERNANCE_NAME_PATTERN)]
MAX_PRIORITY_CLASSES = 10
# ComputeQuotaResources holds at most 15 instance types.
MAX_QUOTA_RESOURCES = 15

SharingStrategy = Literal["Lend", "DontLend", "LendAndBorrow"]

# Regions whose CloudFormation offers both AWS::SageMaker::ClusterSchedulerConfig and
# AWS::SageMaker::ComputeQuota, per the resource specifications of the pinned cfn-lint
# (1.58, schemas of 2026-10-20); a test keeps this set equal to what cfn-lint knows.
GOVERNANCE_REGIONS = frozenset(
    {
        "ap-south-1",
        "eu-central-1",
        "eu-isoe-west-1",
        "eusc-de-east-1",
        "us-east-1",
        "us-iso-east-1",
        "us-iso-west-1",
        "us-isob-east-1",
        "us-isob-west-1",
        "us-isof-east-1",
        "us-isof-south-1",
    }
)
# Quota and scheduler-config names: SageMaker's 63-character name rule.
MAX_RESOURCE_NAME = 63


def _fits_label(value: str, label_value: str, longest: int, what: str) -> str:
    """Jobs carry `label_value` (derived from `value`) as a Kubernetes label value."""
    if len(value) > longest:
        raise ValueError(
            f"{value!r} is too long: jobs carry the label value {label_value!r}, at most "
            f"{LABEL_VALUE_MAX} characters; use a {what} of at most {longest} characters"
        )
    return value


class PriorityClassConfig(Strict):
    name: GovernanceName
    weight: int = Field(ge=0, le=100, description="Higher runs first and may preempt lower.")

    @field_validator("name")
    @classmethod
    def _label_length(cls, value: str) -> str:
        return _fits_label(value, priority_class(value), MAX_PRIORITY_LENGTH, "priority class name")


class QuotaConfig(Strict):
    """Capacity guaranteed to a team on one instance group, in nodes and/or accelerators,
    vCPU and memory (the service fills the fields left out in proportion to the type)."""

    instance_group: str
    count: int | None = Field(default=None, ge=0)
    accelerators: int | None = Field(default=None, ge=0)
    vcpu: int | None = Field(default=None, ge=0)
    memory_gib: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _some_amount(self) -> QuotaConfig:
        if all(v is None for v in (self.count, self.accelerators, self.vcpu, self.memory_gib)):
            raise FieldError(
                "count",
                "a quota needs an amount; set count (nodes) or accelerators, vcpu, memory_gib",
            )
        return self


class TeamConfig(Strict):
    name: GovernanceName
    quotas: list[QuotaConfig] = Field(min_length=1, max_length=MAX_QUOTA_RESOURCES)
    sharing: SharingStrategy = Field(
        default="LendAndBorrow",
        description="Lend idle guaranteed capacity to other teams, borrow theirs, or neither.",
    )
    borrow_limit_percent: int | None = Field(
        default=None,
        ge=1,
        le=500,
        description="With LendAndBorrow: how much idle capacity the team may borrow, in percent "
        "of its guaranteed quota (the service default is 50).",
    )
    preempt_lower_priority: bool = Field(
        default=True,
        description="Reclaim the team's guaranteed capacity by preempting other teams' "
        "lower-priority tasks running on it.",
    )
    fair_share_weight: int = Field(default=0, ge=0, le=100)
    access_principal_arns: list[str] = Field(
        default_factory=list,
        description="IAM roles or users that get AmazonEKSEditPolicy in the team's namespace "
        "only (EKS access entries scoped to the namespace) and the team's Kubernetes group, "
        "whose Role there adds the HyperPod job and Kueue access `hpctl job` needs. Empty: "
        "only cluster admins.",
    )

    @field_validator("access_principal_arns")
    @classmethod
    def _principal_arns(cls, value: list[str]) -> list[str]:
        return principal_arns(value)

    @field_validator("name")
    @classmethod
    def _label_length(cls, value: str) -> str:
        return _fits_label(value, local_queue(value), MAX_TEAM_LENGTH, "team name")

    @field_validator("quotas")
    @classmethod
    def _one_quota_per_group(cls, value: list[QuotaConfig]) -> list[QuotaConfig]:
        unique([q.instance_group for q in value], "instance group")
        return value

    @model_validator(mode="after")
    def _borrow_limit_needs_borrowing(self) -> TeamConfig:
        if self.borrow_limit_percent is not None and self.sharing != "LendAndBorrow":
            raise FieldError(
                "borrow_limit_percent",
                f"only applies to sharing LendAndBorrow (the team uses {self.sharing}); "
                "remove it or set sharing: LendAndBorrow",
            )
        return self


class GovernanceConfig(Strict):
    fair_share: bool = Field(
        default=True, description="Idle compute is lent by the teams' fair-share weights."
    )
    idle_resource_sharing: bool = Field(
        default=True, description="Teams may use capacity other teams leave idle."
    )
    priority_classes: list[PriorityClassConfig] = Field(
        min_length=1, max_length=MAX_PRIORITY_CLASSES
    )
    teams: list[TeamConfig] = Field(min_length=1)
    # No rate is built in: SageMaker HyperPod's per-instance prices are published on the
    # SageMaker pricing page only, per Region and changing; `hpctl teams --cost` prices a type
    # left out here (and not on a training plan) as unknown rather than guessing.
    on_demand_usd_per_hour: dict[str, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="Instance type -> its on-demand USD per instance-hour in this Region, "
        "from the SageMaker pricing page (write the date beside it); for hpctl teams --cost.",
    )

    @field_validator("on_demand_usd_per_hour")
    @classmethod
    def _priced_types(cls, value: dict[str, float]) -> dict[str, float]:
        for name in value:
            if name not in INSTANCE_TYPES:
                raise ValueError(f"{name!r} is not an instance type the platform knows")
        return value

    @field_validator("priority_classes")
    @classmethod
    def _unique_classes(cls, value: list[PriorityClassConfig]) -> list[PriorityClassConfig]:
        unique([c.name for c in value], "priority class")
        return value

    @field_validator("teams")
    @classmethod
    def _unique_teams(cls, value: list[TeamConfig]) -> list[TeamConfig]:
        unique([t.name for t in value], "team")
        # Two teams of one group would share their directories on the shared file system.
        team_gids(t.name for t in value)
        return value

    def teams_by_name(self) -> list[TeamConfig]:
        """Teams sorted by name: the order never depends on the order in the file."""
        return sorted(self.teams, key=lambda t: t.name)


def quota_share(quota: QuotaConfig, instance_type: str, nodes: int) -> Fraction:
    """The share of all `nodes` of `instance_type` that `quota` guarantees: the largest share
    any of its amounts (nodes, accelerators, vCPU, memory) asks for."""
    instance = INSTANCE_TYPES[instance_type]
    per_node = {
        "count": 1,
        "accelerators": instance.accelerator_count,
        "vcpu": instance.vcpus,
        "memory_gib": instance.memory_gib,
    }
    return max(
        (
            Fraction(amount, max(nodes * unit, 1))
            for field, unit in per_node.items()
            if (amount := getattr(quota, field)) is not None
        ),
        default=Fraction(0),
    )


def quota_problems(
    governance: GovernanceConfig, groups: Sequence[InstanceGroupConfig]
) -> Iterator[tuple[str, str]]:
    """(field path, message) for quotas the cluster cannot honour: unknown groups, two groups
    of one instance type in a team, and guarantees that add up to more than the cluster has.

    Quotas are per instance type across the cluster (the API's ComputeQuotaResources), and a
    quota may be given in nodes, accelerators, vCPU or memory: each quota takes the largest
    share of the type's capacity that any of its amounts asks for, and the teams' shares of
    a type add up to at most the whole."""
    by_name = {g.name: g for g in groups}
    nodes_of_type: dict[str, int] = {}
    for member in groups:
        nodes_of_type[member.instance_type] = (
            nodes_of_type.get(member.instance_type, 0) + member.count
        )
    promised: dict[str, Fraction] = {}
    for t, team in enumerate(governance.teams):
        types_seen: dict[str, str] = {}
        for q, quota in enumerate(team.quotas):
            where = f"governance.teams[{t}].quotas[{q}]"
            group = by_name.get(quota.instance_group)
            if group is None:
                known = ", ".join(sorted(by_name))
                yield (
                    f"{where}.instance_group",
                    f"no instance group {quota.instance_group!r} (team {team.name}); "
                    f"use one of {known}",
                )
                continue
            type_name = group.instance_type
            earlier = types_seen.setdefault(type_name, group.name)
            if earlier != group.name:
                yield (
                    f"{where}.instance_group",
                    f"{group.name} and {earlier} are both {type_name}, and a quota is per "
                    f"instance type; give team {team.name} one quota for the two",
                )
                continue
            instance = INSTANCE_TYPES[type_name]
            if quota.accelerators and instance.accelerator_count == 0:
                yield (
                    f"{where}.accelerators",
                    f"{type_name} (group {group.name}) has no accelerators; "
                    "set count, vcpu or memory_gib instead",
                )
                continue
            nodes = nodes_of_type[type_name]
            promised[type_name] = promised.get(type_name, Fraction(0)) + quota_share(
                quota, type_name, nodes
            )
            if promised[type_name] > 1:
                yield (
                    where,
                    f"teams guarantee {float(promised[type_name]) * nodes:.4g} nodes' worth of "
                    f"{type_name}, and the cluster has {nodes}; lower the quotas or grow "
                    f"group {group.name}",
                )
