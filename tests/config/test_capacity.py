"""The IP planner over the whole instance table, both interface types and both orchestrators."""

from __future__ import annotations

import ipaddress
import math

import pytest

from config.capacity import (
    AWS_RESERVED_PER_SUBNET,
    CapacityError,
    GroupPlan,
    NetworkLayout,
    SubnetPlan,
    az_slot,
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


# --- Every slot, every boundary, every refusal with its words -----------------------------


def _net(
    *,
    vpc: str = "10.0.0.0/20",
    cluster: str | None = "10.1.0.0/16",
    azs: str = "abc",
    public: int = 24,
    infra: int = 24,
    prefix: int | None = None,
    groups: list[GroupPlan] | None = None,
) -> NetworkLayout:
    return plan_network(
        vpc_cidr=ipaddress.IPv4Network(vpc),
        cluster_cidr=ipaddress.IPv4Network(cluster) if cluster else None,
        availability_zones=[f"us-east-1{z}" for z in azs],
        public_prefix=public,
        infra_prefix=infra,
        cluster_prefix=prefix,
        groups=groups or [],
    )


def _refusal(**kwargs: object) -> CapacityError:
    with pytest.raises(CapacityError) as caught:
        _net(**kwargs)  # type: ignore[arg-type]
    error = caught.value
    assert str(error) == f"{error.field}: {error.message}"
    return error


def test_all_eight_azs_have_pinned_public_and_infrastructure_subnets():
    layout = _net(azs="abcdefgh")
    assert {az[-1]: str(c) for az, c in layout.public.items()} == {
        z: f"10.0.{i}.0/24" for i, z in enumerate("abcdefgh")
    }
    assert {az[-1]: str(c) for az, c in layout.infra.items()} == {
        z: f"10.0.{8 + i}.0/24" for i, z in enumerate("abcdefgh")
    }
    assert {az[-1]: str(s.cidr) for az, s in layout.cluster.items()} == {
        z: f"10.1.{32 * i}.0/19" for i, z in enumerate("abcdefgh")
    }
    assert all(s.availability_zone == az for az, s in layout.cluster.items())


def test_infrastructure_slots_align_after_smaller_public_slots():
    # No secondary CIDR: public and infrastructure share the lower /17, the cluster the upper.
    layout = _net(vpc="10.0.0.0/16", cluster=None, azs="aeh", public=26, infra=24)
    assert {az[-1]: str(c) for az, c in layout.public.items()} == {
        "a": "10.0.0.0/26",
        "e": "10.0.1.0/26",
        "h": "10.0.1.192/26",
    }
    # The 8 public /26 end at 10.0.1.255: infrastructure /24 slots start at 10.0.2.0.
    assert {az[-1]: str(c) for az, c in layout.infra.items()} == {
        "a": "10.0.2.0/24",
        "e": "10.0.6.0/24",
        "h": "10.0.9.0/24",
    }
    assert {az[-1]: str(s.cidr) for az, s in layout.cluster.items()} == {
        "a": "10.0.128.0/20",
        "e": "10.0.192.0/20",
        "h": "10.0.240.0/20",
    }
    assert layout.vpc_cidr == ipaddress.IPv4Network("10.0.0.0/16")
    assert layout.cluster_cidr is None


def test_the_small_block_must_hold_eight_public_and_eight_infrastructure_slots():
    # 8 x /24 public + 8 x /23 infrastructure = 6144 addresses; a /20 has 4096.
    error = _refusal(infra=23)
    assert error.field == "network.vpc_cidr"
    assert error.message == (
        "10.0.0.0/20 cannot hold 8 public /24 and 8 infrastructure /23 subnet slots; "
        "use a larger vpc_cidr or longer subnet prefixes"
    )
    # Exactly full (8 x /25 + 8 x /24 = 3072, aligned to end at 10.0.11.255) still fits.
    assert str(_net(public=25, infra=24, azs="h").infra["us-east-1h"]) == "10.0.11.0/24"
    # The last infrastructure slot ends on the block's last address: fits.
    assert str(_net(azs="h").infra["us-east-1h"]) == "10.0.15.0/24"
    # The public slots alone fill the block: no room for infrastructure.
    assert _refusal(public=23, infra=28).field == "network.vpc_cidr"


@pytest.mark.parametrize(("public", "infra"), [(19, 28), (28, 19)])
def test_a_slot_wider_than_the_small_block_is_refused(public: int, infra: int):
    error = _refusal(public=public, infra=infra)
    assert error.field == "network.vpc_cidr"
    assert f"8 public /{public} and 8 infrastructure /{infra}" in error.message


def test_a_subnet_prefix_as_wide_as_the_small_block_is_not_refused_for_its_width():
    # /20 public slots in a /16 block (no secondary CIDR, so the /17 lower half) take 8 x 4096:
    # 2 of 8 would not fit, so the refusal comes from the end check, not the width check.
    error = _refusal(vpc="10.0.0.0/16", cluster=None, public=17, infra=28)
    assert "10.0.0.0/17 cannot hold 8 public /17" in error.message


def test_usable_addresses_leave_out_the_five_aws_reserves():
    layout = _net(prefix=24, groups=[plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2)])
    subnet = layout.cluster["us-east-1a"]
    assert subnet.usable == 256 - 5 == 251
    assert subnet.required == 30
    assert subnet.free == 221
    assert subnet.growth() == {"cpu": 221 // 15}


def test_an_exact_fit_passes_and_one_address_more_is_refused():
    # ml.m5.xlarge takes 15 addresses; a /24 holds 251.
    fits = plan_group(name="cpu", instance_type="ml.m5.xlarge", count=16, headroom_nodes=0)
    assert fits.ips_total == 240
    small = plan_group(name="small", instance_type="ml.m5.xlarge", count=0, headroom_nodes=0)
    assert small.ips_total == 0
    # 240 + 11 one-address groups (slurm, no EFA) = 251: exactly full.
    ones = [
        plan_group(name=f"s{i}", instance_type="ml.m5.xlarge", count=1, orchestrator="slurm")
        for i in range(11)
    ]
    full = _net(prefix=24, groups=[fits, *ones]).cluster["us-east-1a"]
    assert (full.required, full.free) == (251, 0)
    assert full.growth() == {"cpu": 0, **{f"s{i}": 0 for i in range(11)}}
    extra = plan_group(name="s11", instance_type="ml.m5.xlarge", count=1, orchestrator="slurm")
    error = _refusal(prefix=24, groups=[fits, *ones, extra])
    assert error.field == "network.cluster_subnet_prefix"
    assert "has 251 usable addresses but the plan needs 252" in error.message


def test_growth_never_goes_negative():
    subnet = SubnetPlan(
        availability_zone="us-east-1a",
        cidr=ipaddress.IPv4Network("10.1.0.0/28"),
        groups=(plan_group(name="cpu", instance_type="ml.m5.xlarge", count=1),),
    )
    assert (subnet.usable, subnet.free) == (11, -4)
    assert subnet.growth() == {"cpu": 0}


def test_a_refused_plan_names_each_group_and_the_prefix_to_set():
    gpu = plan_group(
        name="gpu",
        instance_type="ml.p5.48xlarge",
        count=4,
        headroom_nodes=1,
        availability_zone="us-east-1a",
    )
    cpu = plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2)
    error = _refusal(prefix=24, groups=[gpu, cpu])
    assert error.field == "network.cluster_subnet_prefix"
    assert error.message == (
        "cluster subnet 10.1.0.0/24 in us-east-1a has 251 usable addresses but the plan needs "
        "435 (gpu 4+1 x ml.p5.48xlarge = 405, cpu 2+0 x ml.m5.xlarge = 30); "
        "set network.cluster_subnet_prefix to /23 or shorter"
    )


def test_a_refused_plan_beyond_the_slot_asks_for_a_larger_cidr():
    # /19 is the largest slot of a /16; 200 p5 need a /18.
    gpu = plan_group(name="gpu", instance_type="ml.p5.48xlarge", count=200)
    error = _refusal(prefix=19, groups=[gpu], azs="a")
    assert error.field == "network.cluster_subnet_prefix"
    assert error.message.endswith(
        "use a cluster subnet of /18 or larger (a CIDR of at least /15 for 8 AZ slots)"
    )
    # Without a prefix of its own the field is the CIDR the slots come from.
    assert _refusal(groups=[gpu], azs="a").field == "network.cluster_cidr"
    assert _refusal(cluster=None, vpc="10.0.0.0/16", groups=[gpu], azs="a").field == (
        "network.vpc_cidr"
    )


def test_a_plan_beyond_a_slash_16_asks_for_lower_counts():
    gpu = plan_group(name="gpu", instance_type="ml.p5.48xlarge", count=900)
    error = _refusal(cluster="10.0.0.0/8", vpc="172.16.0.0/20", groups=[gpu], azs="a")
    assert error.message.endswith("lower the counts or the headroom: one subnet cannot exceed /16")
    # Exactly a /16 is still a subnet AWS allows.
    gpu = plan_group(name="gpu", instance_type="ml.p5.48xlarge", count=809)
    assert gpu.ips_total == 65529
    assert (
        _net(cluster="10.0.0.0/8", vpc="172.16.0.0/20", groups=[gpu], azs="a")
        .cluster["us-east-1a"]
        .cidr.prefixlen
        == 16
    )
    error = _refusal(
        cluster="10.0.0.0/8",
        vpc="172.16.0.0/20",
        groups=[plan_group(name="gpu", instance_type="ml.p5.48xlarge", count=810)],
        azs="a",
    )
    assert "use a cluster subnet of /16 or larger (a CIDR of at least /13" not in error.message


def test_a_secondary_cidr_larger_than_eight_slash_16_still_gets_slash_16_slots():
    layout = _net(cluster="100.64.0.0/10", azs="ab")
    assert [str(s.cidr) for s in layout.cluster.values()] == ["100.64.0.0/16", "100.65.0.0/16"]


def test_eight_slash_28_slots_are_the_smallest_and_slash_29_is_refused():
    layout = _net(cluster="10.1.0.0/25", azs="h")
    assert str(layout.cluster["us-east-1h"].cidr) == "10.1.0.112/28"
    error = _refusal(cluster="10.1.0.0/26")
    assert error.field == "network.cluster_cidr"
    assert error.message == (
        "10.1.0.0/26 split into 8 AZ slots gives /29 subnets, smaller than AWS's /28 minimum; "
        "use a CIDR of /25 or larger"
    )
    error = _refusal(prefix=29)
    assert error.field == "network.cluster_subnet_prefix"
    assert "gives /29 subnets" in error.message
    assert str(_net(prefix=28).cluster["us-east-1b"].cidr) == "10.1.0.16/28"


def test_a_cluster_prefix_wider_than_a_slot_is_refused():
    error = _refusal(prefix=18)
    assert error.field == "network.cluster_subnet_prefix"
    assert error.message == (
        "8 subnet slots of /18 do not fit in 10.1.0.0/16; use /19 or longer, or a larger CIDR"
    )
    assert _net(prefix=19).cluster["us-east-1a"].cidr.prefixlen == 19


def test_az_letters_beyond_h_are_named_with_the_fix():
    error = _refusal(azs="ai")
    assert error.message == "us-east-1i: only AZ letters a-h have subnet slots; use AZs a to h"
    assert az_slot("us-east-1a") == 0
    assert az_slot("us-west-2h") == 7


def test_headroom_rounds_up():
    assert default_headroom(10, 25) == 3  # 2.5 nodes
    assert default_headroom(100, 25) == 25
    assert default_headroom(101, 1) == 2  # 1.01
    assert default_headroom(3, 0) == 1


def test_a_group_takes_its_types_default_interface():
    assert plan_group(name="g", instance_type="ml.m5.xlarge", count=1).interface is None
    p5 = plan_group(name="g", instance_type="ml.p5.48xlarge", count=1, orchestrator="slurm")
    assert (p5.interface, p5.ips_per_node, p5.orchestrator) == ("efa", 32, "slurm")
    only = plan_group(name="g", instance_type="ml.p5.48xlarge", count=1, interface="efa-only")
    assert only.ips_per_node == 50


def test_plans_as_dicts():
    group = plan_group(name="cpu", instance_type="ml.m5.xlarge", count=2, headroom_nodes=1)
    assert group.as_dict() == {
        "name": "cpu",
        "instance_type": "ml.m5.xlarge",
        "orchestrator": "eks",
        "interface": None,
        "count": 2,
        "headroom_nodes": 1,
        "ips_per_node": 15,
        "ips_steady_state": 30,
        "ips_total": 45,
        "reserved_per_subnet": 5,
        "subnet_prefix": 26,
        "availability_zone": None,
    }
    assert _net(prefix=20, groups=[group], azs="a").as_dict() == {
        "vpc_cidr": "10.0.0.0/20",
        "cluster_cidr": "10.1.0.0/16",
        "public_subnets": {"us-east-1a": "10.0.0.0/24"},
        "infra_subnets": {"us-east-1a": "10.0.8.0/24"},
        "cluster_subnets": {
            "us-east-1a": {
                "availability_zone": "us-east-1a",
                "cidr": "10.1.0.0/20",
                "prefix": 20,
                "usable": 4091,
                "required": 45,
                "free": 4046,
                "groups": ["cpu"],
                "growth_nodes": {"cpu": 269},
            }
        },
    }
    assert _net(cluster=None, vpc="10.0.0.0/16", azs="a").as_dict()["cluster_cidr"] is None


def test_a_refused_plan_at_the_largest_slot_asks_for_that_prefix():
    # /20 set, the plan needs /19, which is exactly the largest slot of a /16: setting the
    # prefix is enough, no larger CIDR is needed.
    gpu = plan_group(name="gpu", instance_type="ml.p5.48xlarge", count=60)
    error = _refusal(prefix=20, groups=[gpu], azs="a")
    assert smallest_prefix(gpu.ips_total) == 19
    assert error.message.endswith("set network.cluster_subnet_prefix to /19 or shorter")


def test_a_refused_plan_needing_a_slash_16_asks_for_a_larger_cidr():
    # A /14 gives /17 slots; 500 p5 need exactly a /16, which AWS still allows.
    gpu = plan_group(name="gpu", instance_type="ml.p5.48xlarge", count=500)
    assert smallest_prefix(gpu.ips_total) == 16
    error = _refusal(cluster="100.64.0.0/14", groups=[gpu], azs="a")
    assert error.field == "network.cluster_cidr"
    assert error.message.endswith(
        "use a cluster subnet of /16 or larger (a CIDR of at least /13 for 8 AZ slots)"
    )
