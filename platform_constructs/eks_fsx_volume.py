"""The platform's FSx for Lustre file system as statically provisioned Kubernetes volumes.

A PersistentVolume binds to exactly one PersistentVolumeClaim, and a claim lives in one
namespace, so each namespace gets PVs of its own:

- `default` (the platform's own namespace; teams have no access to it) gets the whole file
  system as `fsx-claim` (`add_namespace`): the team-directory Jobs mount it there.
- A team namespace (hyperpod-ns-<team>, which task governance creates for the team's quota)
  gets two (`add_team`, called once the namespace exists): `fsx-team`, the team's own
  directory and nothing above it, and `fsx-data`, the data repository's directory,
  read-only. A pod mounts only claims of its own namespace, so a team's pods cannot reach
  another team's files, nor write what the data repository association exports to S3.

A sub-directory volume is a Lustre sub-directory mount: the FSx CSI driver mounts
`<dnsname>@tcp:/<mountname>` (kubernetes-sigs/aws-fsx-csi-driver pkg/driver/node.go,
NodePublishVolume), so `mountname` `<mount name>/teams/<team>` mounts that directory as the
volume's root, and the PV's mount options (here `ro` for the data) are the mount's flags.

Two volumes with one handle hang a pod in ContainerCreating when that one pod mounts both
(kubernetes/kubernetes#132921: the kubelet keys a CSI volume by driver and handle). A team's
pods mount both of its volumes, so each has a handle of its own (`<file system ID>/<path>`;
the driver reads the handle only as an ID). The whole-file-system PV keeps the bare file
system ID, and a PV's source is immutable once created, so it never changes.

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

from config.kubernetes import DEFAULT_NAMESPACE, FSX_CLAIM_NAME, FSX_MOUNT
from config.teams import DATA_CLAIM_NAME, TEAM_CLAIM_NAME

CSI_DRIVER = "fsx.csi.aws.com"
# The smallest FSx for Lustre size: never above the PV's capacity, whatever size the file
# system is or grows to, so the claim binds and never changes (see the module docstring).
CLAIM_REQUEST_GIB = 1200


@dataclass(frozen=True, kw_only=True)
class LustreFileSystem:
    """The FSx for Lustre file system the volumes point at (`arn` for IAM grants;
    `data_path`: the data repository association's directory, e.g. /data)."""

    file_system_id: str
    arn: str
    dns_name: str
    mount_name: str
    capacity_gib: int
    data_path: str


@dataclass(frozen=True, kw_only=True)
class Volume:
    """One PV + claim: the claim's name, the directory of the file system the volume's root
    is ("/" for all of it) and whether it mounts read-only."""

    claim: str
    path: str
    read_only: bool = False


def persistent_volume_name(namespace: str, claim: str = FSX_CLAIM_NAME) -> str:
    """`fsx-<namespace>` for the whole file system (the name deployed clusters have),
    `fsx-<namespace>-<claim without fsx->` for the others."""
    if claim == FSX_CLAIM_NAME:
        return f"fsx-{namespace}"
    return f"fsx-{namespace}-{claim.removeprefix('fsx-')}"


def file_system_path(pod_path: str) -> str:
    """Where `pod_path` (a path under the whole file system's mount, /fsx) lies on the file
    system itself."""
    if not pod_path.startswith(FSX_MOUNT + "/"):
        raise ValueError(f"{pod_path} is not under {FSX_MOUNT}/")
    return pod_path.removeprefix(FSX_MOUNT)


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
        """Give `namespace` (which must already exist) an `fsx-claim` bound to the whole file
        system: for the platform's own namespace only (see the module docstring)."""
        return self._add(namespace, "Claim", (Volume(claim=FSX_CLAIM_NAME, path="/"),))

    def add_team(self, namespace: str, team_directory: str) -> eks_v2.KubernetesManifest:
        """Give team namespace `namespace` (which must already exist) `fsx-team`, the file
        system's `team_directory` (a path under /fsx) only, and `fsx-data`, the data
        repository's directory, read-only."""
        volumes = (
            Volume(claim=TEAM_CLAIM_NAME, path=file_system_path(team_directory)),
            Volume(claim=DATA_CLAIM_NAME, path=self._file_system.data_path, read_only=True),
        )
        return self._add(namespace, "Team", volumes)

    def _add(
        self, namespace: str, prefix: str, volumes: tuple[Volume, ...]
    ) -> eks_v2.KubernetesManifest:
        if namespace in self.claims:
            raise ValueError(f"namespace {namespace} already has its FSx claims")
        objects: list[dict[str, Any]] = []
        for volume in volumes:
            objects += [self._volume(namespace, volume), self._claim(namespace, volume)]
        manifest = eks_v2.KubernetesManifest(
            self,
            prefix + "".join(part.capitalize() for part in namespace.split("-")),
            cluster=self._cluster,
            manifest=objects,
            overwrite=True,
        )
        self.claims[namespace] = manifest
        return manifest

    def _volume(self, namespace: str, volume: Volume) -> dict[str, Any]:
        whole = volume.path == "/"
        file_system = self._file_system
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": persistent_volume_name(namespace, volume.claim)},
            "spec": {
                "capacity": {"storage": f"{file_system.capacity_gib}Gi"},
                "volumeMode": "Filesystem",
                "accessModes": ["ReadOnlyMany" if volume.read_only else "ReadWriteMany"],
                # Deleting a claim must never touch the data: the file system is owned and
                # retained by the storage stack.
                "persistentVolumeReclaimPolicy": "Retain",
                # Empty class: bind only to the claim named below, never to a default class.
                "storageClassName": "",
                "claimRef": {"namespace": namespace, "name": volume.claim},
                # `ro` is the Lustre mount's own flag: whatever the pod asks, it cannot write.
                "mountOptions": ["flock", "ro"] if volume.read_only else ["flock"],
                "csi": {
                    "driver": CSI_DRIVER,
                    "volumeHandle": file_system.file_system_id
                    if whole
                    else f"{file_system.file_system_id}{volume.path}",
                    "volumeAttributes": {
                        "dnsname": file_system.dns_name,
                        "mountname": file_system.mount_name
                        if whole
                        else f"{file_system.mount_name}{volume.path}",
                    },
                },
            },
        }

    def _claim(self, namespace: str, volume: Volume) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": volume.claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadOnlyMany" if volume.read_only else "ReadWriteMany"],
                "storageClassName": "",
                "volumeName": persistent_volume_name(namespace, volume.claim),
                "resources": {"requests": {"storage": f"{CLAIM_REQUEST_GIB}Gi"}},
            },
        }
