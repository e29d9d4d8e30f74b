"""The figures `hpctl capacity` and `hpctl instance-types` print: the IP plan of one instance
group or of a whole environment file, and the instance types the planner knows, as plain
data (the `--json` objects). The commands are in `hpctl.capacity_cmd`."""

from __future__ import annotations

from typing import Any

from config.capacity import (
    AWS_RESERVED_PER_SUBNET,
    MIN_SUBNET_PREFIX,
    CapacityError,
    Orchestrator,
    plan_group,
)
from config.instance_types import INSTANCE_TYPES, InterfaceType, known_instance_types, lookup
from config.loader import LoadedEnvironment
from hpctl.errors import InputError


def group_plan(
    instance_type: str,
    count: int,
    orchestrator: Orchestrator,
    interface: InterfaceType | None,
    headroom: int,
) -> dict[str, object]:
    """Addresses per node and in all for `count` nodes of `instance_type`, the smallest
    subnet that holds them and how many more nodes that subnet would take."""
    try:
        figures = lookup(instance_type)
    except KeyError as error:
        raise InputError(f"--instance-type: {error.args[0]}") from None
    if interface and not figures.supports_interface(interface):
        supported = figures.supported_interfaces
        fix = f"use --interface {' or '.join(supported)}" if supported else "omit --interface"
        raise InputError(f"--interface: {instance_type} does not support {interface!r}; {fix}")
    try:
        plan = plan_group(
            name=instance_type,
            instance_type=instance_type,
            count=count,
            orchestrator=orchestrator,
            interface=interface,
            headroom_nodes=headroom,
        )
    except CapacityError as error:
        raise InputError(str(error)) from None
    result = plan.as_dict()
    del result["name"], result["availability_zone"]
    prefix = plan.subnet_prefix
    result["subnet_prefix_fits_aws_limits"] = prefix >= MIN_SUBNET_PREFIX
    size = 1 << (32 - max(prefix, 0))
    result["subnet_size"] = size
    result["growth_nodes_in_subnet"] = (
        size - AWS_RESERVED_PER_SUBNET - plan.ips_total
    ) // plan.ips_per_node
    return result


def environment_plan(loaded: LoadedEnvironment) -> dict[str, Any]:
    """The environment's subnet layout with every instance group's plan, by group name."""
    layout = loaded.layout.as_dict()
    groups = {g.name: g for s in loaded.layout.cluster.values() for g in s.groups}
    layout["groups"] = [groups[name].as_dict() for name in sorted(groups)]
    layout["environment"] = loaded.config.environment
    return layout


def instance_type_rows() -> list[dict[str, Any]]:
    """One row per known instance type with its network figures, by name."""
    return [
        {
            "name": t.name,
            "accelerator": t.accelerator,
            "accelerators": t.accelerator_count,
            "network_cards": t.network_cards,
            "efa_interfaces": t.efa_interfaces,
            "ipv4_per_eni": t.ipv4_per_eni,
            "efa_only": t.supports_efa_only,
        }
        for t in (INSTANCE_TYPES[n] for n in known_instance_types())
    ]
