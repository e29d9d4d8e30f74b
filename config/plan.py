"""The platform plan: what a validated environment means, worked out once and frozen.

config/<env>.yaml -> the schema (its shape: one line per problem) -> `plan` -> the stacks,
`hpctl` and the lifecycle settings, which read the plan and never work it out again. The
plan holds the address plan, a node model per instance group, the Deployments the platform
runs, and it refuses, in the schema's one-line wording, an environment that is well formed
but cannot work: nodes that leave a job nothing, system nodes that cannot hold the
platform's controllers, groups that do not fit their subnets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from config.addons import Addon, AddonStack, at_versions
from config.capacity import (
    CapacityError,
    GroupPlan,
    NetworkLayout,
    default_headroom,
    plan_group,
    plan_network,
)
from config.errors import ConfigError
from config.gpu_accounting import team_gpu_quotas
from config.kubernetes import NodeGroup
from config.node_model import (
    NodeModel,
    installed_addons,
    job_fit_problem,
    node_models,
    system_fit_problem,
    system_pods,
)
from config.pods import PodRequests
from config.schema import EnvironmentConfig
from config.team_admission import TeamAdmission, team_admissions
from config.teams import GroupCapacity, TeamQuota, team_capacity, team_quota


@dataclass(frozen=True, kw_only=True)
class PlatformPlan:
    """`layout`: every subnet of the VPC; `group_plans`: each instance group's address needs,
    by group name; `node_models`: group name -> what one of its nodes offers pods, in config
    order; `system_pods`: the platform's Deployments the environment installs; `addons`: the
    add-on rows it installs (with their pods and identities), in table order, each at the
    version it runs (its `eks.addons` override, else the pin); `node_groups`: what the
    device plugins need of each instance group, by group name; `taint_tolerations`: one
    toleration per distinct taint of the groups, in config order (what a pod that may land
    on any node carries). Per task-governance team, by name (empty without governance):
    `team_capacity`, what it may use of each group; `team_quotas`, its compute quota;
    `team_admissions`, what its namespace admits; `team_gpu_quotas`, its guaranteed NVIDIA
    GPUs by team namespace."""

    layout: NetworkLayout
    group_plans: tuple[GroupPlan, ...]
    node_models: Mapping[str, NodeModel]
    system_pods: tuple[PodRequests, ...]
    addons: tuple[Addon, ...]
    node_groups: tuple[NodeGroup, ...]
    taint_tolerations: tuple[Mapping[str, str], ...]
    team_capacity: Mapping[str, tuple[GroupCapacity, ...]]
    team_quotas: Mapping[str, TeamQuota]
    team_admissions: Mapping[str, TeamAdmission]
    team_gpu_quotas: Mapping[str, float]

    def node_model(self, group: str) -> NodeModel:
        """The model of one node of instance group `group`."""
        return self.node_models[group]

    def addons_in(self, stack: AddonStack) -> tuple[Addon, ...]:
        """The installed add-ons that `stack` creates, in table order."""
        return tuple(a for a in self.addons if a.stack == stack)


def plan(config: EnvironmentConfig, source: str = "config") -> PlatformPlan:
    """The plan of a validated environment; `ConfigError` (one line, named after the field,
    from `source`) where the environment cannot work."""
    models = node_models(config)
    pods = system_pods(config)
    # A cluster whose system nodes cannot hold its own controllers, or whose GPU nodes leave
    # a job nothing, deploys but never runs a job.
    for problem in (job_fit_problem(models), system_fit_problem(models, pods)):
        if problem is not None:
            field, message = problem
            raise ConfigError(source, [f"{field}: {message}"])
    group_plans = _group_plans(config)
    governance, groups = config.governance, config.hyperpod.instance_groups
    teams = governance.teams_by_name() if governance is not None else []
    installed = installed_addons(config)
    return PlatformPlan(
        layout=_layout(config, group_plans, source),
        group_plans=group_plans,
        node_models=MappingProxyType({m.group: m for m in models}),
        system_pods=pods,
        addons=tuple(a for a in at_versions(config.eks) if a.name in installed),
        node_groups=_node_groups(config),
        taint_tolerations=_taint_tolerations(config),
        team_capacity=MappingProxyType(
            {t.name: tuple(team_capacity(governance, t, groups)) for t in teams}
            if governance is not None
            else {}
        ),
        team_quotas=MappingProxyType({t.name: team_quota(t, groups) for t in teams}),
        team_admissions=MappingProxyType(
            team_admissions(governance, groups) if governance is not None else {}
        ),
        team_gpu_quotas=MappingProxyType(team_gpu_quotas(governance, groups)),
    )


def _group_plans(config: EnvironmentConfig) -> tuple[GroupPlan, ...]:
    percent = config.network.default_headroom_percent
    return tuple(
        plan_group(
            name=g.name,
            instance_type=g.instance_type,
            count=g.count,
            orchestrator=config.hyperpod.orchestrator,
            interface=g.interface,
            headroom_nodes=g.headroom_nodes
            if g.headroom_nodes is not None
            else default_headroom(g.count, percent),
            availability_zone=g.availability_zone,
        )
        for g in config.hyperpod.groups_by_name()
    )


def _node_groups(config: EnvironmentConfig) -> tuple[NodeGroup, ...]:
    return tuple(
        NodeGroup(
            instance_type=group.instance_type,
            efa=group.interface is not None,
            taints=tuple((taint.key, taint.effect) for taint in group.taints),
        )
        for group in config.hyperpod.groups_by_name()
    )


def _taint_tolerations(config: EnvironmentConfig) -> tuple[Mapping[str, str], ...]:
    tolerations: dict[str, Mapping[str, str]] = {}
    for group in config.hyperpod.instance_groups:
        for taint in group.taints:
            toleration = taint.toleration()
            tolerations.setdefault(json.dumps(toleration, sort_keys=True), toleration)
    return tuple(tolerations.values())


def _layout(
    config: EnvironmentConfig, group_plans: tuple[GroupPlan, ...], source: str
) -> NetworkLayout:
    net = config.network
    try:
        return plan_network(
            vpc_cidr=net.vpc_cidr,
            cluster_cidr=net.cluster_cidr,
            availability_zones=net.availability_zones,
            public_prefix=net.public_subnet_prefix,
            infra_prefix=net.infra_subnet_prefix,
            cluster_prefix=net.cluster_subnet_prefix,
            groups=list(group_plans),
            cluster_level_azs=config.hyperpod.availability_zones,
        )
    except CapacityError as error:
        raise ConfigError(source, [str(error)]) from None
