"""The Kubernetes API calls of `hpctl job submit|list|describe|logs|cancel`, through the
official client, and every API failure as one line that names the object and the fix.

What is called follows AWS's HyperPod CLI (aws/sagemaker-hyperpod-cli): jobs are the custom
objects `hyperpodpytorchjobs` of `sagemaker.amazonaws.com/v1` (create, list, get, delete as in
src/sagemaker/hyperpod/training/hyperpod_pytorch_job.py); a job's pods carry the operator's
`HPJob=<job>` label (its `list_pods`) and their logs are read per pod (its
`get_logs_from_pod`); a job's Kueue Workload (`kueue.x-k8s.io/v1beta1`, plural `workloads`,
src/sagemaker/hyperpod/cli/constants/kueue_constants.py) is found by the
`kueue.x-k8s.io/job-uid` label (its clients/kubernetes_client.py `get_workload_by_label`).
The queue position comes from Kueue's visibility API (`pendingworkloads` of the job's
LocalQueue), which a cluster may not serve or a user may not read: then there is none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, watch
from kubernetes import config as kube_config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from config.kubernetes import (
    HYPERPOD_JOB_GROUP,
    HYPERPOD_JOB_RESOURCE,
    HYPERPOD_JOB_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSION,
    KUEUE_VISIBILITY_GROUP,
    KUEUE_VISIBILITY_VERSION,
    KUEUE_WORKLOAD_RESOURCE,
    LOCAL_QUEUE_RESOURCE,
    PENDING_WORKLOADS_SUBRESOURCE,
)
from config.schema import EnvironmentConfig
from hpctl.job.failures import JobOperationError
from hpctl.job.render import KIND
from hpctl.kubeconfig import kubeconfig_cluster_problem

VISIBILITY_API = f"/apis/{KUEUE_VISIBILITY_GROUP}/{KUEUE_VISIBILITY_VERSION}"

# Seconds a request may take before the command gives up on the API server (connect, read).
REQUEST_TIMEOUT = (10, 60)


class KubeError(JobOperationError):
    """One line for the user: what failed, on which object, and the fix."""


class NotFoundError(KubeError):
    """The named object does not exist (any more)."""


@dataclass(frozen=True)
class Target:
    """The object a call is about, and the command's --env and --team for the fixes."""

    kind: str
    name: str | None
    namespace: str
    env: str
    team: str | None = None

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.name else f"in {self.namespace}"
        return f"{self.kind} {where}"

    @property
    def env_option(self) -> str:
        return f"--env {self.env}"

    @property
    def scope(self) -> str:
        team = f" --team {self.team}" if self.team else ""
        return f"--env {self.env}{team}"


def _status(error: ApiException) -> dict[str, Any]:
    """The Status object the API server sent, or {} for a body that is not one."""
    try:
        body = json.loads(error.body or "")
    except ValueError:
        return {}
    return body if isinstance(body, dict) and body.get("kind") == "Status" else {}


def failure_line(error: ApiException, target: Target, verb: str) -> str:
    """`error` (the API server's answer to `verb` on `target`) as one line with the fix."""
    status = _status(error)
    code = int(status.get("code") or error.status or 0)
    reason = str(status.get("reason") or error.reason or "")
    message = " ".join(str(status.get("message") or error.reason or "").split())
    if "admission webhook" in message and "denied the request" in message:
        # A webhook (the training operator's, Kueue's, a policy engine's) refused the object;
        # its own words say what to change, whatever code it chose.
        return f"{target}: {verb} refused: {message}; change what it names and {verb} again"
    if code == 401:
        return (
            f"{target}: the API server did not accept your credentials ({message}); refresh "
            f"your AWS credentials (aws eks get-token must work) or rewrite the kubeconfig "
            f"with hpctl kubeconfig {target.env_option}"
        )
    if code == 403 and "exceeded quota" in message:
        return (
            f"{target}: {verb} refused: {message}; free quota in {target.namespace} (hpctl job "
            f"cancel) or ask the platform team to raise it"
        )
    if code == 403:
        return (
            f"{target}: {verb} forbidden ({message}); your IAM identity needs Kubernetes access "
            f"to namespace {target.namespace}: ask the platform team for it"
        )
    if code == 404 and not (status.get("details") or {}).get("name"):
        # No object named: the API server does not serve the resource type at all.
        return (
            f"{target}: the cluster does not serve this kind ({message}); check that the "
            "HyperPod training operator and task governance add-ons are installed"
        )
    if code == 404:
        return f"{target}: not found; list the team's jobs with hpctl job list {target.scope}"
    if code == 409 and reason == "AlreadyExists":
        return (
            f"{target}: already exists; pick another --name, or cancel it first with hpctl job "
            f"cancel {target.name} {target.scope} --yes"
        )
    if code == 409:
        return f"{target}: changed while this ran ({message}); run the command again"
    if code == 422 or reason == "Invalid":
        causes = (status.get("details") or {}).get("causes") or []
        fields = "; ".join(
            f"{cause.get('field', '?')}: {cause.get('message', '')}".strip() for cause in causes
        )
        return (
            f"{target}: {verb} rejected as invalid: {fields or message}; fix those fields "
            "(hpctl job render writes a manifest the operator accepts)"
        )
    return f"{target}: {verb} failed: {code} {reason}: {message}"


@contextmanager
def reported(target: Target, verb: str, server: str) -> Iterator[None]:
    """Turn what the client raises inside into a KubeError line about `target`."""
    try:
        yield
    except ApiException as error:
        gone = error.status == 404 and bool((_status(error).get("details") or {}).get("name"))
        raise (NotFoundError if gone else KubeError)(failure_line(error, target, verb)) from None
    except urllib3.exceptions.HTTPError as error:
        cause = getattr(error, "reason", None) or error
        raise KubeError(
            f"cannot reach the API server at {server} ({_short(cause)}); open the tunnel "
            f"hpctl kubeconfig {target.env_option} prints, or check the network"
        ) from None
    except ConfigException as error:
        raise KubeError(f"kubeconfig: {_short(error)}; rewrite it with hpctl kubeconfig") from None


def _short(error: object) -> str:
    text = " ".join(str(error).split())
    return text.split(": ", 1)[-1] if "object at 0x" in text else text


def connect(config: EnvironmentConfig, path: Path, *, option: str = "--kubeconfig") -> Cluster:
    """A client for `config`'s EKS cluster from the kubeconfig at `path` (the one
    `hpctl kubeconfig --env` writes): refused when the file is missing or names another
    cluster, so a job never lands on the wrong environment."""
    env = config.environment
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KubeError(
            f"{option}: {path} does not exist; write it with hpctl kubeconfig --env {env}"
        ) from None
    except (OSError, yaml.YAMLError) as error:
        raise KubeError(f"{option}: cannot read {path} ({_short(error)})") from None
    problem = kubeconfig_cluster_problem(document, config)
    if problem:
        raise KubeError(f"{option}: {path} {problem}; write one with hpctl kubeconfig --env {env}")
    configuration = client.Configuration()
    try:
        kube_config.load_kube_config(
            config_file=str(path), client_configuration=configuration, persist_config=False
        )
    except ConfigException as error:
        raise KubeError(f"{option}: {path}: {_short(error)}") from None
    # One attempt per request: a closed tunnel should fail at once, not after retries.
    configuration.retries = False
    return Cluster(client.ApiClient(configuration), env=env)


@dataclass
class Cluster:
    """The API calls the lifecycle commands make, each returning plain JSON-shaped dicts."""

    api: client.ApiClient
    env: str

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    def _objects(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def _core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def _json(self, value: Any) -> Any:
        return self.api.sanitize_for_serialization(value)

    def _job(self, namespace: str, name: str | None, team: str | None) -> Target:
        return Target(KIND, name, namespace, self.env, team)

    def create_job(self, manifest: dict[str, Any], team: str | None) -> dict[str, Any]:
        meta = manifest["metadata"]
        target = self._job(meta["namespace"], meta["name"], team)
        with reported(target, "create", self.server):
            created: dict[str, Any] = self._objects().create_namespaced_custom_object(
                HYPERPOD_JOB_GROUP,
                HYPERPOD_JOB_VERSION,
                meta["namespace"],
                HYPERPOD_JOB_RESOURCE,
                manifest,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return created

    def get_job(self, namespace: str, name: str, team: str | None) -> dict[str, Any]:
        with reported(self._job(namespace, name, team), "get", self.server):
            job: dict[str, Any] = self._objects().get_namespaced_custom_object(
                HYPERPOD_JOB_GROUP,
                HYPERPOD_JOB_VERSION,
                namespace,
                HYPERPOD_JOB_RESOURCE,
                name,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return job

    def list_jobs(self, namespace: str, team: str | None) -> list[dict[str, Any]]:
        with reported(self._job(namespace, None, team), "list", self.server):
            listed = self._objects().list_namespaced_custom_object(
                HYPERPOD_JOB_GROUP,
                HYPERPOD_JOB_VERSION,
                namespace,
                HYPERPOD_JOB_RESOURCE,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return list(listed.get("items", []))

    def delete_job(self, namespace: str, name: str, team: str | None) -> dict[str, Any]:
        with reported(self._job(namespace, name, team), "delete", self.server):
            # Foreground: the job object stays (with a deletionTimestamp) until the operator's
            # pods are gone, so `list` shows it terminating rather than vanished.
            deleted: dict[str, Any] = self._objects().delete_namespaced_custom_object(
                HYPERPOD_JOB_GROUP,
                HYPERPOD_JOB_VERSION,
                namespace,
                HYPERPOD_JOB_RESOURCE,
                name,
                propagation_policy="Foreground",
                _request_timeout=REQUEST_TIMEOUT,
            )
        return deleted

    def workloads(
        self, namespace: str, team: str | None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        target = Target("Workload", None, namespace, self.env, team)
        with reported(target, "list", self.server):
            listed = self._objects().list_namespaced_custom_object(
                KUEUE_GROUP,
                KUEUE_VERSION,
                namespace,
                KUEUE_WORKLOAD_RESOURCE,
                label_selector=selector,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return list(listed.get("items", []))

    def watch_workloads(
        self, namespace: str, team: str | None, selector: str, timeout_s: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, Workload) for the Workloads matching `selector` until the server ends
        the watch (after at most `timeout_s`)."""
        target = Target("Workload", None, namespace, self.env, team)
        with reported(target, "watch", self.server):
            stream = watch.Watch().stream(
                self._objects().list_namespaced_custom_object,
                KUEUE_GROUP,
                KUEUE_VERSION,
                namespace,
                KUEUE_WORKLOAD_RESOURCE,
                label_selector=selector,
                timeout_seconds=timeout_s,
            )
            for event in stream:
                yield str(event["type"]), dict(event["object"])

    def pending_positions(self, namespace: str, local_queue: str) -> dict[str, int]:
        """Workload name -> 0-based position in its LocalQueue, from Kueue's visibility API;
        {} where the cluster does not serve it or the caller may not read it."""
        try:
            summary = self.api.call_api(
                f"{VISIBILITY_API}/namespaces/{{namespace}}/{LOCAL_QUEUE_RESOURCE}/{{name}}/"
                f"{PENDING_WORKLOADS_SUBRESOURCE}",
                "GET",
                path_params={"namespace": namespace, "name": local_queue},
                header_params={"Accept": "application/json"},
                response_type="object",
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException:
            return {}
        return {
            str(item["metadata"]["name"]): int(item.get("positionInLocalQueue", 0))
            for item in (summary or {}).get("items", [])
        }

    def pods(self, namespace: str, team: str | None, selector: str) -> list[dict[str, Any]]:
        with reported(Target("Pod", None, namespace, self.env, team), "list", self.server):
            listed = self._core().list_namespaced_pod(
                namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
            )
        return list(self._json(listed).get("items", []))

    def events(self, namespace: str, team: str | None, uid: str) -> list[dict[str, Any]]:
        """The events about the object with `uid`."""
        with reported(Target("Event", None, namespace, self.env, team), "list", self.server):
            listed = self._core().list_namespaced_event(
                namespace,
                field_selector=f"involvedObject.uid={uid}",
                _request_timeout=REQUEST_TIMEOUT,
            )
        return list(self._json(listed).get("items", []))

    def log_lines(
        self, namespace: str, pod: str, container: str, *, follow: bool, team: str | None
    ) -> Iterator[str]:
        """The container's log, line by line; with `follow`, until the container ends."""
        target = Target("Pod", pod, namespace, self.env, team)
        with reported(target, "read the log of", self.server):
            response = self._core().read_namespaced_pod_log(
                pod,
                namespace,
                container=container,
                follow=follow,
                _preload_content=False,
                # Following has no read deadline: a quiet trainer is not an error.
                _request_timeout=None if follow else REQUEST_TIMEOUT,
            )
            pending = b""
            try:
                for chunk in response.stream(64 * 1024):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        yield line.decode("utf-8", errors="replace")
                if pending:
                    yield pending.decode("utf-8", errors="replace")
            finally:
                response.release_conn()
