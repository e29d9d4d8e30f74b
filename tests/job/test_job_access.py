"""What a team principal may do is what `hpctl job` needs: every request the lifecycle
commands make (against the local API server of tests/job/kube_api.py) is turned into the
(verb, API group, resource) the API server's RBAC authorizer checks, and each must be allowed
by the team's Role (platform_constructs/team_network.py) or by AmazonEKSEditPolicy, which the
team's access entries carry in the namespace."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from config.kubernetes import team_access_group
from platform_constructs.team_network import team_job_access
from tests.job.kube_api import KubeAPI, Request, kubeconfig, serving, shape
from tests.job.test_job_lifecycle import (
    NAMESPACE,
    RENDER_OPTIONS,
    TEAM,
    add_job,
    add_pods,
    add_workload,
    ok,
    position,
    run,
    values,
)

# The core-group reads AmazonEKSEditPolicy grants (EKS User Guide, "Review access policy
# permissions": Edit includes View's get/list/watch of pods, pods/log and events); the job
# commands need nothing else of it.
EDIT_POLICY_CORE_READS = {
    (verb, "", resource)
    for verb in ("get", "list", "watch")
    for resource in ("pods", "pods/log", "events")
}
WATCH_VALUES = ("true", "True", "1")


@dataclass(frozen=True)
class Attributes:
    """A request as the RBAC authorizer sees it."""

    verb: str
    group: str
    resource: str
    namespace: str


def attributes(request: Request) -> Attributes:
    """The authorizer's request attributes (Kubernetes "Authorization": request verbs):
    `/api/v1/...` is the core group, `/apis/<group>/<version>/...` another; a path is
    namespaces/<ns>/<resource>[/<name>[/<subresource>]]."""
    parts = request.path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    assert rest[0] == "namespaces", request.path  # the commands make namespaced calls only
    namespace, resource, named = rest[1], rest[2], rest[3:]
    if len(named) == 2:
        resource = f"{resource}/{named[1]}"
    if request.method == "POST":
        verb = "create"
    elif request.method == "DELETE":
        verb = "delete" if named else "deletecollection"
    elif request.method == "GET" and named:
        verb = "get"
    elif request.method == "GET":
        verb = "watch" if request.query.get("watch") in WATCH_VALUES else "list"
    else:
        verb = {"PUT": "update", "PATCH": "patch"}[request.method]
    return Attributes(verb, group, resource, namespace)


def role_allows(rules: Sequence[dict[str, Any]], asked: Attributes) -> bool:
    return any(
        asked.group in rule["apiGroups"]
        and asked.resource in rule["resources"]
        and asked.verb in rule["verbs"]
        for rule in rules
    )


def denied(requests: Sequence[Request], role: dict[str, Any]) -> list[Attributes]:
    """The requests neither the Role (in its namespace) nor Edit's core reads allow."""
    refused = []
    for request in requests:
        asked = attributes(request)
        if (asked.verb, asked.group, asked.resource) in EDIT_POLICY_CORE_READS:
            continue
        if asked.namespace == role["metadata"]["namespace"] and role_allows(role["rules"], asked):
            continue
        refused.append(asked)
    return refused


@pytest.fixture(scope="module")
def lifecycle_requests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Request]]:
    """Every request of submit --wait, list, describe, logs and cancel of one team's job."""
    with serving() as api:
        api.config_path = kubeconfig(tmp_path_factory.mktemp("access") / "kubeconfig.yaml", api.url)
        yield _run_every_command(api)


def _run_every_command(api: KubeAPI) -> list[Request]:
    def kueue(job: dict[str, Any]) -> None:
        pending = add_workload(api, job, "pending")
        position(api, job)
        admitted = shape("workload-admitted.json", **values(job))
        api.watch_script.append([("ADDED", pending), ("MODIFIED", admitted)])

    api.on_create = kueue
    ok(run(api, "job", "submit", *RENDER_OPTIONS, "--wait"))
    job = add_job(api, "llama-70b", "job-status-running.json")
    add_workload(api, job, "admitted")
    add_pods(api, job, ["hyperpod-i-0a1", "hyperpod-i-0b2"])
    api.events += shape("events.json", **values(job))["items"]
    api.logs[(NAMESPACE, "llama-70b-pod-0")] = ["HPTRAIN step=1 loss=9.1"]
    ok(run(api, "job", "list", "--team", TEAM))
    ok(run(api, "job", "describe", "llama-8b", "--team", TEAM))
    ok(run(api, "job", "describe", "llama-70b", "--team", TEAM))
    ok(run(api, "job", "logs", "llama-70b", "--team", TEAM))
    ok(run(api, "job", "logs", "llama-70b", "--team", TEAM, "--follow"))
    ok(run(api, "job", "cancel", "llama-8b", "--team", TEAM, "--yes"))
    return list(api.requests)


def _team_role() -> dict[str, Any]:
    role, _ = team_job_access(NAMESPACE, team_access_group(TEAM))
    return role


def test_every_kind_of_call_the_commands_make_was_exercised(
    lifecycle_requests: list[Request],
) -> None:
    asked = {(a.verb, a.group, a.resource) for a in map(attributes, lifecycle_requests)}
    assert asked >= {
        ("create", "sagemaker.amazonaws.com", "hyperpodpytorchjobs"),
        ("list", "sagemaker.amazonaws.com", "hyperpodpytorchjobs"),
        ("get", "sagemaker.amazonaws.com", "hyperpodpytorchjobs"),
        ("delete", "sagemaker.amazonaws.com", "hyperpodpytorchjobs"),
        ("list", "kueue.x-k8s.io", "workloads"),
        ("watch", "kueue.x-k8s.io", "workloads"),
        ("get", "visibility.kueue.x-k8s.io", "localqueues/pendingworkloads"),
        ("list", "", "pods"),
        ("get", "", "pods/log"),
        ("list", "", "events"),
    }


def test_the_team_role_allows_every_call_of_the_job_commands(
    lifecycle_requests: list[Request],
) -> None:
    assert denied(lifecycle_requests, _team_role()) == []


def test_a_role_without_delete_on_jobs_refuses_cancel(lifecycle_requests: list[Request]) -> None:
    role = copy.deepcopy(_team_role())
    (jobs,) = [r for r in role["rules"] if "hyperpodpytorchjobs" in r["resources"]]
    jobs["verbs"].remove("delete")
    assert denied(lifecycle_requests, role) == [
        Attributes("delete", "sagemaker.amazonaws.com", "hyperpodpytorchjobs", NAMESPACE)
    ]


def test_another_teams_role_allows_none_of_the_job_and_queue_calls(
    lifecycle_requests: list[Request],
) -> None:
    other, _ = team_job_access("hyperpod-ns-vision", team_access_group("vision"))
    refused = denied(lifecycle_requests, other)
    assert {a.group for a in refused} == {
        "sagemaker.amazonaws.com",
        "kueue.x-k8s.io",
        "visibility.kueue.x-k8s.io",
    }


def test_attributes_follow_the_authorizers_verbs() -> None:
    base = "/apis/sagemaker.amazonaws.com/v1/namespaces/ns/hyperpodpytorchjobs"
    cases = {
        ("GET", base, ""): Attributes(
            "list", "sagemaker.amazonaws.com", "hyperpodpytorchjobs", "ns"
        ),
        ("GET", base, "true"): Attributes(
            "watch", "sagemaker.amazonaws.com", "hyperpodpytorchjobs", "ns"
        ),
        ("GET", f"{base}/a", ""): Attributes(
            "get", "sagemaker.amazonaws.com", "hyperpodpytorchjobs", "ns"
        ),
        ("POST", base, ""): Attributes(
            "create", "sagemaker.amazonaws.com", "hyperpodpytorchjobs", "ns"
        ),
        ("DELETE", f"{base}/a", ""): Attributes(
            "delete", "sagemaker.amazonaws.com", "hyperpodpytorchjobs", "ns"
        ),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", ""): Attributes("get", "", "pods/log", "ns"),
    }
    for (method, path, watch), expected in cases.items():
        query = {"watch": watch} if watch else {}
        assert attributes(Request(method, path, query, None, None)) == expected
