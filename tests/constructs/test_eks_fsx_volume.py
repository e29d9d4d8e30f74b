"""The static FSx volume and its per-namespace claims, on a bare stack."""

from __future__ import annotations

import json

import pytest

from config.kubernetes import DEFAULT_NAMESPACE, FSX_CLAIM_NAME
from platform_constructs.eks_fsx_volume import FsxStaticVolume, LustreFileSystem
from tests.support import bare_stack, imported_cluster, only, resources_of, template_of

FILE_SYSTEM_ID = "fs-0123456789abcdef0"


def static_volume(capacity_gib: int) -> tuple[FsxStaticVolume, object]:
    stack = bare_stack("Volume")
    volume = FsxStaticVolume(
        stack,
        "Fsx",
        cluster=imported_cluster(stack),
        file_system=LustreFileSystem(
            file_system_id=FILE_SYSTEM_ID,
            arn=f"arn:aws:fsx:us-east-1:111111111111:file-system/{FILE_SYSTEM_ID}",
            dns_name=f"{FILE_SYSTEM_ID}.fsx.us-east-1.amazonaws.com",
            mount_name="abcdefgh",
            capacity_gib=capacity_gib,
            data_path="/data",
        ),
    )
    return volume, stack


def objects_by_namespace(stack) -> dict[str, list[dict]]:
    found = {}
    for resource in resources_of(
        template_of(stack), "Custom::AWSCDK-EKS-KubernetesResource"
    ).values():
        objects = json.loads(resource["Properties"]["Manifest"])
        claim = next(o for o in objects if o["kind"] == "PersistentVolumeClaim")
        found[claim["metadata"]["namespace"]] = objects
    return found


def _static_volume_objects(capacity_gib: int) -> list[dict]:
    _, stack = static_volume(capacity_gib)
    return only(objects_by_namespace(stack))


def test_growing_the_file_system_changes_only_the_volume_not_the_claim():
    """A statically bound claim (storageClassName "") cannot be resized: if its request
    followed the file system's size, growing FSx in config would fail the apply."""
    small, grown = _static_volume_objects(1200), _static_volume_objects(4800)
    claims = [
        next(o for o in objs if o["kind"] == "PersistentVolumeClaim") for objs in (small, grown)
    ]
    volumes = [next(o for o in objs if o["kind"] == "PersistentVolume") for objs in (small, grown)]
    assert claims[0] == claims[1]
    assert claims[1]["spec"]["resources"]["requests"]["storage"] == "1200Gi"
    assert [v["spec"]["capacity"]["storage"] for v in volumes] == ["1200Gi", "4800Gi"]


def test_file_system_below_the_smallest_fsx_size_is_refused():
    with pytest.raises(ValueError, match="1200"):
        static_volume(600)


def _team_objects() -> tuple[FsxStaticVolume, dict[str, list[dict]]]:
    volume, stack = static_volume(1200)
    volume.add_team("hyperpod-ns-team-a", "/fsx/teams/team-a")
    return volume, objects_by_namespace(stack)


def test_the_default_namespace_mounts_the_whole_file_system_under_its_deployed_names():
    # A PV's source is immutable: the names and handle deployed clusters have stay.
    _, by_namespace = _team_objects()
    volume, claim = by_namespace[DEFAULT_NAMESPACE]
    assert (volume["metadata"]["name"], claim["metadata"]["name"]) == ("fsx-default", "fsx-claim")
    assert volume["spec"]["csi"]["volumeHandle"] == FILE_SYSTEM_ID
    assert volume["spec"]["csi"]["volumeAttributes"]["mountname"] == "abcdefgh"
    assert FSX_CLAIM_NAME == "fsx-claim"


def test_team_namespace_gets_its_own_tree_and_the_data_read_only():
    volume, by_namespace = _team_objects()
    with pytest.raises(ValueError, match="already has"):
        volume.add_team("hyperpod-ns-team-a", "/fsx/teams/team-a")
    objects = by_namespace["hyperpod-ns-team-a"]
    pvs = {o["spec"]["claimRef"]["name"]: o for o in objects if o["kind"] == "PersistentVolume"}
    claims = {o["metadata"]["name"]: o for o in objects if o["kind"] == "PersistentVolumeClaim"}
    assert set(pvs) == set(claims) == {"fsx-team", "fsx-data"}
    team, data = pvs["fsx-team"], pvs["fsx-data"]
    # A Lustre sub-directory mount: <dnsname>@tcp:/<mountname> is the volume's root.
    assert team["spec"]["csi"]["volumeAttributes"]["mountname"] == "abcdefgh/teams/team-a"
    assert data["spec"]["csi"]["volumeAttributes"]["mountname"] == "abcdefgh/data"
    assert (team["spec"]["mountOptions"], data["spec"]["mountOptions"]) == (
        ["flock"],
        ["flock", "ro"],
    )
    assert claims["fsx-data"]["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert team["spec"]["csi"]["volumeHandle"] != data["spec"]["csi"]["volumeHandle"]
    for name, claim in claims.items():
        assert claim["spec"]["volumeName"] == pvs[name]["metadata"]["name"]
    import kubernetes_validate

    for obj in objects:
        kubernetes_validate.validate(obj, "1.32.0", strict=True)


def test_a_team_directory_outside_the_file_system_mount_is_refused():
    volume, _ = static_volume(1200)
    with pytest.raises(ValueError, match="/etc is not under /fsx/"):
        volume.add_team("hyperpod-ns-team-a", "/etc")
