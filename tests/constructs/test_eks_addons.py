"""Pinned add-ons, add-ons with a pod identity, and placing a stack's rows of the add-on
table, on a bare stack."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from config.addons import (
    ADDONS,
    CLOUDWATCH_OBSERVABILITY,
    COREDNS,
    FSX_CSI_DRIVER,
    OBSERVABILITY,
    TRAINING_OPERATOR,
    placed_in,
)
from platform_constructs.eks_addons import (
    AddonWithPodIdentity,
    IdentityContext,
    PinnedAddon,
    identity_statements,
    place_addons,
)
from tests.support import bare_stack, eks_config, resources_of, template_of

CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111111111111:cluster/abcdef012345"
WORKSPACE_ARN = "arn:aws:aps:us-west-2:111111111111:workspace/ws-01234567-89ab-cdef-0123"
LOG_GROUP = "arn:aws:logs:us-west-2:111111111111:log-group:/aws/containerinsights/c/application"
LOG_GROUP_ARNS = (LOG_GROUP, f"{LOG_GROUP}:log-stream:*")
CONTEXT = IdentityContext(
    hyperpod_cluster_arn=CLUSTER_ARN,
    workspace_arn=WORKSPACE_ARN,
    container_log_group_arns=LOG_GROUP_ARNS,
)
# What each identity may do, on which resource (AWS documents one permission per controller).
# DescribeFileSystems has no resource type: on "*" or it grants nothing.
PERMISSIONS = {
    FSX_CSI_DRIVER: ("fsx:DescribeFileSystems", "*"),
    TRAINING_OPERATOR: ("sagemaker:DescribeClusterNode", CLUSTER_ARN),
    OBSERVABILITY: ("aps:RemoteWrite", WORKSPACE_ARN),
    # Fluent Bit: create (confirm) the platform's groups, their streams, and write them.
    CLOUDWATCH_OBSERVABILITY: (
        [
            "logs:CreateLogGroup",
            "logs:CreateLogStream",
            "logs:DescribeLogStreams",
            "logs:PutLogEvents",
        ],
        list(LOG_GROUP_ARNS),
    ),
}


def _addon_with_identity(stack: cdk.Stack, name: str, **kwargs) -> AddonWithPodIdentity:
    identity = ADDONS[name].identity
    assert identity is not None
    return AddonWithPodIdentity(
        stack,
        identity.construct_id,
        cluster_name="c",
        addon_name=name,
        version=ADDONS[name].version,
        service_account=identity.service_account,
        description=identity.description,
        statements=identity_statements(identity, CONTEXT),
        **kwargs,
    )


def _place(stack: cdk.Stack, unit: str, **kwargs):
    return place_addons(
        stack,
        placed_in(unit, eks_config()),
        cluster_name="c",
        removal_policy=cdk.RemovalPolicy.DESTROY,
        **kwargs,
    )


def test_pinned_addon_sets_the_exact_version_and_sorted_configuration():
    stack = bare_stack()
    PinnedAddon(
        stack,
        "Addon",
        cluster_name="c",
        addon_name="vpc-cni",
        version=ADDONS["vpc-cni"].version,
        configuration={"env": {"B": "2", "A": "1"}},
    )
    PinnedAddon(stack, "Plain", cluster_name="c", addon_name=COREDNS, version="v1.11.4-eksbuild.14")
    addons = {
        a["Properties"]["AddonName"]: a["Properties"]
        for a in resources_of(template_of(stack), "AWS::EKS::Addon").values()
    }
    assert addons["vpc-cni"] == {
        "AddonName": "vpc-cni",
        "AddonVersion": ADDONS["vpc-cni"].version,
        "ClusterName": "c",
        "ResolveConflicts": "OVERWRITE",
        "ConfigurationValues": json.dumps({"env": {"A": "1", "B": "2"}}),
        "PreserveOnDelete": False,
    }
    assert addons[COREDNS]["AddonVersion"] == "v1.11.4-eksbuild.14"
    assert "ConfigurationValues" not in addons[COREDNS]


@pytest.mark.parametrize(
    ("policy", "preserved"),
    [(cdk.RemovalPolicy.RETAIN, True), (cdk.RemovalPolicy.DESTROY, False)],
)
def test_a_retained_cluster_keeps_its_add_ons_and_their_identities(policy, preserved):
    stack = bare_stack()
    PinnedAddon(
        stack,
        "Dns",
        cluster_name="c",
        addon_name=COREDNS,
        version=ADDONS[COREDNS].version,
        removal_policy=policy,
    )
    _addon_with_identity(stack, FSX_CSI_DRIVER, removal_policy=policy)
    resources = template_of(stack).to_json()["Resources"]
    addons = [r for r in resources.values() if r["Type"] == "AWS::EKS::Addon"]
    assert len(addons) == 2
    for addon in addons:
        # The software stays on the cluster; the resource itself goes, so the stack can be
        # created again over the cluster (OVERWRITE adopts what was preserved).
        assert addon["Properties"]["PreserveOnDelete"] is preserved
        assert addon["Properties"]["ResolveConflicts"] == "OVERWRITE"
        assert "DeletionPolicy" not in addon
    # The controller left running keeps its credentials.
    for type_ in ("AWS::IAM::Role", "AWS::EKS::PodIdentityAssociation"):
        (identity,) = [r for r in resources.values() if r["Type"] == type_]
        expected = "Retain" if preserved else "Delete"
        assert identity.get("DeletionPolicy", "Delete") == expected, type_


WITH_IDENTITY = sorted(n for n, a in ADDONS.items() if a.identity is not None)


def test_every_row_with_an_identity_has_its_documented_permission_here():
    assert set(PERMISSIONS) == set(WITH_IDENTITY)


@pytest.mark.parametrize("name", WITH_IDENTITY)
def test_identity_add_ons_grant_exactly_their_documented_permission(name):
    stack = bare_stack()
    construct = _addon_with_identity(stack, name)
    template = template_of(stack).to_json()
    action, resource = PERMISSIONS[name]
    role_id = stack.get_logical_id(construct.identity.role.node.default_child)
    (policy,) = template["Resources"][role_id]["Properties"]["Policies"]
    assert policy["PolicyDocument"]["Statement"] == [
        {"Action": action, "Effect": "Allow", "Resource": resource}
    ]
    association_id = stack.get_logical_id(construct.identity.association)
    association = template["Resources"][association_id]["Properties"]
    account = ADDONS[name].service_account
    assert (association["Namespace"], association["ServiceAccount"]) == (
        account.namespace,
        account.name,
    )
    addon_id = stack.get_logical_id(construct.addon.resource)
    # The controller has credentials on first start.
    assert association_id in template["Resources"][addon_id]["DependsOn"]
    assert role_id in template["Resources"][addon_id]["DependsOn"]


def test_an_identity_fails_without_the_resource_it_names():
    for name, missing in (
        (TRAINING_OPERATOR, "hyperpod_cluster_arn"),
        (CLOUDWATCH_OBSERVABILITY, "container_log_group_arns"),
    ):
        identity = ADDONS[name].identity
        assert identity is not None
        with pytest.raises(ValueError, match=missing):
            identity_statements(identity, IdentityContext(workspace_arn=WORKSPACE_ARN))


# --------------------------------------------------------------------------- placement


@pytest.mark.parametrize("unit", ["eks", "cluster-addons", "governance", "observability"])
def test_placing_creates_the_rows_of_the_stack_with_their_identities(unit):
    stack = bare_stack()
    placed = _place(stack, unit, context=CONTEXT)
    rows = placed_in(unit, eks_config())
    assert list(placed.addons) == [a.name for a in rows]
    assert set(placed.identities) == {a.name for a in rows if a.service_account}
    template = template_of(stack).to_json()
    created = {
        r["Properties"]["AddonName"]: r["Properties"]["AddonVersion"]
        for r in resources_of(template, "AWS::EKS::Addon").values()
    }
    assert created == {a.name: a.version for a in rows}
    associations = {
        (r["Properties"]["Namespace"], r["Properties"]["ServiceAccount"])
        for r in resources_of(template, "AWS::EKS::PodIdentityAssociation").values()
    }
    assert associations == {
        (a.service_account.namespace, a.service_account.name) for a in rows if a.service_account
    }
    for addon in rows:
        for earlier in addon.after:
            addon_id = stack.get_logical_id(placed.addons[addon.name].resource)
            earlier_id = stack.get_logical_id(placed.addons[earlier].resource)
            assert earlier_id in template["Resources"][addon_id]["DependsOn"]


def test_synth_time_configuration_replaces_the_rows_and_only_for_placed_add_ons():
    stack = bare_stack()
    _place(stack, "observability", context=CONTEXT, configurations={OBSERVABILITY: {"logging": 1}})
    addons = {
        a["Properties"]["AddonName"]: a["Properties"]
        for a in resources_of(template_of(stack), "AWS::EKS::Addon").values()
    }
    assert json.loads(addons[OBSERVABILITY]["ConfigurationValues"]) == {"logging": 1}
    # The stack's other add-on keeps its row's configuration.
    assert json.loads(addons[CLOUDWATCH_OBSERVABILITY]["ConfigurationValues"]) == dict(
        ADDONS[CLOUDWATCH_OBSERVABILITY].configuration or {}
    )
    with pytest.raises(ValueError, match=OBSERVABILITY):
        _place(bare_stack(), "eks", configurations={OBSERVABILITY: {"logging": 1}})
