"""The EKS add-ons the platform installs: the one table of their names, pinned versions,
placement and settings.

Each stack that places add-ons asks `placed_in` for its rows and creates exactly those
(platform_constructs/eks_addons.py `place_addons`): what every node needs from its first
boot goes with the EKS cluster, before any node exists; the rest after the HyperPod cluster.
An environment may override a pin (`eks.addons`), e.g. to try an upgrade in dev first; the
schema checks overrides against the minimum here. Adding an add-on is a row here plus, where
it calls AWS APIs (a service account), its identity in `ADDON_IDENTITIES`
(platform_constructs/eks_addons.py).

Pins are builds EKS publishes for the default Kubernetes version (config/eks_versions.py),
from the "latest version for each Kubernetes version" tables of the Amazon EKS User Guide
(Manage kube-proxy, Manage CoreDNS, Assign IPs to Pods with the Amazon VPC CNI) unless a row
says otherwise.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol

from config.container_logs import ADDON_CONFIGURATION

_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-eksbuild\.(\d+)$")
VERSION_FORMAT = "vMAJOR.MINOR.PATCH-eksbuild.N"

Version = tuple[int, int, int]
# The stacks that place add-ons, by their unit name (config/names.py `PlatformNames.stack`).
AddonStack = Literal["eks", "cluster-addons", "governance", "observability"]


def parse_version(version: str) -> Version | None:
    """(major, minor, patch) of an EKS add-on version, or None if it is not one."""
    match = _VERSION.match(version)
    if not match:
        return None
    return int(match[1]), int(match[2]), int(match[3])


@dataclass(frozen=True, kw_only=True)
class ServiceAccount:
    namespace: str
    name: str


@dataclass(frozen=True, kw_only=True)
class Addon:
    """One EKS add-on.

    `stack`: where it is created.
    - `eks`: what a node needs from its first boot (pod networking, service routing, pod
      credentials, cluster DNS), created with the EKS cluster as AWS's HyperPod templates
      do (aws/sagemaker-hyperpod-cluster-setup eks/cloudformation/eks-template.yaml creates
      vpc-cni, kube-proxy, coredns and eks-pod-identity-agent with the cluster). The
      HyperPod stack depends on this stack, so no node boots before they exist. DaemonSets
      are ACTIVE with zero nodes; coredns (a Deployment) is DEGRADED until nodes come, which
      CloudFormation's AWS::EKS::Addon handler accepts as created
      (hashicorp/terraform-provider-aws#44669), so nothing waits on nodes.
    - `cluster-addons`: add-ons whose permissions name the HyperPod cluster or that AWS
      documents after it (the training operator's prerequisites list the HyperPod cluster
      and cert-manager), created after the HyperPod cluster; they too are created DEGRADED
      while continuous provisioning still brings nodes.
    - `governance` / `observability`: with the quotas whose queues it serves, or with the
      workspace it writes to.
    `service_account`: the controller's, for an add-on that calls AWS APIs through EKS Pod
    Identity. `after`: add-ons in the same stack that must exist first.
    """

    name: str
    version: str
    minimum: Version
    stack: AddonStack
    configuration: Mapping[str, Any] | None = None
    service_account: ServiceAccount | None = None
    after: tuple[str, ...] = field(default=())


# vpc-cni settings for HyperPod nodes. A HyperPod node has a single ENI, and the capacity
# plan (config/capacity.py) sizes the cluster subnets as one address per ENI slot: pods get
# secondary IPs on that ENI. Prefix delegation would take /28 blocks instead, which breaks
# the plan's arithmetic and fragments the subnets, so it is pinned off rather than left to
# a default. Network policy is on: the network policy agent enforces the team namespaces'
# NetworkPolicies (platform_constructs/team_network.py); the add-on's `enableNetworkPolicy`
# value ("Restrict Pod network traffic with Kubernetes network policies", EKS User Guide:
# VPC CNI 1.14 or later, below this table's minimum). Nothing else departs from the
# add-on defaults, which is what HyperPod expects.
VPC_CNI_CONFIGURATION: Mapping[str, Any] = {
    "enableNetworkPolicy": "true",
    "env": {"ENABLE_PREFIX_DELEGATION": "false"},
}

# The add-ons' names, for the table below and the code that refers to one (kube-proxy's build
# must match the cluster's minor; the node model counts their pods).
VPC_CNI = "vpc-cni"
KUBE_PROXY = "kube-proxy"
POD_IDENTITY_AGENT = "eks-pod-identity-agent"
COREDNS = "coredns"
CERT_MANAGER = "cert-manager"
FSX_CSI_DRIVER = "aws-fsx-csi-driver"
TRAINING_OPERATOR = "amazon-sagemaker-hyperpod-training-operator"
TASK_GOVERNANCE = "amazon-sagemaker-hyperpod-taskgovernance"
OBSERVABILITY = "amazon-sagemaker-hyperpod-observability"
CLOUDWATCH_OBSERVABILITY = "amazon-cloudwatch-observability"

# Add-on versions that first offer a feature a job may ask for (`hpctl job render` checks the
# environment's version): topology-aware scheduling needs task governance v1.2.2-eksbuild.1
# ("Using topology-aware scheduling in Amazon SageMaker HyperPod task governance", its note);
# elastic jobs need training operator v1.2 ("Using elastic training in Amazon SageMaker
# HyperPod", prerequisites).
TOPOLOGY_SCHEDULING_MINIMUM: Version = (1, 2, 2)
ELASTIC_TRAINING_MINIMUM: Version = (1, 2, 0)

# Minimums: vpc-cni 1.18.3 is the documented HyperPod minimum; the others are the oldest
# versions this project tested. Service accounts are the ones AWS documents per add-on.
_TABLE = (
    # The EKS User Guide's latest build for Kubernetes 1.29-1.35.
    Addon(
        name=VPC_CNI,
        version="v1.21.1-eksbuild.7",
        minimum=(1, 18, 3),
        stack="eks",
        configuration=VPC_CNI_CONFIGURATION,
    ),
    # Built per Kubernetes minor: must match the cluster's (the schema checks it). The EKS
    # User Guide's latest build for Kubernetes 1.34 (Manage kube-proxy, kube-proxy versions).
    Addon(name=KUBE_PROXY, version="v1.34.6-eksbuild.2", minimum=(1, 33, 0), stack="eks"),
    # EKS's default build for Kubernetes 1.34 and 1.35 alike (describe-addon-versions,
    # 2026-06 for 1.34, 2026-10 for 1.35; also pinned beside 1.35 in
    # awslabs/global-capacity-orchestrator-on-aws, gco/stacks/constants.py).
    Addon(
        name=POD_IDENTITY_AGENT,
        version="v1.3.10-eksbuild.3",
        minimum=(1, 3, 0),
        stack="eks",
    ),
    # The EKS User Guide's latest build for Kubernetes 1.33, 1.34 and 1.35 alike.
    Addon(name=COREDNS, version="v1.13.2-eksbuild.4", minimum=(1, 11, 1), stack="eks"),
    # The build AWS's references install (awslabs/awsome-distributed-training hyperpod-eks-tf
    # modules/hyperpod_cluster/variables.tf; aws/sagemaker-hyperpod-cli helm_to_addon.sh).
    Addon(
        name=CERT_MANAGER,
        version="v1.18.2-eksbuild.2",
        minimum=(1, 16, 0),
        stack="cluster-addons",
    ),
    # Pinned beside Kubernetes 1.35 in awslabs/global-capacity-orchestrator-on-aws
    # (gco/stacks/constants.py); v1.6.0 predates 1.35.
    Addon(
        name=FSX_CSI_DRIVER,
        version="v1.8.0-eksbuild.2",
        minimum=(1, 2, 0),
        stack="cluster-addons",
        service_account=ServiceAccount(namespace="kube-system", name="fsx-csi-controller-sa"),
    ),
    # v1.2.1 is the default build for Kubernetes 1.28-1.35 (awslabs/awsome-distributed-
    # training, hyperpod-eks-tf modules/hyperpod_training_operator/main.tf, 2026-05).
    Addon(
        name=TRAINING_OPERATOR,
        version="v1.2.1-eksbuild.1",
        minimum=(1, 0, 0),
        stack="cluster-addons",
        service_account=ServiceAccount(
            namespace="aws-hyperpod", name="hp-training-operator-controller-manager"
        ),
        # The operator's webhooks take their certificates from cert-manager.
        after=(CERT_MANAGER,),
    ),
    # Installs Kueue and turns the scheduler config and compute quotas into Kueue queues
    # and priority classes (HyperPod task governance setup guide); calls no AWS API itself.
    Addon(
        name=TASK_GOVERNANCE,
        version="v1.6.0-eksbuild.1",
        minimum=(1, 5, 0),
        stack="governance",
    ),
    # Scrapes the cluster (DCGM, EFA, node, Kueue, training operator) and remote-writes to
    # the environment's managed Prometheus workspace; needs running nodes and the pod
    # identity agent (HyperPod observability add-on setup guide). v1.0.5 is the first
    # build that tolerates restricted nodes (the add-on's troubleshooting guide).
    Addon(
        name=OBSERVABILITY,
        version="v1.0.5-eksbuild.1",
        minimum=(1, 0, 5),
        stack="observability",
        service_account=ServiceAccount(
            namespace="hyperpod-observability",
            name="hyperpod-observability-operator-otel-collector",
        ),
    ),
    # Container logs to CloudWatch Logs (its Fluent Bit; config/container_logs.py). v5.3.1 is
    # pinned beside Kubernetes 1.35 in awslabs/global-capacity-orchestrator-on-aws
    # (gco/stacks/constants.py), and it is the last line before 6.0, which turns on
    # OpenTelemetry Container Insights (node exporter, kube-state-metrics, a cluster scraper)
    # by default (aws-observability/helm-charts RELEASE_NOTES). 3.1.0 is the first build that
    # takes an EKS Pod Identity (CloudWatch User Guide, add-on quick start). Fluent Bit and the
    # agent both run as `cloudwatch-agent` (the chart's DaemonSets).
    Addon(
        name=CLOUDWATCH_OBSERVABILITY,
        version="v5.3.1-eksbuild.1",
        minimum=(3, 1, 0),
        stack="observability",
        configuration=ADDON_CONFIGURATION,
        service_account=ServiceAccount(namespace="amazon-cloudwatch", name="cloudwatch-agent"),
    ),
)

ADDONS: Mapping[str, Addon] = MappingProxyType({addon.name: addon for addon in _TABLE})


class AddonVersions(Protocol):
    """Where an environment's add-on versions come from (`config.schema.EksConfig`)."""

    def addon_version(self, name: str) -> str: ...


def placed_in(
    stack: AddonStack, versions: AddonVersions, *, table: Mapping[str, Addon] = ADDONS
) -> tuple[Addon, ...]:
    """The rows of `table` that `stack` creates, in table order, each at the version the
    environment installs (its `eks.addons` override, else the pin)."""
    return tuple(
        dataclasses.replace(addon, version=versions.addon_version(addon.name))
        for addon in table.values()
        if addon.stack == stack
    )
