"""Pinned add-ons and add-ons with a pod identity, on a bare stack."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from config.addons import ADDONS, FSX_CSI_DRIVER, TRAINING_OPERATOR
from platform_constructs.eks_addons import FsxCsiDriver, PinnedAddon, TrainingOperator
from tests.support import bare_stack, resources_of, template_of

FILE_SYSTEM_ARN = "arn:aws:fsx:us-west-2:111111111111:file-system/fs-0123456789abcdef0"
CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111111111111:cluster/abcdef012345"


def test_pinned_addon_sets_the_exact_version_and_sorted_configuration():
    stack = bare_stack()
    PinnedAddon(
        stack,
        "Addon",
        cluster_name="c",
        addon_name="vpc-cni",
        version="v1.20.4-eksbuild.1",
        configuration={"env": {"B": "2", "A": "1"}},
    )
    PinnedAddon(
        stack, "Plain", cluster_name="c", addon_name="coredns", version="v1.11.4-eksbuild.14"
    )
    addons = {
        a["Properties"]["AddonName"]: a["Properties"]
        for a in resources_of(template_of(stack), "AWS::EKS::Addon").values()
    }
    assert addons["vpc-cni"] == {
        "AddonName": "vpc-cni",
        "AddonVersion": "v1.20.4-eksbuild.1",
        "ClusterName": "c",
        "ResolveConflicts": "OVERWRITE",
        "ConfigurationValues": json.dumps({"env": {"A": "1", "B": "2"}}),
        "PreserveOnDelete": False,
    }
    assert "ConfigurationValues" not in addons["coredns"]


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
        addon_name="coredns",
        version="v1.13.2-eksbuild.4",
        removal_policy=policy,
    )
    FsxCsiDriver(
        stack,
        "Fsx",
        cluster_name="c",
        version="v1.6.0-eksbuild.1",
        file_system_arn=FILE_SYSTEM_ARN,
        removal_policy=policy,
    )
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


def test_identity_add_ons_grant_exactly_their_documented_permission():
    stack = bare_stack()
    fsx = FsxCsiDriver(
        stack, "Fsx", cluster_name="c", version="v1.6.0-eksbuild.1", file_system_arn=FILE_SYSTEM_ARN
    )
    operator = TrainingOperator(
        stack,
        "Operator",
        cluster_name="c",
        version="v1.1.0-eksbuild.1",
        hyperpod_cluster_arn=CLUSTER_ARN,
    )
    template = template_of(stack).to_json()
    for construct, name, action, resource in (
        (fsx, FSX_CSI_DRIVER, "fsx:DescribeFileSystems", FILE_SYSTEM_ARN),
        (operator, TRAINING_OPERATOR, "sagemaker:DescribeClusterNode", CLUSTER_ARN),
    ):
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
