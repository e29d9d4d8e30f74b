"""The `eks` section: the EKS control plane, who administers it, add-on pins and images."""

from __future__ import annotations

import ipaddress
import re

from pydantic import Field, field_validator, model_validator

from config import eks_versions
from config.addons import ADDONS, KUBE_PROXY, VERSION_FORMAT, parse_version
from config.eks_versions import SUPPORTED_KUBERNETES_VERSIONS
from config.errors import FieldError
from config.images import COMPONENTS
from config.model import Strict
from config.schema.base import PARTITION, Cidr, log_retention, unique

# The versions and their EKS support dates: config/eks_versions.py.
__all__ = ["SUPPORTED_KUBERNETES_VERSIONS", "EksConfig"]

_ROLE_ARN = re.compile(rf"^arn:{PARTITION}:iam::\d{{12}}:role/[\w+=,.@/-]{{1,512}}$")
_MIN_PUBLIC_ENDPOINT_PREFIX = 16


class EksConfig(Strict):
    kubernetes_version: str
    allow_extended_support: bool = Field(
        default=False,
        description="Accept running kubernetes_version after its EKS standard support ended "
        "(billed at the extended-support rate per cluster hour). Without it, that is an error.",
    )
    admin_role_arns: list[str] = Field(min_length=1)
    public_access_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Empty: the API endpoint is private only.",
    )
    addons: dict[str, str] = Field(
        default_factory=dict,
        description="Add-on versions that differ from the pins in config/addons.py (e.g. an "
        "upgrade tried in dev first).",
    )
    log_retention_days: int = Field(
        default=365, description="Retention of the control-plane log group (all log types)."
    )
    image_overrides: dict[str, str] = Field(
        default_factory=dict,
        description="Replace the pinned image of a HyperPod dependency, e.g. with a copy in the "
        "account's ECR when nodes cannot reach the upstream registry. Pin a tag or a digest.",
    )

    @field_validator("kubernetes_version")
    @classmethod
    def _k8s_supported(cls, value: str) -> str:
        if value not in SUPPORTED_KUBERNETES_VERSIONS:
            raise ValueError(
                f"{value!r} is not supported (the platform runs the versions the SageMaker "
                "HyperPod documentation supports, its bundled kubectl manages and EKS supports "
                f"for at least {eks_versions.RETIREMENT_NOTICE.days} more days: "
                "config/eks_versions.py); use one of "
                f"{', '.join(SUPPORTED_KUBERNETES_VERSIONS)}"
            )
        return value

    @field_validator("admin_role_arns")
    @classmethod
    def _role_arns(cls, value: list[str]) -> list[str]:
        for arn in value:
            if not _ROLE_ARN.match(arn):
                raise ValueError(
                    f"{arn!r} is not an IAM role ARN (arn:aws:iam::<12-digit account>:role/<name>)"
                )
        if len(set(value)) != len(value):
            raise ValueError("lists the same role more than once; list each role once")
        return value

    @field_validator("public_access_cidrs")
    @classmethod
    def _no_open_endpoint(cls, value: list[ipaddress.IPv4Network]) -> list[ipaddress.IPv4Network]:
        for cidr in value:
            if cidr.prefixlen < _MIN_PUBLIC_ENDPOINT_PREFIX:
                raise ValueError(
                    f"{cidr} opens the API endpoint to a large part of the internet (shorter "
                    f"than /{_MIN_PUBLIC_ENDPOINT_PREFIX}); list your office or VPN CIDRs"
                )
        unique(value, "CIDR")
        return value

    @field_validator("addons")
    @classmethod
    def _addon_versions(cls, value: dict[str, str]) -> dict[str, str]:
        for name, version in value.items():
            addon = ADDONS.get(name)
            if addon is None:
                raise ValueError(
                    f"unknown add-on {name!r}; known add-ons: {', '.join(sorted(ADDONS))}"
                )
            parsed = parse_version(version)
            if parsed is None:
                raise ValueError(
                    f"{name}: {version!r} is not an EKS add-on version ({VERSION_FORMAT})"
                )
            if parsed < addon.minimum:
                raise ValueError(
                    f"{name}: {version} is older than the supported minimum "
                    f"v{'.'.join(map(str, addon.minimum))}; upgrade the pin"
                )
        return value

    @field_validator("log_retention_days")
    @classmethod
    def _log_retention(cls, value: int) -> int:
        return log_retention(value)

    @field_validator("image_overrides")
    @classmethod
    def _pinned_images(cls, value: dict[str, str]) -> dict[str, str]:
        # registry[:port]/repository[/...] then an exact tag or a sha256 digest.
        reference = re.compile(
            r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+"
            r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$"
        )
        for component, image in value.items():
            if component not in COMPONENTS:
                raise ValueError(
                    f"{component!r} is not a HyperPod dependency component; use one of "
                    f"{', '.join(COMPONENTS)}"
                )
            if not reference.match(image):
                raise ValueError(
                    f"{component}: {image!r} is not a pinned image reference; use "
                    "registry/repository:tag or registry/repository@sha256:<digest>"
                )
            if image.endswith(":latest"):
                raise ValueError(
                    f"{component}: the 'latest' tag moves between deployments; pin an exact tag or digest"
                )
        return value

    @model_validator(mode="after")
    def _in_eks_support(self) -> EksConfig:
        problem = eks_versions.support_problem(
            self.kubernetes_version,
            on=eks_versions.today(),
            allow_extended=self.allow_extended_support,
        )
        if problem is not None:
            raise FieldError("kubernetes_version", problem)
        return self

    @model_validator(mode="after")
    def _kube_proxy_matches_cluster(self) -> EksConfig:
        version = self.addon_version(KUBE_PROXY)
        parsed = parse_version(version)
        if parsed is not None and f"{parsed[0]}.{parsed[1]}" != self.kubernetes_version:
            raise FieldError(
                f"addons.{KUBE_PROXY}",
                f"{version} is built for Kubernetes {parsed[0]}.{parsed[1]} but kubernetes_version "
                f"is {self.kubernetes_version}; pin the kube-proxy build for the cluster's minor version",
            )
        return self

    def addon_version(self, name: str) -> str:
        """The version of add-on `name` this environment installs."""
        return self.addons.get(name, ADDONS[name].version)
