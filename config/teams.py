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

from config.kubernetes import FSX_MOUNT
from config.schema.governance import GovernanceConfig, TeamConfig, quota_share
from config.schema.hyperpod import InstanceGroupConfig

# The Kubernetes service account training pods run as; EKS Pod Identity maps it to the
# team's IAM role (checkpoint prefix, data read, metrics).
TRAINING_SERVICE_ACCOUNT: Final = "training"
# A ConfigMap in each team namespace with deploy-time values a job cannot know offline
# (the bucket's generated name): jobs read its keys through configMapKeyRef.
TEAM_CONFIG_MAP: Final = "hyperpod-team"
MANAGED_TIER_PATH_KEY: Final = "managed-tier-s3-path"
# The environment's MLflow tracking server (its ARN), present where storage.mlflow is enabled.
MLFLOW_TRACKING_URI_KEY: Final = "mlflow-tracking-uri"
# CloudWatch namespace training pods may publish metrics to (and nothing else).
TRAINING_METRICS_NAMESPACE: Final = "HyperPod/Training"
# The training image's own user and group (training/Dockerfile `USER`): what it runs as off the
# platform. Rendered pods run as their team's user and group instead (config/team_groups.py),
# which the team's admission policy requires; the image's files are readable by any user.
TRAINING_UID: Final = 10001
TRAINING_GID: Final = 10001
# The claims a team's jobs mount (hyperpod-ns-<team>; platform_constructs/eks_fsx_volume.py):
# the team's own tree of the file system, mounted where it lies on the whole file system
# (team_directory), and the data repository's directory, read-only, at DATA_MOUNT. Nothing
# else of the file system is mounted in a team namespace, so a team's pods cannot name
# another team's files whatever user they run as.
TEAM_CLAIM_NAME: Final = "fsx-team"
DATA_CLAIM_NAME: Final = "fsx-data"
DATA_MOUNT: Final = f"{FSX_MOUNT}/data"
# Where rendered pods keep $HOME: their user (the team's, config/team_groups.py) has no
# entry in the image's /etc/passwd, so the runtime would give it "/", which it cannot write.
HOME_MOUNT: Final = "/home/job"

# --- Team directories on the shared file system (docs/fsx.md, "Who owns what on /fsx") -
# A new FSx for Lustre file system's root belongs to root and CreateFileSystem has no
# owner or mode for it, and the data repository association imports its path (/data) with
# the S3 objects' POSIX metadata, root's where the objects carry none (FSx for Lustre guide,
# "POSIX metadata support for data repositories"). So the platform makes each team's
# directories before the team's first job: owner the team's user, group the team's group
# (config/team_groups.py), mode 2770 (the team reads and writes; setgid, so what jobs create
# inherits the team's group; others nothing). /fsx/teams itself stays root's, 0755, so
# nobody but root adds a team.
TEAMS_ROOT: Final = f"{FSX_MOUNT}/teams"
TEAM_DIRECTORY_MODE: Final = 0o2770
TEAMS_ROOT_MODE: Final = 0o755
RUNS_SUBDIRECTORY: Final = "runs"
CHECKPOINTS_SUBDIRECTORY: Final = "checkpoints"
# Borrow limit the service applies when a LendAndBorrow quota leaves it out (percent).
SERVICE_DEFAULT_BORROW_LIMIT_PERCENT: Final = 50


def checkpoint_prefix(team: str) -> str:
    """The key prefix of the checkpoint bucket that only `team` may read and write."""
    return f"teams/{team}/"


def managed_tier_prefix(team: str) -> str:
    """Where managed tiered checkpointing persists `team`'s checkpoints (its S3 tier)."""
    return f"{checkpoint_prefix(team)}managed-tier"


def team_directory(team: str) -> str:
    """`team`'s directory on the shared file system, as pods mounting the FSx claim see it."""
    return f"{TEAMS_ROOT}/{team}"


def team_runs_directory(team: str) -> str:
    """Where `team`'s jobs keep their run directories (one per job)."""
    return f"{team_directory(team)}/{RUNS_SUBDIRECTORY}"


def team_checkpoints_directory(team: str) -> str:
    """Where `team`'s jobs keep their shared checkpoint tiers (one directory per job and tier)."""
    return f"{team_directory(team)}/{CHECKPOINTS_SUBDIRECTORY}"


def team_directories(team: str) -> tuple[str, ...]:
    """Every directory the platform creates for `team` (TEAM_DIRECTORY_MODE), parents first."""
    return team_directory(team), team_runs_directory(team), team_checkpoints_directory(team)


@dataclass(frozen=True, kw_only=True)
class QuotaResource:
    """Guaranteed capacity of one instance type; fields left None are filled by the service
    in proportion to the type."""

    instance_type: str
    count: int | None = None
    accelerators: int | None = None
    vcpu: int | None = None
    memory_gib: int | None = None


@dataclass(frozen=True, kw_only=True)
class TeamQuota:
    """A team's compute quota (platform_constructs/task_governance.py `ComputeQuota`).
    `sharing`: Lend, DontLend or LendAndBorrow; `borrow_limit_percent` only with
    LendAndBorrow (None: the service default)."""

    team: str
    resources: tuple[QuotaResource, ...]
    sharing: str
    borrow_limit_percent: int | None
    preempt_lower_priority: bool
    fair_share_weight: int


def team_quota(team: TeamConfig, groups: Sequence[InstanceGroupConfig]) -> TeamQuota:
    """`team`'s compute quota, its instance groups named by their instance types."""
    instance_types = {g.name: g.instance_type for g in groups}
    return TeamQuota(
        team=team.name,
        resources=tuple(
            QuotaResource(
                instance_type=instance_types[q.instance_group],
                count=q.count,
                accelerators=q.accelerators,
                vcpu=q.vcpu,
                memory_gib=q.memory_gib,
            )
            for q in team.quotas
        ),
        sharing=team.sharing,
        borrow_limit_percent=team.borrow_limit_percent,
        preempt_lower_priority=team.preempt_lower_priority,
        fair_share_weight=team.fair_share_weight,
    )


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
