"""The EKS add-on table (config/addons.py) and the overrides an environment may pin under
`eks.addons`: known name, EKS build format, at least the table's minimum."""

from __future__ import annotations

import dataclasses
from typing import get_args

import pytest

from config import eks_versions
from config.addons import (
    ADDON_DAEMONSETS,
    ADDONS,
    CLOUDWATCH_OBSERVABILITY,
    COREDNS,
    FSX_CSI_DRIVER,
    KUBE_PROXY,
    OBSERVABILITY,
    SYSTEM_PODS,
    TASK_GOVERNANCE,
    TRAINING_OPERATOR,
    VERSION_FORMAT,
    AddonStack,
    parse_version,
    placed_in,
)
from config.eks_versions import DEFAULT_KUBERNETES_VERSION
from config.names import STACK_UNITS
from config.schema import SUPPORTED_KUBERNETES_VERSIONS
from tests.support import ENVIRONMENTS, eks_config, environment, one_error_on


def _override(name: str, version: str):
    return lambda d: d["eks"].setdefault("addons", {}).update({name: version})


# --------------------------------------------------------------------------- the table


@pytest.mark.parametrize("name", sorted(ADDONS))
def test_every_pin_is_an_eks_build_at_or_above_its_minimum(name):
    addon = ADDONS[name]
    assert addon.name == name
    parsed = parse_version(addon.version)
    assert parsed is not None, f"{addon.version} is not {VERSION_FORMAT}"
    assert parsed >= addon.minimum, addon


def test_documented_minimums():
    # vpc-cni 1.18.3 is HyperPod's documented minimum.
    assert ADDONS["vpc-cni"].minimum == (1, 18, 3)


def test_kube_proxy_pin_is_built_for_the_default_kubernetes_version():
    major, minor, _ = parse_version(ADDONS[KUBE_PROXY].version)
    assert f"{major}.{minor}" == DEFAULT_KUBERNETES_VERSION
    assert DEFAULT_KUBERNETES_VERSION in SUPPORTED_KUBERNETES_VERSIONS
    # The minimum follows the oldest supported minor: an older build fits no cluster.
    assert ADDONS[KUBE_PROXY].minimum == (*map(int, SUPPORTED_KUBERNETES_VERSIONS[0].split(".")), 0)


def test_ordering_only_names_add_ons_placed_with_it():
    # `after` is applied among the add-ons of one stack.
    for addon in ADDONS.values():
        for earlier in addon.after:
            assert earlier in ADDONS, (addon.name, earlier)
            assert addon.stack == ADDONS[earlier].stack, (addon.name, earlier)
            assert addon.stack in ("eks", "cluster-addons"), addon.name
    assert ADDONS[TRAINING_OPERATOR].after == ("cert-manager",)


def test_service_accounts_belong_to_the_add_ons_that_call_aws_apis():
    with_identity = {name for name, a in ADDONS.items() if a.service_account is not None}
    assert with_identity == {
        FSX_CSI_DRIVER,
        TRAINING_OPERATOR,
        OBSERVABILITY,
        CLOUDWATCH_OBSERVABILITY,
    }
    assert ADDONS[FSX_CSI_DRIVER].service_account.namespace == "kube-system"
    assert ADDONS[FSX_CSI_DRIVER].service_account.name == "fsx-csi-controller-sa"
    assert ADDONS[TRAINING_OPERATOR].service_account.namespace == "aws-hyperpod"
    assert (
        ADDONS[TRAINING_OPERATOR].service_account.name == "hp-training-operator-controller-manager"
    )


@pytest.mark.parametrize("name", sorted(ADDONS))
def test_every_row_declares_the_pods_it_runs(name):
    # The node model counts only what a row declares: a row without pods would let its
    # controllers and agents take node capacity no job leaves room for.
    addon = ADDONS[name]
    assert addon.pods, f"{name} declares no DaemonSet and no Deployment"
    for pod in addon.pods:
        assert pod.addon == name, pod
        assert pod.source and pod.cpu_millicores >= 0 and pod.memory_mib >= 0, pod
    assert all(p.replicas == 1 for p in addon.daemonsets), addon.daemonsets


def test_every_pod_of_the_table_has_a_name_of_its_own():
    # hpctl nodes and the fit messages name pods: two of one name would read as one.
    names = [p.name for p in (*ADDON_DAEMONSETS, *SYSTEM_PODS)]
    assert len(names) == len(set(names)), names


def test_an_identity_grants_on_a_resource_its_stack_gives():
    for addon in ADDONS.values():
        if addon.identity is None:
            continue
        identity = addon.identity
        assert identity.actions and identity.construct_id and identity.description, addon.name
        # Only a grant on "*" needs a reason for the wildcard.
        assert (identity.resources == "*") is (identity.unscoped_reason is not None), addon.name


def test_vpc_cni_keeps_one_address_per_pod_as_the_capacity_plan_assumes():
    configuration = ADDONS["vpc-cni"].configuration
    assert configuration is not None
    assert configuration["env"] == {"ENABLE_PREFIX_DELEGATION": "false"}


def test_vpc_cni_enforces_network_policies_on_a_version_that_has_them():
    # The add-on's configuration value; network policy needs VPC CNI 1.14 (EKS User Guide,
    # "Restrict Pod network traffic with Kubernetes network policies").
    addon = ADDONS["vpc-cni"]
    assert addon.configuration is not None
    assert addon.configuration["enableNetworkPolicy"] == "true"  # a string in the schema
    assert set(addon.configuration) == {"enableNetworkPolicy", "env"}
    assert addon.minimum >= (1, 14, 0)


def test_placement_what_nodes_boot_with_first_the_rest_after_the_cluster():
    def placed(stack: AddonStack) -> set[str]:
        return {addon.name for addon in placed_in(stack, eks_config())}

    # As AWS's HyperPod EKS template creates them with the cluster: cluster DNS is there
    # before any node boots (the HyperPod stack depends on the EKS stack).
    assert placed("eks") == {"vpc-cni", "kube-proxy", "eks-pod-identity-agent", COREDNS}
    assert placed("cluster-addons") == {"cert-manager", FSX_CSI_DRIVER, TRAINING_OPERATOR}
    assert placed("governance") == {TASK_GOVERNANCE}
    assert placed("observability") == {OBSERVABILITY, CLOUDWATCH_OBSERVABILITY}


def test_add_ons_are_placed_in_stacks_of_the_environment():
    assert set(get_args(AddonStack)) <= set(STACK_UNITS.values())


def test_every_row_is_placed_in_exactly_one_stack_that_places_add_ons():
    placed = [a.name for stack in get_args(AddonStack) for a in placed_in(stack, eks_config())]
    assert sorted(placed) == sorted(ADDONS)


def test_placement_gives_a_stack_its_rows_in_table_order_at_the_environment_versions():
    eks = eks_config(addons={COREDNS: "v1.11.4-eksbuild.20"})
    rows = placed_in("eks", eks)
    assert [a.name for a in rows] == [n for n, a in ADDONS.items() if a.stack == "eks"]
    versions = {a.name: a.version for a in rows}
    assert versions[COREDNS] == "v1.11.4-eksbuild.20"
    assert versions[KUBE_PROXY] == ADDONS[KUBE_PROXY].version
    assert {a.name: a.configuration for a in rows} == {
        a.name: a.configuration for a in ADDONS.values() if a.stack == "eks"
    }


def test_a_row_is_placed_in_the_stack_it_names_whatever_that_is():
    # A row for the observability stack is created there, not only the one it used to read.
    planted = dataclasses.replace(ADDONS[COREDNS], name="planted", stack="observability")
    table = {**ADDONS, "planted": planted}

    class Pins:
        def addon_version(self, name: str) -> str:
            return table[name].version

    assert [a.name for a in placed_in("observability", Pins(), table=table)] == [
        OBSERVABILITY,
        CLOUDWATCH_OBSERVABILITY,
        "planted",
    ]
    assert "planted" not in {a.name for a in placed_in("eks", Pins(), table=table)}


# --------------------------------------------------------------------------- overrides


@pytest.mark.parametrize("env_name", ENVIRONMENTS)
def test_environments_install_every_add_on_at_its_pin(env_name):
    eks = environment(env_name).config.eks
    assert eks.addons == {}
    assert {name: eks.addon_version(name) for name in ADDONS} == {
        name: addon.version for name, addon in ADDONS.items()
    }


def test_an_override_replaces_only_its_own_pin():
    eks = eks_config(addons={"coredns": "v1.11.4-eksbuild.20"})
    assert eks.addon_version("coredns") == "v1.11.4-eksbuild.20"
    for name in set(ADDONS) - {"coredns"}:
        assert eks.addon_version(name) == ADDONS[name].version


def test_an_override_at_the_minimum_is_accepted():
    eks = eks_config(addons={"vpc-cni": "v1.18.3-eksbuild.1"})
    assert eks.addon_version("vpc-cni") == "v1.18.3-eksbuild.1"


def test_override_must_be_an_eks_build():
    line = one_error_on("eks.addons", _override("vpc-cni", "1.20.4"))
    assert "vpc-cni" in line and "vMAJOR.MINOR.PATCH-eksbuild.N" in line


def test_override_below_the_minimum_is_rejected():
    line = one_error_on("eks.addons", _override("vpc-cni", "v1.18.2-eksbuild.1"))
    assert "v1.18.3" in line


def test_override_of_an_unknown_add_on_is_rejected():
    line = one_error_on("eks.addons", _override("vpc-cnii", "v1.20.4-eksbuild.1"))
    assert "vpc-cnii" in line


def test_kube_proxy_minor_must_match_the_cluster():
    line = one_error_on("eks.addons.kube-proxy", _override("kube-proxy", "v1.33.10-eksbuild.2"))
    assert "built for Kubernetes 1.33 but kubernetes_version is 1.34" in line


def test_other_cluster_versions_need_the_matching_kube_proxy(monkeypatch):
    # 1.33 is in extended support on the day the table was checked: opted in, the version
    # itself is fine.
    monkeypatch.setattr(eks_versions, "today", lambda: eks_versions.CALENDAR_CHECKED)
    older = {"kubernetes_version": "1.33", "allow_extended_support": True}
    line = one_error_on("eks.addons.kube-proxy", lambda d: d["eks"].update(older))
    assert ADDONS[KUBE_PROXY].version in line
    # The EKS User Guide's latest kube-proxy build for 1.33 (Manage kube-proxy).
    eks = eks_config(**older, addons={KUBE_PROXY: "v1.33.10-eksbuild.2"})
    assert eks.addon_version(KUBE_PROXY) == "v1.33.10-eksbuild.2"
