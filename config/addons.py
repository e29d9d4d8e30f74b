"""The EKS add-ons the platform installs: the one table of their names, pinned versions,
placement and settings.

The platform plan (config/plan.py `PlatformPlan.addons_in`) hands each stack that places
add-ons its installed rows, and the stack creates exactly those
(platform_constructs/eks_addons.py `place_addons`): what every node needs from its first
boot goes with the EKS cluster, before any node exists; the rest after the HyperPod cluster.
An environment may override a pin (`eks.addons`), e.g. to try an upgrade in dev first; the
schema checks overrides against the minimum here. Adding an add-on is one row here: its pods
(what the node model counts on every node, config/node_model.py) and, where it calls AWS APIs,
its identity (the service account and what it may do; platform_constructs/eks_addons.py turns
it into an IAM role).

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
from config.pods import PodRequests

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


# The session tags EKS Pod Identity adds to every AssumeRole request it makes for a pod (EKS
# User Guide, "Grant Pods access to AWS resources based on tags": list of session tags). A
# role's trust may only test these: EKS documents no other key for its requests.
POD_IDENTITY_SESSION_TAGS = (
    "eks-cluster-arn",
    "eks-cluster-name",
    "kubernetes-namespace",
    "kubernetes-service-account",
    "kubernetes-pod-name",
    "kubernetes-pod-uid",
)


# What an identity's permissions are granted on: "*" (actions that have no resource type) or
# a resource the placing stack gives its add-on identities (eks_addons.py `IdentityContext`).
GrantTarget = Literal["*", "hyperpod_cluster_arn", "workspace_arn", "container_log_group_arns"]


@dataclass(frozen=True, kw_only=True)
class AddonIdentity:
    """What an add-on's controller may do in AWS, through EKS Pod Identity: `actions` on
    `resources`, as `service_account`. `construct_id`: the add-on's construct, part of the
    logical ID of everything in it, so it never changes once deployed. `unscoped_reason`: why
    the grant is on "*" (acknowledges the cdk-nag wildcard finding on the identity's role)."""

    service_account: ServiceAccount
    construct_id: str
    description: str
    actions: tuple[str, ...]
    resources: GrantTarget
    unscoped_reason: str | None = None


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
    `daemonsets`, `deployments`: the pods it runs, at their requests (every row declares
    some). `identity`: the controller's, for an add-on that calls AWS APIs. `after`: add-ons
    in the same stack that must exist first.
    """

    name: str
    version: str
    minimum: Version
    stack: AddonStack
    daemonsets: tuple[PodRequests, ...] = ()
    deployments: tuple[PodRequests, ...] = ()
    configuration: Mapping[str, Any] | None = None
    identity: AddonIdentity | None = None
    after: tuple[str, ...] = field(default=())

    @property
    def service_account(self) -> ServiceAccount | None:
        return self.identity.service_account if self.identity is not None else None

    @property
    def pods(self) -> tuple[PodRequests, ...]:
        return (*self.daemonsets, *self.deployments)


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
# versions this project tested. Service accounts are the ones AWS documents per add-on; pods
# are at their documented default requests (an allowance where none is documented).
_TABLE = (
    # The EKS User Guide's latest build for Kubernetes 1.29-1.35.
    Addon(
        name=VPC_CNI,
        version="v1.21.1-eksbuild.7",
        minimum=(1, 18, 3),
        stack="eks",
        configuration=VPC_CNI_CONFIGURATION,
        # aws-node: 25m CPU (aws/amazon-vpc-cni-k8s charts/aws-vpc-cni/values.yaml
        # `resources.requests`); its network-policy agent container is counted at the same 25m.
        daemonsets=(
            PodRequests(
                name="aws-node",
                cpu_millicores=50,
                memory_mib=0,
                source="amazon-vpc-cni-k8s chart values: aws-node requests cpu 25m "
                "(+25m node agent)",
            ),
        ),
    ),
    # Built per Kubernetes minor: must match the cluster's (the schema checks it). The EKS
    # User Guide's latest build for Kubernetes 1.34 (Manage kube-proxy, kube-proxy versions).
    Addon(
        name=KUBE_PROXY,
        version="v1.34.6-eksbuild.2",
        minimum=(1, 33, 0),
        stack="eks",
        daemonsets=(
            PodRequests(
                name="kube-proxy",
                cpu_millicores=100,
                memory_mib=0,
                source="the EKS kube-proxy add-on DaemonSet: requests cpu 100m",
            ),
        ),
    ),
    # EKS's default build for Kubernetes 1.34 and 1.35 alike (describe-addon-versions,
    # 2026-06 for 1.34, 2026-10 for 1.35; also pinned beside 1.35 in
    # awslabs/global-capacity-orchestrator-on-aws, gco/stacks/constants.py).
    Addon(
        name=POD_IDENTITY_AGENT,
        version="v1.3.10-eksbuild.3",
        minimum=(1, 3, 0),
        stack="eks",
        daemonsets=(
            PodRequests(
                name="eks-pod-identity-agent",
                cpu_millicores=0,
                memory_mib=0,
                source="aws/eks-pod-identity-agent charts values.yaml: resources {}",
            ),
        ),
    ),
    # The EKS User Guide's latest build for Kubernetes 1.33, 1.34 and 1.35 alike.
    Addon(
        name=COREDNS,
        version="v1.13.2-eksbuild.4",
        minimum=(1, 11, 1),
        stack="eks",
        deployments=(
            PodRequests(
                name="coredns",
                cpu_millicores=100,
                memory_mib=70,
                replicas=2,
                source="Amazon EKS User Guide, Manage CoreDNS: 2 replicas, requests 100m / 70Mi",
            ),
        ),
    ),
    # The build AWS's references install (awslabs/awsome-distributed-training hyperpod-eks-tf
    # modules/hyperpod_cluster/variables.tf; aws/sagemaker-hyperpod-cli helm_to_addon.sh).
    Addon(
        name=CERT_MANAGER,
        version="v1.18.2-eksbuild.2",
        minimum=(1, 16, 0),
        stack="cluster-addons",
        deployments=(
            PodRequests(
                name="cert-manager",
                cpu_millicores=0,
                memory_mib=0,
                replicas=3,  # controller, cainjector, webhook
                source="cert-manager chart values: resources {} for all three",
            ),
        ),
    ),
    # Pinned beside Kubernetes 1.35 in awslabs/global-capacity-orchestrator-on-aws
    # (gco/stacks/constants.py); v1.6.0 predates 1.35.
    Addon(
        name=FSX_CSI_DRIVER,
        version="v1.8.0-eksbuild.2",
        minimum=(1, 2, 0),
        stack="cluster-addons",
        # fsx-plugin 10m/40Mi, node-driver-registrar 10m/32Mi, liveness-probe 10m/32Mi.
        daemonsets=(
            PodRequests(
                name="fsx-csi-node",
                cpu_millicores=30,
                memory_mib=104,
                source="kubernetes-sigs/aws-fsx-csi-driver charts values.yaml: node + sidecars",
            ),
        ),
        # fsx-plugin 10m/40Mi + provisioner, resizer, liveness-probe 10m/32Mi each.
        deployments=(
            PodRequests(
                name="fsx-csi-controller",
                cpu_millicores=40,
                memory_mib=136,
                replicas=2,
                source="kubernetes-sigs/aws-fsx-csi-driver charts values.yaml: controller + "
                "sidecars",
            ),
        ),
        # Volumes are provisioned statically (the platform owns the file system), so the
        # controller never creates or deletes file systems: it may only describe them.
        # DescribeFileSystems has no resource type (service authorization reference, Amazon
        # FSx): a grant on one file system's ARN never matches, so it is granted on "*".
        identity=AddonIdentity(
            service_account=ServiceAccount(namespace="kube-system", name="fsx-csi-controller-sa"),
            construct_id="FsxCsiDriver",
            description="FSx CSI controller: describe the account's file systems",
            actions=("fsx:DescribeFileSystems",),
            resources="*",
            unscoped_reason="fsx:DescribeFileSystems supports no resource-level permissions; "
            "the controller only reads file system descriptions.",
        ),
    ),
    # v1.2.1 is the default build for Kubernetes 1.28-1.35 (awslabs/awsome-distributed-
    # training, hyperpod-eks-tf modules/hyperpod_training_operator/main.tf, 2026-05).
    Addon(
        name=TRAINING_OPERATOR,
        version="v1.2.1-eksbuild.1",
        minimum=(1, 0, 0),
        stack="cluster-addons",
        deployments=(
            PodRequests(
                name="hp-training-operator-controller-manager",
                cpu_millicores=10,
                memory_mib=64,
                source="allowance: the kubebuilder manager default; the add-on documents none",
            ),
        ),
        # The operator reads the HyperPod node records to map pods to nodes and their health.
        # AWS documents one permission for it (the AmazonSageMakerHyperPodTrainingOperatorAccess
        # managed policy grants sagemaker:DescribeClusterNode); granted on this platform's
        # HyperPod cluster only.
        identity=AddonIdentity(
            service_account=ServiceAccount(
                namespace="aws-hyperpod", name="hp-training-operator-controller-manager"
            ),
            construct_id="TrainingOperator",
            description="HyperPod training operator: describe the HyperPod cluster's nodes",
            actions=("sagemaker:DescribeClusterNode",),
            resources="hyperpod_cluster_arn",
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
        deployments=(
            PodRequests(
                name="kueue-controller-manager",
                cpu_millicores=500,
                memory_mib=512,
                source="kubernetes-sigs/kueue config/components/manager: requests 500m / 512Mi",
            ),
        ),
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
        # The add-on documents no requests for its exporters (node, DCGM, EFA) or its
        # operator; these allowances keep room for them until they are read from a running
        # cluster.
        daemonsets=(
            PodRequests(
                name="hyperpod-observability-exporters",
                cpu_millicores=300,
                memory_mib=512,
                source="allowance: the observability add-on documents no requests",
            ),
        ),
        deployments=(
            PodRequests(
                name="hyperpod-observability-operator",
                cpu_millicores=250,
                memory_mib=512,
                source="allowance: the observability add-on documents no requests",
            ),
        ),
        # The collector remote-writes to the environment's workspace and nowhere else.
        identity=AddonIdentity(
            service_account=ServiceAccount(
                namespace="hyperpod-observability",
                name="hyperpod-observability-operator-otel-collector",
            ),
            construct_id="ObservabilityAddon",
            description="HyperPod observability collector: remote write to this workspace",
            actions=("aps:RemoteWrite",),
            resources="workspace_arn",
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
        # Its chart's values (v5.x; they tolerate every taint): the CloudWatch agent and Fluent
        # Bit. The DCGM exporter and Neuron monitor are off (config/container_logs.py).
        daemonsets=(
            PodRequests(
                name="cloudwatch-agent",
                cpu_millicores=250,
                memory_mib=128,
                source="aws-observability/helm-charts amazon-cloudwatch-observability "
                "values.yaml: agent.resources.requests 250m / 128Mi",
            ),
            PodRequests(
                name="fluent-bit",
                cpu_millicores=50,
                memory_mib=25,
                source="aws-observability/helm-charts amazon-cloudwatch-observability "
                "values.yaml: containerLogs.fluentBit.resources.requests 50m / 25Mi",
            ),
        ),
        deployments=(
            PodRequests(
                name="amazon-cloudwatch-observability-controller-manager",
                cpu_millicores=100,
                memory_mib=64,
                source="aws-observability/helm-charts amazon-cloudwatch-observability "
                "values.yaml: manager.resources.requests 100m / 64Mi",
            ),
        ),
        # Fluent Bit writes the container log groups the platform created and nothing else:
        # its cloudwatch_logs output with auto_create_group calls CreateLogGroup (it exists
        # already: the call only confirms it), then CreateLogStream, DescribeLogStreams and
        # PutLogEvents. The agent sends no metrics (config/container_logs.py), so none of the
        # rest of AWS's CloudWatchAgentServerPolicy is granted. CloudWatch Logs encrypts with
        # the groups' key: the writer needs no KMS permission.
        identity=AddonIdentity(
            service_account=ServiceAccount(namespace="amazon-cloudwatch", name="cloudwatch-agent"),
            construct_id="CloudWatchObservability",
            description="CloudWatch Observability Fluent Bit: write the container log groups",
            actions=(
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:DescribeLogStreams",
                "logs:PutLogEvents",
            ),
            resources="container_log_group_arns",
        ),
    ),
)


def _owning_its_pods(addon: Addon) -> Addon:
    """`addon` with its own name on each of its pods (the node model counts a pod only where
    its add-on is installed)."""
    return dataclasses.replace(
        addon,
        daemonsets=tuple(dataclasses.replace(p, addon=addon.name) for p in addon.daemonsets),
        deployments=tuple(dataclasses.replace(p, addon=addon.name) for p in addon.deployments),
    )


ADDONS: Mapping[str, Addon] = MappingProxyType(
    {addon.name: _owning_its_pods(addon) for addon in _TABLE}
)
# Every add-on's DaemonSets and Deployments, in table order (config/node_model.py).
ADDON_DAEMONSETS: tuple[PodRequests, ...] = tuple(p for a in ADDONS.values() for p in a.daemonsets)
SYSTEM_PODS: tuple[PodRequests, ...] = tuple(p for a in ADDONS.values() for p in a.deployments)


class AddonVersions(Protocol):
    """Where an environment's add-on versions come from (`config.schema.EksConfig`)."""

    def addon_version(self, name: str) -> str: ...


def at_versions(
    versions: AddonVersions, *, table: Mapping[str, Addon] = ADDONS
) -> tuple[Addon, ...]:
    """Every row of `table`, in table order, at the version the environment installs (its
    `eks.addons` override, else the pin)."""
    return tuple(
        dataclasses.replace(addon, version=versions.addon_version(addon.name))
        for addon in table.values()
    )


def placed_in(
    stack: AddonStack, versions: AddonVersions, *, table: Mapping[str, Addon] = ADDONS
) -> tuple[Addon, ...]:
    """The rows of `table` that `stack` creates, in table order, each at the version the
    environment installs."""
    return tuple(a for a in at_versions(versions, table=table) if a.stack == stack)
