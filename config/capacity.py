"""EFA-aware IP capacity planner (pure Python, no AWS calls).

A HyperPod node takes addresses in its subnet for:
- the primary ENI: one address under Slurm; under EKS the VPC CNI fills the ENI, so the node
  and its pods take the ENI's whole IPv4 limit (each HyperPod node has a single ENI);
- every further network card's EFA interface: one address with interface type `efa`, none
  with `efa-only`.
A subnet's CIDR cannot grow later, so the plan adds headroom for replacements and rolling
updates, AWS's 5 reserved addresses per subnet, and reports how far each subnet can grow.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from config.instance_types import InstanceType, InterfaceType, lookup

Orchestrator = Literal["eks", "slurm"]

AWS_RESERVED_PER_SUBNET = 5
MIN_SUBNET_PREFIX = 16  # largest subnet AWS allows
MAX_SUBNET_PREFIX = 28  # smallest subnet AWS allows
AZ_SLOTS = 8  # fixed subnet slots, one per AZ letter a-h
MAX_AZ_LETTER = chr(ord("a") + AZ_SLOTS - 1)


class CapacityError(ValueError):
    """The plan does not fit; `field` names the config field to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def ips_per_node(
    instance: InstanceType, orchestrator: Orchestrator, interface: InterfaceType | None
) -> int:
    """Addresses one node takes in its subnet."""
    if interface is not None and not instance.supports_interface(interface):
        raise ValueError(f"{instance.name} does not support interface type {interface!r}")
    primary = instance.ipv4_per_eni if orchestrator == "eks" else 1
    efa_cards = min(instance.efa_interfaces, instance.network_cards)
    # The EFA interface on card 0 is the primary ENI itself; the others are extra.
    secondary_efa = max(efa_cards - 1, 0) if interface == "efa" else 0
    return primary + secondary_efa


def smallest_prefix(addresses_needed: int) -> int:
    """Smallest prefix length (largest number) whose subnet holds `addresses_needed`
    addresses including the AWS-reserved ones; may be below /16 when nothing fits."""
    total = addresses_needed + AWS_RESERVED_PER_SUBNET
    return min(MAX_SUBNET_PREFIX, 32 - math.ceil(math.log2(total)))


def default_headroom(count: int, percent: int) -> int:
    return max(1, math.ceil(count * percent / 100)) if count else 0


@dataclass(frozen=True, kw_only=True)
class GroupPlan:
    name: str
    instance_type: str
    orchestrator: Orchestrator
    interface: InterfaceType | None
    count: int
    headroom_nodes: int
    ips_per_node: int
    availability_zone: str | None  # None: the group may land in any cluster subnet

    @property
    def ips_steady_state(self) -> int:
        return self.ips_per_node * self.count

    @property
    def ips_total(self) -> int:
        return self.ips_per_node * (self.count + self.headroom_nodes)

    @property
    def subnet_prefix(self) -> int:
        return smallest_prefix(self.ips_total)

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "instance_type": self.instance_type,
            "orchestrator": self.orchestrator,
            "interface": self.interface,
            "count": self.count,
            "headroom_nodes": self.headroom_nodes,
            "ips_per_node": self.ips_per_node,
            "ips_steady_state": self.ips_steady_state,
            "ips_total": self.ips_total,
            "reserved_per_subnet": AWS_RESERVED_PER_SUBNET,
            "subnet_prefix": self.subnet_prefix,
            "availability_zone": self.availability_zone,
        }


def plan_group(
    *,
    name: str,
    instance_type: str,
    count: int,
    orchestrator: Orchestrator = "eks",
    interface: InterfaceType | None = None,
    headroom_nodes: int = 0,
    availability_zone: str | None = None,
) -> GroupPlan:
    instance = lookup(instance_type)
    if interface is None:
        interface = instance.default_interface
    return GroupPlan(
        name=name,
        instance_type=instance_type,
        orchestrator=orchestrator,
        interface=interface,
        count=count,
        headroom_nodes=headroom_nodes,
        ips_per_node=ips_per_node(instance, orchestrator, interface),
        availability_zone=availability_zone,
    )


@dataclass(frozen=True, kw_only=True)
class SubnetPlan:
    availability_zone: str
    cidr: ipaddress.IPv4Network
    groups: tuple[GroupPlan, ...]

    @property
    def usable(self) -> int:
        return self.cidr.num_addresses - AWS_RESERVED_PER_SUBNET

    @property
    def required(self) -> int:
        return sum(g.ips_total for g in self.groups)

    @property
    def free(self) -> int:
        return self.usable - self.required

    def growth(self) -> dict[str, int]:
        """How many more nodes of each group's type the free addresses still hold."""
        return {g.name: max(self.free, 0) // g.ips_per_node for g in self.groups}

    def as_dict(self) -> dict[str, object]:
        return {
            "availability_zone": self.availability_zone,
            "cidr": str(self.cidr),
            "prefix": self.cidr.prefixlen,
            "usable": self.usable,
            "required": self.required,
            "free": self.free,
            "groups": [g.name for g in self.groups],
            "growth_nodes": self.growth(),
        }


@dataclass(frozen=True, kw_only=True)
class NetworkLayout:
    """Every subnet CIDR of the VPC, decided in one place."""

    vpc_cidr: ipaddress.IPv4Network
    cluster_cidr: ipaddress.IPv4Network | None  # the secondary block, if one is used
    public: dict[str, ipaddress.IPv4Network]
    infra: dict[str, ipaddress.IPv4Network]
    cluster: dict[str, SubnetPlan] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "vpc_cidr": str(self.vpc_cidr),
            "cluster_cidr": str(self.cluster_cidr) if self.cluster_cidr else None,
            "public_subnets": {az: str(c) for az, c in self.public.items()},
            "infra_subnets": {az: str(c) for az, c in self.infra.items()},
            "cluster_subnets": {az: s.as_dict() for az, s in self.cluster.items()},
        }


def _nth_subnet(block: ipaddress.IPv4Network, prefix: int, index: int) -> ipaddress.IPv4Network:
    size = 1 << (32 - prefix)
    start = int(block.network_address) + index * size
    return ipaddress.IPv4Network((start, prefix))


def az_slot(availability_zone: str) -> int:
    """The fixed subnet slot of an AZ: its letter's position (us-east-1a -> 0)."""
    return ord(availability_zone[-1]) - ord("a")


def plan_network(
    *,
    vpc_cidr: ipaddress.IPv4Network,
    cluster_cidr: ipaddress.IPv4Network | None,
    availability_zones: list[str],
    public_prefix: int,
    infra_prefix: int,
    cluster_prefix: int | None,
    groups: list[GroupPlan],
    cluster_level_azs: list[str] | None = None,
) -> NetworkLayout:
    """Lay out all subnets and check the cluster subnets hold the groups.

    Each AZ owns a fixed slot chosen by its letter (a = 0 ... h = 7), never by its position
    in the config list: reordering, adding or removing AZs leaves every other subnet's CIDR,
    and so the subnet and the FSx file system in it, untouched. Public subnets take the first
    8 slots of the small block and infrastructure subnets the next 8; cluster subnets split
    the secondary CIDR (or, without one, the upper half of the VPC CIDR) into 8 equal slots.
    Groups pinned to an AZ (training plans) count in that AZ's subnet; the others may land in
    any of `cluster_level_azs` (default: all AZs) and count in each of them.
    """
    azs = list(availability_zones)
    _check_az_slots(azs)
    slot = {az: az_slot(az) for az in azs}
    unpinned_azs = set(cluster_level_azs if cluster_level_azs is not None else azs)
    small_block = (
        vpc_cidr if cluster_cidr is not None else _nth_subnet(vpc_cidr, vpc_cidr.prefixlen + 1, 0)
    )
    big_block = (
        cluster_cidr
        if cluster_cidr is not None
        else _nth_subnet(vpc_cidr, vpc_cidr.prefixlen + 1, 1)
    )
    field_big = "network.cluster_cidr" if cluster_cidr is not None else "network.vpc_cidr"
    public, infra = _small_subnets(small_block, slot, public_prefix, infra_prefix)

    largest_split = big_block.prefixlen + int(math.log2(AZ_SLOTS))
    field_size = "network.cluster_subnet_prefix" if cluster_prefix is not None else field_big
    prefix = _cluster_subnet_prefix(big_block, cluster_prefix, largest_split, field_size)
    cluster: dict[str, SubnetPlan] = {}
    for az in azs:
        members = tuple(
            g
            for g in groups
            if g.availability_zone == az or (g.availability_zone is None and az in unpinned_azs)
        )
        cluster[az] = SubnetPlan(
            availability_zone=az, cidr=_nth_subnet(big_block, prefix, slot[az]), groups=members
        )
    for subnet in cluster.values():
        _check_subnet_holds_its_groups(
            subnet, cluster_prefix=cluster_prefix, largest_split=largest_split, field=field_size
        )
    return NetworkLayout(
        vpc_cidr=vpc_cidr,
        cluster_cidr=cluster_cidr,
        public=public,
        infra=infra,
        cluster=cluster,
    )


def _check_az_slots(azs: list[str]) -> None:
    beyond = [az for az in azs if not 0 <= az_slot(az) < AZ_SLOTS]
    if beyond:
        raise CapacityError(
            "network.availability_zones",
            f"{beyond[0]}: only AZ letters a-{MAX_AZ_LETTER} have subnet slots; "
            f"use AZs a to {MAX_AZ_LETTER}",
        )


def _small_subnets(
    small_block: ipaddress.IPv4Network,
    slot: Mapping[str, int],
    public_prefix: int,
    infra_prefix: int,
) -> tuple[dict[str, ipaddress.IPv4Network], dict[str, ipaddress.IPv4Network]]:
    """Each AZ's public and infrastructure subnet in `small_block`."""
    slots = AZ_SLOTS
    public_size = 1 << (32 - public_prefix)
    infra_size = 1 << (32 - infra_prefix)
    # Infrastructure slots start after all public slots, aligned to their own size.
    infra_base = (
        -(-(int(small_block.network_address) + slots * public_size) // infra_size) * infra_size
    )
    small_end = infra_base + slots * infra_size - 1
    if (
        public_prefix < small_block.prefixlen
        or infra_prefix < small_block.prefixlen
        or small_end > int(small_block.broadcast_address)
    ):
        raise CapacityError(
            "network.vpc_cidr",
            f"{small_block} cannot hold {slots} public /{public_prefix} and {slots} "
            f"infrastructure /{infra_prefix} subnet slots; use a larger vpc_cidr or longer "
            "subnet prefixes",
        )
    public = {az: _nth_subnet(small_block, public_prefix, index) for az, index in slot.items()}
    infra = {
        az: ipaddress.IPv4Network((infra_base + index * infra_size, infra_prefix))
        for az, index in slot.items()
    }
    return public, infra


def _cluster_subnet_prefix(
    big_block: ipaddress.IPv4Network,
    cluster_prefix: int | None,
    largest_split: int,
    field_size: str,
) -> int:
    """The cluster subnets' prefix: the configured one, else `big_block` split into the AZ
    slots; never beyond AWS's largest subnet."""
    slots = AZ_SLOTS
    prefix = cluster_prefix if cluster_prefix is not None else largest_split
    if prefix < largest_split:
        raise CapacityError(
            "network.cluster_subnet_prefix",
            f"{slots} subnet slots of /{prefix} do not fit in {big_block}; use /{largest_split} "
            "or longer, or a larger CIDR",
        )
    if prefix > MAX_SUBNET_PREFIX:
        raise CapacityError(
            field_size,
            f"{big_block} split into {slots} AZ slots gives /{prefix} subnets, smaller than "
            f"AWS's /{MAX_SUBNET_PREFIX} minimum; use a CIDR of /{MAX_SUBNET_PREFIX - 3} or larger",
        )
    return max(prefix, MIN_SUBNET_PREFIX)


def _check_subnet_holds_its_groups(
    subnet: SubnetPlan, *, cluster_prefix: int | None, largest_split: int, field: str
) -> None:
    if subnet.required <= subnet.usable:
        return
    slots = AZ_SLOTS
    need = smallest_prefix(subnet.required)
    names = ", ".join(
        f"{g.name} {g.count}+{g.headroom_nodes} x {g.instance_type} = {g.ips_total}"
        for g in subnet.groups
    )
    if cluster_prefix is not None and need >= largest_split:
        fix = f"set network.cluster_subnet_prefix to /{need} or shorter"
    elif need >= MIN_SUBNET_PREFIX:
        fix = (
            f"use a cluster subnet of /{need} or larger (a CIDR of at least "
            f"/{max(need - int(math.log2(slots)), 0)} for {slots} AZ slots)"
        )
    else:
        fix = "lower the counts or the headroom: one subnet cannot exceed /16"
    raise CapacityError(
        field,
        f"cluster subnet {subnet.cidr} in {subnet.availability_zone} has {subnet.usable} usable "
        f"addresses but the plan needs {subnet.required} ({names}); {fix}",
    )
