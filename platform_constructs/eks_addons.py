"""EKS managed add-ons, each pinned to the version in config, and the IAM identities of the
add-ons that call AWS APIs (EKS Pod Identity: no OIDC provider to manage)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from config.addons import ADDONS, FSX_CSI_DRIVER, TRAINING_OPERATOR, ServiceAccount


class PinnedAddon(Construct):
    """An `AWS::EKS::Addon` at an exact version.

    OVERWRITE lets the add-on take over fields a previous install (or a manifest) set, so an
    upgrade never stalls on a conflict; the add-on's own configuration is the source of truth.
    It is also what lets a re-created stack adopt add-on software a deleted one preserved.

    `removal_policy`: the cluster's. RETAIN sets PreserveOnDelete: deleting the resource (or
    its stack) leaves the add-on's software running on the cluster, no longer managed by EKS
    (DeleteAddon `preserve`), so a retained cluster keeps its networking, DNS and operators.
    The resource itself is still deleted, so the stack can be created again over the cluster.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        addon_name: str,
        version: str,
        configuration: Mapping[str, Any] | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.DESTROY,
    ) -> None:
        super().__init__(scope, construct_id)
        self.resource = eks.CfnAddon(
            self,
            "Resource",
            cluster_name=cluster_name,
            addon_name=addon_name,
            addon_version=version,
            resolve_conflicts="OVERWRITE",
            configuration_values=json.dumps(configuration, sort_keys=True)
            if configuration
            else None,
            preserve_on_delete=removal_policy == cdk.RemovalPolicy.RETAIN,
        )


class PodIdentity(Construct):
    """An IAM role for one Kubernetes service account, with its EKS Pod Identity association.

    The association is a standalone resource, not the add-on's inline property: inline
    associations depend on the add-on version advertising pod-identity support, which some
    published versions do not. Create it before the add-on so the controller has
    credentials on first start.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        service_account: ServiceAccount,
        description: str,
        statements: Sequence[iam.PolicyStatement],
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            # EKS Pod Identity assumes the role and tags the session with the pod's identity.
            assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
            description=description,
            inline_policies={"Permissions": iam.PolicyDocument(statements=list(statements))},
        )
        self.association = eks.CfnPodIdentityAssociation(
            self,
            "Association",
            cluster_name=cluster_name,
            namespace=service_account.namespace,
            service_account=service_account.name,
            role_arn=self.role.role_arn,
        )


class AddonWithPodIdentity(Construct):
    """A pinned add-on whose controller calls AWS APIs: the controller's service account gets
    an IAM role (through EKS Pod Identity) with exactly `statements`, and the add-on is
    created after the association so the controller has credentials on first start.

    `removal_policy`: the cluster's. RETAIN preserves the add-on's software (PinnedAddon)
    and retains its role and association, so the controller a stack deletion leaves running
    keeps its credentials. Re-creating the stack over that cluster then needs the retained
    association removed first (EKS allows one per service account).

    Exposes `identity` (`role`, `association`) and `addon`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        addon_name: str,
        version: str,
        service_account: ServiceAccount,
        description: str,
        statements: Sequence[iam.PolicyStatement],
        configuration: Mapping[str, Any] | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.DESTROY,
    ) -> None:
        super().__init__(scope, construct_id)
        self.identity = PodIdentity(
            self,
            "ControllerIdentity",
            cluster_name=cluster_name,
            service_account=service_account,
            description=description,
            statements=statements,
        )
        for resource in self.identity.node.find_all():
            if isinstance(resource, cdk.CfnResource):
                resource.apply_removal_policy(removal_policy)
        self.addon = PinnedAddon(
            self,
            "Addon",
            cluster_name=cluster_name,
            addon_name=addon_name,
            version=version,
            configuration=configuration,
            removal_policy=removal_policy,
        )
        self.addon.node.add_dependency(self.identity)


class FsxCsiDriver(AddonWithPodIdentity):
    """The FSx for Lustre CSI driver add-on and its controller identity.

    Volumes are provisioned statically (the platform owns the file system), so the controller
    never creates or deletes file systems: it may only describe the one it serves.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        version: str,
        file_system_arn: str,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.DESTROY,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            cluster_name=cluster_name,
            addon_name=FSX_CSI_DRIVER,
            version=version,
            removal_policy=removal_policy,
            service_account=_service_account(FSX_CSI_DRIVER),
            description="FSx CSI controller: describe the platform's Lustre file system",
            statements=[
                iam.PolicyStatement(
                    actions=["fsx:DescribeFileSystems"], resources=[file_system_arn]
                )
            ],
        )


class TrainingOperator(AddonWithPodIdentity):
    """The SageMaker HyperPod training operator add-on and its controller identity.

    The operator reads the HyperPod node records to map pods to nodes and their health.
    AWS documents one permission for it (the AmazonSageMakerHyperPodTrainingOperatorAccess
    managed policy grants sagemaker:DescribeClusterNode); it is granted here on this
    platform's HyperPod cluster only.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        version: str,
        hyperpod_cluster_arn: str,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.DESTROY,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            cluster_name=cluster_name,
            addon_name=TRAINING_OPERATOR,
            version=version,
            removal_policy=removal_policy,
            service_account=_service_account(TRAINING_OPERATOR),
            description="HyperPod training operator: describe the HyperPod cluster's nodes",
            statements=[
                iam.PolicyStatement(
                    actions=["sagemaker:DescribeClusterNode"], resources=[hyperpod_cluster_arn]
                )
            ],
        )


def _service_account(addon_name: str) -> ServiceAccount:
    service_account = ADDONS[addon_name].service_account
    if service_account is None:
        raise ValueError(f"the add-on table names no service account for {addon_name}")
    return service_account
