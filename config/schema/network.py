"""The `network` section: VPC ranges, AZs, egress (closed, or NAT), endpoints and the admin
host."""

from __future__ import annotations

import difflib
import ipaddress
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from config.capacity import MAX_SUBNET_PREFIX, MIN_SUBNET_PREFIX
from config.errors import FieldError
from config.model import Strict
from config.regions import INTERFACE_ENDPOINT_SERVICES
from config.schema.base import RFC1918, Cidr, Zone, log_retention, unique

# Interface endpoints nodes and the kubectl handler cannot work without (no internet egress).
REQUIRED_ENDPOINTS: tuple[str, ...] = (
    "ec2", "ecr.api", "ecr.dkr", "eks", "eks-auth", "lambda", "logs", "sts",
)  # fmt: skip

# Prometheus remote write (the observability add-on) goes through this endpoint.
PROMETHEUS_ENDPOINT = "aps-workspaces"

# Interface endpoint service names as written after "com.amazonaws.<region>." (ecr.api).
_ENDPOINT_SERVICE = re.compile(r"^[a-z0-9]+([.-][a-z0-9]+)*$")
# https_egress_cidrs is for narrow, deliberate exceptions; anything wider than a /8 (and
# 0.0.0.0/0 above all) would be blanket egress under another name.
_MIN_EGRESS_PREFIX = 8
VPC_MIN_PREFIX, VPC_MAX_PREFIX = 16, 28

# The network stack's output holding the admin host's instance ID (`hpctl kubeconfig` reads
# it; defined here so that hpctl never imports CDK).
ADMIN_HOST_OUTPUT = "AdminHostInstanceId"
# What Session Manager needs on the VPC side: the agent registers through `ssm` and carries
# sessions (shells and port forwarding) over `ssmmessages`.
ADMIN_HOST_ENDPOINTS: tuple[str, ...] = ("ssm", "ssmmessages")
# EC2 instance type names (t3.small, m7i.large); SageMaker's ml.* types are not EC2 types.
_EC2_INSTANCE_TYPE = re.compile(r"^(?P<family>[a-z]+\d+(?P<options>[a-z-]*))\.[a-z0-9]+$")


class AdminHostConfig(Strict):
    """An SSM-managed instance in an infra subnet: the documented way in when the API endpoint
    is private. No inbound rules, no key pair; kubectl comes from the pinned layer package."""

    enabled: bool = True
    instance_type: str = Field(
        default="t3.small",
        description="An x86_64 EC2 instance type (the bundled kubectl is built for amd64).",
    )
    kubernetes_access: Literal["none", "view", "admin-view", "cluster-admin"] = Field(
        default="view",
        description="The EKS access policy of the host's own role, cluster-wide: none (the host "
        "only relays operators' own connections), view (AmazonEKSViewPolicy: no Secrets), "
        "admin-view (AmazonEKSAdminViewPolicy: reads everything, Secrets included) or "
        "cluster-admin (AmazonEKSClusterAdminPolicy: whoever may start a session on the host "
        "is then cluster admin).",
    )

    @field_validator("instance_type")
    @classmethod
    def _x86_ec2_type(cls, value: str) -> str:
        match = _EC2_INSTANCE_TYPE.match(value)
        if match is None:
            raise ValueError(
                f"{value!r} is not an EC2 instance type; use one such as t3.small or m7i.large"
            )
        if match["family"] == "a1" or "g" in match["options"]:
            raise ValueError(
                f"{value} is a Graviton (arm64) type and the bundled kubectl is amd64; use an "
                "x86_64 type such as t3.small"
            )
        return value


class NetworkConfig(Strict):
    vpc_cidr: Cidr = Field(
        description="Primary VPC CIDR: public subnets (NAT) and small infrastructure subnets."
    )
    cluster_cidr: Cidr | None = Field(
        default=None,
        description="Secondary CIDR carved into the large private cluster subnets, one per AZ. "
        "Without it the cluster subnets come from the upper half of vpc_cidr.",
    )
    availability_zones: list[Zone] = Field(min_length=2, max_length=6)
    egress: Literal["closed", "nat"] = Field(
        default="closed",
        description="closed: nodes reach AWS only through the VPC endpoints; no internet "
        "gateway, public subnets or NAT. nat: NAT gateways for the deliberate HTTPS egress in "
        "https_egress_cidrs (and nothing else).",
    )
    nat_gateways: int = Field(
        default=0,
        ge=0,
        le=6,
        description="NAT gateways with egress: nat (1 to one per AZ); 0 with egress: closed.",
    )
    public_subnet_prefix: int = Field(default=24, ge=MIN_SUBNET_PREFIX, le=MAX_SUBNET_PREFIX)
    infra_subnet_prefix: int = Field(default=24, ge=MIN_SUBNET_PREFIX, le=MAX_SUBNET_PREFIX)
    cluster_subnet_prefix: int | None = Field(
        default=None,
        ge=MIN_SUBNET_PREFIX,
        le=MAX_SUBNET_PREFIX,
        description="Fixed prefix for cluster subnets; default: the largest equal split of the "
        "cluster CIDR (subnets cannot grow later, so give them all the room).",
    )
    default_headroom_percent: int = Field(default=25, ge=0, le=200)
    interface_endpoints: list[str] = Field(
        default_factory=lambda: [
            "ec2",
            "ecr.api",
            "ecr.dkr",
            "eks",
            "eks-auth",
            "elasticloadbalancing",
            "lambda",
            "logs",
            "monitoring",
            "sagemaker.api",
            "ssm",
            "ssmmessages",
            "ec2messages",
            "sts",
            PROMETHEUS_ENDPOINT,
            "fsx",
        ],
        description="Interface endpoints nodes use instead of internet egress.",
    )
    https_egress_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Deliberate, narrow TCP 443 egress for nodes (e.g. a proxy or mirror), "
        "through the NAT gateways; only with egress: nat.",
    )
    flow_log_retention_days: int = 365
    admin_host: AdminHostConfig = Field(default_factory=AdminHostConfig)

    @field_validator("vpc_cidr", "cluster_cidr")
    @classmethod
    def _vpc_block_size(cls, value: ipaddress.IPv4Network | None) -> ipaddress.IPv4Network | None:
        # AWS allows VPC CIDR blocks (primary and secondary) from /16 to /28.
        if value is not None and not VPC_MIN_PREFIX <= value.prefixlen <= VPC_MAX_PREFIX:
            raise ValueError(
                f"{value} has prefix /{value.prefixlen}; a VPC CIDR must be "
                f"/{VPC_MIN_PREFIX} to /{VPC_MAX_PREFIX}"
            )
        return value

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr_private(cls, value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if not any(value.subnet_of(block) for block in RFC1918):
            raise ValueError(f"{value} is not in a private range (10/8, 172.16/12, 192.168/16)")
        return value

    @field_validator("availability_zones")
    @classmethod
    def _unique_azs(cls, value: list[str]) -> list[str]:
        unique(value, "AZ")
        return value

    @field_validator("interface_endpoints")
    @classmethod
    def _endpoint_services(cls, value: list[str]) -> list[str]:
        for service in value:
            if not _ENDPOINT_SERVICE.match(service) or service.startswith("com.amazonaws."):
                raise ValueError(
                    f"{service!r} is not an endpoint service name; write the part after "
                    "com.amazonaws.<region>. (e.g. ecr.api)"
                )
            if service not in INTERFACE_ENDPOINT_SERVICES:
                raise ValueError(_unknown_service(service))
        if "s3" in value:
            raise ValueError(
                "'s3' is served by the S3 gateway endpoint the network always creates; "
                "remove it from interface_endpoints"
            )
        unique(value, "endpoint")
        missing = [s for s in REQUIRED_ENDPOINTS if s not in value]
        if missing:
            raise ValueError(
                f"missing {', '.join(missing)}; nodes have no internet egress and need these "
                "endpoints to pull images, join the cluster and log"
            )
        return value

    @field_validator("https_egress_cidrs")
    @classmethod
    def _narrow_egress(cls, value: list[ipaddress.IPv4Network]) -> list[ipaddress.IPv4Network]:
        for cidr in value:
            if cidr.prefixlen < _MIN_EGRESS_PREFIX:
                raise ValueError(
                    f"{cidr} is not a narrow rule (shorter than /{_MIN_EGRESS_PREFIX}); nodes "
                    "have no blanket egress on purpose: list the proxy or mirror ranges"
                )
        unique(value, "CIDR")
        return value

    @field_validator("flow_log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        return log_retention(value)

    @model_validator(mode="after")
    def _cross_checks(self) -> NetworkConfig:
        self._check_egress()
        if self.admin_host.enabled:
            missing = [s for s in ADMIN_HOST_ENDPOINTS if s not in self.interface_endpoints]
            if missing:
                raise FieldError(
                    "interface_endpoints",
                    f"the admin host is reached through Session Manager, which needs the "
                    f"{' and '.join(missing)} endpoint{'s' if len(missing) > 1 else ''}; add "
                    f"{', '.join(missing)} or set admin_host.enabled: false",
                )
        if self.cluster_cidr is not None:
            if self.cluster_cidr.overlaps(self.vpc_cidr):
                raise FieldError(
                    "cluster_cidr",
                    f"{self.cluster_cidr} overlaps vpc_cidr {self.vpc_cidr}; "
                    "choose a disjoint secondary range",
                )
            primary_block = next(b for b in RFC1918 if self.vpc_cidr.subnet_of(b))
            allowed = [primary_block, ipaddress.IPv4Network("100.64.0.0/10")]
            if not any(self.cluster_cidr.subnet_of(block) for block in allowed):
                raise FieldError(
                    "cluster_cidr",
                    f"{self.cluster_cidr} cannot be added to a VPC whose primary "
                    f"CIDR is in {primary_block}; use a range in {primary_block} or 100.64.0.0/10",
                )
        return self

    def _check_egress(self) -> None:
        """NAT gateways exist only where a security group lets traffic reach them: egress: nat
        with the HTTPS rules that use them; egress: closed with neither."""
        azs = len(self.availability_zones)
        if self.egress == "closed":
            if self.nat_gateways:
                raise FieldError(
                    "nat_gateways",
                    f"{self.nat_gateways} NAT gateways with egress: closed would carry no "
                    "traffic; remove nat_gateways, or set egress: nat with https_egress_cidrs",
                )
            if self.https_egress_cidrs:
                raise FieldError(
                    "https_egress_cidrs",
                    "egress: closed has no route out of the VPC for these rules; set egress: "
                    "nat (with nat_gateways) or remove https_egress_cidrs",
                )
            return
        if not 1 <= self.nat_gateways <= azs:
            raise FieldError(
                "nat_gateways",
                f"{self.nat_gateways} NAT gateways for {azs} AZs with egress: nat; use 1 to "
                f"{azs} (at most one per AZ)",
            )
        if not self.https_egress_cidrs:
            raise FieldError(
                "https_egress_cidrs",
                "egress: nat without https_egress_cidrs: no security group lets traffic reach "
                "the NAT gateways; list the proxy or mirror ranges, or set egress: closed",
            )


def _unknown_service(service: str) -> str:
    close = difflib.get_close_matches(service, sorted(INTERFACE_ENDPOINT_SERVICES), n=3)
    guess = f" (did you mean {' or '.join(close)}?)" if close else ""
    return (
        f"{service!r} is not a known interface endpoint service{guess}; use one listed in "
        "config/regions.py (add it there if AWS offers com.amazonaws.<region>."
        f"{service})"
    )
