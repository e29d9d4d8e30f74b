"""Admission guardrails of a task-governance team namespace: a ValidatingAdmissionPolicy and
its binding (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30), so nothing that asks for
an accelerator runs in `hyperpod-ns-<team>` outside the team's Kueue queue and quota.

What it matches, and why (config/team_admission.py has the facts it checks):

- HyperPodPyTorchJobs and batch Jobs. Kueue queues the workload, not its pods: the queue and
  priority-class labels go on the job (Kueue's "Run a Kubernetes Job" and HyperPod task
  governance's job submission docs), and Kueue keeps a labelled job suspended until the
  team's ClusterQueue admits it. A job without the team's queue label starts at once,
  outside the quota: denied.
- Pods. The pods of an admitted job come from the Job controller or the HyperPod training
  operator and need not carry the queue label (the operator's pods do not; Kueue never asks
  it of a Job's pods). Any other pod that asks for an accelerator (a bare pod, a Deployment's
  or StatefulSet's pods) is denied: task governance queues jobs, and a bare pod, labelled or
  not, is only queued where Kueue's pod integration is on, which HyperPod does not document.
  Every pod, whoever creates it, may select only the team's nodes and tolerate only the
  taints it was given (what the job's template asked for, plus what the API server adds).

Only workloads that ask for an accelerator are checked (matchConditions): CPU pods are left
alone. Deletions are never blocked, nor updates of an object being deleted (finalizers must
come off).

A second policy, the identity policy, checks every pod and pod template of the namespace,
accelerators or not: the pod runs as the team's user and group (pod securityContext
runAsUser/runAsGroup, which no container may override). The team's directories belong to
that user and group (config/teams.py), so a pod is never another team's on the file system,
even where a claim would reach further than the team's own tree.

The CEL keeps to the portable subset (has(), exists/all/map, `in`, startsWith, size and
string concatenation) that both Kubernetes and the cel-python evaluator of the tests run;
Kubernetes' string and list extensions (join, split, optionals) are left out, so messages
list the allowed values as literals.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from aws_cdk import aws_eks_v2 as eks_v2
from constructs import Construct

from config.kubernetes import (
    ACCELERATOR_RESOURCES,
    DEFAULT_TOLERATION_KEYS,
    HYPERPOD_JOB_GROUP,
    HYPERPOD_JOB_KIND,
    HYPERPOD_JOB_RESOURCE,
    HYPERPOD_JOB_VERSION,
    INSTANCE_GROUP_LABEL,
    INSTANCE_TYPE_LABEL,
    PRIORITY_LABEL,
    QUEUE_LABEL,
)
from config.team_admission import TeamAdmission

ADMISSION_API_VERSION: Final = "admissionregistration.k8s.io/v1"
POLICY_PREFIX: Final = "hyperpod-team-"
NAMESPACE_NAME_LABEL: Final = (
    "kubernetes.io/metadata.name"  # set on every namespace by the API server
)

# What the policy matches: (API group, version, plural, kind).
MATCHED: Final = (
    ("", "v1", "pods", "Pod"),
    ("batch", "v1", "jobs", "Job"),
    (HYPERPOD_JOB_GROUP, HYPERPOD_JOB_VERSION, HYPERPOD_JOB_RESOURCE, HYPERPOD_JOB_KIND),
)


IDENTITY_SUFFIX: Final = "-identity"


def policy_name(team: str) -> str:
    return f"{POLICY_PREFIX}{team}"


def identity_policy_name(team: str) -> str:
    return f"{POLICY_PREFIX}{team}{IDENTITY_SUFFIX}"


def _str(value: str) -> str:
    """A CEL string literal."""
    return json.dumps(value)


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_str(v) for v in values) + "]"


def _words(values: Iterable[str]) -> str:
    return ", ".join(values) or "none"


def _has_chain(root: str, *fields: str) -> str:
    """`has(root.a) && has(root.a.b) ...`: portable, where has() of a deep path is not."""
    checks, path = [], root
    for field in fields:
        path = f"{path}.{field}"
        checks.append(f"has({path})")
    return " && ".join(checks)


# The pod specs of the object under review: a pod's own, a Job's template, every replica spec
# of a HyperPodPyTorchJob.
POD_SPECS: Final = (
    "request.kind.kind == 'Pod' ? [object.spec] : "
    "(request.kind.kind == 'Job' ? [object.spec.template.spec] : "
    "object.spec.replicaSpecs.map(r, r.template.spec))"
)


def _containers(spec: str, *, ephemeral: bool = False) -> str:
    kinds = ("containers", "initContainers", "ephemeralContainers")[: 3 if ephemeral else 2]
    return "(" + " + ".join(f"(has({spec}.{k}) ? {spec}.{k} : [])" for k in kinds) + ")"


def _asks(container: str, field: str) -> str:
    return (
        f"({_has_chain(container, 'resources', field)} && "
        f"{_list(ACCELERATOR_RESOURCES)}.exists(x, x in {container}.resources.{field}))"
    )


ASKS_FOR_ACCELERATORS: Final = (
    f"({POD_SPECS}).exists(s, {_containers('s')}.exists(c, "
    f"{_asks('c', 'requests')} || {_asks('c', 'limits')}))"
)


def _label_is(label: str, allowed: list[str]) -> str:
    return (
        f"has(object.metadata.labels) && {_str(label)} in object.metadata.labels && "
        f"object.metadata.labels[{_str(label)}] in {_list(allowed)}"
    )


def _label_found(label: str) -> str:
    """The label's value as the message shows it."""
    return (
        f"(has(object.metadata.labels) && {_str(label)} in object.metadata.labels ? "
        f"{_str(label + '=')} + object.metadata.labels[{_str(label)}] : 'no ' + {_str(label)})"
    )


def _selects_own_nodes(admission: TeamAdmission) -> str:
    groups, types = _list(admission.instance_groups), _list(admission.instance_types)
    group, kind = _str(INSTANCE_GROUP_LABEL), _str(INSTANCE_TYPE_LABEL)
    selector = (
        f"(!has(s.nodeSelector) || ((!({group} in s.nodeSelector) || "
        f"s.nodeSelector[{group}] in {groups}) && (!({kind} in s.nodeSelector) || "
        f"s.nodeSelector[{kind}] in {types})))"
    )
    expression = (
        f"(e.key == {group} ? (e.operator == 'In' && has(e.values) && "
        f"e.values.all(v, v in {groups})) : (e.key == {kind} ? (e.operator == 'In' && "
        f"has(e.values) && e.values.all(v, v in {types})) : true))"
    )
    required = "s.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    affinity = (
        f"(!({_has_chain('s', 'affinity', 'nodeAffinity')} && has({required})) || "
        f"!has({required}.nodeSelectorTerms) || {required}.nodeSelectorTerms.all(t, "
        "(!has(t.matchFields) || size(t.matchFields) == 0) && "
        f"(!has(t.matchExpressions) || t.matchExpressions.all(e, {expression}))))"
    )
    # The scheduler binds a pod by setting its nodeName: a bound pod's later updates (labels,
    # annotations) must pass, so a pod is held to it only when created. A job's template has
    # no binding, and a HyperPodPyTorchJob's is mutable: always.
    no_node_name = (
        "((request.kind.kind == 'Pod' && request.operation != 'CREATE') || "
        "!has(s.nodeName) || s.nodeName == '')"
    )
    return f"variables.podSpecs.all(s, {no_node_name} && {selector} && {affinity})"


def _given(toleration: Mapping[str, str]) -> str:
    """`t` is exactly `toleration` (operator Equal when left out, value '' when left out)."""
    operator = "(has(t.operator) ? t.operator : 'Equal')"
    value = "(has(t.value) ? t.value : '')"
    return (
        f"(t.key == {_str(toleration['key'])} && has(t.effect) && "
        f"t.effect == {_str(toleration['effect'])} && {operator} == "
        f"{_str(toleration['operator'])} && {value} == {_str(toleration.get('value', ''))})"
    )


def _tolerates_given(admission: TeamAdmission) -> str:
    given = " || ".join(_given(t) for t in admission.tolerations) or "false"
    # The API server adds the not-ready/unreachable tolerations to every pod, and the
    # ExtendedResourceToleration admission plugin (on in EKS) one per extended resource a pod
    # requests (key = the resource, operator Exists).
    added = (
        f"t.key in {_list(DEFAULT_TOLERATION_KEYS)} || (t.key in "
        f"{_list(ACCELERATOR_RESOURCES)} && has(t.operator) && t.operator == 'Exists')"
    )
    return (
        "variables.podSpecs.all(s, !has(s.tolerations) || s.tolerations.all(t, "
        f"has(t.key) && ({added} || {given})))"
    )


def _toleration_words(admission: TeamAdmission) -> str:
    def word(t: Mapping[str, str]) -> str:
        value = f"={t['value']}" if "value" in t else ""
        return f"{t['key']}{value}:{t['effect']}"

    return _words(word(t) for t in admission.tolerations)


def _validation(expression: str, message: str) -> dict[str, str]:
    return {"expression": expression, "messageExpression": message, "reason": "Forbidden"}


def admission_policy(admission: TeamAdmission) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy of `admission`'s namespace."""
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name(admission.team)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": [version],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [plural],
                    }
                    for group, version, plural, _ in MATCHED
                ]
            },
            "matchConditions": [
                {
                    "name": "not-being-deleted",
                    "expression": "!has(object.metadata.deletionTimestamp)",
                },
                {"name": "asks-for-accelerators", "expression": ASKS_FOR_ACCELERATORS},
            ],
            "variables": [{"name": "podSpecs", "expression": POD_SPECS}],
            "validations": _validations(admission),
        },
    }


def _validations(admission: TeamAdmission) -> list[dict[str, str]]:
    """The policy's rules, each with the one-line message that names the fix."""
    team, queue = admission.team, admission.queue
    subject = f"request.kind.kind + ' in ' + {_str(admission.namespace)}"
    asks = f" asks for accelerators ({', '.join(ACCELERATOR_RESOURCES)})"

    def says(text: str, found: str = "") -> str:
        """The message: the object's kind and namespace, what it asks for and carries
        (`found`, a CEL string) where that is the problem, then `text`."""
        if not found:
            return f"{subject} + {_str(text)}"
        return f"{subject} + {_str(asks + ' with ')} + {found} + {_str(text)}"

    not_pod = "request.kind.kind != 'Pod'"
    return [
        _validation(
            # Where a pod comes from is settled when it is created; later updates (a label, an
            # annotation, by anyone) meet only the node and toleration rules.
            f"{not_pod} || request.operation != 'CREATE' || "
            f"request.userInfo.username in {_list(admission.workload_creators)}",
            says(
                f"{asks} outside a job, which bypasses team {team}'s queue and quota; submit "
                f"it as a HyperPodPyTorchJob or Job labelled {QUEUE_LABEL}={queue} "
                "(hpctl job render writes one)"
            ),
        ),
        _validation(
            f"{not_pod} ? ({_label_is(QUEUE_LABEL, [queue])}) : true",
            says(
                f", so Kueue would not hold it to team {team}'s quota; add the label "
                f"{QUEUE_LABEL}: {queue} to metadata.labels",
                found=_label_found(QUEUE_LABEL),
            ),
        ),
        _validation(
            f"{not_pod} ? ({_label_is(PRIORITY_LABEL, list(admission.priority_classes))}) : true",
            says(
                f"; add the label {PRIORITY_LABEL} to metadata.labels with one of "
                f"{_words(admission.priority_classes)}",
                found=_label_found(PRIORITY_LABEL),
            ),
        ),
        _validation(
            _selects_own_nodes(admission),
            says(
                f" selects nodes that are not team {team}'s; select only instance groups "
                f"{_words(admission.instance_groups)} ({INSTANCE_GROUP_LABEL}) or instance "
                f"types {_words(admission.instance_types)} ({INSTANCE_TYPE_LABEL}) through "
                "nodeSelector or required node affinity (operator In), without nodeName or "
                "matchFields"
            ),
        ),
        _validation(
            _tolerates_given(admission),
            says(
                f" tolerates taints team {team} was not given; tolerate only its nodes' "
                f"taints, as hpctl job render does: {_toleration_words(admission)} (operator "
                "Equal with the value, Exists without; never an empty key)"
            ),
        ),
    ]


def _runs_as(admission: TeamAdmission) -> str:
    uid, gid = admission.user_id, admission.group_id
    pod = (
        f"{_has_chain('s', 'securityContext', 'runAsUser')} && s.securityContext.runAsUser == "
        f"{uid} && has(s.securityContext.runAsGroup) && s.securityContext.runAsGroup == {gid}"
    )
    container = (
        "(!has(c.securityContext) || ((!has(c.securityContext.runAsUser) || "
        f"c.securityContext.runAsUser == {uid}) && (!has(c.securityContext.runAsGroup) || "
        f"c.securityContext.runAsGroup == {gid})))"
    )
    return f"variables.podSpecs.all(s, {pod} && {_containers('s', ephemeral=True)}.all(c, {container}))"


def identity_policy(admission: TeamAdmission) -> dict[str, Any]:
    """The identity policy of `admission`'s namespace: every pod runs as the team's user and
    group. A pod's identity is settled when it is created (or an ephemeral container added);
    a pod's later updates (labels, status) are not held to it, so pods that predate the
    policy keep running and can be relabelled."""
    team, uid, gid = admission.team, admission.user_id, admission.group_id
    pod_settled = (
        "request.kind.kind == 'Pod' && request.operation != 'CREATE' && "
        "!(has(request.subResource) && request.subResource == 'ephemeralcontainers')"
    )
    message = f"request.kind.kind + ' in ' + {_str(admission.namespace)} + " + _str(
        f" does not run as team {team}'s user and group; set securityContext.runAsUser: "
        f"{uid} and runAsGroup: {gid} in the pod spec and no other in its containers "
        "(hpctl job render writes them)"
    )
    resources = [
        (group, version, [plural, "pods/ephemeralcontainers"] if kind == "Pod" else [plural])
        for group, version, plural, kind in MATCHED
    ]
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": identity_policy_name(team)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": [version],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": plurals,
                    }
                    for group, version, plurals in resources
                ]
            },
            "matchConditions": [
                {
                    "name": "not-being-deleted",
                    "expression": "!has(object.metadata.deletionTimestamp)",
                },
            ],
            "variables": [{"name": "podSpecs", "expression": POD_SPECS}],
            "validations": [
                _validation(f"({pod_settled}) || {_runs_as(admission)}", message),
            ],
        },
    }


def admission_binding(admission: TeamAdmission, *, name: str | None = None) -> dict[str, Any]:
    """Binds the policy `name` (default: the team's guardrails) of `admission`'s team to the
    team's namespace only, denying."""
    name = name or policy_name(admission.team)
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: admission.namespace}}
            },
        },
    }


class TeamAdmissionPolicy(Construct):
    """Applies the policy and its binding; `manifest` is the KubernetesManifest."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        admission: TeamAdmission,
        cluster: eks_v2.ICluster,
    ) -> None:
        super().__init__(scope, construct_id)
        self.manifest = eks_v2.KubernetesManifest(
            self,
            "Manifest",
            cluster=cluster,
            manifest=[
                admission_policy(admission),
                admission_binding(admission),
                identity_policy(admission),
                admission_binding(admission, name=identity_policy_name(admission.team)),
            ],
            overwrite=True,
        )
