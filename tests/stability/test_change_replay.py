"""Config changes replayed against prod: each variant is built with `build_app` like the
real app and compared with the session's prod baseline, so this module runs on its own
worker (xdist group "variants") next to the main synth.

- everyday changes (FSx throughput and maintenance window, bucket retention, node counts, the
  GPU group's training plan removed, a new instance group, team quotas, sharing and
  fair-share weights edited, a priority class reweighted)
  and an AZ list that is reordered and grows by one AZ replace nothing in the network and
  storage stacks and leave the HyperPod cluster's create-only properties alone;
- instance groups reordered in the file with one group added change nothing but the new
  group.
"""

from __future__ import annotations

import copy

import pytest
from aws_cdk.assertions import Match

from platform_constructs.hyperpod_cluster import CLUSTER_LOGICAL_ID
from tests.stability.replacement import (
    create_only_paths,
    dig,
    fsx_replacement_values,
    replacement_paths,
)
from tests.support import (
    VARIANTS_GROUP,
    SynthResult,
    environment,
    synthesize,
    variant_of,
)

pytestmark = [pytest.mark.xdist_group(VARIANTS_GROUP), pytest.mark.slow]

STATEFUL_TYPES = (
    "AWS::FSx::FileSystem",
    "AWS::FSx::DataRepositoryAssociation",
    "AWS::S3::Bucket",
    "AWS::KMS::Key",
    "AWS::Logs::LogGroup",
)
GPU_GROUP = "gpu-p5"
VARIANT_GROUP = {
    "name": "gpu-g5-eval",
    "instance_type": "ml.g5.12xlarge",
    "count": 2,
    "labels": {"workload": "evaluation"},
}
EXTRA_GROUP = {
    "name": "cpu-batch",
    "instance_type": "ml.c5.4xlarge",
    "count": 2,
    "ebs_volume_gib": 100,
    "labels": {"workload": "batch"},
}
# Reordered, with us-east-1d added between existing AZs. The cluster-level AZs (HyperPod's
# VpcConfig, fixed at creation) are reordered but not extended.
CHANGED_NETWORK_AZS = ["us-east-1c", "us-east-1a", "us-east-1d", "us-east-1b"]
CHANGED_HYPERPOD_AZS = ["us-east-1c", "us-east-1a", "us-east-1b"]
ADDED_AZ = "us-east-1d"
EDITED_TEAM = "foundation"


def _everyday_changes(data: dict) -> None:
    data["storage"]["fsx"]["throughput_per_tib"] = 1000
    data["storage"]["fsx"]["weekly_maintenance_start"] = "6:05:30"
    data["storage"]["buckets"]["checkpoint_noncurrent_days"] = 30
    groups = data["hyperpod"]["instance_groups"]
    groups[0]["count"] += 2
    groups[1]["count"] += 1
    # The plan ended: the group now lands in any cluster-level subnet. FSx stays where
    # storage.fsx.availability_zone puts it.
    assert groups[0]["name"] == GPU_GROUP
    del groups[0]["training_plan"]
    groups.append(copy.deepcopy(VARIANT_GROUP))
    teams = {team["name"]: team for team in data["governance"]["teams"]}
    teams[EDITED_TEAM]["quotas"][0]["count"] += 2
    teams[EDITED_TEAM]["borrow_limit_percent"] = 25
    teams[EDITED_TEAM]["fair_share_weight"] = 55
    data["governance"]["priority_classes"][0]["weight"] = 90


def _az_changes(data: dict) -> None:
    # prod names its zones by ID; the change writes names, which resolve to the same zones.
    resolved = environment("prod").config.network.availability_zones
    assert sorted(resolved) == sorted(CHANGED_HYPERPOD_AZS)
    data["network"]["availability_zones"] = list(CHANGED_NETWORK_AZS)
    data["hyperpod"]["availability_zones"] = list(CHANGED_HYPERPOD_AZS)


def _groups_reordered_plus_one(data: dict) -> None:
    data["hyperpod"]["instance_groups"].reverse()
    data["hyperpod"]["instance_groups"].insert(1, copy.deepcopy(EXTRA_GROUP))


@pytest.fixture(scope="module")
def baseline(prod_baseline: SynthResult) -> SynthResult:
    """prod as shipped, synthesized in this worker (once, shared with the guard's tests)."""
    return prod_baseline


@pytest.fixture(scope="module")
def variant(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    """prod with everyday changes."""
    loaded = variant_of("prod", _everyday_changes)
    return synthesize(loaded, tmp_path_factory.mktemp("cdk-variant"))


@pytest.fixture(scope="module")
def az_variant(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    """prod with its AZs reordered and one AZ added."""
    loaded = variant_of("prod", _az_changes)
    return synthesize(loaded, tmp_path_factory.mktemp("cdk-az-variant"))


@pytest.fixture(scope="module")
def reordered(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    """prod with its groups in reverse file order and one group added."""
    loaded = variant_of("prod", _groups_reordered_plus_one)
    return synthesize(loaded, tmp_path_factory.mktemp("cdk-reordered"))


@pytest.fixture(params=["variant", "az_variant"])
def changed(request: pytest.FixtureRequest) -> SynthResult:
    return request.getfixturevalue(request.param)


def raw(result: SynthResult, stack: str) -> dict:
    return result.templates[stack]


# --------------------------------------------------------------------------- nothing replaced


def test_config_changes_keep_every_network_and_storage_logical_id(baseline, changed):
    # Every resource survives under its logical ID: the VPC, its CIDR association, every
    # subnet, route table, NAT gateway and EIP, the security groups and endpoints, FSx, the
    # DRA, the buckets and the keys (a new logical ID is a replacement).
    for stack in ("network", "storage"):
        after = raw(changed, stack)["Resources"]
        for logical, resource in raw(baseline, stack)["Resources"].items():
            assert logical in after, (stack, logical)
            assert after[logical]["Type"] == resource["Type"], (stack, logical)
    covered = {
        r["Type"]
        for stack in ("network", "storage")
        for r in raw(baseline, stack)["Resources"].values()
    }
    assert {
        *STATEFUL_TYPES,
        "AWS::EC2::VPC",
        "AWS::EC2::Subnet",
        "AWS::EC2::VPCCidrBlock",
    } <= covered


def test_config_changes_leave_create_only_properties_unchanged(baseline, changed):
    assert fsx_replacement_values(changed) == fsx_replacement_values(baseline)
    checked: set[str] = set()
    for stack in ("network", "storage"):
        for logical, resource in raw(baseline, stack)["Resources"].items():
            after = raw(changed, stack)["Resources"][logical].get("Properties", {})
            for path in replacement_paths(resource["Type"]):
                assert dig(after, path) == dig(resource.get("Properties", {}), path), (
                    logical,
                    path,
                )
            checked.add(resource["Type"])
    assert {
        "AWS::EC2::VPC", "AWS::EC2::VPCCidrBlock", "AWS::EC2::Subnet",
        "AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation", "AWS::S3::Bucket",
        "AWS::KMS::Key",
    } <= checked  # fmt: skip


def test_config_changes_leave_the_hyperpod_clusters_create_only_properties_unchanged(
    baseline, changed
):
    before = baseline.resources("hyperpod", "AWS::SageMaker::Cluster")
    after = changed.resources("hyperpod", "AWS::SageMaker::Cluster")
    assert len(before) == 1 and set(after) == set(before)
    paths = create_only_paths("AWS::SageMaker::Cluster")
    assert {("ClusterName",), ("VpcConfig",)} <= set(paths)
    for logical, resource in before.items():
        assert dig(resource["Properties"], ("VpcConfig", "Subnets")), logical
        for path in paths:
            assert dig(after[logical]["Properties"], path) == dig(resource["Properties"], path), (
                path
            )


def test_quota_edits_update_the_governance_stack_in_place(baseline, variant):
    """Quotas, the scheduler config and the team workspaces keep their logical IDs and
    create-only properties: a quota edit is an update, never a delete-then-create (which
    would drop the team's namespace under its running jobs)."""
    before, after = raw(baseline, "governance"), raw(variant, "governance")
    assert set(after["Resources"]) == set(before["Resources"])
    checked = set()
    for logical, resource in before["Resources"].items():
        for path in replacement_paths(resource["Type"]):
            new = after["Resources"][logical].get("Properties", {})
            assert dig(new, path) == dig(resource.get("Properties", {}), path), (logical, path)
            checked.add(resource["Type"])
    assert {
        "AWS::SageMaker::ComputeQuota",
        "AWS::SageMaker::ClusterSchedulerConfig",
        "AWS::EKS::PodIdentityAssociation",
    } <= checked
    quota = next(
        q["Properties"]
        for q in variant.resources("governance", "AWS::SageMaker::ComputeQuota").values()
        if q["Properties"]["ComputeQuotaTarget"]["TeamName"] == EDITED_TEAM
    )
    assert quota["ComputeQuotaConfig"]["ResourceSharingConfig"]["BorrowLimit"] == 25
    assert quota["ComputeQuotaTarget"]["FairShareWeight"] == 55
    assert quota["ComputeQuotaConfig"]["ComputeQuotaResources"][0]["Count"] == 10


def test_the_changes_took_effect(variant, az_variant):
    """The variants differ from prod where intended (else the tests above prove nothing)."""
    assert az_variant.stacks["network"].availability_zones == CHANGED_NETWORK_AZS
    assert ADDED_AZ in az_variant.stacks["network"].cluster_subnets
    (cluster,) = variant.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    (gpu,) = [
        g for g in cluster["Properties"]["InstanceGroups"] if g["InstanceGroupName"] == GPU_GROUP
    ]
    assert "TrainingPlanArn" not in gpu and "OverrideVpcConfig" not in gpu


# --------------------------------------------------------------------------- AZ changes


def test_an_added_az_gets_its_planned_subnets_and_no_way_out(baseline, az_variant):
    """prod's network is closed (egress: closed): the new AZ's infra and cluster subnets
    take their planned ranges and, like the others, route nowhere outside the VPC."""
    network = az_variant.stacks["network"]
    layout, before = az_variant.layout, baseline.layout
    for kind in ("public", "infra"):
        assert {az: c for az, c in getattr(layout, kind).items() if az != ADDED_AZ} == getattr(
            before, kind
        )
    assert {az: p.cidr for az, p in layout.cluster.items() if az != ADDED_AZ} == {
        az: p.cidr for az, p in before.cluster.items()
    }
    templates = raw(az_variant, "network")["Resources"]
    for kind, subnet, cidr in (
        ("infra", network.infra_subnets[ADDED_AZ], layout.infra[ADDED_AZ]),
        ("cluster", network.cluster_subnets[ADDED_AZ], layout.cluster[ADDED_AZ].cidr),
    ):
        props = templates[az_variant.logical_id("network", subnet)]["Properties"]
        assert (props["AvailabilityZone"], props["CidrBlock"]) == (ADDED_AZ, str(cidr)), kind
    assert az_variant.resources("network", "AWS::EC2::NatGateway") == {}
    for subnet in (network.infra_subnets[ADDED_AZ], network.cluster_subnets[ADDED_AZ]):
        table = network.resolve(subnet.route_table.route_table_id)
        assert not [
            r
            for r in az_variant.resources("network", "AWS::EC2::Route").values()
            if r["Properties"]["RouteTableId"] == table
        ]


def test_reordering_and_adding_azs_only_extends_the_endpoints_subnet_lists(baseline, az_variant):
    """Every prod resource is unchanged except the endpoints, which also list the new AZ's
    subnets (interface endpoints) or route tables (S3 gateway endpoint): no route moves
    to another NAT gateway, and the storage stack does not change at all."""
    assert raw(az_variant, "storage")["Resources"] == raw(baseline, "storage")["Resources"]
    before = raw(baseline, "network")["Resources"]
    after = raw(az_variant, "network")["Resources"]
    changed = {k for k, v in before.items() if after[k] != v}
    assert changed == set(baseline.resources("network", "AWS::EC2::VPCEndpoint"))
    for logical in changed:
        before_props = before[logical]["Properties"]
        after_props = after[logical]["Properties"]
        key = "SubnetIds" if "SubnetIds" in before_props else "RouteTableIds"
        assert {k: v for k, v in after_props.items() if k != key} == {
            k: v for k, v in before_props.items() if k != key
        }, logical
        extra = 1 if key == "SubnetIds" else 2
        assert len(after_props[key]) == len(before_props[key]) + extra, logical
        assert all(ref in after_props[key] for ref in before_props[key]), logical


# --------------------------------------------------------------------------- updates


def test_config_changes_reach_the_updatable_properties(variant):
    variant.template("storage").has_resource_properties(
        "AWS::FSx::FileSystem",
        {
            "LustreConfiguration": Match.object_like(
                {"PerUnitStorageThroughput": 1000, "WeeklyMaintenanceStartTime": "6:05:30"}
            )
        },
    )
    storage = variant.stacks["storage"]
    checkpoint = raw(variant, "storage")["Resources"][
        variant.logical_id("storage", storage.checkpoint_bucket)
    ]
    rules = checkpoint["Properties"]["LifecycleConfiguration"]["Rules"]
    assert {
        "Id": "expire-noncurrent-checkpoints",
        "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
        "Status": "Enabled",
    } in rules


def test_reordering_and_adding_groups_changes_nothing_else(baseline, reordered):
    changed = copy.deepcopy(reordered.templates["hyperpod"])
    groups = changed["Resources"][CLUSTER_LOGICAL_ID]["Properties"]["InstanceGroups"]
    assert [g["InstanceGroupName"] for g in groups] == ["cpu-batch", "gpu-p5", "system"]
    groups[:] = [g for g in groups if g["InstanceGroupName"] != "cpu-batch"]
    # Without the new group, the template is byte-for-byte prod's: file order is ignored
    # and no other group, role or resource moved.
    assert changed == baseline.templates["hyperpod"]


def test_added_group_is_built_from_its_own_config(baseline, reordered):
    cluster = reordered.templates["hyperpod"]["Resources"][CLUSTER_LOGICAL_ID]
    groups = {g["InstanceGroupName"]: g for g in cluster["Properties"]["InstanceGroups"]}
    added = groups["cpu-batch"]
    assert added["InstanceType"] == "ml.c5.4xlarge"
    assert added["InstanceCount"] == 2
    assert added["KubernetesConfig"] == {"Labels": {"workload": "batch"}}
    assert "NetworkInterface" not in added and "OverrideVpcConfig" not in added
    before = baseline.templates["hyperpod"]["Resources"][CLUSTER_LOGICAL_ID]
    (system,) = [
        g for g in before["Properties"]["InstanceGroups"] if g["InstanceGroupName"] == "system"
    ]
    assert added["ExecutionRole"] == system["ExecutionRole"]
