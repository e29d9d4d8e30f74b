"""Compose one environment's stacks. app.py and the tests both call `build_platform`."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from config.loader import LoadedEnvironment
from stacks.cluster_addons_stack import ClusterAddonsStack
from stacks.eks_stack import EksStack
from stacks.hyperpod_stack import HyperPodStack
from stacks.network_stack import NetworkStack
from stacks.storage_stack import StorageStack


@dataclass(frozen=True)
class PlatformStacks:
    network: NetworkStack
    storage: StorageStack
    eks: EksStack
    hyperpod: HyperPodStack
    cluster_addons: ClusterAddonsStack


def register_policy_checks(scope: Construct) -> None:
    """cdk-nag runs as a validation plugin of the App/Stage that holds the stacks: plugins
    do not cross a Stage boundary, so a pipeline Stage must call this itself."""
    cdk.Validations.of(scope).add_plugins(AwsSolutionsChecks(scope))


def build_platform(scope: Construct, loaded: LoadedEnvironment) -> PlatformStacks:
    config = loaded.config
    env = cdk.Environment(account=config.account, region=config.region)
    prefix = f"hyperpod-{config.environment}"

    network = NetworkStack(
        scope, f"{prefix}-network", env=env, config=config, layout=loaded.layout
    )
    storage = StorageStack(
        scope, f"{prefix}-storage", env=env, config=config, network=network
    )
    eks = EksStack(scope, f"{prefix}-eks", env=env, config=config, network=network)
    hyperpod = HyperPodStack(
        scope, f"{prefix}-hyperpod", env=env, config=config, network=network, storage=storage, eks=eks
    )
    # Add-ons that need running nodes (coredns, cert-manager, FSx CSI, training operator)
    # deploy after the HyperPod cluster so they never wait on nodes that do not exist yet.
    cluster_addons = ClusterAddonsStack(
        scope, f"{prefix}-cluster-addons", env=env, config=config, storage=storage, eks=eks,
        hyperpod=hyperpod,
    )
    cluster_addons.add_stack_dependency(hyperpod, "add-ons need the HyperPod nodes to be running")
    for key, value in sorted(config.tags.items()):
        cdk.Tags.of(scope).add(key, value)
    return PlatformStacks(
        network=network, storage=storage, eks=eks, hyperpod=hyperpod, cluster_addons=cluster_addons
    )
