"""The team namespace rules that hold for every pod, accelerators or not, and for the
namespace's NetworkPolicies: each policy's CEL runs in cel-python the way the API server runs
a ValidatingAdmissionPolicy (resource rules, the binding's namespace, match conditions,
variables, then every validation; the request's user and groups as EKS passes them). Every
job `hpctl job render` writes, and the pods the operator makes of it, are admitted; each rule
denies a planted pod with the one line that names the field and the fix."""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import celpy
import pytest

from config.instance_types import lookup
from config.kubernetes import (
    ACCELERATOR_RESOURCES,
    DEFAULT_TOLERATION_KEYS,
    INSTANCE_GROUP_LABEL,
    INSTANCE_TYPE_LABEL,
    JOB_CONTROLLER_USER,
    NVIDIA_DRIVER_CAPABILITIES_ENV,
    NVIDIA_VISIBLE_DEVICES_ENV,
    service_account_user,
    team_access_group,
)
from config.team_admission import team_admissions
from config.team_groups import team_gid
from config.teams import team_capacity
from hpctl.job.render import render_job
from platform_constructs.team_admission import MATCHED, team_admission_manifest
from tests.constructs.test_team_admission import _operator_pod
from tests.job.conftest import env_spec
from tests.support import ENVIRONMENTS, environment

OPERATOR_USER = "system:serviceaccount:aws-hyperpod:hp-training-operator-controller-manager"
PERSON = "arn:aws:sts::111111111111:assumed-role/Researcher/alice"
AUTHENTICATED = "system:authenticated"
NAMESPACE = "hyperpod-ns-research"
_CEL = celpy.Environment()
PLURALS = {kind: (group, version, plural) for group, version, plural, kind in MATCHED} | {
    "NetworkPolicy": ("networking.k8s.io", "v1", "networkpolicies")
}


@dataclass(frozen=True)
class Cluster:
    """The policies and bindings of one environment, run like the API server runs them."""

    objects: tuple[dict[str, Any], ...]

    def review(
        self,
        obj: dict[str, Any],
        *,
        user: str = PERSON,
        groups: Sequence[str] = (team_access_group("research"), AUTHENTICATED),
        operation: str = "CREATE",
        sub_resource: str | None = None,
    ) -> list[str] | None:
        """The denial messages of every policy bound to the object's namespace (empty:
        admitted), or None if none matches."""
        namespace = obj["metadata"]["namespace"]
        group, version, plural = PLURALS[obj["kind"]]
        resource = f"{plural}/{sub_resource}" if sub_resource else plural
        request: dict[str, Any] = {
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "operation": operation,
            "namespace": namespace,
            "userInfo": {"username": user, "groups": list(groups)},
        }
        if sub_resource:
            request["subResource"] = sub_resource
        deleted = operation == "DELETE"
        activation = {"object": None if deleted else obj, "oldObject": obj if deleted else None}
        activation["request"] = request
        denials: list[str] | None = None
        for policy in self._bound_to(namespace):
            if not any(
                group in r["apiGroups"]
                and version in r["apiVersions"]
                and resource in r["resources"]
                and operation in r["operations"]
                for r in policy["matchConstraints"]["resourceRules"]
            ):
                continue
            if not all(
                _run(c["expression"], activation) for c in policy.get("matchConditions", [])
            ):
                continue
            variables = {
                v["name"]: _run(v["expression"], activation) for v in policy.get("variables", [])
            }
            denials = (denials or []) + [
                str(_run(v["messageExpression"], activation, variables))
                for v in policy["validations"]
                if not _run(v["expression"], activation, variables)
            ]
        return denials

    def _bound_to(self, namespace: str) -> list[dict[str, Any]]:
        policies = {
            o["metadata"]["name"]: o["spec"] for o in self.objects if o["kind"].endswith("Policy")
        }
        return [
            policies[b["spec"]["policyName"]]
            for b in self.objects
            if b["kind"].endswith("Binding")
            and b["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
            == {"kubernetes.io/metadata.name": namespace}
        ]


def _run(
    expression: str, activation: dict[str, Any], variables: dict[str, Any] | None = None
) -> Any:
    cel: dict[str, Any] = {k: celpy.json_to_cel(v) for k, v in activation.items()}
    if variables is not None:
        cel["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()}
        )
    return _program(expression).evaluate(cel)


@functools.cache
def _program(expression: str) -> Any:
    """Compiled once: parsing CEL costs far more than evaluating it."""
    return _CEL.program(_CEL.compile(expression))


def _cluster(env: str) -> Cluster:
    config = environment(env).config
    assert config.governance is not None
    facts = team_admissions(config.governance, config.hyperpod.instance_groups)
    return Cluster(tuple(o for a in facts.values() for o in team_admission_manifest(a)))


@pytest.fixture(scope="module")
def prod() -> Cluster:
    return _cluster("prod")


def _job(env: str = "prod", team: str = "research", **options: Any) -> dict[str, Any]:
    return render_job(env_spec(env, team=team, instance_group="gpu-p5", nodes=1, **options))


@pytest.fixture
def cpu_pod() -> dict[str, Any]:
    """research's bare CPU pod on its CPU group (prod's system group), as a person creates it:
    compliant."""
    pod = _operator_pod(_job())
    spec = pod["spec"]
    spec["nodeSelector"] = {INSTANCE_GROUP_LABEL: "system", INSTANCE_TYPE_LABEL: "ml.m5.4xlarge"}
    spec["tolerations"] = [t for t in spec["tolerations"] if t["key"] in DEFAULT_TOLERATION_KEYS]
    return _without_accelerators(pod)


def _without_accelerators(pod: dict[str, Any]) -> dict[str, Any]:
    for container in pod["spec"]["containers"]:
        for field in ("requests", "limits"):
            for resource in ACCELERATOR_RESOURCES:
                container["resources"][field].pop(resource, None)
    return pod


@pytest.fixture
def gpu_pod() -> dict[str, Any]:
    """A pod the training operator makes of research's rendered GPU job: compliant."""
    return _operator_pod(_job())


def _denied(cluster: Cluster, obj: dict[str, Any], **kwargs: Any) -> str:
    messages = cluster.review(obj, **kwargs)
    assert messages is not None and len(messages) == 1, messages
    return messages[0]


# ------------------------------------------------------------------ what is admitted


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_teams_rendered_job_and_its_pods_are_admitted(env: str) -> None:
    cluster = _cluster(env)
    config = environment(env).config
    assert config.governance is not None
    for team in config.governance.teams_by_name():
        (group, *_) = (
            c.instance_group
            for c in team_capacity(config.governance, team, config.hyperpod.instance_groups)
            if c.max_job_nodes > 0 and lookup(c.instance_type).has_accelerators
        )
        job = render_job(env_spec(config, team=team.name, instance_group=group, nodes=1))
        assert cluster.review(job) == []
        assert cluster.review(_operator_pod(job), user=OPERATOR_USER, groups=()) == []
        batch = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": job["metadata"],
            "spec": {"template": job["spec"]["replicaSpecs"][0]["template"]},
        }
        assert cluster.review(batch) == []
        assert cluster.review(_operator_pod(job), user=JOB_CONTROLLER_USER, groups=()) == []


def test_compliant_cpu_and_gpu_pods_are_admitted(
    prod: Cluster, cpu_pod: dict[str, Any], gpu_pod: dict[str, Any]
) -> None:
    assert prod.review(cpu_pod) == []
    assert prod.review(gpu_pod, user=OPERATOR_USER, groups=()) == []
    # Pinned by required node affinity instead of nodeSelector.
    del cpu_pod["spec"]["nodeSelector"]
    cpu_pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"].append(
        {"key": INSTANCE_GROUP_LABEL, "operator": "In", "values": ["system"]}
    )
    assert prod.review(cpu_pod) == []


def test_own_group_and_no_gpus_are_admitted(prod: Cluster, cpu_pod: dict[str, Any]) -> None:
    cpu_pod["spec"]["securityContext"] |= {
        "fsGroup": team_gid("research"),
        "supplementalGroups": [team_gid("research")],
    }
    # What HyperPod's health-monitoring agent sets to keep every GPU out.
    cpu_pod["spec"]["containers"][0]["env"] += [
        {"name": NVIDIA_VISIBLE_DEVICES_ENV, "value": "void"},
        {"name": NVIDIA_DRIVER_CAPABILITIES_ENV},
    ]
    assert prod.review(cpu_pod) == []


def test_gpu_container_may_choose_driver_capabilities(
    prod: Cluster, gpu_pod: dict[str, Any]
) -> None:
    gpu_pod["spec"]["containers"][0]["env"].append(
        {"name": NVIDIA_DRIVER_CAPABILITIES_ENV, "value": "compute,utility,video"}
    )
    assert prod.review(gpu_pod, user=OPERATOR_USER, groups=()) == []


def test_a_created_pods_later_updates_pass(prod: Cluster, cpu_pod: dict[str, Any]) -> None:
    # Bound by the scheduler (nodeName), or created before the rules: relabelling passes.
    cpu_pod["spec"]["nodeName"] = "hyperpod-i-0123456789abcdef0"
    del cpu_pod["spec"]["nodeSelector"]
    cpu_pod["spec"]["containers"][0]["env"].append(
        {"name": NVIDIA_VISIBLE_DEVICES_ENV, "value": "all"}
    )
    assert prod.review(cpu_pod, operation="UPDATE") == []


# ------------------------------------------------------------------ placement, every pod

NODES = "selects nodes that are not team research's; select only instance groups gpu-p5, system"


def test_cpu_pod_tolerating_everything_is_denied(prod: Cluster, cpu_pod: dict[str, Any]) -> None:
    cpu_pod["spec"]["tolerations"].append({"operator": "Exists"})
    message = _denied(prod, cpu_pod)
    assert message.startswith("Pod in hyperpod-ns-research tolerates taints team research was ")
    assert message.endswith("(operator Equal with the value, Exists without; never an empty key)")


def test_cpu_job_tolerating_everything_is_denied(prod: Cluster, cpu_pod: dict[str, Any]) -> None:
    cpu_pod["spec"]["tolerations"].append({"operator": "Exists", "effect": "NoSchedule"})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "cpu", "namespace": NAMESPACE},
        "spec": {"template": {"metadata": {}, "spec": cpu_pod["spec"]}},
    }
    assert "tolerates taints team research was not given" in _denied(prod, job)


def test_cpu_pod_on_a_named_node_is_denied(prod: Cluster, cpu_pod: dict[str, Any]) -> None:
    cpu_pod["spec"]["nodeName"] = "hyperpod-i-0123456789abcdef0"
    message = _denied(prod, cpu_pod)
    assert message.startswith(f"Pod in hyperpod-ns-research {NODES}")
    assert message.endswith(
        "through nodeSelector or required node affinity (operator In), "
        "without nodeName or matchFields"
    )


def test_daemonset_pod_is_denied(prod: Cluster, cpu_pod: dict[str, Any]) -> None:
    # The DaemonSet controller pins each pod to its node through matchFields.
    terms = cpu_pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    terms["nodeSelectorTerms"] = [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
    ]
    user = service_account_user("kube-system", "daemon-set-controller")
    assert NODES in _denied(prod, cpu_pod, user=user, groups=())


def test_cpu_pod_on_another_teams_group_is_denied(prod: Cluster) -> None:
    # foundation has no CPU group: its CPU pods may run only on its own GPU nodes.
    pod = _without_accelerators(_operator_pod(_job(team="foundation")))
    pod["spec"]["nodeSelector"] = {INSTANCE_GROUP_LABEL: "system"}
    message = _denied(prod, pod)
    assert (
        "selects nodes that are not team foundation's; select only instance groups gpu-p5 "
        in message
    )


def test_cpu_pod_selecting_no_node_is_denied(prod: Cluster, cpu_pod: dict[str, Any]) -> None:
    del cpu_pod["spec"]["nodeSelector"]
    message = _denied(prod, cpu_pod)
    assert message.startswith(
        "Pod in hyperpod-ns-research selects none of team research's nodes and could run on "
        "any node; select only instance groups gpu-p5, system"
    )


# ------------------------------------------------------------------ groups


@pytest.mark.parametrize("field", ["fsGroup", "supplementalGroups"])
def test_cpu_pod_joining_another_teams_group_is_denied(
    prod: Cluster, cpu_pod: dict[str, Any], field: str
) -> None:
    other = team_gid("foundation")
    value = other if field == "fsGroup" else [team_gid("research"), other]
    cpu_pod["spec"]["securityContext"][field] = value
    assert _denied(prod, cpu_pod) == (
        "Pod in hyperpod-ns-research joins a group that is not team research's through "
        f"securityContext.{field}; set it to {team_gid('research')} (team research's group) or "
        "leave it out"
    )


def test_job_template_joining_another_group_is_denied(prod: Cluster) -> None:
    job = _job()
    job["spec"]["replicaSpecs"][0]["template"]["spec"]["securityContext"]["supplementalGroups"] = [
        0
    ]
    assert "through securityContext.supplementalGroups" in _denied(prod, job)


# ------------------------------------------------------------------ NVIDIA variables

VISIBLE = "sets NVIDIA_VISIBLE_DEVICES in a container, which would reach GPUs it was not allocated"


@pytest.mark.parametrize(
    "variable",
    [
        {"value": "all"},
        {"value": "0,1"},
        {"valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
    ],
    ids=["all", "indices", "from-a-config-map"],
)
def test_cpu_pod_choosing_gpus_is_denied(
    prod: Cluster, cpu_pod: dict[str, Any], variable: dict[str, Any]
) -> None:
    cpu_pod["spec"]["containers"][0]["env"].append({"name": NVIDIA_VISIBLE_DEVICES_ENV, **variable})
    message = _denied(prod, cpu_pod)
    assert message == (
        f"Pod in hyperpod-ns-research {VISIBLE}; remove it from env (request nvidia.com/gpu in "
        "resources and the device plugin sets it; NVIDIA_VISIBLE_DEVICES=void is allowed)"
    )


def test_gpu_pod_choosing_more_gpus_is_denied(prod: Cluster) -> None:
    # The variable would override the device plugin's allocation.
    job = _job()
    job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["env"].append(
        {"name": NVIDIA_VISIBLE_DEVICES_ENV, "value": "all"}
    )
    assert VISIBLE in _denied(prod, job)
    assert VISIBLE in _denied(prod, _operator_pod(job), user=OPERATOR_USER, groups=())


def test_init_and_ephemeral_containers_choosing_gpus_are_denied(
    prod: Cluster, cpu_pod: dict[str, Any]
) -> None:
    variable = {"name": NVIDIA_VISIBLE_DEVICES_ENV, "value": "all"}
    planted = copy.deepcopy(cpu_pod)
    planted["spec"]["initContainers"] = [{"name": "warm", "image": "x", "env": [variable]}]
    assert VISIBLE in _denied(prod, planted)
    cpu_pod["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "x", "env": [variable]}]
    message = _denied(prod, cpu_pod, operation="UPDATE", sub_resource="ephemeralcontainers")
    assert VISIBLE in message


def test_cpu_pod_choosing_driver_capabilities_is_denied(
    prod: Cluster, cpu_pod: dict[str, Any]
) -> None:
    cpu_pod["spec"]["containers"][0]["env"].append(
        {"name": NVIDIA_DRIVER_CAPABILITIES_ENV, "value": "all"}
    )
    assert _denied(prod, cpu_pod) == (
        "Pod in hyperpod-ns-research sets NVIDIA_DRIVER_CAPABILITIES in a container that "
        "requests no nvidia.com/gpu; remove it from env, or request nvidia.com/gpu in that "
        "container's resources"
    )


# ------------------------------------------------------------------ NetworkPolicies


def _network_policy(namespace: str = NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "allow-everything", "namespace": namespace},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]},
    }


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_team_principal_cannot_touch_network_policies(prod: Cluster, operation: str) -> None:
    message = _denied(prod, _network_policy(), operation=operation)
    assert message == (
        f"{operation} of a NetworkPolicy in hyperpod-ns-research by a team principal or service "
        "account: the platform's NetworkPolicies fence the namespace (instance metadata, other "
        "teams) and any added one only opens it; have a platform admin change them "
        "(platform_constructs/team_network.py)"
    )


def test_impersonated_service_account_cannot_touch_network_policies(prod: Cluster) -> None:
    # Edit lets a team impersonate its namespace's service accounts, which sheds its group.
    user = service_account_user(NAMESPACE, "default")
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", AUTHENTICATED)
    assert "of a NetworkPolicy" in _denied(prod, _network_policy(), user=user, groups=groups)


def test_platform_changes_network_policies(prod: Cluster) -> None:
    handler = "arn:aws:sts::111111111111:assumed-role/KubectlRole/session"
    assert prod.review(_network_policy(), user=handler, groups=(AUTHENTICATED,)) == []
    controller = service_account_user("kube-system", "namespace-controller")
    groups = ("system:serviceaccounts", "system:serviceaccounts:kube-system", AUTHENTICATED)
    assert prod.review(_network_policy(), user=controller, groups=groups, operation="DELETE") == []
    # The team's principals keep their namespace-scoped Edit elsewhere; the rule is the team
    # namespaces' only.
    assert prod.review(_network_policy("default")) is None
