"""One test per rule of the `network` section, starting from config/dev.yaml: each bad value
gives exactly one line naming the field."""

from __future__ import annotations

import typing

import pytest

from config.kubernetes import ADMIN_HOST_ACCESS_POLICIES
from config.schema import REQUIRED_ENDPOINTS, NetworkConfig
from config.schema.network import AdminHostConfig
from tests.support import environment_data, loaded_from, one_error_on


@pytest.mark.parametrize("name", ["com.amazonaws.us-west-2.sts", "ECR API", "ecr_api", "ecr."])
def test_rule_interface_endpoint_names_must_be_service_names(name):
    line = one_error_on(
        "network.interface_endpoints", lambda d: d["network"].update(interface_endpoints=[name])
    )
    assert "not an endpoint service name" in line


def test_rule_s3_is_not_an_interface_endpoint():
    line = one_error_on(
        "network.interface_endpoints",
        lambda d: d["network"].update(interface_endpoints=["sts", "s3"]),
    )
    assert "gateway endpoint" in line


def test_rule_interface_endpoints_listed_once():
    line = one_error_on(
        "network.interface_endpoints",
        lambda d: d["network"].update(interface_endpoints=["sts", "ecr.api", "sts"]),
    )
    assert (
        line == "network.interface_endpoints: listed more than once: sts; list each endpoint once"
    )


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "0.0.0.0/1", "128.0.0.0/7"])
def test_rule_https_egress_cidrs_must_be_narrow(cidr):
    line = one_error_on(
        "network.https_egress_cidrs", lambda d: d["network"].update(https_egress_cidrs=[cidr])
    )
    assert "not a narrow rule" in line


def test_rule_https_egress_cidrs_listed_once():
    line = one_error_on(
        "network.https_egress_cidrs",
        lambda d: d["network"].update(https_egress_cidrs=["203.0.113.10/32", "203.0.113.10/32"]),
    )
    assert line == (
        "network.https_egress_cidrs: listed more than once: 203.0.113.10/32; list each CIDR once"
    )


def test_narrow_https_egress_cidrs_are_accepted():
    data = environment_data("dev")
    data["network"].update(egress="nat", nat_gateways=1)
    data["network"]["https_egress_cidrs"] = ["203.0.113.10/32", "10.0.0.0/8"]
    assert [str(c) for c in loaded_from(data).config.network.https_egress_cidrs] == [
        "203.0.113.10/32",
        "10.0.0.0/8",
    ]


def test_default_endpoints_include_every_required_one_and_lambda():
    # The kubectl handler in the infra subnets invokes Lambda functions through the VPC.
    defaults = NetworkConfig.model_fields["interface_endpoints"].default_factory()
    assert "lambda" in REQUIRED_ENDPOINTS
    assert set(REQUIRED_ENDPOINTS) <= set(defaults)


# --------------------------------------------------------------------------- egress


def test_shipped_environments_are_closed_networks_with_an_admin_host():
    for name in ("dev", "staging", "prod"):
        network = loaded_from(environment_data(name)).config.network
        assert network.egress == "closed", name
        assert network.nat_gateways == 0 and network.https_egress_cidrs == [], name
        assert network.admin_host.enabled and network.admin_host.kubernetes_access == "view"


def test_egress_defaults_to_a_closed_network_without_nat():
    assert NetworkConfig.model_fields["egress"].default == "closed"
    assert NetworkConfig.model_fields["nat_gateways"].default == 0


def test_rule_closed_network_takes_no_nat_gateways():
    line = one_error_on("network.nat_gateways", lambda d: d["network"].update(nat_gateways=1))
    assert line == (
        "network.nat_gateways: 1 NAT gateways with egress: closed would carry no traffic; "
        "remove nat_gateways, or set egress: nat with https_egress_cidrs"
    )


def test_rule_closed_network_takes_no_https_egress_cidrs():
    line = one_error_on(
        "network.https_egress_cidrs",
        lambda d: d["network"].update(https_egress_cidrs=["203.0.113.10/32"]),
    )
    assert "egress: closed has no route out of the VPC" in line


@pytest.mark.parametrize("count", [0, 3])
def test_rule_nat_egress_needs_one_to_one_per_az_nat_gateways(count):
    # dev has two AZs.
    line = one_error_on(
        "network.nat_gateways",
        lambda d: d["network"].update(
            egress="nat", nat_gateways=count, https_egress_cidrs=["203.0.113.10/32"]
        ),
    )
    assert f"{count} NAT gateways for 2 AZs with egress: nat; use 1 to 2" in line


def test_rule_nat_egress_needs_https_egress_cidrs_to_carry_traffic():
    line = one_error_on(
        "network.https_egress_cidrs",
        lambda d: d["network"].update(egress="nat", nat_gateways=1),
    )
    assert "no security group lets traffic reach the NAT gateways" in line


def test_rule_egress_is_closed_or_nat():
    line = one_error_on("network.egress", lambda d: d["network"].update(egress="open"))
    assert "'closed' or 'nat'" in line


# --------------------------------------------------------------------------- admin host


@pytest.mark.parametrize("instance_type", ["t4g.small", "m7g.large", "c7gn.xlarge", "a1.large"])
def test_rule_admin_host_is_x86_for_the_amd64_kubectl(instance_type):
    line = one_error_on(
        "network.admin_host.instance_type",
        lambda d: d["network"]["admin_host"].update(instance_type=instance_type),
    )
    assert "Graviton (arm64)" in line


@pytest.mark.parametrize("instance_type", ["ml.m5.xlarge", "t3", "T3.small"])
def test_rule_admin_host_instance_type_is_an_ec2_type(instance_type):
    line = one_error_on(
        "network.admin_host.instance_type",
        lambda d: d["network"]["admin_host"].update(instance_type=instance_type),
    )
    assert "is not an EC2 instance type" in line


@pytest.mark.parametrize("instance_type", ["t3.micro", "m7i-flex.large", "m6a.large", "g5.xlarge"])
def test_x86_admin_host_types_are_accepted(instance_type):
    data = environment_data("dev")
    data["network"]["admin_host"]["instance_type"] = instance_type
    assert loaded_from(data).config.network.admin_host.instance_type == instance_type


def test_rule_admin_host_kubernetes_access_is_one_of_the_choices():
    line = one_error_on(
        "network.admin_host.kubernetes_access",
        lambda d: d["network"]["admin_host"].update(kubernetes_access="edit"),
    )
    assert "'none', 'view', 'admin-view' or 'cluster-admin'" in line


def test_admin_host_access_choices_are_the_access_policy_tables_keys():
    choices = typing.get_args(AdminHostConfig.model_fields["kubernetes_access"].annotation)
    assert set(choices) == set(ADMIN_HOST_ACCESS_POLICIES)


def test_rule_admin_host_needs_the_session_manager_endpoints():
    def without_ssm(data):
        endpoints = NetworkConfig.model_fields["interface_endpoints"].default_factory()
        data["network"]["interface_endpoints"] = [
            e for e in endpoints if e not in ("ssm", "ssmmessages")
        ]

    line = one_error_on("network.interface_endpoints", without_ssm)
    assert line == (
        "network.interface_endpoints: the admin host is reached through Session Manager, "
        "which needs the ssm and ssmmessages endpoints; add ssm, ssmmessages or set "
        "admin_host.enabled: false"
    )


def test_without_an_admin_host_the_session_manager_endpoints_are_optional():
    data = environment_data("dev")
    endpoints = NetworkConfig.model_fields["interface_endpoints"].default_factory()
    data["network"]["interface_endpoints"] = [e for e in endpoints if e != "ssmmessages"]
    data["network"]["admin_host"] = {"enabled": False}
    assert loaded_from(data).config.network.admin_host.enabled is False
