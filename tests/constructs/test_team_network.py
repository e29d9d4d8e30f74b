"""A team namespace's isolation on a bare stack: NetworkPolicies (valid against the
Kubernetes schema, and what they admit evaluated connection by connection), Pod Security
Admission labels patched onto the namespace task governance owns, and namespace-scoped
access entries."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
import pytest

from config.kubernetes import (
    ELASTIC_AGENT_PORT,
    METRICS_LABEL,
    METRICS_LABEL_VALUE,
    METRICS_PORT,
    team_access_group,
)
from platform_constructs.team_network import (
    INSTANCE_METADATA_CIDR,
    TEAM_JOB_ROLE,
    TIERED_CHECKPOINT_DAEMON_PORT,
    PodNetwork,
    TeamIsolation,
    network_policies,
    operator_namespace,
    pod_security_labels,
    team_job_access,
)
from tests.support import (
    KUBERNETES_VALIDATE_VERSIONS,
    bare_stack,
    imported_cluster,
    only,
    resources_of,
    template_of,
)

NAMESPACE = "hyperpod-ns-research"
GROUP = team_access_group("research")
NETWORK = PodNetwork(scraper_cidrs=["10.0.0.0/24", "10.0.1.0/24"], node_cidrs=["10.1.0.0/17"])
PRINCIPAL = "arn:aws:iam::111111111111:role/research-engineers"
MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"
PATCH = "Custom::AWSCDK-EKS-KubernetesPatch"


def _isolation(principals: tuple[str, ...] = (PRINCIPAL,)) -> tuple[dict[str, Any], str]:
    stack = bare_stack("Isolation")
    ready = cdk.CfnWaitConditionHandle(stack, "NamespaceReady")
    TeamIsolation(
        stack,
        "Research",
        cluster=imported_cluster(stack),
        cluster_name="c",
        namespace=NAMESPACE,
        network=NETWORK,
        access_principal_arns=principals,
        access_group=GROUP,
        namespace_ready=ready,
    )
    return template_of(stack).to_json(), stack.get_logical_id(ready)


TEMPLATE, READY = _isolation()


def _manifest(construct: str) -> dict[str, Any]:
    """The manifest resource of the construct `construct` (NetworkPolicies or JobAccess)."""
    (resource,) = [
        r
        for key, r in resources_of(TEMPLATE, MANIFEST).items()
        if key.startswith(f"Research{construct}")
    ]
    return resource


POLICIES = network_policies(NAMESPACE, NETWORK)
OTHER_NAMESPACE = "hyperpod-ns-vision"
# Every team namespace has its own set: the evaluator sees both teams'.
CLUSTER_POLICIES = POLICIES + network_policies(OTHER_NAMESPACE, NETWORK)


# --------------------------------------------------------------------------- evaluator


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    ip: str = "10.1.0.10"


@dataclass(frozen=True)
class Peer:
    """A connection's other end: a pod, or an address outside the cluster's pods."""

    pod: Pod | None = None
    ip: str = ""

    @property
    def address(self) -> str:
        return self.pod.ip if self.pod else self.ip


def _labels_match(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _peer_matches(rule: dict[str, Any], peer: Peer, own_namespace: str) -> bool:
    if "ipBlock" in rule:
        block = rule["ipBlock"]
        address = ipaddress.ip_address(peer.address)
        if address not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(address in ipaddress.ip_network(c) for c in block.get("except", []))
    if peer.pod is None:
        return False
    namespace_labels = {"kubernetes.io/metadata.name": peer.pod.namespace}
    if "namespaceSelector" in rule:
        if not _labels_match(rule["namespaceSelector"], namespace_labels):
            return False
    elif peer.pod.namespace != own_namespace:
        return False
    return _labels_match(rule.get("podSelector", {}), peer.pod.labels)


def _port_matches(rule: dict[str, Any], protocol: str, port: int) -> bool:
    ports = rule.get("ports")
    return not ports or any(
        p.get("protocol", "TCP") == protocol and p.get("port") in (None, port) for p in ports
    )


def allowed(pod: Pod, peer: Peer, direction: str, protocol: str, port: int) -> bool:
    """Whether the policies admit a connection to (Ingress) or from (Egress) `pod`: selected
    by any policy of that direction, some rule of one of them must allow it."""
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [
        p["spec"]
        for p in CLUSTER_POLICIES
        if p["metadata"]["namespace"] == pod.namespace
        and direction in p["spec"]["policyTypes"]
        and _labels_match(p["spec"]["podSelector"], pod.labels)
    ]
    if not selecting:
        return True
    return any(
        _port_matches(rule, protocol, port)
        and any(_peer_matches(r, peer, pod.namespace) for r in rule.get(peers_key, [{}]))
        for spec in selecting
        for rule in spec.get(key, [])
    )


TRAINER = Pod(NAMESPACE, {METRICS_LABEL: METRICS_LABEL_VALUE})
PEER_TRAINER = Peer(Pod(NAMESPACE, {METRICS_LABEL: METRICS_LABEL_VALUE}, ip="10.1.0.11"))
OTHER_TEAM = Peer(Pod(OTHER_NAMESPACE, {METRICS_LABEL: METRICS_LABEL_VALUE}, "10.1.0.12"))
OPERATOR = Peer(Pod(operator_namespace(), {}, ip="10.1.0.13"))
SCRAPER = Peer(ip="10.0.1.25")
DNS = Peer(Pod("kube-system", {"k8s-app": "kube-dns"}, ip="10.1.0.14"))
METADATA = Peer(ip=str(ipaddress.ip_network(INSTANCE_METADATA_CIDR).network_address))


# --------------------------------------------------------------------------- policies


def test_every_network_policy_passes_the_kubernetes_schema():
    import kubernetes_validate

    manifest = json.loads(_manifest("NetworkPolicies")["Properties"]["Manifest"])
    # The handler adds only its prune label to what network_policies() builds.
    assert [{**o, "metadata": {k: v for k, v in o["metadata"].items() if k != "labels"}}
            for o in manifest] == POLICIES  # fmt: skip
    for version in KUBERNETES_VALIDATE_VERSIONS:
        for obj in manifest:
            kubernetes_validate.validate(obj, version, strict=True)


def test_planted_invalid_policy_is_rejected_by_the_schema():
    import kubernetes_validate

    broken = json.loads(json.dumps(POLICIES[0]))
    broken["spec"]["policyTypes"] = "Ingress"  # a list in the API
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VALIDATE_VERSIONS[0], strict=True)


def test_default_deny_selects_every_pod_both_ways():
    (deny,) = [p for p in POLICIES if p["metadata"]["name"] == "default-deny"]
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert {p["metadata"]["namespace"] for p in POLICIES} == {NAMESPACE}


def test_pods_of_the_namespace_reach_each_other_on_any_port():
    for port in (29500, 23456, ELASTIC_AGENT_PORT, 41000):  # rendezvous, NCCL, agent
        assert allowed(TRAINER, PEER_TRAINER, "Ingress", "TCP", port)
        assert allowed(TRAINER, PEER_TRAINER, "Egress", "TCP", port)


def test_other_teams_reach_neither_the_agent_nor_the_metrics_port():
    for port in (ELASTIC_AGENT_PORT, METRICS_PORT, 29500):
        assert not allowed(TRAINER, OTHER_TEAM, "Ingress", "TCP", port)


def test_only_the_training_operator_reaches_the_agent_port_from_outside():
    assert allowed(TRAINER, OPERATOR, "Ingress", "TCP", ELASTIC_AGENT_PORT)
    assert not allowed(TRAINER, OPERATOR, "Ingress", "TCP", METRICS_PORT)
    assert operator_namespace() == "aws-hyperpod"


def test_the_collector_scrapes_only_the_metrics_port_of_labelled_pods():
    assert allowed(TRAINER, SCRAPER, "Ingress", "TCP", METRICS_PORT)
    assert not allowed(TRAINER, SCRAPER, "Ingress", "TCP", ELASTIC_AGENT_PORT)
    unlabelled = Pod(NAMESPACE)
    assert not allowed(unlabelled, SCRAPER, "Ingress", "TCP", METRICS_PORT)


def test_egress_is_dns_aws_apis_and_pod_identity_but_never_instance_metadata():
    assert allowed(TRAINER, DNS, "Egress", "UDP", 53)
    assert allowed(TRAINER, DNS, "Egress", "TCP", 53)
    # Outside the cluster subnets (an infrastructure-subnet host): DNS only to CoreDNS.
    assert not allowed(TRAINER, Peer(ip="10.0.0.50"), "Egress", "UDP", 53)
    assert allowed(TRAINER, Peer(ip="52.216.0.10"), "Egress", "TCP", 443)  # S3
    assert not allowed(TRAINER, Peer(ip="52.216.0.10"), "Egress", "TCP", 80)
    assert allowed(TRAINER, Peer(ip="169.254.170.23"), "Egress", "TCP", 80)
    for port in (80, 443):
        assert not allowed(TRAINER, METADATA, "Egress", "TCP", port)


def test_egress_to_the_cluster_subnets_reaches_the_tiered_checkpoint_daemon_only():
    node = Peer(ip="10.1.0.200")  # a node, or the daemon's pod, in a cluster subnet
    assert allowed(TRAINER, node, "Egress", "TCP", TIERED_CHECKPOINT_DAEMON_PORT)
    # Not the node's other ports: the kubelet, host-network daemons, anything else.
    for port in (10250, 22, 9999):
        assert not allowed(TRAINER, node, "Egress", "TCP", port)
    assert not allowed(TRAINER, node, "Egress", "UDP", TIERED_CHECKPOINT_DAEMON_PORT)
    assert not allowed(
        TRAINER, Peer(ip="10.0.0.50"), "Egress", "TCP", TIERED_CHECKPOINT_DAEMON_PORT
    )
    # The other team's pod is reachable on that port, but its own default deny refuses it.
    assert OTHER_TEAM.pod is not None
    assert not allowed(
        OTHER_TEAM.pod, Peer(TRAINER), "Ingress", "TCP", TIERED_CHECKPOINT_DAEMON_PORT
    )


def test_policies_wait_for_the_namespace():
    assert READY in _manifest("NetworkPolicies")["DependsOn"]


# --------------------------------------------------------------------------- admission


def test_namespace_gets_pod_security_labels_through_a_reversible_patch():
    patch = only(resources_of(TEMPLATE, PATCH))
    properties = patch["Properties"]
    assert properties["ResourceName"] == f"namespace/{NAMESPACE}"
    assert properties["PatchType"] == "strategic"
    labels = {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    assert json.loads(properties["ApplyPatchJson"]) == {"metadata": {"labels": labels}}
    assert json.loads(properties["RestorePatchJson"]) == {
        "metadata": {"labels": dict.fromkeys(labels, "privileged")}
    }
    assert READY in patch["DependsOn"]
    assert pod_security_labels() == labels


def test_pod_security_labels_are_levels_kubernetes_accepts():
    from config.kubernetes import is_label_key

    for key, level in pod_security_labels().items():
        assert is_label_key(key)
        assert level in ("privileged", "baseline", "restricted")


# --------------------------------------------------------------------------- access


def test_team_principals_get_edit_access_in_their_namespace_only():
    entry = only(resources_of(TEMPLATE, "AWS::EKS::AccessEntry"))
    properties = entry["Properties"]
    assert properties["PrincipalArn"] == PRINCIPAL
    assert properties["Type"] == "STANDARD"
    (policy,) = properties["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "namespace", "Namespaces": [NAMESPACE]}
    assert json.dumps(policy["PolicyArn"]).endswith('cluster-access-policy/AmazonEKSEditPolicy"]]}')
    assert properties["KubernetesGroups"] == [GROUP]
    assert READY in entry["DependsOn"]


def test_team_access_group_is_not_a_reserved_kubernetes_group():
    assert GROUP == "hyperpod-platform:team:research"
    assert not GROUP.startswith("system:")


def test_team_group_is_bound_to_the_job_role_in_its_namespace_only():
    resource = _manifest("JobAccess")
    role, binding = json.loads(resource["Properties"]["Manifest"])
    assert READY in resource["DependsOn"]
    assert (role["kind"], role["metadata"]["name"], role["metadata"]["namespace"]) == (
        "Role",
        TEAM_JOB_ROLE,
        NAMESPACE,
    )
    assert binding["kind"] == "RoleBinding"
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": TEAM_JOB_ROLE,
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": GROUP}
    ]


def test_job_role_and_binding_pass_the_kubernetes_schema():
    import kubernetes_validate

    manifest = json.loads(_manifest("JobAccess")["Properties"]["Manifest"])
    assert [{**o, "metadata": {k: v for k, v in o["metadata"].items() if k != "labels"}}
            for o in manifest] == team_job_access(NAMESPACE, GROUP)  # fmt: skip
    for version in KUBERNETES_VALIDATE_VERSIONS:
        for obj in manifest:
            kubernetes_validate.validate(obj, version, strict=True)


def test_planted_invalid_role_is_rejected_by_the_schema():
    import kubernetes_validate

    role, _ = team_job_access(NAMESPACE, GROUP)
    role["rules"][0]["verbs"] = "get"  # a list in the API
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(role, KUBERNETES_VALIDATE_VERSIONS[0], strict=True)


def test_no_access_entries_without_team_principals():
    template, _ = _isolation(())
    assert resources_of(template, "AWS::EKS::AccessEntry") == {}
