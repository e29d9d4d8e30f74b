"""Task governance of one environment: the task governance add-on, a wait for its Kueue
controller, the cluster's scheduler config, one compute quota per team, and in every team
namespace what the team's jobs name (FSx claim, service account with its pod identity, the
team ConfigMap, the Job that creates the team's directories) and the admission policy that
keeps accelerator workloads there inside the team's queue, nodes and taints. Deployed after the HyperPod
cluster (both SageMaker resources reference it, and the add-on's Kueue controller runs on
its nodes) and the cluster add-ons (the FSx CSI driver serves the claims)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks_v2
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config.addons import Addon
from config.images import TEAM_DIRECTORIES, pinned_images
from config.kubernetes import team_access_group, team_namespace
from config.names import PlatformNames
from config.schema import EksConfig
from config.schema.governance import GovernanceConfig
from config.team_admission import TeamAdmission
from config.team_groups import team_gids, team_uid
from config.teams import (
    MANAGED_TIER_PATH_KEY,
    MLFLOW_TRACKING_URI_KEY,
    TEAM_CONFIG_MAP,
    TRAINING_METRICS_NAMESPACE,
    TRAINING_SERVICE_ACCOUNT,
    TeamQuota,
    checkpoint_prefix,
    managed_tier_prefix,
    team_directories,
)
from platform_constructs.eks_addons import (
    AddonWithPodIdentity,
    IdentityContext,
    PinnedAddon,
    place_addons,
)
from platform_constructs.eks_fsx_volume import FsxStaticVolume, LustreFileSystem
from platform_constructs.mlflow import job_statement
from platform_constructs.task_governance import (
    ComputeQuota,
    PriorityClass,
    SchedulerConfig,
    kueue_controller_available,
)
from platform_constructs.team_admission import TeamAdmissionPolicy
from platform_constructs.team_network import PodNetwork, TeamIsolation
from platform_constructs.team_workspace import TeamWorkspace, TeamWorkspaceProps


def workspace_props(
    team: str,
    checkpoint_bucket_name: str,
    *,
    group_id: int,
    setup_image: str,
    tolerations: Sequence[Mapping[str, str]],
    mlflow_server_arn: str | None = None,
) -> TeamWorkspaceProps:
    """The names config/teams.py promises a team's jobs, for `team` (its directories owned
    by `group_id`, made by a Job of `setup_image` with `tolerations`: the plan's
    `taint_tolerations`, so it may land on any node)."""
    return TeamWorkspaceProps(
        team=team,
        namespace=team_namespace(team),
        service_account=TRAINING_SERVICE_ACCOUNT,
        config_map=TEAM_CONFIG_MAP,
        config={
            MANAGED_TIER_PATH_KEY: f"s3://{checkpoint_bucket_name}/{managed_tier_prefix(team)}",
            # The trainer's tracking URI (training/tracking.py), where the server exists.
            **({MLFLOW_TRACKING_URI_KEY: mlflow_server_arn} if mlflow_server_arn else {}),
        },
        checkpoint_prefix=checkpoint_prefix(team),
        metrics_namespace=TRAINING_METRICS_NAMESPACE,
        user_id=team_uid(team),
        group_id=group_id,
        directories=team_directories(team),
        setup_image=setup_image,
        tolerations=tuple(tolerations),
    )


class GovernanceStack(cdk.Stack):
    """Exports `kueue_ready` (the wait for Kueue's controller), `quotas`, `workspaces` and
    `admission` and `isolation` (team name -> ComputeQuota / TeamWorkspace /
    TeamAdmissionPolicy / TeamIsolation)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        governance: GovernanceConfig,
        eks: EksConfig,
        addons: Sequence[Addon],
        quotas: Mapping[str, TeamQuota],
        tolerations: Sequence[Mapping[str, str]],
        admissions: Mapping[str, TeamAdmission],
        names: PlatformNames,
        eks_cluster_name: str,
        kubernetes: eks_v2.ICluster,
        hyperpod_cluster_arn: str,
        file_system: LustreFileSystem,
        checkpoint_bucket: s3.IBucket,
        data_bucket: s3.IBucket,
        pod_network: PodNetwork,
        removal_policy: cdk.RemovalPolicy,
        mlflow_server_arn: str | None = None,
        **kwargs: Any,
    ) -> None:
        """From the platform plan: `addons`, the governance rows of the add-on table;
        `quotas`, each team's compute quota, and `admissions`, what each team's namespace
        admits, by team; `tolerations`, the groups' taints' (the team directory Jobs');
        `mlflow_server_arn`: the environment's MLflow tracking server, which the teams' job
        identities (and no other) may log runs to; None where there is none."""
        super().__init__(scope, construct_id, **kwargs)
        placed = place_addons(
            self,
            addons,
            cluster_name=eks_cluster_name,
            removal_policy=removal_policy,
            context=IdentityContext(hyperpod_cluster_arn=hyperpod_cluster_arn),
        )
        self.addons: dict[str, PinnedAddon] = placed.addons
        self.identities: dict[str, AddonWithPodIdentity] = placed.identities
        self.scheduler_config = self._scheduler_config(governance, names, hyperpod_cluster_arn)
        # A scheduler config or quota created before Kueue serves fails to create: both wait
        # for its controller (platform_constructs/task_governance.py).
        self.kueue_ready = kueue_controller_available(
            self, cluster=kubernetes, after=list(self.addons.values())
        )
        self.scheduler_config.node.add_dependency(self.kueue_ready)
        # Each team's admission policy goes first: its binding selects the namespace by name,
        # so it is in force before the quota makes task governance create the namespace, and
        # no workload there is ever admitted unguarded.
        self.admission: dict[str, TeamAdmissionPolicy] = {
            team: TeamAdmissionPolicy(
                self, f"Admission-{team}", admission=admission, cluster=kubernetes
            )
            for team, admission in admissions.items()
        }
        self.quotas = self._quotas(governance, names, hyperpod_cluster_arn, quotas)

        # One PV + claim per team namespace, all on the same file system.
        self.fsx_volume = FsxStaticVolume(
            self,
            "FsxVolume",
            cluster=kubernetes,
            file_system=file_system,
            namespaces=(),
        )
        self.workspaces = self._workspaces(
            eks,
            kubernetes,
            eks_cluster_name,
            checkpoint_bucket,
            data_bucket,
            tolerations=tolerations,
            mlflow_server_arn=mlflow_server_arn,
        )
        self.isolation = self._isolation(governance, kubernetes, eks_cluster_name, pod_network)
        if mlflow_server_arn is not None:
            for workspace in self.workspaces.values():
                workspace.identity.role.add_to_principal_policy(job_statement(mlflow_server_arn))

    def _scheduler_config(
        self, governance: GovernanceConfig, names: PlatformNames, hyperpod_cluster_arn: str
    ) -> SchedulerConfig:
        return SchedulerConfig(
            self,
            "SchedulerConfig",
            name=names.scheduler_config,
            cluster_arn=hyperpod_cluster_arn,
            priority_classes=[
                PriorityClass(name=c.name, weight=c.weight) for c in governance.priority_classes
            ],
            fair_share=governance.fair_share,
            idle_resource_sharing=governance.idle_resource_sharing,
        )

    def _quotas(
        self,
        governance: GovernanceConfig,
        names: PlatformNames,
        hyperpod_cluster_arn: str,
        quotas: Mapping[str, TeamQuota],
    ) -> dict[str, ComputeQuota]:
        """One compute quota per team, after the scheduler config and the team's admission
        policy."""
        created: dict[str, ComputeQuota] = {}
        for team in governance.teams_by_name():
            quota = ComputeQuota(
                self,
                f"Quota-{team.name}",
                name=names.compute_quota(team.name),
                cluster_arn=hyperpod_cluster_arn,
                quota=quotas[team.name],
            )
            # Quotas name priority classes only through the jobs, but their queues are built
            # by the same controller: create them once the cluster policy exists.
            quota.node.add_dependency(self.scheduler_config, self.admission[team.name])
            created[team.name] = quota
        return created

    def _workspaces(
        self,
        eks: EksConfig,
        kubernetes: eks_v2.ICluster,
        eks_cluster_name: str,
        checkpoint_bucket: s3.IBucket,
        data_bucket: s3.IBucket,
        *,
        tolerations: Sequence[Mapping[str, str]],
        mlflow_server_arn: str | None,
    ) -> dict[str, TeamWorkspace]:
        """Each team's workspace, in its namespace once the team's quota has created it."""
        gids = team_gids(self.quotas)
        images = {**pinned_images(self.region), **eks.image_overrides}
        return {
            team: TeamWorkspace(
                self,
                f"Workspace-{team}",
                props=workspace_props(
                    team,
                    checkpoint_bucket.bucket_name,
                    group_id=gids[team],
                    setup_image=images[TEAM_DIRECTORIES],
                    tolerations=tolerations,
                    mlflow_server_arn=mlflow_server_arn,
                ),
                cluster=kubernetes,
                cluster_name=eks_cluster_name,
                volume=self.fsx_volume,
                checkpoint_bucket=checkpoint_bucket,
                data_bucket=data_bucket,
                # Creating the quota creates the team's namespace.
                created_after=quota,
            )
            for team, quota in self.quotas.items()
        }

    def _isolation(
        self,
        governance: GovernanceConfig,
        kubernetes: eks_v2.ICluster,
        eks_cluster_name: str,
        pod_network: PodNetwork,
    ) -> dict[str, TeamIsolation]:
        # Each team namespace: default-deny NetworkPolicies, Pod Security labels and the
        # team's namespace-scoped access with the Role its group needs for `hpctl job`
        # (platform_constructs/team_network.py).
        return {
            team.name: TeamIsolation(
                self,
                f"Isolation-{team.name}",
                cluster=kubernetes,
                cluster_name=eks_cluster_name,
                namespace=team_namespace(team.name),
                network=pod_network,
                access_principal_arns=team.access_principal_arns,
                access_group=team_access_group(team.name),
                namespace_ready=self.workspaces[team.name].namespace_ready,
            )
            for team in governance.teams_by_name()
        }
