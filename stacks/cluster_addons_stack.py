"""Add-ons that need running nodes: coredns, cert-manager, the FSx CSI driver with the static
FSx volume, and the HyperPod training operator. Deployed after the HyperPod stack, so their
CloudFormation resources (which wait for the add-on to become ACTIVE) find nodes to run on."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from config.schema import EnvironmentConfig
from platform_constructs.eks_addons import (
    FsxCsiDriver,
    PinnedAddon,
    TrainingOperator,
    file_system_arn,
)
from platform_constructs.eks_fsx_volume import FsxStaticVolume
from stacks.eks_stack import EksStack
from stacks.hyperpod_stack import HyperPodStack
from stacks.storage_stack import StorageStack


class ClusterAddonsStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        storage: StorageStack,
        eks: EksStack,
        hyperpod: HyperPodStack,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        versions = config.eks.addons
        cluster_name = eks.cluster_name

        self.coredns = PinnedAddon(
            self, "Addon-coredns", cluster_name=cluster_name, addon_name="coredns",
            version=versions["coredns"],
        )
        self.cert_manager = PinnedAddon(
            self, "Addon-cert-manager", cluster_name=cluster_name, addon_name="cert-manager",
            version=versions["cert-manager"],
        )

        file_system = storage.file_system
        self.fsx_csi = FsxCsiDriver(
            self,
            "FsxCsiDriver",
            cluster_name=cluster_name,
            version=versions["aws-fsx-csi-driver"],
            file_system_arn=file_system_arn(self, file_system.file_system_id),
        )
        self.fsx_volume = FsxStaticVolume(
            self,
            "FsxVolume",
            cluster=eks.kubernetes,
            file_system_id=file_system.file_system_id,
            dns_name=file_system.dns_name,
            mount_name=file_system.mount_name,
            capacity_gib=config.storage.fsx.storage_capacity_gib,
        )
        # The PV names the CSI driver; registering the driver first avoids a window where
        # pods referencing the claim fail to mount.
        self.fsx_volume.node.add_dependency(self.fsx_csi)

        self.training_operator = TrainingOperator(
            self,
            "TrainingOperator",
            cluster_name=cluster_name,
            version=versions["amazon-sagemaker-hyperpod-training-operator"],
            hyperpod_cluster_arn=hyperpod.cluster_arn,
        )
        # The operator's webhooks take their certificates from cert-manager.
        self.training_operator.addon.node.add_dependency(self.cert_manager)
