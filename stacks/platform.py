"""Build one environment's platform: the one place stacks are composed.

`build_app` makes the whole CDK app (`app.py`, the tests and the synth benchmark all call
it); `build_platform` fills any scope with the stacks, so a pipeline Stage builds exactly
what `cdk deploy` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from config.loader import LoadedEnvironment
from config.names import STACK_UNITS, StackUnit
from config.schema.governance import GovernanceConfig
from config.schema.observability import ObservabilityConfig
from platform_constructs.log_groups import FunctionLogGroups
from platform_constructs.retention import stateful_removal_policy
from platform_constructs.team_network import PodNetwork
from stacks.cluster_addons_stack import ClusterAddonsStack
from stacks.eks_stack import EksStack
from stacks.governance_stack import GovernanceStack
from stacks.hyperpod_stack import HyperPodStack
from stacks.network_stack import NetworkStack
from stacks.observability_stack import ObservabilityStack
from stacks.storage_stack import StorageStack

CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"


@dataclass(frozen=True)
class PlatformStacks:
    network: NetworkStack
    storage: StorageStack
    eks: EksStack
    hyperpod: HyperPodStack
    cluster_addons: ClusterAddonsStack
    governance: GovernanceStack | None
    observability: ObservabilityStack | None

    def by_name(self) -> dict[str, cdk.Stack]:
        """Short name ("network", "cluster_addons", ...: config/names.py `STACK_UNITS`) ->
        stack, for the stacks built, in deploy order."""
        stacks: dict[str, cdk.Stack | None] = {short: getattr(self, short) for short in STACK_UNITS}
        return {name: stack for name, stack in stacks.items() if stack is not None}


def cdk_json_context() -> dict[str, Any]:
    """The context `cdk synth` passes to app.py (feature flags included)."""
    context: dict[str, Any] = json.loads(CDK_JSON.read_text(encoding="utf-8"))["context"]
    return context


def build_app(
    loaded: LoadedEnvironment, *, app: cdk.App | None = None, outdir: str | None = None
) -> tuple[cdk.App, PlatformStacks]:
    """The whole app of one environment. `app`: the App the CDK CLI gave app.py; default, a
    new App in `outdir` with the context the CLI would pass (tests, benchmarks)."""
    if app is None:
        context = {**cdk_json_context(), "env": loaded.config.environment}
        app = cdk.App(outdir=outdir, context=context)
    return app, build_platform(app, loaded)


def build_platform(scope: Construct, loaded: LoadedEnvironment) -> PlatformStacks:
    """The stacks of one environment in `scope` (an App or a pipeline Stage), with cdk-nag
    registered on `scope`: validation plugins do not cross a Stage boundary."""
    cdk.Validations.of(scope).add_plugins(AwsSolutionsChecks(scope))
    config, plan = loaded.config, loaded.plan
    names = config.names
    # The one mapping of `retain_stateful`: every stateful resource takes this policy.
    target = _Target(scope, loaded, stateful_removal_policy(config.retain_stateful))

    # Every Lambda function (all CDK's deploy-time handlers) logs to a group of its own
    # template. Their logs expire with the environment's flow logs, the retention the
    # prefix-list lookup's handler already had: short in dev, a year in prod.
    cdk.Aspects.of(scope).add(
        FunctionLogGroups(
            retention_days=config.network.flow_log_retention_days,
            removal_policy=target.removal_policy,
        ),
        priority=cdk.AspectPriority.MUTATING,
    )

    network = NetworkStack(
        scope,
        **target.stack_props("network"),
        network=config.network,
        layout=plan.layout,
        cluster_name=names.eks_cluster,
        removal_policy=target.removal_policy,
    )
    storage = StorageStack(
        scope,
        **target.stack_props("storage"),
        storage=config.storage,
        role_prefix=names.stack_prefix,
        subnet=network.cluster_subnets[config.training_availability_zone],
        security_group=network.efa_security_group,
        removal_policy=target.removal_policy,
        mlflow_server_name=names.mlflow_tracking_server,
    )
    eks = _eks_stack(target, network)
    hyperpod = _hyperpod_stack(target, network, storage, eks)
    cluster_addons = _cluster_addons_stack(target, storage, eks, hyperpod)
    governance = (
        _governance_stack(target, config.governance, storage, eks, hyperpod, cluster_addons)
        if config.governance is not None
        else None
    )
    observability = (
        _observability_stack(
            target, config.observability, network, storage, eks, cluster_addons, governance
        )
        if config.observability is not None
        else None
    )
    for key, value in sorted(config.tags.items()):
        cdk.Tags.of(scope).add(key, value)
    return PlatformStacks(
        network=network,
        storage=storage,
        eks=eks,
        hyperpod=hyperpod,
        cluster_addons=cluster_addons,
        governance=governance,
        observability=observability,
    )


@dataclass(frozen=True)
class _Target:
    """Where and for which environment the stacks are built, with the removal policy of
    every stateful resource."""

    scope: Construct
    loaded: LoadedEnvironment
    removal_policy: cdk.RemovalPolicy

    def stack_props(self, unit: StackUnit) -> dict[str, Any]:
        """A stack's construct ID and name (the same) and its account and Region."""
        config = self.loaded.config
        name = config.names.stack(unit)
        env = cdk.Environment(account=config.account, region=config.region)
        return {"construct_id": name, "stack_name": name, "env": env}


def _eks_stack(target: _Target, network: NetworkStack) -> EksStack:
    config, plan = target.loaded.config, target.loaded.plan
    return EksStack(
        target.scope,
        **target.stack_props("eks"),
        eks=config.eks,
        addons=plan.addons_in("eks"),
        cluster_name=config.names.eks_cluster,
        node_groups=plan.node_groups,
        vpc=network.vpc,
        infra_subnets=network.infra_subnets,
        node_security_group=network.efa_security_group,
        endpoint_security_group=network.endpoint_security_group,
        s3_prefix_list_id=network.s3_prefix_list_id,
        admin_host=network.admin_host,
        removal_policy=target.removal_policy,
    )


def _hyperpod_stack(
    target: _Target, network: NetworkStack, storage: StorageStack, eks: EksStack
) -> HyperPodStack:
    config = target.loaded.config
    return HyperPodStack(
        target.scope,
        **target.stack_props("hyperpod"),
        hyperpod=config.hyperpod,
        cluster_name=config.names.hyperpod_cluster,
        fsx_efa_enabled=config.storage.fsx.efa_enabled,
        eks_cluster_arn=eks.cluster_arn,
        vpc=network.vpc,
        cluster_subnets=network.cluster_subnets,
        node_security_group=network.efa_security_group,
        artifact_bucket=storage.artifact_bucket,
        removal_policy=target.removal_policy,
    )


def _cluster_addons_stack(
    target: _Target, storage: StorageStack, eks: EksStack, hyperpod: HyperPodStack
) -> ClusterAddonsStack:
    plan = target.loaded.plan
    # The table's `cluster-addons` rows deploy after the HyperPod cluster (AWS documents the
    # training operator on a created cluster); what nodes boot with is in the EKS stack.
    cluster_addons = ClusterAddonsStack(
        target.scope,
        **target.stack_props("cluster-addons"),
        addons=plan.addons_in("cluster-addons"),
        cluster_name=eks.cluster_name,
        kubernetes=eks.kubernetes,
        hyperpod_cluster_arn=hyperpod.cluster_arn,
        file_system=storage.file_system,
        removal_policy=target.removal_policy,
    )
    cluster_addons.add_stack_dependency(
        hyperpod, "the training operator's permissions name the HyperPod cluster"
    )
    return cluster_addons


def _governance_stack(
    target: _Target,
    governance_config: GovernanceConfig,
    storage: StorageStack,
    eks: EksStack,
    hyperpod: HyperPodStack,
    cluster_addons: ClusterAddonsStack,
) -> GovernanceStack:
    config, plan = target.loaded.config, target.loaded.plan
    governance = GovernanceStack(
        target.scope,
        **target.stack_props("governance"),
        governance=governance_config,
        eks=config.eks,
        addons=plan.addons_in("governance"),
        quotas=plan.team_quotas,
        tolerations=plan.taint_tolerations,
        admissions=plan.team_admissions,
        names=config.names,
        eks_cluster_name=eks.cluster_name,
        kubernetes=eks.kubernetes,
        hyperpod_cluster_arn=hyperpod.cluster_arn,
        file_system=storage.file_system,
        checkpoint_bucket=storage.checkpoint_bucket,
        data_bucket=storage.data_bucket,
        pod_network=PodNetwork(
            # The managed collector's ENIs: the control-plane (infrastructure) subnets.
            scraper_cidrs=[str(c) for _, c in sorted(plan.layout.infra.items())],
            node_cidrs=[str(subnet.cidr) for _, subnet in sorted(plan.layout.cluster.items())],
        ),
        mlflow_server_arn=storage.mlflow_server_arn,
        removal_policy=target.removal_policy,
    )
    # Kueue's controller runs on the nodes, with the cluster DNS deployed there, and the
    # team claims need the FSx CSI driver.
    governance.add_stack_dependency(
        cluster_addons, "Kueue runs on nodes with cluster DNS; claims need the FSx driver"
    )
    return governance


def _observability_stack(
    target: _Target,
    observability_config: ObservabilityConfig,
    network: NetworkStack,
    storage: StorageStack,
    eks: EksStack,
    cluster_addons: ClusterAddonsStack,
    governance: GovernanceStack | None,
) -> ObservabilityStack:
    config, plan = target.loaded.config, target.loaded.plan
    observability = ObservabilityStack(
        target.scope,
        **target.stack_props("observability"),
        observability=observability_config,
        eks=config.eks,
        addons=plan.addons_in("observability"),
        eks_cluster_name=eks.cluster_name,
        eks_cluster_arn=eks.cluster_arn,
        vpc=network.vpc,
        # The control plane's subnets: the trainer's collector reaches the API from there.
        scraper_subnets=eks.control_plane_subnets,
        pod_security_group=network.efa_security_group,
        api_security_group=eks.cluster.control_plane_security_group,
        file_system=storage.file_system,
        nat_gateway_ids=network.nat_gateway_ids,
        removal_policy=target.removal_policy,
        team_gpu_quotas=plan.team_gpu_quotas,
    )
    # The collector runs on the nodes, next to the cluster add-ons it scrapes.
    observability.add_stack_dependency(cluster_addons, "the collector needs running nodes")
    if governance is not None:
        observability.add_stack_dependency(governance, "Kueue metrics need Kueue")
    return observability
