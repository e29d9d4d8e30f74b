"""One test per rule of the `eks` section (add-on pins: tests/config/test_addons.py), starting
from config/dev.yaml: each bad value gives exactly one line naming the field."""

from __future__ import annotations

import pytest

from config.images import COMPONENTS
from config.schema import SUPPORTED_KUBERNETES_VERSIONS
from tests.support import one_error_on


def _eks(**values):
    return lambda d: d["eks"].update(values)


def test_kubernetes_version_outside_supported_set_is_rejected():
    line = one_error_on("eks.kubernetes_version", _eks(kubernetes_version="1.29"))
    assert all(v in line for v in SUPPORTED_KUBERNETES_VERSIONS)


def test_admin_role_arn_must_be_a_role_arn():
    line = one_error_on(
        "eks.admin_role_arns", _eks(admin_role_arns=["arn:aws:iam::111111111111:user/someone"])
    )
    assert "user/someone" in line


def test_admin_role_arns_must_be_unique():
    arn = "arn:aws:iam::111111111111:role/PlatformAdmin"
    one_error_on("eks.admin_role_arns", _eks(admin_role_arns=[arn, arn]))


def test_public_access_cidrs_cannot_open_the_endpoint_to_the_internet():
    line = one_error_on("eks.public_access_cidrs", _eks(public_access_cidrs=["0.0.0.0/0"]))
    assert "0.0.0.0/0" in line


def test_log_retention_must_be_a_cloudwatch_period():
    one_error_on("eks.log_retention_days", _eks(log_retention_days=100))


@pytest.mark.parametrize(
    "image",
    [
        "111111111111.dkr.ecr.us-west-2.amazonaws.com/mirror/k8s-device-plugin",
        "111111111111.dkr.ecr.us-west-2.amazonaws.com/mirror/k8s-device-plugin:latest",
    ],
    ids=["no-tag", "latest"],
)
def test_image_override_must_be_pinned(image):
    one_error_on("eks.image_overrides", _eks(image_overrides={"nvidia-device-plugin": image}))


def test_image_override_names_a_known_component():
    line = one_error_on(
        "eks.image_overrides", _eks(image_overrides={"gpu-plugin": "r.example.com/a/b:v1"})
    )
    assert "'gpu-plugin' is not a HyperPod dependency component" in line
    assert all(component in line for component in COMPONENTS)
