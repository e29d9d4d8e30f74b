"""The IP plan's contract as a property: whatever the CIDRs, AZs and groups, a plan either is
refused with the field to change, or never overlaps, stays inside its CIDRs, holds every
group with its headroom, and uses only subnet sizes AWS allows."""

from __future__ import annotations

import ipaddress
import itertools

from hypothesis import given
from hypothesis import strategies as st

from config.capacity import (
    AWS_RESERVED_PER_SUBNET,
    MAX_SUBNET_PREFIX,
    MIN_SUBNET_PREFIX,
    CapacityError,
    GroupPlan,
    plan_group,
    plan_network,
)

LETTERS = "abcdefgh"
TYPES = ["ml.m5.xlarge", "ml.p5.48xlarge", "ml.g5.48xlarge", "ml.trn1.32xlarge"]
FIELDS = {"network.vpc_cidr", "network.cluster_cidr", "network.cluster_subnet_prefix"}


@st.composite
def groups(draw: st.DrawFn, azs: list[str]) -> list[GroupPlan]:
    return [
        plan_group(
            name=f"g{i}",
            instance_type=draw(st.sampled_from(TYPES)),
            count=draw(st.integers(0, 20)),
            headroom_nodes=draw(st.integers(0, 5)),
            orchestrator=draw(st.sampled_from(["eks", "slurm"])),
            availability_zone=draw(st.sampled_from([None, *azs])),
        )
        for i in range(draw(st.integers(0, 3)))
    ]


@st.composite
def networks(draw: st.DrawFn) -> dict[str, object]:
    letters = draw(st.lists(st.sampled_from(LETTERS), min_size=1, max_size=8, unique=True))
    azs = [f"us-west-2{z}" for z in letters]
    vpc_prefix = draw(st.integers(16, 22))
    # Somewhere in 10.0.0.0/8; the secondary CIDR comes from 100.64.0.0/10, as AWS suggests.
    start = (10 << 24) | (draw(st.integers(0, 2 ** (vpc_prefix - 8) - 1)) << (32 - vpc_prefix))
    vpc = ipaddress.IPv4Network((start, vpc_prefix))
    cluster = None
    if draw(st.booleans()):
        cluster_prefix = draw(st.integers(10, 26))
        base = int(ipaddress.IPv4Address("100.64.0.0"))
        cluster = ipaddress.IPv4Network((base, cluster_prefix), strict=False)
    return {
        "vpc_cidr": vpc,
        "cluster_cidr": cluster,
        "availability_zones": azs,
        # Mostly plans that can fit, and some that cannot.
        "public_prefix": draw(st.integers(vpc_prefix + 4, 28)),
        "infra_prefix": draw(st.integers(vpc_prefix + 4, 28)),
        "cluster_prefix": draw(st.one_of(st.none(), st.none(), st.integers(14, 28))),
        "groups": draw(groups(azs)),
    }


@given(network=networks())
def test_a_plan_never_overlaps_and_always_fits_its_cidrs(network: dict[str, object]) -> None:
    try:
        layout = plan_network(**network)  # type: ignore[arg-type]
    except CapacityError as error:
        assert error.field in FIELDS | {"network.availability_zones"}
        assert error.message and "\n" not in error.message
        return
    vpc = layout.vpc_cidr
    halves = list(vpc.subnets(prefixlen_diff=1))
    small, big = (vpc, layout.cluster_cidr) if layout.cluster_cidr else (halves[0], halves[1])
    assert big is not None
    cidrs = [
        *layout.public.values(),
        *layout.infra.values(),
        *(s.cidr for s in layout.cluster.values()),
    ]
    for a, b in itertools.combinations(cidrs, 2):
        assert not a.overlaps(b), (a, b)
    assert all(c.subnet_of(small) for c in [*layout.public.values(), *layout.infra.values()])
    for az, subnet in layout.cluster.items():
        assert subnet.cidr.subnet_of(big)
        assert MIN_SUBNET_PREFIX <= subnet.cidr.prefixlen <= MAX_SUBNET_PREFIX
        assert subnet.usable == subnet.cidr.num_addresses - AWS_RESERVED_PER_SUBNET
        assert subnet.required <= subnet.usable
        # Every group that may land here is counted here, with its headroom.
        expected = sum(
            g.ips_total
            for g in network["groups"]  # type: ignore[attr-defined]
            if g.availability_zone in (None, az)
        )
        assert subnet.required == expected
    assert set(layout.cluster) == set(layout.public) == set(layout.infra)
