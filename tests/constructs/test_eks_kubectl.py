"""The bundled kubectl and the Kubernetes versions the platform may run."""

from __future__ import annotations

import pytest

from config.schema import SUPPORTED_KUBERNETES_VERSIONS
from platform_constructs.eks_kubectl import (
    KUBECTL_MINOR,
    MANAGEABLE_KUBERNETES_VERSIONS,
    check_kubectl_skew,
)


def test_supported_kubernetes_versions_are_within_the_bundled_kubectl_skew():
    for version in SUPPORTED_KUBERNETES_VERSIONS:
        major, minor = (int(p) for p in version.split("."))
        assert major == KUBECTL_MINOR[0] and abs(minor - KUBECTL_MINOR[1]) <= 1, version
        check_kubectl_skew(version)
    assert set(SUPPORTED_KUBERNETES_VERSIONS) <= set(MANAGEABLE_KUBERNETES_VERSIONS)
    with pytest.raises(ValueError, match=r"1\.29"):
        check_kubectl_skew("1.29")


def test_manageable_versions_are_one_minor_either_side_of_kubectl():
    assert (
        tuple(f"{KUBECTL_MINOR[0]}.{KUBECTL_MINOR[1] + skew}" for skew in (-1, 0, 1))
        == MANAGEABLE_KUBERNETES_VERSIONS
    )
