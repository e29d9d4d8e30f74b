"""What the platform gives each task-governance team, and what a team's jobs may ask for.

The one home of the names a team's jobs rely on: the stacks create them in every team
namespace (`hyperpod-ns-<team>`, config/kubernetes.py), `hpctl job render` writes jobs that
use them, and a contract test checks one against the other.

Capacity: a team's guaranteed nodes per instance group follow from its quota (a share of
the instance type, config/schema/governance.py), and with `LendAndBorrow` (and idle-resource
sharing on) it may borrow idle capacity up to its borrow limit, in percent of the guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from config.schema.governance import GovernanceConfig, TeamConfig, quota_share
from config.schema.hyperpod import InstanceGroupConfig

# The Kubernetes service account training pods run as; EKS Pod Identity maps it to the
# team's IAM role (checkpoint prefix, data read, metrics).
TRAINING_SERVICE_ACCOUNT: Final = "training"
# A ConfigMap in each team namespace with deploy-time values a job cannot know offline
# (the bucket's generated name): jobs read its keys through configMapKeyRef.
TEAM_CONFIG_MAP: Final = "hyperpod-team"
MANAGED_TIER_PATH_KEY: Final = "managed-tier-s3-path"
# CloudWatch namespace training pods may publish metrics to (and nothing else).
TRAINING_METRICS_NAMESPACE: Final = "HyperPod/Training"
# Borrow limit the service applies when a LendAndBorrow quota leaves it out (percent).
SERVICE_DEFAULT_BORROW_LIMIT_PERCENT: Final = 50


def checkpoint_prefix(team: str) -> str:
    """The key prefix of the checkpoint bucket that only `team` may read and write."""
    return f"teams/{team}/"


def managed_tier_prefix(team: str) -> str:
    """Where managed tiered checkpointing persists `team`'s checkpoints (its S3 tier)."""
    return f"{checkpoint_prefix(team)}managed-tier"


@dataclass(frozen=True, kw_only=True)
class GroupCapacity:
    """What one team may use of one instance group, in nodes.

    Quotas are per instance type, so `guaranteed` and `borrowable` are the team's figures
    for the group's type; `max_job_nodes` also stops at the group's own size."""

    instance_group: str
    instance_type: str
    group_nodes: int
    guaranteed: Fraction
    borrowable: Fraction

    @property
    def max_job_nodes(self) -> int:
        return min(self.group_nodes, math.floor(self.guaranteed + self.borrowable))


def team_capacity(
    governance: GovernanceConfig, team: TeamConfig, groups: Sequence[InstanceGroupConfig]
) -> list[GroupCapacity]:
    """`team`'s capacity on every instance group, sorted by group name (0 where it has no
    quota for the group's type). Assumes a validated environment (quotas name real groups)."""
    nodes_of_type: dict[str, int] = {}
    for group in groups:
        nodes_of_type[group.instance_type] = nodes_of_type.get(group.instance_type, 0) + group.count
    by_name = {g.name: g for g in groups}
    guaranteed: dict[str, Fraction] = {}
    for quota in team.quotas:
        instance_type = by_name[quota.instance_group].instance_type
        nodes = nodes_of_type[instance_type]
        guaranteed[instance_type] = quota_share(quota, instance_type, nodes) * nodes
    borrows = team.sharing == "LendAndBorrow" and governance.idle_resource_sharing
    limit = Fraction(team.borrow_limit_percent or SERVICE_DEFAULT_BORROW_LIMIT_PERCENT, 100)
    capacity = []
    for group in sorted(groups, key=lambda g: g.name):
        own = guaranteed.get(group.instance_type, Fraction(0))
        idle_elsewhere = nodes_of_type[group.instance_type] - own
        capacity.append(
            GroupCapacity(
                instance_group=group.name,
                instance_type=group.instance_type,
                group_nodes=group.count,
                guaranteed=own,
                borrowable=min(own * limit, idle_elsewhere) if borrows else Fraction(0),
            )
        )
    return capacity
