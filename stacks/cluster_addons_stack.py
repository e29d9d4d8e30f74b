"""The `cluster-addons` rows of config/addons.py (cert-manager, the FSx CSI driver, the
HyperPod training operator), the FSx CSI driver's static FSx volume, and the controllers' pod
identities. Deployed after the HyperPod stack: the training operator's permissions name the
HyperPod cluster, and AWS documents installing it on a created cluster. Nothing here waits
for nodes: an add-on whose pods cannot run yet (continuous provisioning brings nodes after
the cluster is InService) is created DEGRADED and becomes ACTIVE when they can.

`removal_policy`: the cluster's. Under RETAIN, deleting this stack leaves a retained cluster
as it runs: the add-ons' software is preserved, the controllers keep their pod identities,
and the FSx volume and claim stay bound."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks_v2
from constructs import Construct

from config.addons import FSX_CSI_DRIVER, Addon
from platform_constructs.eks_addons import (
    AddonWithPodIdentity,
    IdentityContext,
    PinnedAddon,
    place_addons,
)
from platform_constructs.eks_cluster import retain_with_cluster
from platform_constructs.eks_fsx_volume import FsxStaticVolume, LustreFileSystem


class ClusterAddonsStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        addons: Sequence[Addon],
        cluster_name: str,
        kubernetes: eks_v2.ICluster,
        hyperpod_cluster_arn: str,
        file_system: LustreFileSystem,
        # RETAIN unless told: the safe side for a cluster that outlives this stack.
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        **kwargs: Any,
    ) -> None:
        """`addons`: the plan's `cluster-addons` rows (`PlatformPlan.addons_in`)."""
        super().__init__(scope, construct_id, **kwargs)
        placed = place_addons(
            self,
            addons,
            cluster_name=cluster_name,
            removal_policy=removal_policy,
            context=IdentityContext(hyperpod_cluster_arn=hyperpod_cluster_arn),
        )
        self.addons: dict[str, PinnedAddon] = placed.addons
        self.identities: dict[str, AddonWithPodIdentity] = placed.identities

        self.fsx_volume = FsxStaticVolume(
            self,
            "FsxVolume",
            cluster=kubernetes,
            file_system=file_system,
        )
        # The PV names the CSI driver; registering the driver first avoids a window where
        # pods referencing the claim fail to mount.
        self.fsx_volume.node.add_dependency(self.identities[FSX_CSI_DRIVER])
        # Pods of a retained cluster keep mounting the claim after this stack is deleted.
        retain_with_cluster(self.fsx_volume, removal_policy)
