"""Kubernetes and HyperPod names the platform, its jobs and `hpctl` must agree on, and
Kubernetes' own rules for names, labels and taints.

The one home of each: the stacks create what these name, `hpctl job render` writes
manifests that use them, and tests check one against the other. The config schema and the
job renderer validate names with the same rules and share one `Taint`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import field_validator

from config.model import Strict

# Node labels HyperPod and Kubernetes set (HyperPod CLI constants, AWS task-governance docs).
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
INSTANCE_GROUP_LABEL: Final = "sagemaker.amazonaws.com/instance-group-name"
NODE_HEALTH_LABEL: Final = "sagemaker.amazonaws.com/node-health-status"

# Network topology labels HyperPod puts on the nodes of the instance types that support
# topology-aware scheduling, coarsest first: EC2's three network node layers (layer 3 is the
# node an instance hangs off, so the fewest hops), then the UltraServer (one NVLink domain).
# Sources: the HyperPod task-governance guide, "Using topology-aware scheduling in Amazon
# SageMaker HyperPod task governance" (its node labels and annotation examples), and the
# HyperPod CLI's accepted levels (aws/sagemaker-hyperpod-cli,
# hyperpod-pytorch-job-template/hyperpod_pytorch_job_template/v1_1/model.py
# ALLOWED_TOPOLOGY_LABELS); tests/job/hyperpod_node_labels.json records them.
NETWORK_NODE_LAYER_LABELS: Final = (
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
)
ULTRASERVER_LABEL: Final = "topology.k8s.aws/ultraserver-id"
TOPOLOGY_LEVELS: Final = (*NETWORK_NODE_LAYER_LABELS, ULTRASERVER_LABEL)

# Kueue's topology requests (topology-aware scheduling): a job asks for all its pods in one
# domain of a level, required (wait until one domain fits) or preferred (the smallest domain
# that fits, climbing levels as needed). Kueue reads them from the pod template (a PodSet);
# the HyperPod CLI writes them on the job and its pod template alike, and so does
# `hpctl job render`. Kueue refuses a pod set with more than one.
REQUIRED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-preferred-topology"

# Extended resources a pod requests, each advertised by a device plugin DaemonSet
# (platform_constructs/hyperpod_dependencies.py ADVERTISED_BY).
GPU_RESOURCE: Final = "nvidia.com/gpu"
NEURON_RESOURCE: Final = "aws.amazon.com/neuron"
EFA_RESOURCE: Final = "vpc.amazonaws.com/efa"

# Every resource that makes a workload an accelerated one: what task governance's quotas
# count and what the admission policy of each team namespace guards.
ACCELERATOR_RESOURCES: Final = (GPU_RESOURCE, NEURON_RESOURCE, EFA_RESOURCE)

# The NVIDIA Container Toolkit's variables: which GPUs a container gets and which driver
# libraries come with them. The device plugin sets the first itself for the GPUs it allocates;
# `void` asks for no GPU at all (NVIDIA Container Toolkit, "Environment variables").
NVIDIA_VISIBLE_DEVICES_ENV: Final = "NVIDIA_VISIBLE_DEVICES"
NVIDIA_DRIVER_CAPABILITIES_ENV: Final = "NVIDIA_DRIVER_CAPABILITIES"
NVIDIA_NO_DEVICES: Final = "void"

# The HyperPod training operator's job CRD (`hpctl job render` writes it; the admission policy
# of each team namespace matches it by group, version and plural).
HYPERPOD_JOB_GROUP: Final = "sagemaker.amazonaws.com"
HYPERPOD_JOB_VERSION: Final = "v1"
HYPERPOD_JOB_KIND: Final = "HyperPodPyTorchJob"
HYPERPOD_JOB_RESOURCE: Final = "hyperpodpytorchjobs"

# Kueue's API as `hpctl job` reads it: a job's Workload (the HyperPod CLI's
# src/sagemaker/hyperpod/cli/constants/kueue_constants.py), and the pending workloads of a
# LocalQueue from Kueue's visibility API (an aggregated API; Kueue's "Pending workloads on
# demand" docs: reading it takes `get` on this subresource in that group).
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta1"
KUEUE_WORKLOAD_RESOURCE: Final = "workloads"
KUEUE_VISIBILITY_GROUP: Final = "visibility.kueue.x-k8s.io"
KUEUE_VISIBILITY_VERSION: Final = "v1beta1"
LOCAL_QUEUE_RESOURCE: Final = "localqueues"
PENDING_WORKLOADS_SUBRESOURCE: Final = "pendingworkloads"

# Tolerations the API server itself adds to every pod (the DefaultTolerationSeconds admission
# plugin: 300 s on a node that is not ready or unreachable), so every pod carries them.
DEFAULT_TOLERATION_KEYS: Final = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")

# Kueue labels a job carries so task governance admits it to its team's queue.
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"
# Kueue labels the Workload it creates for a job with the job's UID (what the HyperPod CLI's
# kubernetes_client.get_workload_by_label selects on); the training operator labels a job's
# pods with its name (HyperPodPytorchJob.list_pods in the HyperPod CLI).
KUEUE_JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
OPERATOR_JOB_LABEL: Final = "HPJob"

# Task governance names a team's namespace, local queue and priority classes like this.
TEAM_NAMESPACE_PREFIX: Final = "hyperpod-ns-"
LOCAL_QUEUE_SUFFIX: Final = "-localqueue"
PRIORITY_CLASS_SUFFIX: Final = "-priority"

# Training pods the platform's managed Prometheus collector scrapes (stacks/observability_stack.py
# keeps exactly the pods with this label and value, and scrapes their container port named
# METRICS_PORT_NAME); `hpctl job render` puts both on every worker and passes the port to the
# trainer (`--set metrics.port=...`, training/metrics_export.py). TRAINING_JOB_LABEL carries
# the job's name, which the collector copies into every series as `training_job`. The
# platform's own label domain: no other component sets labels under it.
PLATFORM_LABEL_DOMAIN: Final = "hyperpod-platform"
METRICS_LABEL: Final = f"{PLATFORM_LABEL_DOMAIN}/metrics"
METRICS_LABEL_VALUE: Final = "trainer"
TRAINING_JOB_LABEL: Final = f"{PLATFORM_LABEL_DOMAIN}/training-job"
# A container port name (IANA service name: at most 15 lowercase letters, digits and '-').
METRICS_PORT_NAME: Final = "metrics"
# The elastic agent's HTTP server in every training pod (`hyperpodrun --server-port`): the
# training operator talks to it there, so team NetworkPolicies admit the operator to it.
ELASTIC_AGENT_PORT: Final = 8080
# Unprivileged and clear of the elastic agent's 8080; pods have their own network namespace,
# so it cannot collide with a node's exporters.
METRICS_PORT: Final = 9410

# The PersistentVolumeClaim bound to the platform's FSx for Lustre file system, and where
# every pod that uses it (training jobs, the platform's directory setup) mounts it.
FSX_CLAIM_NAME: Final = "fsx-claim"
FSX_MOUNT: Final = "/fsx"
DEFAULT_NAMESPACE: Final = "default"

# Label key prefixes (the DNS domain before the "/") owned by someone else: HyperPod sets its
# own node labels and taints (health status, instance group, deep health checks) under
# sagemaker.amazonaws.com and would fight over them; Kubernetes reserves kubernetes.io and
# k8s.io for its core components. Subdomains belong to the same owner.
RESERVED_LABEL_DOMAINS: Final = ("sagemaker.amazonaws.com", "kubernetes.io", "k8s.io")

# SageMaker's ClusterInstanceGroupName pattern (also the HyperPod cluster name rule).
INSTANCE_GROUP_NAME_PATTERN: Final = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
INSTANCE_GROUP_NAME = re.compile(INSTANCE_GROUP_NAME_PATTERN)

# --- Kubernetes' name rules --------------------------------------------------------------
# As the API server applies them (k8s.io/apimachinery/pkg/util/validation: IsDNS1123Label,
# IsDNS1123Subdomain, IsDNS1035Label, IsQualifiedName, IsValidLabelValue), lengths included.
DNS_LABEL_MAX: Final = 63
DNS_SUBDOMAIN_MAX: Final = 253
LABEL_NAME_MAX: Final = 63  # the name part of a label key
LABEL_VALUE_MAX: Final = 63
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def is_dns1123_label(value: str) -> bool:
    """A namespace's name (and a team's, which becomes one): 1-63 lowercase letters, digits
    and '-', starting and ending with a letter or digit."""
    return len(value) <= DNS_LABEL_MAX and _DNS1123_LABEL.fullmatch(value) is not None


def is_dns1123_subdomain(value: str) -> bool:
    """Most object names (service accounts, claims, ConfigMaps) and label key prefixes: DNS
    labels joined by '.', at most 253 characters."""
    return len(value) <= DNS_SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(value) is not None


def is_dns1035_label(value: str) -> bool:
    """A Service's name: a DNS label that starts with a letter."""
    return len(value) <= DNS_LABEL_MAX and _DNS1035_LABEL.fullmatch(value) is not None


def is_label_key(value: str) -> bool:
    """A label or taint key: `[prefix/]name`, the prefix a DNS subdomain, the name 1-63
    letters, digits, '-', '_' and '.', starting and ending with a letter or digit."""
    prefix, slash, name = value.rpartition("/")
    if slash and not is_dns1123_subdomain(prefix):  # an empty prefix is not one either
        return False
    return len(name) <= LABEL_NAME_MAX and _LABEL_NAME.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    """A label or taint value: empty, or 1-63 letters, digits, '-', '_' and '.', starting and
    ending with a letter or digit."""
    return len(value) <= LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(value) is not None


LABEL_KEY_RULE: Final = (
    "use [prefix/]name: a name of 1-63 letters, digits, '-', '_' or '.' that starts and ends "
    "with a letter or digit, after an optional DNS subdomain prefix"
)
LABEL_VALUE_RULE: Final = (
    "use at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
)

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Taint(Strict):
    """A node taint (core/v1 Taint): an instance group's nodes carry it, and a job on them
    must tolerate it.

    Kubernetes keeps no difference between an empty value and none (the field is an omitempty
    string), and HyperPod's API refuses an empty one, so an empty value is read as none.
    """

    key: str
    value: str | None = None
    effect: TaintEffect

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not is_label_key(value):
            raise ValueError(f"{value!r} is not a valid Kubernetes taint key; {LABEL_KEY_RULE}")
        return value

    @field_validator("value")
    @classmethod
    def _value(cls, value: str | None) -> str | None:
        if value is not None and not is_label_value(value):
            raise ValueError(f"{value!r} is not a valid Kubernetes taint value; {LABEL_VALUE_RULE}")
        return value or None

    def toleration(self) -> dict[str, Any]:
        """The pod toleration that lets a pod onto a node with this taint."""
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


def reserved_label_domain(key: str) -> str | None:
    """The reserved domain a label or taint `key` is prefixed with, if any."""
    if "/" not in key:
        return None
    prefix = key.split("/", 1)[0].lower()
    for domain in RESERVED_LABEL_DOMAINS:
        if prefix == domain or prefix.endswith(f".{domain}"):
            return domain
    return None


def team_namespace(team: str) -> str:
    """The namespace task governance creates for `team`."""
    return f"{TEAM_NAMESPACE_PREFIX}{team}"


def local_queue(team: str) -> str:
    """The Kueue LocalQueue of `team`'s namespace."""
    return f"{team_namespace(team)}{LOCAL_QUEUE_SUFFIX}"


# The Kubernetes group a team's principals are mapped to (their EKS access entries'
# `kubernetesGroups`), which the team's Role binds: EKS access policies cannot grant the
# HyperPod job and Kueue resources (EKS User Guide, "Review access policy permissions").
# The API server reserves the `system:` prefix, and EKS refuses it in an access entry.
TEAM_ACCESS_GROUP_PREFIX: Final = f"{PLATFORM_LABEL_DOMAIN}:team:"


def team_access_group(team: str) -> str:
    """The Kubernetes group of `team`'s principals."""
    return f"{TEAM_ACCESS_GROUP_PREFIX}{team}"


def priority_class(name: str) -> str:
    """The Kueue WorkloadPriorityClass task governance creates for a priority class `name`."""
    return f"{name}{PRIORITY_CLASS_SUFFIX}"


# Jobs carry the queue and priority-class names as label values, so a team or priority class
# name can only be as long as those labels allow.
MAX_TEAM_LENGTH: Final = LABEL_VALUE_MAX - len(local_queue(""))
MAX_PRIORITY_LENGTH: Final = LABEL_VALUE_MAX - len(priority_class(""))


def service_account_user(namespace: str, name: str) -> str:
    """The user name the API server gives requests made as service account `namespace/name`."""
    return f"system:serviceaccount:{namespace}:{name}"


def service_accounts_group(namespace: str) -> str:
    """The group the API server puts every service account of `namespace` in (Kubernetes
    "Authenticating": service accounts), impersonated ones included."""
    return f"system:serviceaccounts:{namespace}"


# The kube-controller-manager's Job controller creates a Job's pods under its own service
# account (Kubernetes RBAC "Controller roles": system:controller:job-controller, bound to
# kube-system/job-controller when the controller manager uses service account credentials).
JOB_CONTROLLER_USER: Final = service_account_user("kube-system", "job-controller")


# What the admin host's role may do in Kubernetes: the EKS access policy bound to it at cluster
# scope, or no access entry at all (the host then only relays operators' own connections).
ADMIN_HOST_ACCESS_POLICIES: dict[str, str | None] = {
    "none": None,
    "view": "AmazonEKSViewPolicy",
    "admin-view": "AmazonEKSAdminViewPolicy",
    "cluster-admin": "AmazonEKSClusterAdminPolicy",
}


@dataclass(frozen=True, kw_only=True)
class NodeGroup:
    """What the device plugins need to know of one instance group (the platform plan's
    `node_groups`): its type, whether its nodes get EFA interfaces, and its taints as
    (key, effect)."""

    instance_type: str
    efa: bool
    taints: tuple[tuple[str, str], ...] = ()
