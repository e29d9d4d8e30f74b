"""A team namespace's isolation: default-deny NetworkPolicies with the allows training jobs
need, Pod Security Admission labels, and namespace-scoped EKS access for the team.

Enforced by the VPC CNI's network policy agent (config/addons.py turns it on). The allows,
from what the rendered jobs do (hpctl/job/render.py) and the platform runs around them:

- any port between the pods of the namespace: a job's NCCL bootstrap, torch's rendezvous
  and the elastic agent's own (EFA traffic is OS-bypass and never crosses a policy);
- the training operator (its namespace: config/addons.py) to the elastic agent's port;
- the managed Prometheus collector (ENIs in the control-plane subnets) to the metrics port;
- DNS to the cluster's CoreDNS; TCP 443 to AWS APIs (interface endpoints, the S3 gateway
  endpoint's public ranges) anywhere but the instance metadata service; the EKS Pod Identity
  agent (link-local, port 80: "EKS Pod Identity" in the EKS User Guide) for credentials;
- the cluster subnets on TCP 9200 only: HyperPod's memory management daemon of managed
  tiered checkpointing (TIERED_CHECKPOINT_DAEMON_PORT), whichever address it runs at. Not the
  nodes' other ports (kubelet, host-network daemons); other teams' pods there still deny it
  (their own default-deny ingress).

Access: each team principal's EKS access entry carries AmazonEKSEditPolicy in the namespace
and maps the principal to the team's Kubernetes group (config/kubernetes.py
`team_access_group`). EKS access policies are fixed AWS-managed rule lists that grant neither
HyperPod jobs nor Kueue's objects (EKS User Guide, "Review access policy permissions", whose
way to grant more is RBAC bound to `kubernetesGroups`), so a Role bound to that group adds
exactly what `hpctl job` calls beyond Edit (hpctl/job/kube.py). Edit also writes
NetworkPolicies: the namespace's admission policy denies the team's group (and the namespace's
service accounts, which Edit may impersonate) any change to them
(platform_constructs/team_admission.py).

Pod Security Admission: `baseline` enforced, `restricted` audited and warned. The team's
directory Job runs as root with CHOWN and FSETID (platform_constructs/team_workspace.py),
which baseline admits and restricted does not; rendered training pods meet restricted.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import aws_cdk as cdk
from aws_cdk import aws_eks as eks
from aws_cdk import aws_eks_v2 as eks_v2
from constructs import Construct, IDependable

from config.addons import ADDONS, TRAINING_OPERATOR
from config.kubernetes import (
    ELASTIC_AGENT_PORT,
    HYPERPOD_JOB_GROUP,
    HYPERPOD_JOB_RESOURCE,
    KUEUE_GROUP,
    KUEUE_VISIBILITY_GROUP,
    KUEUE_WORKLOAD_RESOURCE,
    LOCAL_QUEUE_RESOURCE,
    METRICS_LABEL,
    METRICS_LABEL_VALUE,
    METRICS_PORT,
    PENDING_WORKLOADS_SUBRESOURCE,
)
from platform_constructs.eks_cluster import cluster_access_policy_arn

DNS_PORT: Final = 53
HTTPS_PORT: Final = 443
INSTANCE_METADATA_CIDR: Final = "169.254.169.254/32"
# The EKS Pod Identity agent's link-local address and port (EKS User Guide, "Set up the
# Amazon EKS Pod Identity Agent").
POD_IDENTITY_AGENT_CIDR: Final = "169.254.170.23/32"
POD_IDENTITY_AGENT_PORT: Final = 80
# HyperPod's memory management daemon of managed tiered checkpointing, which the
# checkpointing library reaches at ai-toolkit-gossip-headless.aws-hyperpod:9200 (its
# InMemoryClientConfig.base_url, amzn-sagemaker-checkpointing 1.1.3): a headless service, so
# the addresses are the daemon's own, in the cluster subnets.
TIERED_CHECKPOINT_DAEMON_PORT: Final = 9200
ANYWHERE: Final = "0.0.0.0/0"
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"  # set by the API server
DNS_NAMESPACE: Final = "kube-system"
DNS_POD_LABELS: Final = {"k8s-app": "kube-dns"}  # CoreDNS add-on's pods

POD_SECURITY_ENFORCE: Final = "baseline"
POD_SECURITY_AUDIT: Final = "restricted"
POD_SECURITY_LABEL_PREFIX: Final = "pod-security.kubernetes.io"
POD_SECURITY_UNSET: Final = "privileged"  # what a namespace without the labels gets

# What a team's principals may do in their namespace (EKS access policy, namespace scope).
TEAM_ACCESS_POLICY: Final = "AmazonEKSEditPolicy"

NETWORK_POLICY_API: Final = "networking.k8s.io/v1"

RBAC_GROUP: Final = "rbac.authorization.k8s.io"
RBAC_API: Final = f"{RBAC_GROUP}/v1"
TEAM_JOB_ROLE: Final = "hyperpod-platform-team-jobs"
# What `hpctl job submit|list|describe|logs|cancel` call beyond AmazonEKSEditPolicy (which
# covers the pods, their logs and events): the jobs (watch for `kubectl get -w`), the job's
# Kueue Workload (found by label, watched by `submit --wait`), and the queue position.
TEAM_JOB_RULES: Final = (
    {
        "apiGroups": [HYPERPOD_JOB_GROUP],
        "resources": [HYPERPOD_JOB_RESOURCE],
        "verbs": ["create", "get", "list", "watch", "delete"],
    },
    {
        "apiGroups": [KUEUE_GROUP],
        "resources": [KUEUE_WORKLOAD_RESOURCE],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": [KUEUE_VISIBILITY_GROUP],
        "resources": [f"{LOCAL_QUEUE_RESOURCE}/{PENDING_WORKLOADS_SUBRESOURCE}"],
        "verbs": ["get"],
    },
)


def pod_security_labels() -> dict[str, str]:
    """The Pod Security Admission labels of a team namespace."""
    return {
        f"{POD_SECURITY_LABEL_PREFIX}/enforce": POD_SECURITY_ENFORCE,
        f"{POD_SECURITY_LABEL_PREFIX}/audit": POD_SECURITY_AUDIT,
        f"{POD_SECURITY_LABEL_PREFIX}/warn": POD_SECURITY_AUDIT,
    }


@dataclass(frozen=True)
class PodNetwork:
    """The CIDRs a team's pods talk to: `scraper_cidrs` (the control-plane subnets, where the
    managed collector's ENIs are) and `node_cidrs` (the cluster subnets)."""

    scraper_cidrs: Sequence[str]
    node_cidrs: Sequence[str]


def operator_namespace() -> str:
    """Where the training operator runs: its service account's namespace (config/addons.py)."""
    account = ADDONS[TRAINING_OPERATOR].service_account
    if account is None:
        raise ValueError(f"config/addons.py names no service account for {TRAINING_OPERATOR}")
    return account.namespace


def _policy(name: str, namespace: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": NETWORK_POLICY_API,
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": dict(spec),
    }


def _tcp(port: int) -> dict[str, Any]:
    return {"protocol": "TCP", "port": port}


def network_policies(namespace: str, network: PodNetwork) -> list[dict[str, Any]]:
    """The NetworkPolicies of one team namespace: deny all, then the allows above."""
    return [
        *_isolation_policies(namespace),
        *_ingress_policies(namespace, network),
        *_egress_policies(namespace, network),
    ]


def _isolation_policies(namespace: str) -> list[dict[str, Any]]:
    """Nothing in or out, but the namespace's pods among themselves."""
    every_pod: dict[str, Any] = {}
    return [
        _policy(
            "default-deny", namespace, {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
        ),
        _policy(
            "allow-same-namespace",
            namespace,
            {
                "podSelector": every_pod,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": {}}]}],
                "egress": [{"to": [{"podSelector": {}}]}],
            },
        ),
    ]


def _ingress_policies(namespace: str, network: PodNetwork) -> list[dict[str, Any]]:
    """The training operator to the elastic agents, the managed collector to the metrics.

    The operator is admitted by its namespace, which matches only pod addresses: a
    host-network caller would arrive from its node's address, which no policy selects (VPC
    CNI network policy FAQ). The operator add-on runs as a Deployment and nothing public
    says it uses the host network, and the cluster subnets hold every pod's address too
    (VPC CNI), so admitting them on the agent's port would open it to all pods instead."""
    every_pod: dict[str, Any] = {}
    return [
        _policy(
            "allow-training-operator",
            namespace,
            {
                "podSelector": every_pod,
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {NAMESPACE_NAME_LABEL: operator_namespace()}
                                }
                            }
                        ],
                        "ports": [_tcp(ELASTIC_AGENT_PORT)],
                    }
                ],
            },
        ),
        _policy(
            "allow-metrics-scrape",
            namespace,
            {
                "podSelector": {"matchLabels": {METRICS_LABEL: METRICS_LABEL_VALUE}},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [{"ipBlock": {"cidr": c}} for c in network.scraper_cidrs],
                        "ports": [_tcp(METRICS_PORT)],
                    }
                ],
            },
        ),
    ]


def _egress_policies(namespace: str, network: PodNetwork) -> list[dict[str, Any]]:
    """DNS, AWS APIs over HTTPS (not instance metadata), the Pod Identity agent and the node
    daemons."""
    every_pod: dict[str, Any] = {}
    return [
        _policy(
            "allow-dns",
            namespace,
            {
                "podSelector": every_pod,
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {NAMESPACE_NAME_LABEL: DNS_NAMESPACE}
                                },
                                "podSelector": {"matchLabels": dict(DNS_POD_LABELS)},
                            }
                        ],
                        "ports": [
                            {"protocol": "UDP", "port": DNS_PORT},
                            {"protocol": "TCP", "port": DNS_PORT},
                        ],
                    }
                ],
            },
        ),
        _policy(
            "allow-aws-apis",
            namespace,
            {
                "podSelector": every_pod,
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [{"ipBlock": {"cidr": ANYWHERE, "except": [INSTANCE_METADATA_CIDR]}}],
                        "ports": [_tcp(HTTPS_PORT)],
                    },
                    {
                        "to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT_CIDR}}],
                        "ports": [_tcp(POD_IDENTITY_AGENT_PORT)],
                    },
                ],
            },
        ),
        _policy(
            "allow-node-daemons",
            namespace,
            {
                "podSelector": every_pod,
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [{"ipBlock": {"cidr": c}} for c in network.node_cidrs],
                        "ports": [{"protocol": "TCP", "port": TIERED_CHECKPOINT_DAEMON_PORT}],
                    }
                ],
            },
        ),
    ]


def team_job_access(namespace: str, group: str) -> list[dict[str, Any]]:
    """The Role of TEAM_JOB_RULES in `namespace` and its binding to the Kubernetes `group`."""
    return [
        {
            "apiVersion": RBAC_API,
            "kind": "Role",
            "metadata": {"name": TEAM_JOB_ROLE, "namespace": namespace},
            "rules": [
                {key: list(values) for key, values in rule.items()} for rule in TEAM_JOB_RULES
            ],
        },
        {
            "apiVersion": RBAC_API,
            "kind": "RoleBinding",
            "metadata": {"name": TEAM_JOB_ROLE, "namespace": namespace},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": TEAM_JOB_ROLE},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": group}],
        },
    ]


def team_access_entry_id(principal_arn: str) -> str:
    """Construct ID of a team principal's access entry, from the principal alone (like the
    admins': a list shift must not move an entry to another principal)."""
    name = re.sub(r"[^A-Za-z0-9]", "", principal_arn.rsplit("/", 1)[-1])[:64]
    digest = hashlib.sha256(principal_arn.encode()).hexdigest()[:8]
    return f"Access{name}{digest}"


class TeamIsolation(Construct):
    """Exposes `policies` (the NetworkPolicies' manifest), `labels` (the namespace patch),
    `job_access` (the team's Role and RoleBinding) and `access_entries` (one per team
    principal, mapped to `access_group`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks_v2.ICluster,
        cluster_name: str,
        namespace: str,
        network: PodNetwork,
        access_principal_arns: Sequence[str],
        access_group: str,
        namespace_ready: IDependable,
    ) -> None:
        """`namespace_ready`: the wait for task governance to create the namespace."""
        super().__init__(scope, construct_id)
        self.policies = eks_v2.KubernetesManifest(
            self,
            "NetworkPolicies",
            cluster=cluster,
            manifest=network_policies(namespace, network),
            overwrite=True,
        )
        self.policies.node.add_dependency(namespace_ready)
        # A patch, not a Namespace manifest: task governance owns the namespace, and deleting
        # this stack must take the labels off, never the namespace with the team's jobs.
        labels = pod_security_labels()
        # Restored to Kubernetes' level for an unlabelled namespace (EKS configures no
        # cluster-wide default): the handler's JSON drops nulls, so keys cannot be removed.
        self.labels = eks_v2.KubernetesPatch(
            self,
            "PodSecurityLabels",
            cluster=cluster,
            resource_name=f"namespace/{namespace}",
            apply_patch={"metadata": {"labels": labels}},
            restore_patch={"metadata": {"labels": dict.fromkeys(labels, POD_SECURITY_UNSET)}},
            patch_type=eks_v2.PatchType.STRATEGIC,
        )
        self.labels.node.add_dependency(namespace_ready)
        self.job_access = eks_v2.KubernetesManifest(
            self,
            "JobAccess",
            cluster=cluster,
            manifest=team_job_access(namespace, access_group),
            overwrite=True,
        )
        self.job_access.node.add_dependency(namespace_ready)
        self.access_entries = [
            eks.CfnAccessEntry(
                self,
                team_access_entry_id(arn),
                cluster_name=cluster_name,
                principal_arn=arn,
                type="STANDARD",
                kubernetes_groups=[access_group],
                access_policies=[
                    eks.CfnAccessEntry.AccessPolicyProperty(
                        policy_arn=cluster_access_policy_arn(TEAM_ACCESS_POLICY),
                        access_scope=eks.CfnAccessEntry.AccessScopeProperty(
                            type="namespace", namespaces=[namespace]
                        ),
                    )
                ],
            )
            for arn in access_principal_arns
        ]
        for entry in self.access_entries:
            entry.node.add_dependency(namespace_ready)
            # An entry is access, not data: deleting the stack revokes it.
            entry.apply_removal_policy(cdk.RemovalPolicy.DESTROY)
