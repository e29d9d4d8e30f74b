"""One test per rule of the `network` section, starting from config/dev.yaml: each bad value
gives exactly one line naming the field."""

from __future__ import annotations

import pytest

from config.schema import REQUIRED_ENDPOINTS, NetworkConfig
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
