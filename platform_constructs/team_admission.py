"""Admission guardrails of a task-governance team namespace: ValidatingAdmissionPolicies
(admissionregistration.k8s.io/v1, GA in Kubernetes 1.30), each bound to `hyperpod-ns-<team>`
only and denying. Four policies, the facts they check in config/team_admission.py:

1. Accelerators (`hyperpod-team-<team>`): nothing that asks for an accelerator runs outside the
   team's Kueue queue and quota (matchConditions: only workloads that ask for one).
   - HyperPodPyTorchJobs and batch Jobs. Kueue queues the workload, not its pods: the queue and
     priority-class labels go on the job (Kueue's "Run a Kubernetes Job" and HyperPod task
     governance's job submission docs), and Kueue keeps a labelled job suspended until the
     team's ClusterQueue admits it. A job without the team's queue label starts at once,
     outside the quota: denied.
   - Pods. The pods of an admitted job come from the Job controller or the HyperPod training
     operator and need not carry the queue label (the operator's pods do not; Kueue never asks
     it of a Job's pods). Any other pod that asks for an accelerator (a bare pod, a
     Deployment's or StatefulSet's pods) is denied: task governance queues jobs, and a bare
     pod, labelled or not, is only queued where Kueue's pod integration is on, which HyperPod
     does not document.
2. Identity (`-identity`): every pod and pod template runs as the team's user and group
   (runAsUser/runAsGroup, which no container may override) and joins no other group (fsGroup
   and every supplementalGroups entry the team's group id). The team's directories belong to
   that user and group (config/teams.py), so a pod is never another team's on the file system.
3. Placement (`-placement`): every pod and pod template, accelerators or not (issue: a CPU pod
   that tolerates everything, names a node or sets NVIDIA_VISIBLE_DEVICES ran next to another
   team's job):
   - it selects only the team's nodes, through nodeSelector or required node affinity on the
     instance group or type label (operator In), and a pod must select them when created (one
     that selects nothing may land on any untainted node). No nodeName: it bypasses the
     scheduler and with it taints (Kubernetes "Assigning Pods to Nodes", nodeName); no
     matchFields (they name nodes too);
   - it tolerates only the taints of the team's nodes, as `hpctl job render` tolerates them, and
     what the API server adds itself (never an empty key: that tolerates every taint);
   - no container sets NVIDIA_VISIBLE_DEVICES (but `void`, no GPU at all, which HyperPod's own
     health-monitoring agent sets: aws/sagemaker-hyperpod-cli, helm_chart/.../
     health-monitoring-agent.yaml), GPU request or not: in the NVIDIA Container Toolkit's and
     device plugin's default configuration (`accept-nvidia-visible-devices-envvar-when-
     unprivileged = true`, DEVICE_LIST_STRATEGY envvar) an unprivileged container that sets it
     gets GPUs it did not request, or more than it requested (NVIDIA GPU Operator, "Security
     Considerations: Preventing Unprivileged Access to GPUs"); the device plugin sets it itself
     for the GPUs it allocates. NVIDIA_DRIVER_CAPABILITIES only picks the driver libraries that
     come with visible GPUs: refused in a container that requests no nvidia.com/gpu.
     Admission sees neither a variable an image sets (CUDA base images set
     NVIDIA_VISIBLE_DEVICES=all) nor one from envFrom: only those toolkit and device plugin
     settings close that, and until then the node rule keeps such a pod on its team's nodes.
4. NetworkPolicies (`-network-policies`): team principals create, change and delete none in
   their namespace. AmazonEKSEditPolicy, which their access entries carry there, includes
   networking.k8s.io networkpolicies create/update/patch/delete (EKS User Guide, "Review access
   policy permissions"), and a policy a team adds only opens more: policies are additive
   (Kubernetes "Network Policies"), so one allowing all egress would reach the instance
   metadata address the platform's deny keeps out. An admission rule, not a narrower access
   policy: EKS access policies are fixed AWS lists that cannot drop one resource, and a
   hand-copied Role of everything else Edit grants would drift from AWS's. Matched by the
   request's groups: EKS passes an access entry's `kubernetesGroups` as the user's groups, and
   every team principal is mapped to `hyperpod-platform:team:<team>`
   (platform_constructs/team_network.py); and every service account of the namespace, which
   Edit lets a team impersonate (`serviceaccounts impersonate`), shedding its team group. The
   platform's own writes (the kubectl handler, cluster admins, the namespace controller)
   carry neither group and pass.

Who else creates pods in a team namespace: HyperPod's own system pods run in `aws-hyperpod`
(the health-monitoring agent and deep health checks: the HyperPod CLI's helm chart values),
not here; the Job controller and the training operator create a job's pods from its template,
which these policies checked with the job; Kueue changes a template only to add its flavor's
node labels (the team's instance type) when it admits the job.

Deletions of pods and jobs are never blocked, nor updates of an object being deleted
(finalizers must come off). The CEL keeps to the subset platform_constructs/admission_cel.py
describes: no join, split or optionals, so messages list the allowed values as literals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from aws_cdk import aws_eks_v2 as eks_v2
from constructs import Construct

from config.kubernetes import (
    ACCELERATOR_RESOURCES,
    DEFAULT_TOLERATION_KEYS,
    GPU_RESOURCE,
    HYPERPOD_JOB_GROUP,
    HYPERPOD_JOB_KIND,
    HYPERPOD_JOB_RESOURCE,
    HYPERPOD_JOB_VERSION,
    INSTANCE_GROUP_LABEL,
    INSTANCE_TYPE_LABEL,
    NVIDIA_DRIVER_CAPABILITIES_ENV,
    NVIDIA_NO_DEVICES,
    NVIDIA_VISIBLE_DEVICES_ENV,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    TEAM_ACCESS_GROUP_PREFIX,
    service_accounts_group,
)
from config.team_admission import TeamAdmission
from platform_constructs.admission_cel import (
    ADMISSION_API_VERSION,
    NOT_BEING_DELETED,
    cel_list,
    cel_string,
    has_chain,
    validating_policy,
    validation,
    words,
)

POLICY_PREFIX: Final = "hyperpod-team-"
NAMESPACE_NAME_LABEL: Final = (
    "kubernetes.io/metadata.name"  # set on every namespace by the API server
)

# What the pod policies match: (API group, version, plural, kind).
MATCHED: Final = (
    ("", "v1", "pods", "Pod"),
    ("batch", "v1", "jobs", "Job"),
    (HYPERPOD_JOB_GROUP, HYPERPOD_JOB_VERSION, HYPERPOD_JOB_RESOURCE, HYPERPOD_JOB_KIND),
)
EPHEMERAL_CONTAINERS: Final = "pods/ephemeralcontainers"
NETWORK_POLICY_RULE: Final = ("networking.k8s.io", "v1", "networkpolicies")

IDENTITY_SUFFIX: Final = "-identity"
PLACEMENT_SUFFIX: Final = "-placement"
NETWORK_POLICIES_SUFFIX: Final = "-network-policies"


def policy_name(team: str) -> str:
    return f"{POLICY_PREFIX}{team}"


def identity_policy_name(team: str) -> str:
    return f"{POLICY_PREFIX}{team}{IDENTITY_SUFFIX}"


def placement_policy_name(team: str) -> str:
    return f"{POLICY_PREFIX}{team}{PLACEMENT_SUFFIX}"


def network_policies_policy_name(team: str) -> str:
    return f"{POLICY_PREFIX}{team}{NETWORK_POLICIES_SUFFIX}"


# The pod specs of the object under review: a pod's own, a Job's template, every replica spec
# of a HyperPodPyTorchJob.
POD_SPECS: Final = (
    "request.kind.kind == 'Pod' ? [object.spec] : "
    "(request.kind.kind == 'Job' ? [object.spec.template.spec] : "
    "object.spec.replicaSpecs.map(r, r.template.spec))"
)
# A pod's spec is settled when it is created (or an ephemeral container added); its later
# updates (labels, annotations, by anyone) are not held to what only creation decides, so
# pods that predate a rule keep running and can be relabelled.
POD_VARIABLES: Final = {"podSpecs": POD_SPECS}
POD_SETTLED: Final = (
    "(request.kind.kind == 'Pod' && request.operation != 'CREATE' && "
    "!(has(request.subResource) && request.subResource == 'ephemeralcontainers'))"
)
POD_CREATED_BEFORE: Final = "(request.kind.kind == 'Pod' && request.operation != 'CREATE')"


def _containers(spec: str, *, ephemeral: bool = False) -> str:
    kinds = ("containers", "initContainers", "ephemeralContainers")[: 3 if ephemeral else 2]
    return "(" + " + ".join(f"(has({spec}.{k}) ? {spec}.{k} : [])" for k in kinds) + ")"


def _asks(container: str, field: str, resources: Sequence[str] = ACCELERATOR_RESOURCES) -> str:
    return (
        f"({has_chain(container, 'resources', field)} && "
        f"{cel_list(resources)}.exists(x, x in {container}.resources.{field}))"
    )


ASKS_FOR_ACCELERATORS: Final = (
    f"({POD_SPECS}).exists(s, {_containers('s')}.exists(c, "
    f"{_asks('c', 'requests')} || {_asks('c', 'limits')}))"
)


def _label_is(label: str, allowed: list[str]) -> str:
    return (
        f"has(object.metadata.labels) && {cel_string(label)} in object.metadata.labels && "
        f"object.metadata.labels[{cel_string(label)}] in {cel_list(allowed)}"
    )


def _label_found(label: str) -> str:
    """The label's value as the message shows it."""
    return (
        f"(has(object.metadata.labels) && {cel_string(label)} in object.metadata.labels ? "
        f"{cel_string(label + '=')} + object.metadata.labels[{cel_string(label)}] : 'no ' + {cel_string(label)})"
    )


REQUIRED_AFFINITY: Final = "s.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
HAS_REQUIRED_TERMS: Final = (
    f"({has_chain('s', 'affinity', 'nodeAffinity')} && has({REQUIRED_AFFINITY}) && "
    f"has({REQUIRED_AFFINITY}.nodeSelectorTerms))"
)


def _selects_only_own_nodes(admission: TeamAdmission) -> str:
    """Whatever selects nodes names only the team's groups and types, and no node by name."""
    groups, types = cel_list(admission.instance_groups), cel_list(admission.instance_types)
    group, kind = cel_string(INSTANCE_GROUP_LABEL), cel_string(INSTANCE_TYPE_LABEL)
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
    affinity = (
        f"(!{HAS_REQUIRED_TERMS} || {REQUIRED_AFFINITY}.nodeSelectorTerms.all(t, "
        "(!has(t.matchFields) || size(t.matchFields) == 0) && "
        f"(!has(t.matchExpressions) || t.matchExpressions.all(e, {expression}))))"
    )
    # The scheduler binds a pod by setting its nodeName: a bound pod's later updates must
    # pass. A job's template has no binding, and a HyperPodPyTorchJob's is mutable: always.
    no_node_name = f"({POD_CREATED_BEFORE} || !has(s.nodeName) || s.nodeName == '')"
    return f"variables.podSpecs.all(s, {no_node_name} && {selector} && {affinity})"


def _selects_own_nodes_at_all() -> str:
    """A selection by instance group or type, in nodeSelector or in every required term (their
    values are held to the team's by `_selects_only_own_nodes`). Pods once created: settled."""
    labels = cel_list((INSTANCE_GROUP_LABEL, INSTANCE_TYPE_LABEL))
    by_selector = f"(has(s.nodeSelector) && {labels}.exists(l, l in s.nodeSelector))"
    by_affinity = (
        f"({HAS_REQUIRED_TERMS} && size({REQUIRED_AFFINITY}.nodeSelectorTerms) > 0 && "
        f"{REQUIRED_AFFINITY}.nodeSelectorTerms.all(t, has(t.matchExpressions) && "
        f"t.matchExpressions.exists(e, e.key in {labels} && e.operator == 'In')))"
    )
    return f"{POD_CREATED_BEFORE} || variables.podSpecs.all(s, {by_selector} || {by_affinity})"


def _given(toleration: Mapping[str, str]) -> str:
    """`t` is exactly `toleration` (operator Equal when left out, value '' when left out)."""
    operator = "(has(t.operator) ? t.operator : 'Equal')"
    value = "(has(t.value) ? t.value : '')"
    return (
        f"(t.key == {cel_string(toleration['key'])} && has(t.effect) && "
        f"t.effect == {cel_string(toleration['effect'])} && {operator} == "
        f"{cel_string(toleration['operator'])} && {value} == {cel_string(toleration.get('value', ''))})"
    )


def _tolerates_given(admission: TeamAdmission) -> str:
    given = " || ".join(_given(t) for t in admission.tolerations) or "false"
    # The API server adds the not-ready/unreachable tolerations to every pod, and the
    # ExtendedResourceToleration admission plugin (on in EKS) one per extended resource a pod
    # requests (key = the resource, operator Exists).
    added = (
        f"t.key in {cel_list(DEFAULT_TOLERATION_KEYS)} || (t.key in "
        f"{cel_list(ACCELERATOR_RESOURCES)} && has(t.operator) && t.operator == 'Exists')"
    )
    return (
        "variables.podSpecs.all(s, !has(s.tolerations) || s.tolerations.all(t, "
        f"has(t.key) && ({added} || {given})))"
    )


def _toleration_words(admission: TeamAdmission) -> str:
    def word(t: Mapping[str, str]) -> str:
        value = f"={t['value']}" if "value" in t else ""
        return f"{t['key']}{value}:{t['effect']}"

    return words(word(t) for t in admission.tolerations)


def _sets_no_devices() -> str:
    """No container chooses its own GPUs; `void` (none) is allowed."""
    return (
        f"{POD_SETTLED} || variables.podSpecs.all(s, {_containers('s', ephemeral=True)}.all(c, "
        f"!has(c.env) || c.env.all(e, e.name != {cel_string(NVIDIA_VISIBLE_DEVICES_ENV)} || "
        f"(has(e.value) && e.value == {cel_string(NVIDIA_NO_DEVICES)}))))"
    )


def _driver_capabilities_only_with_gpus() -> str:
    """NVIDIA_DRIVER_CAPABILITIES only in a container that requests GPUs ('' is no choice)."""
    gpus = [GPU_RESOURCE]
    return (
        f"{POD_SETTLED} || variables.podSpecs.all(s, {_containers('s', ephemeral=True)}.all(c, "
        f"{_asks('c', 'requests', gpus)} || {_asks('c', 'limits', gpus)} || !has(c.env) || "
        f"c.env.all(e, e.name != {cel_string(NVIDIA_DRIVER_CAPABILITIES_ENV)} || "
        "(!has(e.value) && !has(e.valueFrom)) || (has(e.value) && e.value == ''))))"
    )


def _subject(admission: TeamAdmission) -> str:
    """The message's start: the object's kind and namespace."""
    return f"request.kind.kind + ' in ' + {cel_string(admission.namespace)}"


def _pod_rules(*, ephemeral: bool) -> list[tuple[str, str, Sequence[str]]]:
    """MATCHED as resource rules; with `ephemeral`, pods' ephemeral containers too."""
    return [
        (
            group,
            version,
            [plural, EPHEMERAL_CONTAINERS] if kind == "Pod" and ephemeral else [plural],
        )
        for group, version, plural, kind in MATCHED
    ]


def admission_policy(admission: TeamAdmission) -> dict[str, Any]:
    """The accelerator policy of `admission`'s namespace."""
    return validating_policy(
        policy_name(admission.team),
        _pod_rules(ephemeral=False),
        variables=POD_VARIABLES,
        conditions=(
            NOT_BEING_DELETED,
            {"name": "asks-for-accelerators", "expression": ASKS_FOR_ACCELERATORS},
        ),
        validations=_accelerator_validations(admission),
    )


def _accelerator_validations(admission: TeamAdmission) -> list[dict[str, str]]:
    """The accelerator policy's rules, each with the one-line message that names the fix."""
    team, queue = admission.team, admission.queue
    subject = _subject(admission)
    asks = f" asks for accelerators ({', '.join(ACCELERATOR_RESOURCES)})"

    def says(text: str, found: str = "") -> str:
        """The message: the object's kind and namespace, what it asks for and carries
        (`found`, a CEL string) where that is the problem, then `text`."""
        if not found:
            return f"{subject} + {cel_string(text)}"
        return f"{subject} + {cel_string(asks + ' with ')} + {found} + {cel_string(text)}"

    not_pod = "request.kind.kind != 'Pod'"
    return [
        validation(
            # Where a pod comes from is settled when it is created.
            f"{not_pod} || request.operation != 'CREATE' || "
            f"request.userInfo.username in {cel_list(admission.workload_creators)}",
            says(
                f"{asks} outside a job, which bypasses team {team}'s queue and quota; submit "
                f"it as a HyperPodPyTorchJob or Job labelled {QUEUE_LABEL}={queue} "
                "(hpctl job render writes one)"
            ),
        ),
        validation(
            f"{not_pod} ? ({_label_is(QUEUE_LABEL, [queue])}) : true",
            says(
                f", so Kueue would not hold it to team {team}'s quota; add the label "
                f"{QUEUE_LABEL}: {queue} to metadata.labels",
                found=_label_found(QUEUE_LABEL),
            ),
        ),
        validation(
            f"{not_pod} ? ({_label_is(PRIORITY_LABEL, list(admission.priority_classes))}) : true",
            says(
                f"; add the label {PRIORITY_LABEL} to metadata.labels with one of "
                f"{words(admission.priority_classes)}",
                found=_label_found(PRIORITY_LABEL),
            ),
        ),
    ]


def placement_policy(admission: TeamAdmission) -> dict[str, Any]:
    """The placement policy of `admission`'s namespace: every pod and pod template selects the
    team's nodes, tolerates only their taints and chooses no GPUs of its own."""
    team, subject = admission.team, _subject(admission)
    nodes = (
        f"select only instance groups {words(admission.instance_groups)} "
        f"({INSTANCE_GROUP_LABEL}) or instance types {words(admission.instance_types)} "
        f"({INSTANCE_TYPE_LABEL}) through nodeSelector or required node affinity (operator In)"
    )
    return validating_policy(
        placement_policy_name(team),
        _pod_rules(ephemeral=True),
        variables=POD_VARIABLES,
        validations=[
            validation(
                _selects_only_own_nodes(admission),
                f"{subject} + "
                + cel_string(
                    f" selects nodes that are not team {team}'s; {nodes}, without nodeName or "
                    "matchFields"
                ),
            ),
            validation(
                _selects_own_nodes_at_all(),
                f"{subject} + "
                + cel_string(
                    f" selects none of team {team}'s nodes and could run on any node; {nodes} "
                    "(hpctl job render writes both labels in spec.nodeSelector)"
                ),
            ),
            validation(
                _tolerates_given(admission),
                f"{subject} + "
                + cel_string(
                    f" tolerates taints team {team} was not given; tolerate only its nodes' "
                    f"taints, as hpctl job render does: {_toleration_words(admission)} "
                    "(operator Equal with the value, Exists without; never an empty key)"
                ),
            ),
            validation(
                _sets_no_devices(),
                f"{subject} + "
                + cel_string(
                    f" sets {NVIDIA_VISIBLE_DEVICES_ENV} in a container, which would reach GPUs "
                    f"it was not allocated; remove it from env (request {GPU_RESOURCE} in "
                    "resources and the device plugin sets it; "
                    f"{NVIDIA_VISIBLE_DEVICES_ENV}={NVIDIA_NO_DEVICES} is allowed)"
                ),
            ),
            validation(
                _driver_capabilities_only_with_gpus(),
                f"{subject} + "
                + cel_string(
                    f" sets {NVIDIA_DRIVER_CAPABILITIES_ENV} in a container that requests no "
                    f"{GPU_RESOURCE}; remove it from env, or request {GPU_RESOURCE} in that "
                    "container's resources"
                ),
            ),
        ],
    )


def _runs_as(admission: TeamAdmission) -> str:
    uid, gid = admission.user_id, admission.group_id
    pod = (
        f"{has_chain('s', 'securityContext', 'runAsUser')} && s.securityContext.runAsUser == "
        f"{uid} && has(s.securityContext.runAsGroup) && s.securityContext.runAsGroup == {gid}"
    )
    container = (
        "(!has(c.securityContext) || ((!has(c.securityContext.runAsUser) || "
        f"c.securityContext.runAsUser == {uid}) && (!has(c.securityContext.runAsGroup) || "
        f"c.securityContext.runAsGroup == {gid})))"
    )
    return f"variables.podSpecs.all(s, {pod} && {_containers('s', ephemeral=True)}.all(c, {container}))"


def _joins_only_own_group(admission: TeamAdmission, field: str) -> str:
    """The pod securityContext's `field` (fsGroup or supplementalGroups) is absent or the
    team's group id alone."""
    gid = admission.group_id
    value = f"s.securityContext.{field}"
    check = f"{value}.all(g, g == {gid})" if field == "supplementalGroups" else f"{value} == {gid}"
    return f"variables.podSpecs.all(s, !({has_chain('s', 'securityContext', field)}) || {check})"


def identity_policy(admission: TeamAdmission) -> dict[str, Any]:
    """The identity policy of `admission`'s namespace: every pod runs as the team's user and
    group and joins no other group."""
    team, uid, gid = admission.team, admission.user_id, admission.group_id
    subject = _subject(admission)

    def joins(field: str) -> dict[str, str]:
        return validation(
            f"{POD_SETTLED} || {_joins_only_own_group(admission, field)}",
            f"{subject} + "
            + cel_string(
                f" joins a group that is not team {team}'s through securityContext.{field}; "
                f"set it to {gid} (team {team}'s group) or leave it out"
            ),
        )

    return validating_policy(
        identity_policy_name(team),
        _pod_rules(ephemeral=True),
        variables=POD_VARIABLES,
        validations=[
            validation(
                f"{POD_SETTLED} || {_runs_as(admission)}",
                f"{subject} + "
                + cel_string(
                    f" does not run as team {team}'s user and group; set securityContext."
                    f"runAsUser: {uid} and runAsGroup: {gid} in the pod spec and no other in "
                    "its containers (hpctl job render writes them)"
                ),
            ),
            joins("fsGroup"),
            joins("supplementalGroups"),
        ],
    )


def network_policies_policy(admission: TeamAdmission) -> dict[str, Any]:
    """The NetworkPolicy guard of `admission`'s namespace: no team principal, and no service
    account of the namespace, creates, changes or deletes a NetworkPolicy there."""
    group, version, plural = NETWORK_POLICY_RULE
    own_accounts = cel_string(service_accounts_group(admission.namespace))
    team_request = (
        "has(request.userInfo.groups) && request.userInfo.groups.exists(g, "
        f"g.startsWith({cel_string(TEAM_ACCESS_GROUP_PREFIX)}) || g == {own_accounts})"
    )
    message = "request.operation + ' of a NetworkPolicy in ' + " + cel_string(
        f"{admission.namespace} by a team principal or service account: the platform's "
        "NetworkPolicies fence the namespace (instance metadata, other teams) and any added "
        "one only opens it; have a platform admin change them (platform_constructs/"
        "team_network.py)"
    )
    return validating_policy(
        network_policies_policy_name(admission.team),
        [(group, version, [plural])],
        operations=("CREATE", "UPDATE", "DELETE"),
        conditions=(),
        validations=[validation(f"!({team_request})", message)],
    )


def admission_binding(admission: TeamAdmission, *, name: str | None = None) -> dict[str, Any]:
    """Binds the policy `name` (default: the team's accelerator policy) of `admission`'s team
    to the team's namespace only, denying."""
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


def team_admission_manifest(admission: TeamAdmission) -> list[dict[str, Any]]:
    """Every policy of `admission`'s namespace, each followed by its binding."""
    policies = (
        admission_policy(admission),
        identity_policy(admission),
        placement_policy(admission),
        network_policies_policy(admission),
    )
    return [
        o
        for policy in policies
        for o in (policy, admission_binding(admission, name=policy["metadata"]["name"]))
    ]


class TeamAdmissionPolicy(Construct):
    """Applies the team's policies and their bindings; `manifest` is the KubernetesManifest."""

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
            manifest=team_admission_manifest(admission),
            overwrite=True,
        )
