"""The IP planner over the whole instance table, both interface types and both orchestrators."""

from __future__ import annotations

import ipaddress
import math

import pytest

from config.capacity import (
    AWS_RESERVED_PER_SUBNET,
    CapacityError,
    default_headroom,
    ips_per_node,
    plan_group,
    plan_network,
    smallest_prefix,
)
from config.instance_types import INSTANCE_TYPES, lookup
from config.loader import load_environment

ALL_TYPES = sorted(INSTANCE_TYPES)
EFA_TYPES = [n for n in ALL_TYPES if INSTANCE_TYPES[n].supports_efa]
EFA_ONLY_TYPES = [n for n in ALL_TYPES if INSTANCE_TYPES[n].supports_efa_only]


def test_documented_p5_figures():
    p5 = lookup("ml.p5.48xlarge")
    assert ips_per_node(p5, "eks", "efa") == 81
    assert ips_per_node(p5, "slurm", "efa") == 32


def test_p5_efa_only_takes_no_address_for_secondary_cards():
    p5 = lookup("ml.p5.48xlarge")
    assert ips_per_node(p5, "eks", "efa-only") == 50
    assert ips_per_node(p5, "slurm", "efa-only") == 1


@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize("orchestrator", ["eks", "slurm"])
def test_formula_over_the_table(name, orchestrator):
    t = INSTANCE_TYPES[name]
    interface = "efa" if t.supports_efa else None
    primary = t.ipv4_per_eni if orchestrator == "eks" else 1
    extra = (min(t.efa_interfaces, t.network_cards) - 1) if t.supports_efa else 0
    assert ips_per_node(t, orchestrator, interface) == primary + extra


@pytest.mark.parametrize("name", EFA_ONLY_TYPES)
@pytest.mark.parametrize("orchestrator", ["eks", "slurm"])
def test_efa_only_never_costs_more_than_efa(name, orchestrator):
    t = INSTANCE_TYPES[name]
    efa = ips_per_node(t, orchestrator, "efa")
    efa_only = ips_per_node(t, orchestrator, "efa-only")
    assert efa_only == (t.ipv4_per_eni if orchestrator == "eks" else 1)
    assert efa - efa_only == t.network_cards - 1


@pytest.mark.parametrize("name", [n for n in ALL_TYPES if n not in EFA_ONLY_TYPES])
def test_efa_only_is_refused_where_unsupported(name):
    with pytest.raises(ValueError, match="does not support"):
        ips_per_node(INSTANCE_TYPES[name], "eks", "efa-only")


def test_table_figures_match_the_field_notes():
    expected = {
        "ml.p4d.24xlarge": (4, 4),
        "ml.p4de.24xlarge": (4, 4),
        "ml.p5.48xlarge": (32, 32),
        "ml.p5e.48xlarge": (32, 32),
        "ml.p5en.48xlarge": (16, 16),
        "ml.p6-b200.48xlarge": (8, 8),
        "ml.trn1.32xlarge": (8, 8),
        "ml.trn1n.32xlarge": (16, 16),
        "ml.trn2.48xlarge": (16, 16),
        "ml.g5.48xlarge": (1, 1),
        "ml.g6e.48xlarge": (4, 4),
    }
    for name, (cards, efa) in expected.items():
        t = INSTANCE_TYPES[name]
        assert (t.network_cards, t.efa_interfaces, t.ipv4_per_eni) == (cards, efa, 50), name


@pytest.mark.parametrize(
    ("needed", "prefix"),
    [(1, 28), (11, 28), (12, 27), (1296, 21), (2043, 21), (2044, 20), (65531, 16), (65532, 15)],
)
def test_smallest_prefix_includes_reserved_addresses(needed, prefix):
    assert smallest_prefix(needed) == prefix
    if prefix < 28:
        # One bit longer would not hold it.
        assert (1 << (32 - (prefix + 1))) < needed + AWS_RESERVED_PER_SUBNET


def test_group_totals_include_headroom():
    plan = plan_group(name="g", instance_type="ml.p5.48xlarge", count=16, headroom_nodes=4)
    assert plan.ips_steady_state == 16 * 81
    assert plan.ips_total == 20 * 81
    assert plan.subnet_prefix == 21
    assert plan.interface == "efa"


def test_default_headroom():
    assert default_headroom(16, 25) == 4
    assert default_headroom(1, 25) == 1
    assert default_headroom(0, 25) == 0


def _layout(groups, *, cluster_cidr="10.1.0.0/16", prefix=None, azs=("a", "b", "c")):
    return plan_network(
        vpc_cidr=ipaddress.IPv4Network("10.0.0.0/20"),
        cluster_cidr=ipaddress.IPv4Network(cluster_cidr) if cluster_cidr else None,
        availability_zones=[f"us-east-1{z}" for z in azs],
        public_prefix=24,
        infra_prefix=24,
        cluster_prefix=prefix,
        groups=groups,
    )


def test_pinned_group_only_counts_in_its_az():
    pinned = plan_group(
        name="gpu", instance_type="ml.p5.48xlarge", count=16, availability_zone="us-east-1b"
    )
    floating = plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2)
    layout = _layout([pinned, floating])
    assert layout.cluster["us-east-1b"].required == 16 * 81 + 2 * 15
    assert layout.cluster["us-east-1a"].required == 2 * 15
    assert [g.name for g in layout.cluster["us-east-1a"].groups] == ["cpu"]


def test_cluster_subnets_fill_the_secondary_cidr_and_do_not_overlap():
    layout = _layout([plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2)])
    cidrs = [s.cidr for s in layout.cluster.values()]
    assert all(c.prefixlen == 19 for c in cidrs)  # 8 fixed AZ slots in a /16
    assert all(c.subnet_of(ipaddress.IPv4Network("10.1.0.0/16")) for c in cidrs)
    every = cidrs + list(layout.public.values()) + list(layout.infra.values())
    for i, a in enumerate(every):
        for b in every[i + 1 :]:
            assert not a.overlaps(b), (a, b)


def test_without_secondary_cidr_cluster_subnets_take_the_upper_half():
    layout = plan_network(
        vpc_cidr=ipaddress.IPv4Network("10.0.0.0/16"),
        cluster_cidr=None,
        availability_zones=["us-east-1a", "us-east-1b"],
        public_prefix=24,
        infra_prefix=24,
        cluster_prefix=None,
        groups=[plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2)],
    )
    upper = ipaddress.IPv4Network("10.0.128.0/17")
    assert all(s.cidr.subnet_of(upper) for s in layout.cluster.values())
    assert all(s.cidr.prefixlen == 20 for s in layout.cluster.values())
    assert all(not c.overlaps(upper) for c in layout.public.values())
    assert all(not c.overlaps(upper) for c in layout.infra.values())


def test_growth_reports_how_many_more_nodes_fit():
    gpu = plan_group(
        name="gpu", instance_type="ml.p5.48xlarge", count=16, availability_zone="us-east-1a"
    )
    subnet = _layout([gpu]).cluster["us-east-1a"]
    expected = (subnet.cidr.num_addresses - AWS_RESERVED_PER_SUBNET - 16 * 81) // 81
    assert subnet.growth() == {"gpu": expected}
    assert expected == (8192 - 5 - 16 * 81) // 81 == 85


def test_plan_that_does_not_fit_names_the_field_and_the_fix():
    gpu = plan_group(
        name="gpu", instance_type="ml.p5.48xlarge", count=64, availability_zone="us-east-1a"
    )
    with pytest.raises(CapacityError) as caught:
        _layout([gpu], cluster_cidr="10.1.0.0/20")
    assert caught.value.field == "network.cluster_cidr"
    assert "needs 5184" in caught.value.message
    need = smallest_prefix(5184)
    assert f"/{need} or larger" in caught.value.message


def test_prod_plan_has_room_to_grow():
    layout = load_environment("prod").layout
    gpu_subnet = layout.cluster["us-east-1a"]
    assert gpu_subnet.required == (16 + 4) * 81 + (3 + 1) * 30
    assert gpu_subnet.growth()["gpu-p5"] >= 50
    assert math.log2(gpu_subnet.cidr.num_addresses) == 32 - gpu_subnet.cidr.prefixlen


def test_subnet_cidrs_do_not_depend_on_az_order_or_on_other_azs():
    """A subnet replaced by a config edit would take the FSx file system in it along."""
    cpu = plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2)
    abc = _layout([cpu], azs=("a", "b", "c"))
    cba = _layout([cpu], azs=("c", "b", "a"))
    ac = _layout([cpu], azs=("a", "c"))
    abcd = _layout([cpu], azs=("a", "b", "c", "d"))
    for other in (cba, ac, abcd):
        for az in other.cluster:
            if az in abc.cluster:
                assert other.cluster[az].cidr == abc.cluster[az].cidr, az
                assert other.public[az] == abc.public[az], az
                assert other.infra[az] == abc.infra[az], az


def test_az_letters_beyond_h_have_no_slot():
    cpu = plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2)
    with pytest.raises(CapacityError) as caught:
        _layout([cpu], azs=("a", "i"))
    assert caught.value.field == "network.availability_zones"


def test_unpinned_groups_count_only_in_cluster_level_azs():
    cpu = plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2)
    layout = plan_network(
        vpc_cidr=ipaddress.IPv4Network("10.0.0.0/20"),
        cluster_cidr=ipaddress.IPv4Network("10.1.0.0/16"),
        availability_zones=["us-east-1a", "us-east-1b"],
        public_prefix=24,
        infra_prefix=24,
        cluster_prefix=None,
        groups=[cpu],
        cluster_level_azs=["us-east-1a"],
    )
    assert layout.cluster["us-east-1a"].required == 2 * 15
    assert layout.cluster["us-east-1b"].required == 0


def test_every_az_letter_has_a_fixed_slot():
    cpu = plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2)
    layout = _layout([cpu], azs=("a", "f"))
    assert {s.cidr.prefixlen for s in layout.cluster.values()} == {19}
    assert layout.cluster["us-east-1f"].cidr == ipaddress.IPv4Network("10.1.160.0/19")
