"""Pinned container images of the HyperPod dependency components and of the platform's own
team-directory Job, and the rules that tell, before synth, whether the cluster's nodes can
pull them.

Pure data and functions: the config schema validates with it, and
`platform_constructs.hyperpod_dependencies` renders the manifests from it.

Component names are the keys `eks.image_overrides` accepts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

HEALTH_MONITORING_AGENT = "health-monitoring-agent"
NVIDIA_DEVICE_PLUGIN = "nvidia-device-plugin"
EFA_DEVICE_PLUGIN = "aws-efa-k8s-device-plugin"
NEURON_DEVICE_PLUGIN = "neuron-device-plugin"
# The Job that creates each team's directories on FSx (platform_constructs/team_workspace.py).
TEAM_DIRECTORIES = "team-directories"
COMPONENTS: tuple[str, ...] = (
    HEALTH_MONITORING_AGENT,
    NVIDIA_DEVICE_PLUGIN,
    EFA_DEVICE_PLUGIN,
    NEURON_DEVICE_PLUGIN,
    TEAM_DIRECTORIES,
)

# Exact tags, each the one the HyperPod dependency chart pins (aws/sagemaker-hyperpod-cli
# helm_chart/HyperPodHelmChart, checked 2026-11-23 at 011ca92). HyperPod's health monitoring
# agent is published per Region by AWS (account per Region below); the EFA plugin comes from
# the Region's EKS image registry. Both are private ECR registries in the node's Region,
# pulled through the VPC's ECR endpoints (layers through the S3 gateway endpoint).
# The chart's default tag: charts/health-monitoring-agent/templates/_helpers.tpl (released
# with "Release new version for Health Monitoring Agent 1.0.1892.0_1.0.424.0", 2026-06-04).
HEALTH_MONITORING_AGENT_TAG = "1.0.1892.0_1.0.424.0"
HEALTH_MONITORING_AGENT_ACCOUNTS: Mapping[str, str] = {
    "us-east-1": "767398015722",
    "us-west-2": "905418368575",
    "us-east-2": "851725546812",
    "us-west-1": "011528288828",
    "eu-central-1": "211125453373",
    "eu-north-1": "654654141839",
    "eu-west-1": "533267293120",
    "eu-west-2": "011528288831",
    "ap-northeast-1": "533267052152",
    "ap-south-1": "011528288864",
    "ap-southeast-1": "905418428165",
    "ap-southeast-2": "851725636348",
    "sa-east-1": "025066253954",
}
# Every Region above serves EKS images from this account.
EKS_IMAGE_ACCOUNT = "602401143452"
# The chart depends on aws/eks-charts aws-efa-k8s-device-plugin 0.5.20 (Chart.yaml), whose
# values.yaml pins image tag v0.5.13 (aws/eks-charts stable/aws-efa-k8s-device-plugin).
EFA_DEVICE_PLUGIN_TAG = "v0.5.13"
# Registries outside the account's Region: nodes need an egress path to them, or
# eks.image_overrides naming a copy in the account's private ECR.
NVIDIA_DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.16.1"  # HyperPod chart's pin
NEURON_DEVICE_PLUGIN_IMAGE = "public.ecr.aws/neuron/neuron-device-plugin:2.19.16.0"  # ditto
# busybox has sh, mkdir, chown and chmod and nothing else; an exact version of the Docker
# Official Image, as ECR Public mirrors it.
TEAM_DIRECTORIES_IMAGE = "public.ecr.aws/docker/library/busybox:1.37.0"


@dataclass(frozen=True)
class PinnedImage:
    """An image by repository, the tag people read, and the digest that pins it: what the
    registry served for the tag when it was reviewed (`hpctl preflight` checks it is still
    served, and prints the digest of an image recorded without one)."""

    repository: str  # [registry/]path, as a reference writes it
    tag: str
    digest: str | None = None  # sha256:<64 hex>

    @property
    def reference(self) -> str:
        by_tag = f"{self.repository}:{self.tag}"
        return f"{by_tag}@{self.digest}" if self.digest else by_tag


# The training image's base (training/Dockerfile FROM names exactly this reference): the
# official PyTorch 2.11.0 / CUDA 12.8 runtime image, its multi-platform index digest.
TRAINING_BASE = "training-base"
TRAINING_BASE_IMAGE = PinnedImage(
    repository="pytorch/pytorch",
    tag="2.11.0-cuda12.8-cudnn9-runtime",
    digest="sha256:eee11b3b3872a8c838e35ef48f08b2d5def2080902c7f666831310ca1a0ef2be",
)


def platform_images(region: str) -> dict[str, PinnedImage]:
    """Every image the platform runs or builds from, for `region`: the one table of image
    pins (`pinned_images` gives the references the manifests use)."""
    images = {
        NVIDIA_DEVICE_PLUGIN: _split(NVIDIA_DEVICE_PLUGIN_IMAGE),
        NEURON_DEVICE_PLUGIN: _split(NEURON_DEVICE_PLUGIN_IMAGE),
        TEAM_DIRECTORIES: _split(TEAM_DIRECTORIES_IMAGE),
        TRAINING_BASE: TRAINING_BASE_IMAGE,
    }
    account = HEALTH_MONITORING_AGENT_ACCOUNTS.get(region)
    if account is not None:
        images[HEALTH_MONITORING_AGENT] = PinnedImage(
            f"{account}.dkr.ecr.{region}.amazonaws.com/hyperpod-health-monitoring-agent",
            HEALTH_MONITORING_AGENT_TAG,
        )
        images[EFA_DEVICE_PLUGIN] = PinnedImage(
            f"{EKS_IMAGE_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/eks/aws-efa-k8s-device-plugin",
            EFA_DEVICE_PLUGIN_TAG,
        )
    return images


def _split(reference: str) -> PinnedImage:
    by_tag, _, digest = reference.partition("@")
    repository, _, tag = by_tag.rpartition(":")
    return PinnedImage(repository, tag, digest or None)


# A private ECR registry: <12-digit account>.dkr.ecr.<region>.<partition's domain>/...
_PRIVATE_ECR = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\."
    r"(?P<domain>amazonaws\.com(\.cn)?|c2s\.ic\.gov|sc2s\.sgov\.gov)/"
)


def pinned_images(region: str) -> dict[str, str]:
    """Default image reference per cluster component for `region` (components without a
    regional image for `region` are absent: they need an override)."""
    return {
        name: image.reference
        for name, image in platform_images(region).items()
        if name in COMPONENTS
    }


def _domain(region: str) -> str:
    """The DNS domain of `region`'s partition (China: amazonaws.com.cn; ISO: their own)."""
    if region.startswith("cn-"):
        return "amazonaws.com.cn"
    if region.startswith("us-isob-"):
        return "sc2s.sgov.gov"
    if region.startswith("us-iso-"):
        return "c2s.ic.gov"
    return "amazonaws.com"


def is_private_ecr_in(image: str, region: str) -> bool:
    """Whether `image` lives in a private ECR registry of `region` (and its partition): the
    only registries the VPC's ECR endpoints serve (other Regions, other partitions and
    public registries need egress)."""
    match = _PRIVATE_ECR.match(image)
    return match is not None and match["region"] == region and match["domain"] == _domain(region)


def needed_components(*, accelerators: set[str], efa: bool, teams: bool = False) -> tuple[str, ...]:
    """The components rendered for a cluster with these devices, in `COMPONENTS` order.

    The health monitoring agent runs on NVIDIA and Neuron nodes; each device plugin only
    where its device exists; the team-directory Job where task governance has `teams`.
    """
    needed = set()
    if teams:
        needed.add(TEAM_DIRECTORIES)
    if accelerators & {"nvidia", "neuron"}:
        needed.add(HEALTH_MONITORING_AGENT)
    if "nvidia" in accelerators:
        needed.add(NVIDIA_DEVICE_PLUGIN)
    if "neuron" in accelerators:
        needed.add(NEURON_DEVICE_PLUGIN)
    if efa:
        needed.add(EFA_DEVICE_PLUGIN)
    return tuple(c for c in COMPONENTS if c in needed)


def image_problems(
    *,
    region: str,
    accelerators: set[str],
    efa: bool,
    overrides: dict[str, str],
    https_egress: bool,
    teams: bool = False,
    account: str = "<account>",
) -> list[tuple[str, str]]:
    """(field path, one-line message) for each image the cluster's nodes would fail to get.

    `accelerators`: the accelerator kinds of the configured instance types ("nvidia",
    "neuron"; others are ignored). `efa`: some instance group has EFA interfaces.
    `https_egress`: nodes have deliberate HTTPS egress (network.https_egress_cidrs), e.g.
    to a registry proxy. `teams`: task governance has teams (each gets a directory Job). `account`: the environment's account, named in messages.

    An override is the operator's explicit choice and is not judged, except one in another
    Region's or partition's private ECR: the VPC's ECR endpoints serve this Region's
    registries only, and a copy in this Region is the fix (a proxy in https_egress_cidrs
    does not excuse it: every node would pull across Regions).
    """
    defaults = pinned_images(region)
    problems: list[tuple[str, str]] = []
    for name in needed_components(accelerators=accelerators, efa=efa, teams=teams):
        if name in overrides:
            continue
        image = defaults.get(name)
        if image is None:
            problems.append(
                (
                    "eks.image_overrides",
                    f"no pinned {name} image for {region}; set eks.image_overrides.{name} "
                    "to a pinned copy in ECR",
                )
            )
        elif not https_egress and not is_private_ecr_in(image, region):
            problems.append(
                (
                    f"eks.image_overrides.{name}",
                    f"nodes have no internet egress, so {image} cannot be pulled; copy it "
                    f"into ECR and set eks.image_overrides.{name}, or allow a registry proxy "
                    "in network.https_egress_cidrs",
                )
            )
    for name, image in overrides.items():
        match = _PRIVATE_ECR.match(image)
        if match is None or is_private_ecr_in(image, region):
            continue
        if match["domain"] != _domain(region):
            where = f"{match['region']}, another partition ({match['domain']})"
        else:
            where = match["region"]
        problems.append(
            (
                f"eks.image_overrides.{name}",
                f"{image} is in the ECR of {where}, which nodes in {region} cannot pull "
                f"through this VPC's ECR endpoints; copy it into ECR in {region} "
                f"({account}.dkr.ecr.{region}.{_domain(region)}) and point the override there",
            )
        )
    return problems
