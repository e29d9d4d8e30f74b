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


def test_team_namespace_gets_its_own_volume_and_fsx_claim():
    """How a team namespace (created elsewhere, e.g. hyperpod-ns-<team>) gets `fsx-claim`."""
    volume, stack = static_volume(1200)
    volume.add_namespace("hyperpod-ns-team-a")
    with pytest.raises(ValueError, match="already has"):
        volume.add_namespace("hyperpod-ns-team-a")
    by_namespace = objects_by_namespace(stack)
    assert set(by_namespace) == {DEFAULT_NAMESPACE, "hyperpod-ns-team-a"}
    volumes = {
        ns: next(o for o in objs if o["kind"] == "PersistentVolume")
        for ns, objs in by_namespace.items()
    }
    assert (
        volumes["default"]["metadata"]["name"] != volumes["hyperpod-ns-team-a"]["metadata"]["name"]
    )
    assert {v["spec"]["csi"]["volumeHandle"] for v in volumes.values()} == {FILE_SYSTEM_ID}
    import kubernetes_validate

    for objects in by_namespace.values():
        for obj in objects:
            kubernetes_validate.validate(obj, "1.32.0", strict=True)
    team_claim = next(
        o for o in by_namespace["hyperpod-ns-team-a"] if o["kind"] == "PersistentVolumeClaim"
    )
    assert team_claim["metadata"]["name"] == FSX_CLAIM_NAME == "fsx-claim"
    assert team_claim["spec"]["volumeName"] == volumes["hyperpod-ns-team-a"]["metadata"]["name"]
