"""Each team namespace's admission policy, evaluated offline: its CEL runs in cel-python the way
the API server runs a ValidatingAdmissionPolicy (resource rules, the binding's namespace,
match conditions, variables, then every validation), against every job `hpctl job render`
writes for every environment (all admitted, and so are the pods the operator makes of them)
and against planted violations (each denied with the message that says what to add)."""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import celpy
import kubernetes_validate
import pytest

from config.instance_types import lookup
from config.kubernetes import (
    ACCELERATOR_RESOURCES,
    DEFAULT_TOLERATION_KEYS,
    GPU_RESOURCE,
    INSTANCE_GROUP_LABEL,
    INSTANCE_TYPE_LABEL,
    JOB_CONTROLLER_USER,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    local_queue,
)
from config.schema import EnvironmentConfig
from config.team_admission import TeamAdmission, team_admissions
from config.team_groups import team_gid, team_uid
from config.teams import team_capacity
from hpctl.job.render import render_job
from platform_constructs.team_admission import (
    MATCHED,
    TeamAdmissionPolicy,
    team_admission_manifest,
)
from tests.job.conftest import env_spec
from tests.support import (
    ENVIRONMENTS,
    KUBERNETES_VALIDATE_VERSIONS,
    bare_stack,
    environment,
    imported_cluster,
    kubernetes_objects,
    template_of,
    variant_of,
)

OPERATOR_USER = "system:serviceaccount:aws-hyperpod:hp-training-operator-controller-manager"
PERSON = "arn:aws:sts::111111111111:assumed-role/Researcher/alice"
_CEL = celpy.Environment()


@dataclass(frozen=True)
class Admission:
    """The policies and bindings of one environment, run like the API server runs them."""

    objects: tuple[dict[str, Any], ...]

    def review(
        self,
        obj: dict[str, Any],
        *,
        user: str = PERSON,
        operation: str = "CREATE",
        namespace: str | None = None,
        sub_resource: str | None = None,
    ) -> list[str] | None:
        """The denial messages of every policy bound to the namespace for `obj` (empty:
        admitted), or None if none matches."""
        namespace = namespace or obj["metadata"]["namespace"]
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = {kind: p for _, _, p, kind in MATCHED}.get(obj["kind"])
        resource = f"{plural}/{sub_resource}" if sub_resource else plural
        request: dict[str, Any] = {
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "operation": operation,
            "namespace": namespace,
            "userInfo": {"username": user},
        }
        if sub_resource:
            request["subResource"] = sub_resource
        denials: list[str] | None = None
        for policy in self._policies_for(namespace):
            rules = policy["spec"]["matchConstraints"]["resourceRules"]
            if not any(
                group in r["apiGroups"]
                and version in r["apiVersions"]
                and resource in r["resources"]
                and operation in r["operations"]
                for r in rules
            ):
                continue
            activation: dict[str, Any] = {
                "object": celpy.json_to_cel(obj),
                "request": celpy.json_to_cel(request),
            }
            conditions = policy["spec"]["matchConditions"]
            if not all(_run(c["expression"], activation) for c in conditions):
                continue
            activation["variables"] = celpy.celtypes.MapType(
                {
                    celpy.celtypes.StringType(v["name"]): _run(v["expression"], activation)
                    for v in policy["spec"]["variables"]
                }
            )
            denials = (denials or []) + [
                str(_run(v["messageExpression"], activation))
                for v in policy["spec"]["validations"]
                if not _run(v["expression"], activation)
            ]
        return denials

    def _policies_for(self, namespace: str) -> list[dict[str, Any]]:
        policies = {o["metadata"]["name"]: o for o in self.objects if o["kind"].endswith("Policy")}
        return [
            policies[binding["spec"]["policyName"]]
            for binding in (o for o in self.objects if o["kind"].endswith("Binding"))
            if binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
            == {"kubernetes.io/metadata.name": namespace}
        ]


def _run(expression: str, activation: dict[str, Any]) -> Any:
    """`expression` evaluated on an activation already in CEL types."""
    return _program(expression).evaluate(activation)


@functools.cache
def _program(expression: str) -> Any:
    """`expression` compiled once: parsing CEL takes far longer than evaluating it, and every
    review runs the same few dozen expressions."""
    return _CEL.program(_CEL.compile(expression))


def _admission_of(config: EnvironmentConfig) -> Admission:
    assert config.governance is not None
    facts = team_admissions(config.governance, config.hyperpod.instance_groups)
    return Admission(tuple(o for a in facts.values() for o in team_admission_manifest(a)))


def _operator_pod(job: dict[str, Any]) -> dict[str, Any]:
    """A pod of `job` as the API server stores it: the replica template, with the tolerations
    the DefaultTolerationSeconds and ExtendedResourceToleration admission plugins add."""
    template = copy.deepcopy(job["spec"]["replicaSpecs"][0]["template"])
    spec = template["spec"]
    requested = spec["containers"][0]["resources"]["requests"]
    spec["tolerations"] = [
        *spec.get("tolerations", []),
        *(
            {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            for key in DEFAULT_TOLERATION_KEYS
        ),
        *(
            {"key": r, "operator": "Exists", "effect": "NoSchedule"}
            for r in ACCELERATOR_RESOURCES
            if r in requested
        ),
    ]
    metadata = {**template["metadata"], "name": f"{job['metadata']['name']}-worker-0"}
    metadata["namespace"] = job["metadata"]["namespace"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _batch_job(job: dict[str, Any]) -> dict[str, Any]:
    """The rendered job's labels and pod template as a batch Job."""
    template = copy.deepcopy(job["spec"]["replicaSpecs"][0]["template"])
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": copy.deepcopy(job["metadata"]),
        "spec": {"template": template},
    }


def _rendered_jobs(config: EnvironmentConfig) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every job `hpctl job render` writes for `config`: each team on each accelerated group
    it may use, at one node and at its largest size, at every priority class."""
    assert config.governance is not None
    for team in config.governance.teams_by_name():
        for capacity in team_capacity(config.governance, team, config.hyperpod.instance_groups):
            if capacity.max_job_nodes == 0 or not lookup(capacity.instance_type).has_accelerators:
                continue
            for nodes, priority in itertools.product(
                sorted({1, capacity.max_job_nodes}), config.governance.priority_classes
            ):
                spec = env_spec(
                    config,
                    team=team.name,
                    instance_group=capacity.instance_group,
                    nodes=nodes,
                    priority=priority.name,
                )
                yield (
                    f"{team.name}/{capacity.instance_group}/{nodes}/{priority.name}",
                    render_job(spec),
                )


def _tainted_dev() -> EnvironmentConfig:
    """dev with taints: the GPU group (the sandbox team's) dedicated to training, and the
    system group (no team's GPUs) tainted for system pods."""

    def mutate(data: dict[str, Any]) -> None:
        gpu, system = data["hyperpod"]["instance_groups"]
        gpu.pop("deep_health_checks", None)
        gpu["taints"] = [
            {"key": "example.com/dedicated", "value": "training", "effect": "NoSchedule"},
            {"key": "example.com/gpu", "effect": "NoExecute"},
        ]
        system["taints"] = [{"key": "example.com/system", "effect": "NoSchedule"}]

    return variant_of("dev", mutate).config


CONFIGS = {name: environment(name).config for name in ENVIRONMENTS} | {
    "dev-tainted": _tainted_dev()
}
RENDERED = [
    pytest.param(name, job, id=f"{name}:{label}")
    for name, config in CONFIGS.items()
    for label, job in _rendered_jobs(config)
]


def _tainted_job() -> dict[str, Any]:
    return render_job(
        env_spec(CONFIGS["dev-tainted"], team="sandbox", instance_group="gpu-g5", nodes=1)
    )


@pytest.fixture(scope="module")
def admissions() -> dict[str, Admission]:
    return {name: _admission_of(config) for name, config in CONFIGS.items()}


# ------------------------------------------------------------------ what is admitted


def test_every_environment_renders_jobs_for_every_team() -> None:
    teams = {(p.values[0], p.values[1]["metadata"]["namespace"]) for p in RENDERED}
    expected = {
        (name, f"hyperpod-ns-{t.name}")
        for name, config in CONFIGS.items()
        for t in (config.governance.teams if config.governance else [])
    }
    assert teams == expected


@pytest.mark.parametrize(("env", "job"), RENDERED)
def test_rendered_job_and_its_pods_are_admitted(
    admissions: dict[str, Admission], env: str, job: dict[str, Any]
) -> None:
    admission = admissions[env]
    assert admission.review(job) == []
    assert admission.review(job, operation="UPDATE") == []
    pod = _operator_pod(job)
    assert admission.review(pod, user=OPERATOR_USER) == []
    # Once bound, its updates (labels, annotations) by anyone pass too.
    pod["spec"]["nodeName"] = "hyperpod-i-0123456789abcdef0"
    assert admission.review(pod, user=OPERATOR_USER, operation="UPDATE") == []
    assert admission.review(pod, user=PERSON, operation="UPDATE") == []


@pytest.mark.parametrize("env", sorted(CONFIGS))
def test_rendered_job_as_a_batch_job_and_its_pods_are_admitted(
    admissions: dict[str, Admission], env: str
) -> None:
    job = next(job for name, job in (p.values for p in RENDERED) if name == env)
    batch = _batch_job(job)
    assert admissions[env].review(batch) == []
    pod = _operator_pod(job)
    assert admissions[env].review(pod, user=JOB_CONTROLLER_USER) == []


def test_tainted_group_jobs_tolerate_exactly_the_given_taints(
    admissions: dict[str, Admission],
) -> None:
    job = _tainted_job()
    tolerations = job["spec"]["replicaSpecs"][0]["template"]["spec"]["tolerations"]
    assert {t["key"] for t in tolerations} == {"example.com/dedicated", "example.com/gpu"}
    assert admissions["dev-tainted"].review(job) == []


# ------------------------------------------------------------------ what is not matched


@pytest.fixture
def job() -> dict[str, Any]:
    """prod's foundation team, 2 nodes of gpu-p5: an admitted job to plant violations in."""
    return render_job(env_spec("prod"))


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "Pod":
        return obj["spec"]
    return obj["spec"]["replicaSpecs"][0]["template"]["spec"]


def _without_accelerators(obj: dict[str, Any]) -> dict[str, Any]:
    for container in _pod_spec(obj)["containers"]:
        for field in ("requests", "limits"):
            for resource in ACCELERATOR_RESOURCES:
                container["resources"][field].pop(resource, None)
    return obj


def test_workloads_without_accelerators_are_not_checked(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    # Only the identity policy checks them, and they run as the team.
    job["metadata"]["labels"] = {}
    assert admissions["prod"].review(_without_accelerators(job)) == []
    pod = _without_accelerators(_operator_pod(render_job(env_spec("prod"))))
    assert admissions["prod"].review(pod, user=PERSON) == []


def test_an_accelerator_in_limits_alone_is_checked(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    resources = _pod_spec(job)["containers"][0]["resources"]
    for resource in ACCELERATOR_RESOURCES:
        resources["requests"].pop(resource, None)
    job["metadata"]["labels"].pop(QUEUE_LABEL)
    assert len(admissions["prod"].review(job) or []) == 1


def test_an_accelerator_in_an_init_container_is_checked(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    spec = _pod_spec(job)
    spec["initContainers"] = [
        {"name": "warm", "image": "x", "resources": {"limits": {GPU_RESOURCE: 1}}}
    ]
    _without_accelerators(job)
    job["metadata"]["labels"].pop(QUEUE_LABEL)
    assert len(admissions["prod"].review(job) or []) == 1


def test_other_namespaces_and_deletions_are_not_checked(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    job["metadata"]["labels"] = {}
    assert admissions["prod"].review(job, namespace="default") is None
    assert admissions["prod"].review(job, operation="DELETE") is None
    job["metadata"]["deletionTimestamp"] = "2026-11-26T08:00:00Z"
    assert admissions["prod"].review(job, operation="UPDATE") is None


# ------------------------------------------------------------------ planted violations


def _denied(admission: Admission, obj: dict[str, Any], **kwargs: Any) -> str:
    messages = admission.review(obj, **kwargs)
    assert messages is not None and len(messages) == 1, messages
    return messages[0]


def test_bare_pod_is_denied_whatever_its_labels(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    pod = _operator_pod(job)
    pod["metadata"]["labels"].update(job["metadata"]["labels"])
    message = _denied(admissions["prod"], pod, user=PERSON)
    assert message.startswith("Pod in hyperpod-ns-foundation asks for accelerators (")
    assert "outside a job, which bypasses team foundation's queue and quota" in message
    assert f"{QUEUE_LABEL}={local_queue('foundation')}" in message


def test_pod_of_a_deployment_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    user = "system:serviceaccount:kube-system:replicaset-controller"
    assert "outside a job" in _denied(admissions["prod"], _operator_pod(job), user=user)


def test_job_without_queue_label_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    del job["metadata"]["labels"][QUEUE_LABEL]
    message = _denied(admissions["prod"], job)
    assert message == (
        "HyperPodPyTorchJob in hyperpod-ns-foundation asks for accelerators (nvidia.com/gpu, "
        "aws.amazon.com/neuron, vpc.amazonaws.com/efa) with no kueue.x-k8s.io/queue-name, so "
        "Kueue would not hold it to team foundation's quota; add the label "
        "kueue.x-k8s.io/queue-name: hyperpod-ns-foundation-localqueue to metadata.labels"
    )


def test_batch_job_without_labels_is_denied_twice(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    batch = _batch_job(job)
    del batch["metadata"]["labels"]
    messages = admissions["prod"].review(batch) or []
    assert [m.split(" with ")[1].split(",")[0].split(";")[0] for m in messages] == [
        f"no {QUEUE_LABEL}",
        f"no {PRIORITY_LABEL}",
    ]


def test_job_in_another_teams_queue_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    job["metadata"]["labels"][QUEUE_LABEL] = local_queue("research")
    message = _denied(admissions["prod"], job)
    assert f"with {QUEUE_LABEL}=hyperpod-ns-research-localqueue, so Kueue" in message


@pytest.mark.parametrize("value", [None, "urgent-priority", "training"])
def test_job_without_a_known_priority_class_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any], value: str | None
) -> None:
    if value is None:
        del job["metadata"]["labels"][PRIORITY_LABEL]
    else:
        job["metadata"]["labels"][PRIORITY_LABEL] = value
    message = _denied(admissions["prod"], job)
    assert message.endswith(
        f"; add the label {PRIORITY_LABEL} to metadata.labels with one of "
        "experimentation-priority, production-priority, training-priority"
    )


OUTSIDE = "selects nodes that are not team foundation's; select only instance groups gpu-p5"


def test_node_selector_of_another_group_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    _pod_spec(job)["nodeSelector"][INSTANCE_GROUP_LABEL] = "system"
    assert OUTSIDE in _denied(admissions["prod"], job)


def test_node_selector_of_another_type_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    _pod_spec(job)["nodeSelector"] = {INSTANCE_TYPE_LABEL: "ml.m5.4xlarge"}
    assert OUTSIDE in _denied(admissions["prod"], job)


def _require(spec: dict[str, Any], expression: dict[str, Any]) -> None:
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"].append({"matchExpressions": [expression]})


@pytest.mark.parametrize(
    "expression",
    [
        {"key": INSTANCE_GROUP_LABEL, "operator": "In", "values": ["gpu-p5", "system"]},
        {"key": INSTANCE_GROUP_LABEL, "operator": "NotIn", "values": ["gpu-p5"]},
        {"key": INSTANCE_GROUP_LABEL, "operator": "Exists"},
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": ["ml.m5.4xlarge"]},
    ],
    ids=["in-other-group", "not-in", "exists", "other-type"],
)
def test_required_affinity_outside_the_teams_nodes_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any], expression: dict[str, Any]
) -> None:
    _require(_pod_spec(job), expression)
    assert OUTSIDE in _denied(admissions["prod"], job)


def test_required_affinity_within_the_teams_nodes_is_admitted(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    _require(_pod_spec(job), {"key": INSTANCE_GROUP_LABEL, "operator": "In", "values": ["gpu-p5"]})
    assert admissions["prod"].review(job) == []


def test_node_by_name_is_denied(admissions: dict[str, Admission], job: dict[str, Any]) -> None:
    _pod_spec(job)["nodeName"] = "hyperpod-i-0abc"
    assert OUTSIDE in _denied(admissions["prod"], job)
    job = render_job(env_spec("prod"))
    terms = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}
    affinity = _pod_spec(job)["affinity"]["nodeAffinity"]
    affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].append(terms)
    assert OUTSIDE in _denied(admissions["prod"], job)


def test_pod_created_on_a_named_node_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    pod = _operator_pod(job)
    pod["spec"]["nodeName"] = "hyperpod-i-0123456789abcdef0"
    assert OUTSIDE in _denied(admissions["prod"], pod, user=OPERATOR_USER)


def test_operator_pod_on_another_group_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    pod = _operator_pod(job)
    pod["spec"]["nodeSelector"][INSTANCE_GROUP_LABEL] = "system"
    assert OUTSIDE in _denied(admissions["prod"], pod, user=OPERATOR_USER)


@pytest.mark.parametrize(
    "toleration",
    [
        {"operator": "Exists"},
        {"key": "example.com/system", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "example.com/dedicated", "value": "other", "effect": "NoSchedule"},
        {"key": "example.com/dedicated", "value": "training"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
        {"key": "sagemaker.amazonaws.com/node-health-status", "operator": "Exists"},
    ],
    ids=[
        "wildcard",
        "other-groups-taint",
        "exists-for-a-valued-taint",
        "other-value",
        "every-effect",
        "cordoned-nodes",
        "unhealthy-nodes",
    ],
)
def test_tolerating_a_taint_not_given_is_denied(
    admissions: dict[str, Admission], toleration: dict[str, Any]
) -> None:
    job = _tainted_job()
    _pod_spec(job)["tolerations"].append(toleration)
    message = _denied(admissions["dev-tainted"], job)
    assert message == (
        "HyperPodPyTorchJob in hyperpod-ns-sandbox tolerates taints team sandbox was not "
        "given; tolerate only its nodes' taints, as hpctl job render does: "
        "example.com/dedicated=training:NoSchedule, example.com/gpu:NoExecute (operator Equal "
        "with the value, Exists without; never an empty key)"
    )


# ------------------------------------------------------------------ the manifests


@pytest.mark.parametrize("version", KUBERNETES_VALIDATE_VERSIONS)
@pytest.mark.parametrize("env", sorted(CONFIGS))
def test_manifests_validate_against_kubernetes(
    admissions: dict[str, Admission], env: str, version: str
) -> None:
    for obj in admissions[env].objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_schema_validation_catches_a_misspelt_field(admissions: dict[str, Admission]) -> None:
    policy = copy.deepcopy(admissions["prod"].objects[0])
    policy["spec"]["validations"][0]["messageExpresion"] = "'x'"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(policy, KUBERNETES_VALIDATE_VERSIONS[-1], strict=True)


def test_binding_denies_in_the_team_namespace_only(admissions: dict[str, Admission]) -> None:
    bindings = [o for o in admissions["prod"].objects if o["kind"].endswith("Binding")]
    # Four per team: accelerators, identity, placement and NetworkPolicies.
    assert [b["spec"]["validationActions"] for b in bindings] == [["Deny"]] * 12
    assert [b["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] for b in bindings] == [
        {"kubernetes.io/metadata.name": f"hyperpod-ns-{t}"}
        for t in ("evaluation", "foundation", "research")
        for _ in range(4)
    ]


def test_team_facts_come_from_its_quota_types() -> None:
    config = CONFIGS["prod"]
    assert config.governance is not None
    facts: dict[str, TeamAdmission] = team_admissions(
        config.governance, config.hyperpod.instance_groups
    )
    assert facts["foundation"].instance_groups == ("gpu-p5",)
    assert facts["research"].instance_groups == ("gpu-p5", "system")
    assert facts["research"].instance_types == ("ml.m5.4xlarge", "ml.p5.48xlarge")
    assert facts["foundation"].workload_creators == (JOB_CONTROLLER_USER, OPERATOR_USER)


def test_construct_applies_policy_and_binding() -> None:
    stack = bare_stack("Admission")
    config = CONFIGS["prod"]
    assert config.governance is not None
    facts = team_admissions(config.governance, config.hyperpod.instance_groups)
    TeamAdmissionPolicy(
        stack, "Admission", admission=facts["foundation"], cluster=imported_cluster(stack)
    )
    objects = kubernetes_objects(template_of(stack).to_json())
    expected = team_admission_manifest(facts["foundation"])
    # CDK adds its prune label to metadata; the rest is applied as built.
    assert [(o["kind"], o["metadata"]["name"], o["spec"]) for o in objects] == [
        (o["kind"], o["metadata"]["name"], o["spec"]) for o in expected
    ]


# ------------------------------------------------------------------ identity


def _identity_denied(admission: Admission, obj: dict[str, Any], **kwargs: Any) -> str:
    message = _denied(admission, obj, **kwargs)
    assert message.endswith(
        f"does not run as team foundation's user and group; set securityContext.runAsUser: "
        f"{team_uid('foundation')} and runAsGroup: {team_gid('foundation')} in the pod spec "
        "and no other in its containers (hpctl job render writes them)"
    )
    return message


def test_job_running_as_another_teams_user_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    other = next(t for t in team_admissions_of("prod") if t != "foundation")
    _pod_spec(job)["securityContext"]["runAsUser"] = team_uid(other)
    message = _identity_denied(admissions["prod"], job)
    assert message.startswith("HyperPodPyTorchJob in hyperpod-ns-foundation does not run as")


def test_job_in_another_teams_group_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    other = next(t for t in team_admissions_of("prod") if t != "foundation")
    _pod_spec(job)["securityContext"]["runAsGroup"] = team_gid(other)
    _identity_denied(admissions["prod"], job)


def test_job_without_a_pod_user_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    # The image's own user would be every team's.
    del _pod_spec(job)["securityContext"]["runAsUser"]
    _identity_denied(admissions["prod"], job)


def test_container_overriding_the_user_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    _pod_spec(job)["containers"][0]["securityContext"]["runAsUser"] = 0
    _identity_denied(admissions["prod"], job)


def test_init_container_overriding_the_group_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    _pod_spec(job)["initContainers"] = [
        {"name": "setup", "image": "x", "securityContext": {"runAsGroup": 0}}
    ]
    _identity_denied(admissions["prod"], job)


def test_cpu_pod_as_another_user_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    # No accelerators: the guardrails leave it alone, the identity policy does not.
    pod = _without_accelerators(_operator_pod(job))
    pod["spec"]["securityContext"]["runAsUser"] = 0
    _identity_denied(admissions["prod"], pod, user=PERSON)


def test_ephemeral_container_as_another_user_is_denied(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    pod = _operator_pod(job)
    pod["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": "x", "securityContext": {"runAsUser": 0}}
    ]
    _identity_denied(
        admissions["prod"],
        pod,
        user=PERSON,
        operation="UPDATE",
        sub_resource="ephemeralcontainers",
    )


def test_existing_pod_updates_are_not_held_to_the_identity(
    admissions: dict[str, Admission], job: dict[str, Any]
) -> None:
    # A pod created before the policy (as the image's user) can still be relabelled.
    pod = _without_accelerators(_operator_pod(job))
    pod["spec"]["securityContext"]["runAsUser"] = 10001
    assert admissions["prod"].review(pod, user=PERSON, operation="UPDATE") == []


def team_admissions_of(env: str) -> list[str]:
    config = CONFIGS[env]
    assert config.governance is not None
    return [t.name for t in config.governance.teams_by_name()]
