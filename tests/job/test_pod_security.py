"""Rendered jobs against the Pod Security Standards' restricted profile (what team
namespaces audit and warn; they enforce baseline), and the image rules: a digest where the
environment requires one, and the pull policy that matches the reference."""

from __future__ import annotations

from typing import Any

import pytest

from hpctl.job.environment import JobRequestError
from hpctl.job.render import render_job
from hpctl.job.spec import JobSpec
from tests.job.conftest import IMAGE, env_spec, make_spec
from tests.support import environment, variant_of

TAGGED = IMAGE.partition("@")[0]
# Pod Security Standards, "restricted" (kubernetes.io/docs/concepts/security/
# pod-security-standards): the volume types it admits, and the one capability it lets a
# container add back.
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
        "projected", "secret",
    }
)  # fmt: skip
RESTRICTED_ADD = frozenset({"NET_BIND_SERVICE"})
# Baseline additionally forbids these pod fields outright.
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What the restricted profile refuses in a pod spec (an empty list: admitted)."""
    problems: list[str] = []
    pod_context = pod.get("securityContext", {})
    for field in HOST_NAMESPACES:
        if pod.get(field):
            problems.append(f"{field} is set")
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            problems.append(f"volume {volume['name']} is {sorted(kinds)}")
    pod_seccomp = pod_context.get("seccompProfile", {}).get("type")
    for container in pod.get("initContainers", []) + pod["containers"]:
        name = container["name"]
        context = container.get("securityContext", {})
        if context.get("privileged"):
            problems.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            problems.append(f"{name}: runs as UID 0")
        seccomp = context.get("seccompProfile", {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile is {seccomp}")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if not set(capabilities.get("add", [])) <= RESTRICTED_ADD:
            problems.append(f"{name}: adds {capabilities['add']}")
        if any("hostPort" in p for p in container.get("ports", [])):
            problems.append(f"{name}: hostPort")
    return problems


def _pod(spec: JobSpec) -> dict[str, Any]:
    pod: dict[str, Any] = render_job(spec)["spec"]["replicaSpecs"][0]["template"]["spec"]
    return pod


def test_rendered_pods_meet_the_restricted_profile():
    assert restricted_violations(_pod(make_spec())) == []
    assert restricted_violations(_pod(env_spec("prod"))) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda p: p["securityContext"].pop("seccompProfile"), "seccompProfile is None"),
        (lambda p: p["containers"][0]["securityContext"].pop("capabilities"), "drop ALL"),
        (lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "hostPath"),
        (lambda p: p.update(hostNetwork=True), "hostNetwork"),
    ],
)
def test_planted_violations_are_reported(change, expected):
    pod = _pod(make_spec())
    change(pod)
    (problem,) = restricted_violations(pod)
    assert expected in problem


def test_pods_carry_no_kubernetes_api_token():
    # Pod Identity's webhook adds its own projected token volume (aws/amazon-eks-pod-
    # identity-webhook, pkg/handler/handler.go updatePodSpec); this only drops the API one.
    assert _pod(make_spec())["automountServiceAccountToken"] is False


def test_pull_policy_follows_the_reference():
    (by_digest,) = _pod(make_spec(image=IMAGE))["containers"]
    (by_tag,) = _pod(make_spec(image=TAGGED))["containers"]
    assert by_digest["imagePullPolicy"] == "IfNotPresent"
    assert by_tag["imagePullPolicy"] == "Always"


def test_prod_requires_a_digest_and_says_how():
    assert environment("prod").config.require_image_digest
    with pytest.raises(JobRequestError) as caught:
        env_spec("prod", image=TAGGED)
    (line,) = str(caught.value).splitlines()
    assert line.startswith("--image: ")
    assert "require_image_digest" in line and "REPOSITORY@sha256:<digest>" in line


def test_a_tag_is_accepted_where_no_digest_is_required():
    def relax(data: dict[str, Any]) -> None:
        data["require_image_digest"] = False

    config = variant_of("prod", relax).config
    assert env_spec(config, image=TAGGED).image == TAGGED
    assert not environment("dev").config.require_image_digest
