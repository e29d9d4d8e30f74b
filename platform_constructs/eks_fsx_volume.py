"""The platform's FSx for Lustre file system as a statically provisioned Kubernetes volume.

A PersistentVolume binds to exactly one PersistentVolumeClaim, and a claim lives in one
namespace. Each namespace that mounts the file system therefore gets its own PV (same
file system: same volumeHandle and attributes) bound to a claim named `fsx-claim`, so a job
spec mounts `fsx-claim` whatever team namespace it runs in. `default` gets one here; a team
namespace (e.g. hyperpod-ns-<team>, which HyperPod task governance creates for a team's
compute quota) gets one through `add_namespace`, called after the namespace exists.

Every PV's volumeHandle is the file system ID. Two volumes with one handle hang a pod in
ContainerCreating only when that one pod mounts both (kubernetes/kubernetes#132921: the
kubelet keys a CSI volume by driver and handle); a namespace has exactly one FSx claim and a
pod mounts only claims of its own namespace, so no pod here can (tests/stacks/
test_job_contract.py holds both). Pods of different namespaces on one node are distinct
mounts. A PV's source is immutable once created, so a new handle on the PVs that deployed
clusters already have would fail every update of these stacks.

Only the PV carries the file system's real capacity. The claim requests a fixed nominal
size: a statically bound claim (`storageClassName: ""`) cannot be resized, so a request
that followed the configured capacity would make the apply fail as soon as FSx grows.
Nothing enforces either figure for a CSI file system; binding only needs request <= capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import aws_eks_v2 as eks_v2
from constructs import Construct

from config.kubernetes import DEFAULT_NAMESPACE, FSX_CLAIM_NAME

CSI_DRIVER = "fsx.csi.aws.com"
# The smallest FSx for Lustre size: never above the PV's capacity, whatever size the file
# system is or grows to, so the claim binds and never changes (see the module docstring).
CLAIM_REQUEST_GIB = 1200


@dataclass(frozen=True, kw_only=True)
class LustreFileSystem:
    """The FSx for Lustre file system the volumes point at (`arn` for IAM grants)."""

    file_system_id: str
    arn: str
    dns_name: str
    mount_name: str
    capacity_gib: int


def persistent_volume_name(namespace: str) -> str:
    return f"fsx-{namespace}"


class FsxStaticVolume(Construct):
    """Static PV + `fsx-claim` PVC per namespace for one FSx for Lustre file system."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks_v2.ICluster,
        file_system: LustreFileSystem,
        namespaces: tuple[str, ...] = (DEFAULT_NAMESPACE,),
    ) -> None:
        super().__init__(scope, construct_id)
        if file_system.capacity_gib < CLAIM_REQUEST_GIB:
            raise ValueError(
                f"{file_system.capacity_gib} GiB is below the smallest FSx for Lustre size "
                f"({CLAIM_REQUEST_GIB} GiB)"
            )
        self._cluster = cluster
        self._file_system = file_system
        self.claims: dict[str, eks_v2.KubernetesManifest] = {}
        for namespace in namespaces:
            self.add_namespace(namespace)

    def add_namespace(self, namespace: str) -> eks_v2.KubernetesManifest:
        """Give `namespace` (which must already exist) an `fsx-claim` bound to the file system."""
        if namespace in self.claims:
            raise ValueError(f"namespace {namespace} already has an {FSX_CLAIM_NAME}")
        manifest = eks_v2.KubernetesManifest(
            self,
            "Claim" + "".join(part.capitalize() for part in namespace.split("-")),
            cluster=self._cluster,
            manifest=[self._volume(namespace), self._claim(namespace)],
            overwrite=True,
        )
        self.claims[namespace] = manifest
        return manifest

    def _volume(self, namespace: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": persistent_volume_name(namespace)},
            "spec": {
                "capacity": {"storage": f"{self._file_system.capacity_gib}Gi"},
                "volumeMode": "Filesystem",
                "accessModes": ["ReadWriteMany"],
                # Deleting a claim must never touch the data: the file system is owned and
                # retained by the storage stack.
                "persistentVolumeReclaimPolicy": "Retain",
                # Empty class: bind only to the claim named below, never to a default class.
                "storageClassName": "",
                "claimRef": {"namespace": namespace, "name": FSX_CLAIM_NAME},
                "mountOptions": ["flock"],
                "csi": {
                    "driver": CSI_DRIVER,
                    "volumeHandle": self._file_system.file_system_id,
                    "volumeAttributes": {
                        "dnsname": self._file_system.dns_name,
                        "mountname": self._file_system.mount_name,
                    },
                },
            },
        }

    def _claim(self, namespace: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": FSX_CLAIM_NAME, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": persistent_volume_name(namespace),
                "resources": {"requests": {"storage": f"{CLAIM_REQUEST_GIB}Gi"}},
            },
        }
