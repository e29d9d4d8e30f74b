"""Kubernetes and HyperPod names the platform, its jobs and `hpctl` must agree on.

The one home of each: the stacks create what these name, `hpctl job render` writes
manifests that use them, and tests check one against the other.
"""

from __future__ import annotations

import re
from typing import Final

# Node labels HyperPod and Kubernetes set (HyperPod CLI constants, AWS task-governance docs).
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
INSTANCE_GROUP_LABEL: Final = "sagemaker.amazonaws.com/instance-group-name"
NODE_HEALTH_LABEL: Final = "sagemaker.amazonaws.com/node-health-status"

# Extended resources a pod requests, each advertised by a device plugin DaemonSet
# (platform_constructs/hyperpod_dependencies.py ADVERTISED_BY).
GPU_RESOURCE: Final = "nvidia.com/gpu"
NEURON_RESOURCE: Final = "aws.amazon.com/neuron"
EFA_RESOURCE: Final = "vpc.amazonaws.com/efa"

# Kueue labels a job carries so task governance admits it to its team's queue.
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"

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
# Unprivileged and clear of the elastic agent's 8080; pods have their own network namespace,
# so it cannot collide with a node's exporters.
METRICS_PORT: Final = 9410

# The PersistentVolumeClaim bound to the platform's FSx for Lustre file system.
FSX_CLAIM_NAME: Final = "fsx-claim"
DEFAULT_NAMESPACE: Final = "default"

# Label key prefixes (the DNS domain before the "/") owned by someone else: HyperPod sets its
# own node labels and taints (health status, instance group, deep health checks) under
# sagemaker.amazonaws.com and would fight over them; Kubernetes reserves kubernetes.io and
# k8s.io for its core components. Subdomains belong to the same owner.
RESERVED_LABEL_DOMAINS: Final = ("sagemaker.amazonaws.com", "kubernetes.io", "k8s.io")

# SageMaker's ClusterInstanceGroupName pattern (also the HyperPod cluster name rule).
INSTANCE_GROUP_NAME_PATTERN: Final = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
INSTANCE_GROUP_NAME = re.compile(INSTANCE_GROUP_NAME_PATTERN)

LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE_MAX: Final = 63
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


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


def priority_class(name: str) -> str:
    """The Kueue WorkloadPriorityClass task governance creates for a priority class `name`."""
    return f"{name}{PRIORITY_CLASS_SUFFIX}"


# Jobs carry the queue and priority-class names as label values, so a team or priority class
# name can only be as long as those labels allow.
MAX_TEAM_LENGTH: Final = LABEL_VALUE_MAX - len(local_queue(""))
MAX_PRIORITY_LENGTH: Final = LABEL_VALUE_MAX - len(priority_class(""))
