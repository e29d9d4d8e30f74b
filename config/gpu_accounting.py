"""Each team's GPU quota, as the GPU accounting rules compare usage with it.

A team's quota on an instance type is a share of that type's nodes (config/teams.py
`team_capacity`); its GPU quota is those guaranteed nodes times the type's GPUs per node,
summed over the types. Only NVIDIA GPUs count: DCGM, which the accounting reads, sees no
other accelerator. Borrowed capacity is not quota: a team above 100 % of its quota is
borrowing.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from config.instance_types import lookup
from config.kubernetes import team_namespace
from config.schema.governance import GovernanceConfig
from config.schema.hyperpod import InstanceGroupConfig
from config.teams import team_capacity


def team_gpu_quotas(
    governance: GovernanceConfig | None, groups: Sequence[InstanceGroupConfig]
) -> dict[str, float]:
    """Team namespace -> its guaranteed NVIDIA GPUs, every team of the environment (none
    without governance)."""
    if governance is None:
        return {}
    quotas: dict[str, float] = {}
    for team in governance.teams_by_name():
        gpus = Fraction(0)
        counted: set[str] = set()
        for capacity in team_capacity(governance, team, groups):
            instance = lookup(capacity.instance_type)
            # Quotas are per instance type; every group of the type reports the same share.
            if instance.accelerator != "nvidia" or capacity.instance_type in counted:
                continue
            counted.add(capacity.instance_type)
            gpus += capacity.guaranteed * instance.accelerator_count
        quotas[team_namespace(team.name)] = float(gpus)
    return quotas
