"""One test per rule of the `eks` section (add-on pins: tests/config/test_addons.py), starting
from config/dev.yaml: each bad value gives exactly one line naming the field."""

from __future__ import annotations

import datetime

import pytest

from config import eks_versions
from config.eks_versions import (
    CALENDAR_CHECKED,
    DEFAULT_KUBERNETES_VERSION,
    KUBERNETES_RELEASES,
    RETIREMENT_NOTICE,
)
from config.images import COMPONENTS
from config.schema import SUPPORTED_KUBERNETES_VERSIONS
from tests.support import ENVIRONMENTS, environment_data, loaded_from, one_error_on


def _eks(**values):
    return lambda d: d["eks"].update(values)


def _on(monkeypatch, day: datetime.date) -> None:
    monkeypatch.setattr(eks_versions, "today", lambda: day)


# 1.35: EKS offers it, HyperPod does not document it. 1.31: EKS retires it. 1.32: HyperPod
# documents it, the bundled kubectl cannot manage it.
@pytest.mark.parametrize("version", ["1.29", "1.31", "1.32", "1.35"])
def test_kubernetes_version_outside_supported_set_is_rejected(version):
    line = one_error_on("eks.kubernetes_version", _eks(kubernetes_version=version))
    assert f"'{version}' is not supported" in line
    assert "SageMaker HyperPod documentation" in line
    assert line.endswith(f"use one of {', '.join(SUPPORTED_KUBERNETES_VERSIONS)}")


# ------------------------------------------------------------------- the EKS calendar


def test_every_release_cites_the_eks_calendar():
    # "Understand the Kubernetes version lifecycle on EKS" (Amazon EKS User Guide).
    assert all("kubernetes-versions" in r.eks_calendar.url for r in KUBERNETES_RELEASES.values())


def test_every_version_cites_hyperpod_documentation_naming_it():
    for release in KUBERNETES_RELEASES.values():
        source = release.hyperpod_support
        assert "sagemaker-hyperpod" in source.url, release
        assert "HyperPod" in source.title, release
        # The version is named in what the document says, not as a prefix of another one.
        named = source.says.replace(",", " ").split()
        assert release.version in named, release


def test_no_supported_version_leaves_extended_support_within_the_notice():
    for release in KUBERNETES_RELEASES.values():
        assert release.extended_support_ends - RETIREMENT_NOTICE > CALENDAR_CHECKED, release


def test_the_default_is_the_newest_version_hyperpod_documents():
    assert DEFAULT_KUBERNETES_VERSION == "1.34"
    assert SUPPORTED_KUBERNETES_VERSIONS[-1] == DEFAULT_KUBERNETES_VERSION
    # On the day the table was checked it is also the newest in EKS standard support.
    assert eks_versions.newest_in_standard_support(CALENDAR_CHECKED) == DEFAULT_KUBERNETES_VERSION
    assert KUBERNETES_RELEASES[DEFAULT_KUBERNETES_VERSION].standard_support_ends > CALENDAR_CHECKED


@pytest.mark.parametrize("env_name", ENVIRONMENTS)
def test_every_environment_runs_the_default_and_outlives_its_standard_support(
    env_name, monkeypatch
):
    # The default is the newest version HyperPod documents; each environment accepts its
    # extended support, so the files stay valid when standard support ends (2026-12-02).
    data = environment_data(env_name)
    assert data["eks"]["kubernetes_version"] == DEFAULT_KUBERNETES_VERSION
    assert data["eks"]["allow_extended_support"] is True
    for day in (CALENDAR_CHECKED, datetime.date(2027, 6, 1)):
        _on(monkeypatch, day)
        loaded_from(data)


def test_extended_support_is_an_error_without_the_opt_in(monkeypatch):
    _on(monkeypatch, datetime.date(2026, 12, 2))  # 1.34 leaves standard support
    line = one_error_on("eks.kubernetes_version", _eks(allow_extended_support=False))
    assert "left EKS standard support on 2026-12-02" in line
    assert "extended-support rate until 2027-12-02" in line
    assert "eks.allow_extended_support: true" in line
    # No version HyperPod documents is newer: the fix is a new row or the opt-in.
    assert (
        "add a version HyperPod documents that is in EKS standard support to "
        "config/eks_versions.py, or set eks.allow_extended_support: true" in line
    )


def test_extended_support_is_accepted_when_opted_in(monkeypatch):
    _on(monkeypatch, datetime.date(2026, 12, 2))
    data = environment_data("dev")
    data["eks"]["allow_extended_support"] = True
    assert loaded_from(data).config.eks.allow_extended_support is True


def test_standard_support_needs_no_opt_in(monkeypatch):
    _on(monkeypatch, datetime.date(2026, 12, 1))
    data = environment_data("dev")
    data["eks"]["allow_extended_support"] = False
    loaded_from(data)


def test_a_version_close_to_the_end_of_extended_support_is_rejected_even_opted_in(monkeypatch):
    ends = KUBERNETES_RELEASES[DEFAULT_KUBERNETES_VERSION].extended_support_ends
    _on(monkeypatch, ends - RETIREMENT_NOTICE)
    line = one_error_on("eks.kubernetes_version", _eks(allow_extended_support=True))
    assert f"leaves EKS extended support on {ends}" in line
    assert "EKS upgrades the control plane itself" in line


def test_the_fix_names_the_newest_version_in_standard_support(monkeypatch):
    _on(monkeypatch, datetime.date(2026, 7, 29))  # 1.33 leaves standard support
    data = environment_data("dev")
    data["eks"].update(
        kubernetes_version="1.33",
        addons={"kube-proxy": "v1.33.10-eksbuild.2"},
        allow_extended_support=False,
    )
    from tests.support import config_errors

    (line,) = config_errors(lambda d: d.update(data))
    assert line.startswith("eks.kubernetes_version: 1.33 left EKS standard support")
    assert "upgrade to 1.34, one minor version at a time" in line


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
