"""What each task-governance team's namespace admits: the facts its admission policies check.

Task governance queues only workloads that name their team's LocalQueue; anything else in a
team namespace runs outside Kueue and its quotas. So every workload there that asks for an
accelerator (config/kubernetes.py ACCELERATOR_RESOURCES) must carry the team's queue label and
one of the environment's priority classes; and every pod and pod template there, accelerators
or not, must select the team's nodes, tolerate only the taints those nodes carry and run as
the team's user and group (platform_constructs/team_admission.py turns this into
ValidatingAdmissionPolicies; docs/governance.md, "Admission guardrails").

- A team's nodes: the instance groups of every instance type its quotas name. Quotas are per
  instance type (Kueue flavors), so a team whose quota names gpu-p5 may run on any group of
  that type, and on no other type (config/teams.py `team_capacity`).
- The taints it was given: those of its groups, tolerated exactly as `hpctl job render`
  tolerates them (`Taint.toleration`).
- Pods that come from a policed workload: those the Job controller and the HyperPod training
  operator create, the two controllers whose workloads the policy checks itself.
- The one user and group every pod of the namespace runs as, accelerators or not: the team's
  (they own its directories on the shared file system); the group is also the only one a pod
  may join (fsGroup, supplementalGroups).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from config.addons import ADDONS, TRAINING_OPERATOR
from config.kubernetes import (
    JOB_CONTROLLER_USER,
    local_queue,
    priority_class,
    service_account_user,
    team_namespace,
)
from config.schema.governance import GovernanceConfig, TeamConfig
from config.schema.hyperpod import InstanceGroupConfig
from config.team_groups import team_gid, team_uid


@dataclass(frozen=True, kw_only=True)
class TeamAdmission:
    """`priority_classes`: the Kueue class names (`<class>-priority`); `tolerations`: the pod
    tolerations of the taints of the team's groups; `workload_creators`: the users whose
    pods belong to a workload the policy has already checked; `user_id`, `group_id`: the only
    user and group a pod of the namespace may run as (config/team_groups.py)."""

    team: str
    namespace: str
    queue: str
    priority_classes: tuple[str, ...]
    instance_groups: tuple[str, ...]
    instance_types: tuple[str, ...]
    tolerations: tuple[Mapping[str, str], ...]
    workload_creators: tuple[str, ...]
    user_id: int
    group_id: int


def _operator_user() -> str:
    account = ADDONS[TRAINING_OPERATOR].service_account
    if account is None:
        raise ValueError(f"config/addons.py: {TRAINING_OPERATOR} names no service account")
    return service_account_user(account.namespace, account.name)


def team_admission(
    governance: GovernanceConfig, team: TeamConfig, groups: Sequence[InstanceGroupConfig]
) -> TeamAdmission:
    """What `team`'s namespace admits, from a validated environment's governance and groups."""
    by_name = {g.name: g for g in groups}
    types = sorted({by_name[q.instance_group].instance_type for q in team.quotas})
    own = sorted((g for g in groups if g.instance_type in types), key=lambda g: g.name)
    tolerations: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
    for group in own:
        for taint in group.taints:
            toleration = taint.toleration()
            tolerations.setdefault(tuple(sorted(toleration.items())), toleration)
    return TeamAdmission(
        team=team.name,
        namespace=team_namespace(team.name),
        queue=local_queue(team.name),
        priority_classes=tuple(
            priority_class(c.name)
            for c in sorted(governance.priority_classes, key=lambda c: c.name)
        ),
        instance_groups=tuple(g.name for g in own),
        instance_types=tuple(types),
        tolerations=tuple(
            sorted(tolerations.values(), key=lambda t: (t["key"], t["effect"], t.get("value", "")))
        ),
        workload_creators=(JOB_CONTROLLER_USER, _operator_user()),
        user_id=team_uid(team.name),
        group_id=team_gid(team.name),
    )


def team_admissions(
    governance: GovernanceConfig, groups: Sequence[InstanceGroupConfig]
) -> dict[str, TeamAdmission]:
    """Every team's admission facts, by team name."""
    return {t.name: team_admission(governance, t, groups) for t in governance.teams_by_name()}
