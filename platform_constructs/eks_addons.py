"""EKS managed add-ons, each pinned to the version in config, and the IAM identities of the
add-ons that call AWS APIs (EKS Pod Identity: no OIDC provider to manage).

`place_addons` is the one way a stack creates add-ons: the rows of config/addons.py the
platform plan assigns to it (`PlatformPlan.addons_in`), each with the pod identity its row
declares.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from config.addons import Addon, AddonIdentity, ServiceAccount
from platform_constructs.nag import acknowledge


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


def pod_identity_conditions(
    scope: Construct, cluster_name: str, service_account: ServiceAccount
) -> dict[str, Any]:
    """Trust conditions of a Pod Identity role: this cluster's pods of this service account.

    Only session tags EKS sets on its AssumeRole request (`POD_IDENTITY_SESSION_TAGS`), as in
    the EKS User Guide's "Create IAM role with trust policy required by EKS Pod Identity".
    No `aws:SourceArn` or `aws:SourceAccount`: EKS does not document them for these requests,
    and a condition on a key the request lacks silently denies every pod its credentials. The
    cluster ARN tag names the account, so the account needs no condition of its own.
    """
    return {
        "StringEquals": {
            "aws:RequestTag/eks-cluster-arn": cdk.Stack.of(scope).format_arn(
                service="eks", resource="cluster", resource_name=cluster_name
            ),
            "aws:RequestTag/kubernetes-namespace": service_account.namespace,
            "aws:RequestTag/kubernetes-service-account": service_account.name,
        },
    }


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
            # EKS Pod Identity assumes the role and tags the session with the pod's identity;
            # the trust accepts only this cluster's pods of this service account (the session
            # tags of the EKS User Guide's "Create IAM role with trust policy required by EKS
            # Pod Identity").
            assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com")
            .with_conditions(pod_identity_conditions(self, cluster_name, service_account))
            .with_session_tags(),
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


@dataclass(frozen=True, kw_only=True)
class IdentityContext:
    """The resources add-on permissions name, as far as the placing stack has them: an
    identity that needs one the stack did not give fails to build."""

    hyperpod_cluster_arn: str | None = None
    workspace_arn: str | None = None
    # ARNs (`...:log-group:<name>:*`) of the container log groups the platform created.
    container_log_group_arns: tuple[str, ...] | None = None

    def require(self, name: str) -> Any:
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"this stack gives its add-on identities no {name}")
        return value


def identity_statements(
    identity: AddonIdentity, context: IdentityContext
) -> tuple[iam.PolicyStatement, ...]:
    """The IAM statements of an add-on's identity (its table row), on the resources of
    `context` it names."""
    if identity.resources == "*":
        resources = ["*"]
    else:
        named = context.require(identity.resources)
        resources = [named] if isinstance(named, str) else list(named)
    return (iam.PolicyStatement(actions=list(identity.actions), resources=resources),)


@dataclass(frozen=True)
class PlacedAddons:
    """What `place_addons` created: every add-on (name -> PinnedAddon) and, for those with a
    controller identity, the whole construct (name -> AddonWithPodIdentity)."""

    addons: dict[str, PinnedAddon] = field(default_factory=dict)
    identities: dict[str, AddonWithPodIdentity] = field(default_factory=dict)


def place_addons(
    scope: Construct,
    rows: Sequence[Addon],
    *,
    cluster_name: str,
    removal_policy: cdk.RemovalPolicy,
    context: IdentityContext | None = None,
    configurations: Mapping[str, Mapping[str, Any]] | None = None,
) -> PlacedAddons:
    """Create in `scope` the add-ons `rows` (a stack's, from the platform plan), in order,
    each at its row's version.

    An add-on whose row declares an identity gets its role, on the resources of `context`.
    `configurations`: configuration values only known at synth time (they name this stack's
    resources), in place of the row's. Each add-on follows the ones its row lists in `after`.
    """
    context = context or IdentityContext()
    configurations = configurations or {}
    unplaced = set(configurations) - {addon.name for addon in rows}
    if unplaced:
        raise ValueError(f"configurations for add-ons this stack does not place: {unplaced}")
    placed = PlacedAddons()
    for addon in rows:
        configuration = configurations.get(addon.name, addon.configuration)
        if addon.identity is None:
            placed.addons[addon.name] = PinnedAddon(
                scope,
                f"Addon-{addon.name}",
                cluster_name=cluster_name,
                addon_name=addon.name,
                version=addon.version,
                configuration=configuration,
                removal_policy=removal_policy,
            )
            continue
        identity = addon.identity
        with_identity = AddonWithPodIdentity(
            scope,
            identity.construct_id,
            cluster_name=cluster_name,
            addon_name=addon.name,
            version=addon.version,
            service_account=identity.service_account,
            description=identity.description,
            statements=identity_statements(identity, context),
            configuration=configuration,
            removal_policy=removal_policy,
        )
        if identity.unscoped_reason:
            acknowledge(
                with_identity.identity.role,
                "IAM5",
                identity.unscoped_reason,
                finding="Resource::*",
            )
        placed.identities[addon.name] = with_identity
        placed.addons[addon.name] = with_identity.addon
    for addon in rows:
        for earlier in addon.after:
            placed.addons[addon.name].node.add_dependency(placed.addons[earlier])
    return placed
