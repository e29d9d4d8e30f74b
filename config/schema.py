"""The typed schema every environment file (config/<env>.yaml) must satisfy.

One model per concern; cross-field rules live in the model that owns both fields. Every
rule raises a message that says what is wrong and how to fix it; `config.loader` turns
them into one line per problem, prefixed with the field's dotted path.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from config.images import image_problems
from config.instance_types import INSTANCE_TYPES, InterfaceType, known_instance_types

# Kubernetes versions HyperPod EKS orchestration supports that the platform's bundled
# kubectl (1.32, see platform_constructs/eks_kubectl.py) can manage: kubectl supports API
# servers one minor version older or newer than itself.
SUPPORTED_KUBERNETES_VERSIONS: tuple[str, ...] = ("1.31", "1.32", "1.33")

# Add-ons pinned in config, with the oldest version the project supports. vpc-cni 1.18.3 is
# the documented HyperPod minimum; the others are the oldest versions this project tested.
ADDON_MINIMUM_VERSIONS: dict[str, tuple[int, int, int]] = {
    "vpc-cni": (1, 18, 3),
    "coredns": (1, 11, 1),
    "kube-proxy": (1, 31, 0),
    "eks-pod-identity-agent": (1, 3, 0),
    "aws-fsx-csi-driver": (1, 2, 0),
    "cert-manager": (1, 16, 0),
    "amazon-sagemaker-hyperpod-training-operator": (1, 0, 0),
}
_ADDON_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-eksbuild\.(\d+)$")

# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS: tuple[int, ...] = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557,
    2922, 3288, 3653,
)

_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")
_PARTITION = r"aws(-cn|-us-gov|-iso|-iso-b)?"
_ROLE_ARN = re.compile(rf"^arn:{_PARTITION}:iam::\d{{12}}:role/[\w+=,.@/-]{{1,512}}$")
_TRAINING_PLAN_ARN = re.compile(
    rf"^arn:{_PARTITION}:sagemaker:(?P<region>[a-z0-9-]+):(?P<account>\d{{12}}):"
    r"training-plan/[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}$"
)
_K8S_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_K8S_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")

# Secondary VPC CIDRs AWS refuses for a given primary range (VPC User Guide, "IPv4 CIDR
# block association restrictions").
_RFC1918 = tuple(
    ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)


# Interface endpoint service names as written after "com.amazonaws.<region>." (ecr.api).
_ENDPOINT_SERVICE = re.compile(r"^[a-z0-9]+([.-][a-z0-9]+)*$")
# https_egress_cidrs is for narrow, deliberate exceptions; anything wider than a /8 (and
# 0.0.0.0/0 above all) would be blanket egress under another name.
_MIN_EGRESS_PREFIX = 8
_MIN_PUBLIC_ENDPOINT_PREFIX = 16
# FSx for Lustre metadata IOPS (SSD): 1500, 3000, 6000, then multiples of 12000 to 192000.
_METADATA_IOPS = (1500, 3000, 6000, *range(12000, 192001, 12000))


def _parse_cidr(value: object) -> ipaddress.IPv4Network:
    """CIDR syntax with a message that says what to write instead."""
    if isinstance(value, ipaddress.IPv4Network):
        return value
    text = str(value).strip()
    if "/" not in text:
        raise ValueError(f"{text!r} is not a CIDR block; write it as a.b.c.d/prefix")
    try:
        return ipaddress.IPv4Network(text)
    except ipaddress.NetmaskValueError:
        raise ValueError(f"{text!r} has an invalid prefix length; use /0 to /32") from None
    except ValueError as error:
        if "host bits set" in str(error):
            network = ipaddress.IPv4Network(text, strict=False)
            raise ValueError(f"{text} has host bits set; use {network}") from None
        raise ValueError(f"{text!r} is not a valid IPv4 CIDR block") from None


Cidr = Annotated[ipaddress.IPv4Network, BeforeValidator(_parse_cidr)]

Name = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")]
# HyperPod's instance group name rule (also what `hpctl job render` accepts).
GROUP_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
GroupName = Annotated[str, StringConstraints(pattern=GROUP_NAME_PATTERN)]


class FieldError(ValueError):
    """A rule checked on a model that belongs to one of its fields.

    `path` is relative to the model that raises it ("nat_gateways", "instance_groups[2].taints");
    the loader appends it to the model's location so the message names the exact field.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


class Strict(BaseModel):
    """Base for every config model: unknown keys are errors (typos must not pass)."""

    # strict: no silent coercion ("16" or true for a count, 24000.0 for a size).
    model_config = ConfigDict(
        extra="forbid", frozen=True, str_strip_whitespace=True, strict=True
    )


def _parse_version(version: str) -> tuple[int, int, int] | None:
    match = _ADDON_VERSION.match(version)
    if not match:
        return None
    return int(match[1]), int(match[2]), int(match[3])


def _unique(values: list, what: str) -> None:
    """Reject repeats; `what` names one item ("AZ", "endpoint")."""
    duplicates = sorted({str(v) for v in values if values.count(v) > 1})
    if duplicates:
        raise ValueError(f"listed more than once: {', '.join(duplicates)}; list each {what} once")


def _log_retention(value: int) -> int:
    if value not in LOG_RETENTION_DAYS:
        raise ValueError(
            f"{value} is not a CloudWatch Logs retention period; use one of "
            f"{', '.join(map(str, LOG_RETENTION_DAYS))}"
        )
    return value


# Interface endpoints nodes and the kubectl handler cannot work without (no internet egress).
REQUIRED_ENDPOINTS: tuple[str, ...] = (
    "ec2", "ecr.api", "ecr.dkr", "eks", "eks-auth", "lambda", "logs", "sts",
)
# Each AZ letter owns a fixed subnet slot (see config.capacity): a..h.
MAX_AZ_LETTER = "h"


# --------------------------------------------------------------------------- network


class NetworkConfig(Strict):
    vpc_cidr: Cidr = Field(
        description="Primary VPC CIDR: public subnets (NAT) and small infrastructure subnets."
    )
    cluster_cidr: Cidr | None = Field(
        default=None,
        description="Secondary CIDR carved into the large private cluster subnets, one per AZ. "
        "Without it the cluster subnets come from the upper half of vpc_cidr.",
    )
    availability_zones: list[str] = Field(min_length=2, max_length=6)
    nat_gateways: int = Field(ge=1, le=6)
    public_subnet_prefix: int = Field(default=24, ge=16, le=28)
    infra_subnet_prefix: int = Field(default=24, ge=16, le=28)
    cluster_subnet_prefix: int | None = Field(
        default=None,
        ge=16,
        le=28,
        description="Fixed prefix for cluster subnets; default: the largest equal split of the "
        "cluster CIDR (subnets cannot grow later, so give them all the room).",
    )
    default_headroom_percent: int = Field(default=25, ge=0, le=200)
    interface_endpoints: list[str] = Field(
        default_factory=lambda: [
            "ec2", "ecr.api", "ecr.dkr", "eks", "eks-auth", "elasticloadbalancing", "lambda",
            "logs", "monitoring", "sagemaker.api", "ssm", "ssmmessages", "ec2messages", "sts",
            "aps-workspaces", "fsx",
        ],
        description="Interface endpoints nodes use instead of internet egress.",
    )
    https_egress_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Deliberate, narrow TCP 443 egress for nodes (e.g. a proxy or mirror).",
    )
    flow_log_retention_days: int = 365

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr_size(cls, value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if not 16 <= value.prefixlen <= 28:
            raise ValueError(f"{value} has prefix /{value.prefixlen}; a VPC CIDR must be /16 to /28")
        if not any(value.subnet_of(block) for block in _RFC1918):
            raise ValueError(f"{value} is not in a private range (10/8, 172.16/12, 192.168/16)")
        return value

    @field_validator("cluster_cidr")
    @classmethod
    def _cluster_cidr_size(
        cls, value: ipaddress.IPv4Network | None
    ) -> ipaddress.IPv4Network | None:
        if value is not None and not 16 <= value.prefixlen <= 28:
            raise ValueError(f"{value} has prefix /{value.prefixlen}; a VPC CIDR must be /16 to /28")
        return value

    @field_validator("availability_zones")
    @classmethod
    def _unique_azs(cls, value: list[str]) -> list[str]:
        _unique(value, "AZ")
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
        if "s3" in value:
            raise ValueError(
                "'s3' is served by the S3 gateway endpoint the network always creates; "
                "remove it from interface_endpoints"
            )
        _unique(value, "endpoint")
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
        _unique(value, "CIDR")
        return value

    @field_validator("flow_log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        return _log_retention(value)

    @model_validator(mode="after")
    def _cross_checks(self) -> NetworkConfig:
        if self.nat_gateways > len(self.availability_zones):
            raise FieldError(
                "nat_gateways",
                f"{self.nat_gateways} NAT gateways for "
                f"{len(self.availability_zones)} AZs; use at most one per AZ"
            )
        if self.cluster_cidr is not None:
            if self.cluster_cidr.overlaps(self.vpc_cidr):
                raise FieldError(
                    "cluster_cidr",
                    f"{self.cluster_cidr} overlaps vpc_cidr {self.vpc_cidr}; "
                    "choose a disjoint secondary range"
                )
            primary_block = next(b for b in _RFC1918 if self.vpc_cidr.subnet_of(b))
            allowed = [primary_block, ipaddress.IPv4Network("100.64.0.0/10")]
            if not any(self.cluster_cidr.subnet_of(block) for block in allowed):
                raise FieldError(
                    "cluster_cidr",
                    f"{self.cluster_cidr} cannot be added to a VPC whose primary "
                    f"CIDR is in {primary_block}; use a range in {primary_block} or 100.64.0.0/10"
                )
        return self


# --------------------------------------------------------------------------- storage


class DataRepositoryConfig(Strict):
    file_system_path: str = Field(default="/data", pattern=r"^/[A-Za-z0-9_./-]*$")
    bucket_prefix: str = Field(default="", pattern=r"^([A-Za-z0-9_.-]+/)*$")
    auto_import: list[Literal["NEW", "CHANGED", "DELETED"]] = Field(
        default_factory=lambda: ["NEW", "CHANGED", "DELETED"]
    )
    auto_export: list[Literal["NEW", "CHANGED", "DELETED"]] = Field(
        default_factory=lambda: ["NEW", "CHANGED", "DELETED"]
    )

    @field_validator("file_system_path")
    @classmethod
    def _normalized_path(cls, value: str) -> str:
        if "//" in value or "/../" in f"{value}/" or "/./" in f"{value}/":
            raise ValueError(
                f"{value!r} is not a normalized path; write it without '//', '.' or '..' "
                "(e.g. /data)"
            )
        return value

    @field_validator("auto_import", "auto_export")
    @classmethod
    def _unique_events(cls, value: list[str]) -> list[str]:
        _unique(value, "event")
        return value


class FsxConfig(Strict):
    availability_zone: str = Field(
        description="The AZ of the file system: fixed at creation (moving it replaces the file "
        "system). Training plans must be in this AZ so training I/O and EFA stay in one AZ."
    )
    storage_capacity_gib: int = Field(ge=1200, le=2_000_000)
    throughput_per_tib: Literal[125, 250, 500, 1000]
    data_compression: Literal["LZ4", "NONE"] = "LZ4"
    weekly_maintenance_start: str = Field(
        default="7:03:00",
        pattern=r"^[1-7]:([01]\d|2[0-3]):[0-5]\d$",
        description="d:HH:MM in UTC, 1 = Monday.",
    )
    efa_enabled: bool = Field(
        default=False,
        description="EFA and GPUDirect Storage. Fixed at creation (changing it replaces the "
        "file system) and, once on, throughput_per_tib can no longer change.",
    )
    metadata_iops: int | None = Field(
        default=None,
        description="Provisioned metadata IOPS; default: AUTOMATIC mode (scales with capacity).",
    )
    data_repository: DataRepositoryConfig = Field(default_factory=DataRepositoryConfig)

    @field_validator("metadata_iops")
    @classmethod
    def _metadata_iops(cls, value: int | None) -> int | None:
        if value is not None and value not in _METADATA_IOPS:
            raise ValueError(
                f"{value} is not an FSx for Lustre metadata IOPS value; use 1500, 3000, 6000 "
                "or a multiple of 12000 up to 192000 (or leave it out for AUTOMATIC)"
            )
        return value

    @field_validator("storage_capacity_gib")
    @classmethod
    def _persistent2_capacity(cls, value: int) -> int:
        if value != 1200 and value % 2400 != 0:
            raise ValueError(
                f"{value} GiB is not a PERSISTENT_2 size; use 1200 or a multiple of 2400"
            )
        return value


class BucketsConfig(Strict):
    checkpoint_noncurrent_days: int = Field(default=7, ge=1, le=365)
    data_noncurrent_days: int = Field(
        default=30,
        ge=1,
        le=3653,
        description="Days an overwritten or deleted data object (e.g. re-exported by FSx) "
        "stays recoverable.",
    )
    access_log_retention_days: int = Field(default=365, ge=1, le=3653)


class StorageConfig(Strict):
    fsx: FsxConfig
    buckets: BucketsConfig = Field(default_factory=BucketsConfig)


# --------------------------------------------------------------------------- eks


class EksConfig(Strict):
    kubernetes_version: str
    admin_role_arns: list[str] = Field(min_length=1)
    public_access_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Empty: the API endpoint is private only.",
    )
    addons: dict[str, str]
    log_retention_days: int = Field(
        default=365, description="Retention of the control-plane log group (all log types)."
    )
    image_overrides: dict[
        Literal[
            "health-monitoring-agent",
            "nvidia-device-plugin",
            "aws-efa-k8s-device-plugin",
            "neuron-device-plugin",
        ],
        str,
    ] = Field(
        default_factory=dict,
        description="Replace the pinned image of a HyperPod dependency, e.g. with a copy in the "
        "account's ECR when nodes cannot reach the upstream registry. Pin a tag or a digest.",
    )

    @field_validator("kubernetes_version")
    @classmethod
    def _k8s_supported(cls, value: str) -> str:
        if value not in SUPPORTED_KUBERNETES_VERSIONS:
            raise ValueError(
                f"{value!r} is not supported by HyperPod; use one of "
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
    def _no_open_endpoint(
        cls, value: list[ipaddress.IPv4Network]
    ) -> list[ipaddress.IPv4Network]:
        for cidr in value:
            if cidr.prefixlen < _MIN_PUBLIC_ENDPOINT_PREFIX:
                raise ValueError(
                    f"{cidr} opens the API endpoint to a large part of the internet (shorter "
                    f"than /{_MIN_PUBLIC_ENDPOINT_PREFIX}); list your office or VPN CIDRs"
                )
        _unique(value, "CIDR")
        return value

    @field_validator("addons")
    @classmethod
    def _addon_versions(cls, value: dict[str, str]) -> dict[str, str]:
        missing = sorted(set(ADDON_MINIMUM_VERSIONS) - set(value))
        if missing:
            raise ValueError(f"missing pinned versions for {', '.join(missing)}; pin every add-on")
        for name, version in value.items():
            if name not in ADDON_MINIMUM_VERSIONS:
                raise ValueError(
                    f"unknown add-on {name!r}; known add-ons: {', '.join(sorted(ADDON_MINIMUM_VERSIONS))}"
                )
            parsed = _parse_version(version)
            if parsed is None:
                raise ValueError(
                    f"{name}: {version!r} is not an EKS add-on version (vMAJOR.MINOR.PATCH-eksbuild.N)"
                )
            minimum = ADDON_MINIMUM_VERSIONS[name]
            if parsed < minimum:
                raise ValueError(
                    f"{name}: {version} is older than the supported minimum "
                    f"v{'.'.join(map(str, minimum))}; upgrade the pin"
                )
        return value

    @field_validator("log_retention_days")
    @classmethod
    def _log_retention(cls, value: int) -> int:
        return _log_retention(value)

    @field_validator("image_overrides")
    @classmethod
    def _pinned_images(cls, value: dict[str, str]) -> dict[str, str]:
        # registry[:port]/repository[/...] then an exact tag or a sha256 digest.
        reference = re.compile(
            r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+"
            r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$"
        )
        for component, image in value.items():
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
    def _kube_proxy_matches_cluster(self) -> EksConfig:
        version = self.addons.get("kube-proxy")
        parsed = _parse_version(version) if version else None
        if parsed is not None and f"{parsed[0]}.{parsed[1]}" != self.kubernetes_version:
            raise FieldError(
                "addons.kube-proxy",
                f"{version} is built for Kubernetes {parsed[0]}.{parsed[1]} but kubernetes_version "
                f"is {self.kubernetes_version}; pin the kube-proxy build for the cluster's minor version",
            )
        return self


# --------------------------------------------------------------------------- hyperpod


class TrainingPlanConfig(Strict):
    arn: str
    availability_zone: str

    @field_validator("arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        if not _TRAINING_PLAN_ARN.match(value):
            raise ValueError(
                f"{value!r} is not a training plan ARN "
                "(arn:aws:sagemaker:<region>:<account>:training-plan/<name>)"
            )
        return value

    @property
    def region(self) -> str:
        match = _TRAINING_PLAN_ARN.match(self.arn)
        assert match is not None  # validated above
        return match["region"]

    @property
    def account(self) -> str:
        match = _TRAINING_PLAN_ARN.match(self.arn)
        assert match is not None
        return match["account"]


class TaintConfig(Strict):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    @staticmethod
    def reserved_domain(key: str) -> str | None:
        """The reserved domain `key` is prefixed with, if any (node labels share the rule).

        Key prefixes (the DNS domain before the "/") owned by someone else: HyperPod sets its
        own node labels and taints (health status, instance group, deep health checks) under
        sagemaker.amazonaws.com and would fight over them; Kubernetes reserves kubernetes.io
        and k8s.io for its core components. Subdomains belong to the same owner.
        """
        if "/" not in key:
            return None
        prefix = key.split("/", 1)[0].lower()
        for domain in ("sagemaker.amazonaws.com", "kubernetes.io", "k8s.io"):
            if prefix == domain or prefix.endswith(f".{domain}"):
                return domain
        return None

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not _K8S_LABEL_KEY.match(value):
            raise ValueError(f"{value!r} is not a valid Kubernetes taint key")
        domain = cls.reserved_domain(value)
        if domain is not None:
            raise ValueError(
                f"{value!r} uses the reserved prefix {domain}/ (set by HyperPod or "
                "Kubernetes itself); use a key under your own domain, e.g. example.com/dedicated"
            )
        return value

    @field_validator("value")
    @classmethod
    def _value(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError("an empty taint value is not allowed; leave value out instead")
        if value is not None and not _K8S_LABEL_VALUE.match(value):
            raise ValueError(f"{value!r} is not a valid Kubernetes taint value")
        return value


class InstanceGroupConfig(Strict):
    name: GroupName
    instance_type: str
    count: int = Field(ge=0, le=6758)
    min_count: int | None = Field(default=None, ge=0)
    threads_per_core: Literal[1, 2] = 1
    ebs_volume_gib: int = Field(default=500, ge=1, le=16384)
    deep_health_checks: list[Literal["InstanceStress", "InstanceConnectivity"]] = Field(
        default_factory=list
    )
    labels: dict[str, str] = Field(default_factory=dict)
    # HyperPod's KubernetesConfig accepts at most 50 taints per group (checked below).
    taints: list[TaintConfig] = Field(default_factory=list)
    training_plan: TrainingPlanConfig | None = None
    network_interface: InterfaceType | None = Field(
        default=None, description="efa or efa-only; default efa where the type has EFA."
    )
    headroom_nodes: int | None = Field(
        default=None,
        ge=0,
        description="Spare addresses for replacements and rolling updates, in nodes; default "
        "network.default_headroom_percent of count (at least 1).",
    )

    @field_validator("instance_type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in INSTANCE_TYPES:
            raise ValueError(
                f"unknown instance type {value!r}; known types: {', '.join(known_instance_types())}"
            )
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            if not _K8S_LABEL_KEY.match(key):
                raise ValueError(f"{key!r} is not a valid Kubernetes label key")
            if not _K8S_LABEL_VALUE.match(label):
                raise ValueError(f"{key}: {label!r} is not a valid Kubernetes label value")
            domain = TaintConfig.reserved_domain(key)
            if domain is not None:
                raise ValueError(
                    f"{key!r} uses the reserved prefix {domain}/ (set by HyperPod or "
                    "Kubernetes itself); use a key under your own domain, e.g. example.com/team"
                )
        return value

    @field_validator("taints", mode="before")
    @classmethod
    def _taint_count(cls, value: object) -> object:
        if isinstance(value, list) and len(value) > 50:
            raise ValueError(f"{len(value)} taints; HyperPod accepts at most 50 per group")
        return value

    @field_validator("taints")
    @classmethod
    def _unique_taints(cls, value: list[TaintConfig]) -> list[TaintConfig]:
        # Kubernetes rejects a node whose taints repeat a key with the same effect.
        seen: set[tuple[str, str]] = set()
        for taint in value:
            if (taint.key, taint.effect) in seen:
                raise ValueError(
                    f"{taint.key} with effect {taint.effect} appears more than once; "
                    "list each key/effect pair once"
                )
            seen.add((taint.key, taint.effect))
        return value

    @field_validator("deep_health_checks")
    @classmethod
    def _unique_checks(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists a check more than once; list each check once")
        return value

    @model_validator(mode="after")
    def _group_rules(self) -> InstanceGroupConfig:
        instance = INSTANCE_TYPES[self.instance_type]
        if self.min_count is not None and self.min_count > self.count:
            raise FieldError(
                "min_count",
                f"{self.min_count} is more than count {self.count}; "
                "lower min_count or raise count"
            )
        if self.network_interface is not None and not instance.supports_interface(
            self.network_interface
        ):
            supported = [i for i in ("efa", "efa-only") if instance.supports_interface(i)]  # type: ignore[arg-type]
            fix = f"use {' or '.join(supported)}" if supported else "remove network_interface"
            raise FieldError(
                "network_interface",
                f"{self.instance_type} does not support "
                f"{self.network_interface!r}; {fix}"
            )
        if self.taints and self.deep_health_checks:
            raise FieldError(
                "taints",
                "custom taints cannot be combined with deep_health_checks (HyperPod "
                "taints nodes while it checks them); remove the taints or the checks"
            )
        if self.deep_health_checks and instance.accelerator == "none":
            raise FieldError(
                "deep_health_checks",
                f"{self.instance_type} has no accelerators to check; "
                "remove deep_health_checks"
            )
        return self

    @property
    def interface(self) -> InterfaceType | None:
        """The EFA interface type in effect (None for types without EFA)."""
        if self.network_interface is not None:
            return self.network_interface
        return "efa" if INSTANCE_TYPES[self.instance_type].supports_efa else None

    @property
    def availability_zone(self) -> str | None:
        return self.training_plan.availability_zone if self.training_plan else None


class TieredStorageConfig(Strict):
    enabled: bool = False
    # The API type accepts 0-100, but HyperPod's managed tiered checkpointing setup guide
    # gives 20-100 as the range for the in-memory tier: fail here, not mid-deploy.
    memory_percent: int = Field(
        default=20,
        ge=20,
        le=100,
        description="Share of each node's memory given to the in-memory checkpoint tier (20-100).",
    )

    @field_validator("memory_percent", mode="before")
    @classmethod
    def _memory_percent(cls, value: object) -> object:
        # Before the bounds above, so the message gives the range and the default.
        if isinstance(value, int) and not isinstance(value, bool) and not 20 <= value <= 100:
            raise ValueError(
                f"{value} is outside 20-100, the range managed tiered checkpointing accepts; "
                "use 20 (the default) or more"
            )
        return value


class HyperPodConfig(Strict):
    availability_zones: list[str] = Field(
        min_length=1,
        description="AZs of the cluster-level subnets, where groups without a training plan "
        "run. Fixed when the cluster is created (its VpcConfig cannot change); groups reach "
        "other AZs through their training plan's subnet.",
    )
    orchestrator: Literal["eks"] = "eks"
    node_recovery: Literal["Automatic", "None"] = "Automatic"
    node_provisioning_mode: Literal["Continuous"] | None = "Continuous"
    tiered_storage: TieredStorageConfig = Field(default_factory=TieredStorageConfig)
    autoscaling: bool = False
    instance_groups: list[InstanceGroupConfig] = Field(min_length=1, max_length=100)

    @field_validator("availability_zones")
    @classmethod
    def _unique_azs(cls, value: list[str]) -> list[str]:
        _unique(value, "AZ")
        return value

    @field_validator("instance_groups")
    @classmethod
    def _unique_names(cls, value: list[InstanceGroupConfig]) -> list[InstanceGroupConfig]:
        names = [g.name for g in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(
                f"group names must be unique; {', '.join(duplicates)} appears more than once"
            )
        return value

    @model_validator(mode="after")
    def _autoscaling_needs_continuous(self) -> HyperPodConfig:
        # HyperPod's managed Karpenter autoscaling is built on continuous provisioning (its
        # setup guide creates the cluster with NodeProvisioningMode Continuous).
        if self.autoscaling and self.node_provisioning_mode != "Continuous":
            raise FieldError(
                "autoscaling",
                "needs node_provisioning_mode: Continuous; set it or turn autoscaling off",
            )
        return self

    def groups_by_name(self) -> list[InstanceGroupConfig]:
        """Groups sorted by name: the order never depends on the order in the file."""
        return sorted(self.instance_groups, key=lambda g: g.name)


# --------------------------------------------------------------------------- environment


class EnvironmentConfig(Strict):
    environment: Name
    account: Annotated[str, StringConstraints(pattern=r"^\d{12}$")]
    region: str
    retain_stateful: bool = Field(
        description="Keep FSx, buckets and the cluster when the stack is deleted. Required in prod."
    )
    tags: dict[str, str] = Field(default_factory=dict)
    network: NetworkConfig
    storage: StorageConfig
    eks: EksConfig
    hyperpod: HyperPodConfig

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 40:
            raise ValueError(f"{len(value)} tags; keep at most 40 (AWS allows 50 and CDK adds its own)")
        for key, tag in value.items():
            if key.lower().startswith("aws:"):
                raise ValueError(f"{key!r}: the aws: prefix is reserved for AWS; drop it")
            if not 1 <= len(key) <= 128 or len(tag) > 256:
                raise ValueError(f"{key!r}: keys take 1-128 characters and values at most 256")
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not _REGION.match(value):
            raise ValueError(f"{value!r} is not an AWS region name (e.g. us-east-1)")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> EnvironmentConfig:
        network_azs = self.network.availability_zones
        for index, az in enumerate(network_azs):
            if not re.fullmatch(rf"{re.escape(self.region)}[a-z]", az):
                raise FieldError(
                    f"network.availability_zones[{index}]",
                    f"{az!r} is not an AZ of region "
                    f"{self.region} (expected {self.region}a, {self.region}b, ...)"
                )
            if az[-1] > MAX_AZ_LETTER:
                raise FieldError(
                    f"network.availability_zones[{index}]",
                    f"{az}: AZ letters a-{MAX_AZ_LETTER} own the fixed subnet slots; use an AZ "
                    f"from {self.region}a to {self.region}{MAX_AZ_LETTER}",
                )
        for index, az in enumerate(self.hyperpod.availability_zones):
            if az not in network_azs:
                raise FieldError(
                    f"hyperpod.availability_zones[{index}]",
                    f"{az} has no cluster subnet; add it to network.availability_zones "
                    f"({', '.join(network_azs)}) or remove it",
                )
        fsx_az = self.storage.fsx.availability_zone
        if fsx_az not in network_azs:
            raise FieldError(
                "storage.fsx.availability_zone",
                f"{fsx_az} has no cluster subnet; use one of {', '.join(network_azs)}",
            )
        if self.environment == "prod" and not self.retain_stateful:
            raise FieldError(
                "retain_stateful",
                "prod must retain FSx, buckets and the cluster; set it to true"
            )
        for index, group in enumerate(self.hyperpod.instance_groups):
            where = f"hyperpod.instance_groups[{index}]"
            plan = group.training_plan
            if plan is None:
                continue
            if plan.availability_zone not in network_azs:
                raise FieldError(
                    f"{where}.training_plan.availability_zone",
                    f"{plan.availability_zone} (group {group.name}) has no "
                    f"cluster subnet; add it to network.availability_zones "
                    f"({', '.join(network_azs)})"
                )
            if plan.region != self.region or plan.account != self.account:
                raise FieldError(
                    f"{where}.training_plan.arn",
                    f"plan is in {plan.account}/{plan.region}, the "
                    f"environment in {self.account}/{self.region}; use a plan of this account and region"
                )
            # FSx for Lustre lives in one AZ and EFA does not cross AZs: capacity bought
            # elsewhere would read its data cross-AZ and could not join the other groups' jobs.
            if plan.availability_zone != fsx_az:
                raise FieldError(
                    f"{where}.training_plan.availability_zone",
                    f"{plan.availability_zone} (group {group.name}) differs from "
                    f"storage.fsx.availability_zone {fsx_az} (FSx and EFA stay in one AZ); "
                    f"buy the plan in {fsx_az}",
                )
        for path, message in image_problems(
            region=self.region,
            accelerators={INSTANCE_TYPES[g.instance_type].accelerator for g in self.hyperpod.instance_groups},
            efa=any(g.interface is not None for g in self.hyperpod.instance_groups),
            overrides=dict(self.eks.image_overrides),
            https_egress=bool(self.network.https_egress_cidrs),
        ):
            raise FieldError(path, message)
        return self

    @property
    def training_availability_zone(self) -> str:
        """Where FSx and all training-plan capacity live (storage.fsx.availability_zone)."""
        return self.storage.fsx.availability_zone
