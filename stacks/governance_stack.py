"""Task governance of one environment: the task governance add-on, the cluster's scheduler
config and one compute quota per team. Deployed after the HyperPod cluster (both SageMaker
resources reference it, and the add-on's Kueue controller runs on its nodes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from constructs import Construct

from config.addons import ADDONS
from config.names import PlatformNames
from config.schema import EksConfig, InstanceGroupConfig
from config.schema.governance import GovernanceConfig, TeamConfig
from platform_constructs.eks_addons import PinnedAddon
from platform_constructs.task_governance import (
    ComputeQuota,
    PriorityClass,
    QuotaResource,
    SchedulerConfig,
    TeamQuota,
)


def team_quota(team: TeamConfig, groups: Sequence[InstanceGroupConfig]) -> TeamQuota:
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


class GovernanceStack(cdk.Stack):
    """Exports `quotas` (team name -> ComputeQuota)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        governance: GovernanceConfig,
        eks: EksConfig,
        instance_groups: Sequence[InstanceGroupConfig],
        names: PlatformNames,
        eks_cluster_name: str,
        hyperpod_cluster_arn: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.addons = {
            addon.name: PinnedAddon(
                self,
                f"Addon-{addon.name}",
                cluster_name=eks_cluster_name,
                addon_name=addon.name,
                version=eks.addon_version(addon.name),
                configuration=addon.configuration,
            )
            for addon in ADDONS.values()
            if addon.stack == "governance"
        }
        self.scheduler_config = SchedulerConfig(
            self,
            "SchedulerConfig",
            name=names.scheduler_config,
            cluster_arn=hyperpod_cluster_arn,
            priority_classes=[
                PriorityClass(name=c.name, weight=c.weight) for c in governance.priority_classes
            ],
            fair_share=governance.fair_share,
            idle_resource_sharing=governance.idle_resource_sharing,
        )
        # A scheduler config created before Kueue is installed fails to create (HyperPod CLI
        # getting-started walkthrough): the add-on goes first.
        for addon in self.addons.values():
            self.scheduler_config.node.add_dependency(addon)
        self.quotas: dict[str, ComputeQuota] = {}
        for team in governance.teams_by_name():
            quota = ComputeQuota(
                self,
                f"Quota-{team.name}",
                name=names.compute_quota(team.name),
                cluster_arn=hyperpod_cluster_arn,
                quota=team_quota(team, instance_groups),
            )
            # Quotas name priority classes only through the jobs, but their queues are built
            # by the same controller: create them once the cluster policy exists.
            quota.node.add_dependency(self.scheduler_config)
            self.quotas[team.name] = quota
