"""A local Kubernetes API server for the `hpctl job` lifecycle tests: an HTTP server on
127.0.0.1, in a thread, that answers the calls the official client makes with the shapes
recorded in tests/job/kube/ (see its README for where each comes from).

It keeps HyperPodPyTorchJobs, Kueue Workloads, pods, events and pod logs in memory, records
every request (method, path, query, body, Authorization header), streams watches as the API
server does (one JSON event per line), and answers a planted failure with a recorded Status.
Anything it does not serve is the API server's own 404 for an unknown resource, so an
unexpected call shows up as a failing command and in `requests`.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from config.loader import load_environment

SHAPES = Path(__file__).parent / "kube"
JOBS = re.compile(r"^/apis/sagemaker\.amazonaws\.com/v1/namespaces/([^/]+)/hyperpodpytorchjobs$")
JOB = re.compile(
    r"^/apis/sagemaker\.amazonaws\.com/v1/namespaces/([^/]+)/hyperpodpytorchjobs/([^/]+)$"
)
WORKLOADS = re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta1/namespaces/([^/]+)/workloads$")
PENDING = re.compile(
    r"^/apis/visibility\.kueue\.x-k8s\.io/v1beta1/namespaces/([^/]+)/localqueues/([^/]+)/pendingworkloads$"
)
PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods$")
LOG = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$")
EVENTS = re.compile(r"^/api/v1/namespaces/([^/]+)/events$")
TOKEN = "local-test-token"


def shape(name: str, **values: str) -> Any:
    """A recorded shape with its `{placeholder}`s filled in."""
    text = (SHAPES / name).read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return json.loads(text)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    authorization: str | None


@dataclass
class KubeAPI:
    """The server's state; tests arrange it and read `requests` afterwards."""

    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    workloads: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    positions: dict[tuple[str, str], Any] = field(default_factory=dict)
    # (method, path regex) -> (recorded Status file, its placeholders): answered instead.
    failures: dict[tuple[str, str], tuple[str, dict[str, str]]] = field(default_factory=dict)
    # The events one workload watch streams, then the watch ends (as at its timeout).
    watch_script: list[list[tuple[str, dict[str, Any]]]] = field(default_factory=list)
    # Called with each created job (e.g. to let "Kueue" create its Workload).
    on_create: Callable[[dict[str, Any]], None] | None = None
    requests: list[Request] = field(default_factory=list)
    url: str = ""
    # A kubeconfig that points at this server (the test's, see `kubeconfig`).
    config_path: Path | None = None
    _counter: int = 0

    def calls(self, method: str | None = None) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.requests if method in (None, r.method)]

    def fail(self, method: str, path: str, status: str, **values: str) -> None:
        self.failures[(method, path)] = (status, values)

    def next_uid(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}-0000-4000-8000-{self._counter:012d}"


def _selected(labels: dict[str, str], selector: str | None) -> bool:
    """A label selector of `key`, `key=value` terms joined by commas."""
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if key not in labels or ("=" in term and labels[key] != value):
            return False
    return True


def _fields(obj: dict[str, Any], selector: str | None) -> bool:
    """A field selector of `involvedObject.uid=...` terms."""
    for term in filter(None, (selector or "").split(",")):
        path, _, value = term.partition("=")
        node: Any = obj
        for part in path.split("."):
            node = (node or {}).get(part)
        if node != value:
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    api: KubeAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:  # quiet
        pass

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, lines: Iterator[str], content_type: str) -> None:
        """A streamed response (watch, followed log): chunked, as the API server sends it."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for line in lines:
            data = line.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def _status(self, name: str, **values: str) -> None:
        body = shape(name, **values)
        self._send(int(body["code"]), body)

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        api = self.api
        api.requests.append(
            Request(method, url.path, query, body, self.headers.get("Authorization"))
        )
        for (fail_method, pattern), (status, values) in api.failures.items():
            if fail_method == method and re.fullmatch(pattern, url.path):
                self._status(status, **values)
                return
        route = self._route(method, url.path, query, body)
        if route is None:
            self._status("status-no-such-resource.json")

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> bool | None:
        api = self.api
        if (m := JOBS.fullmatch(path)) and method == "POST":
            namespace, name = m[1], body["metadata"]["name"]
            if (namespace, name) in api.jobs:
                self._status("status-already-exists.json", job=name)
                return True
            job = copy.deepcopy(body)
            job["metadata"].update(
                uid=api.next_uid("b6f3c1d2"),
                resourceVersion="81230",
                generation=1,
                creationTimestamp="2026-03-04T05:06:07Z",
            )
            api.jobs[(namespace, name)] = job
            if api.on_create:
                api.on_create(job)
            self._send(201, job)
            return True
        if (m := JOBS.fullmatch(path)) and method == "GET":
            items = [j for (ns, _), j in sorted(api.jobs.items()) if ns == m[1]]
            self._send(
                200,
                {
                    "apiVersion": "sagemaker.amazonaws.com/v1",
                    "kind": "HyperPodPyTorchJobList",
                    "metadata": {"resourceVersion": "90000"},
                    "items": items,
                },
            )
            return True
        if m := JOB.fullmatch(path):
            job = api.jobs.get((m[1], m[2]))
            if job is None:
                self._status("status-not-found.json", job=m[2])
                return True
            if method == "GET":
                self._send(200, job)
                return True
            if method == "DELETE":
                job["metadata"]["deletionTimestamp"] = "2026-03-04T10:00:00Z"
                job["metadata"]["finalizers"] = ["foregroundDeletion"]
                self._send(200, job)
                return True
        if (m := WORKLOADS.fullmatch(path)) and method == "GET":
            items = [
                w
                for (ns, _), w in sorted(api.workloads.items())
                if ns == m[1]
                and _selected(w["metadata"].get("labels") or {}, query.get("labelSelector"))
            ]
            if query.get("watch", "").lower() == "true":  # the client sends "True"
                script = api.watch_script.pop(0) if api.watch_script else []
                self._stream(
                    (json.dumps({"type": kind, "object": obj}) + "\n" for kind, obj in script),
                    "application/json",
                )
                for kind, obj in script:  # the server's state follows what it streamed
                    key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                    if kind == "DELETED":
                        api.workloads.pop(key, None)
                    else:
                        api.workloads[key] = obj
                return True
            self._send(
                200,
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "WorkloadList",
                    "metadata": {"resourceVersion": "90001"},
                    "items": items,
                },
            )
            return True
        if (m := PENDING.fullmatch(path)) and method == "GET":
            summary = api.positions.get((m[1], m[2]))
            if summary is None:
                return None
            self._send(200, summary)
            return True
        if (m := PODS.fullmatch(path)) and method == "GET":
            items = [
                p
                for p in api.pods
                if p["metadata"]["namespace"] == m[1]
                and _selected(p["metadata"].get("labels") or {}, query.get("labelSelector"))
            ]
            self._send(
                200,
                {
                    "apiVersion": "v1",
                    "kind": "PodList",
                    "metadata": {"resourceVersion": "90002"},
                    "items": items,
                },
            )
            return True
        if (m := LOG.fullmatch(path)) and method == "GET":
            lines = api.logs.get((m[1], m[2]))
            if lines is None:
                return None
            self._stream((line + "\n" for line in lines), "text/plain")
            return True
        if (m := EVENTS.fullmatch(path)) and method == "GET":
            items = [
                e
                for e in api.events
                if e["metadata"]["namespace"] == m[1] and _fields(e, query.get("fieldSelector"))
            ]
            self._send(
                200,
                {
                    "apiVersion": "v1",
                    "kind": "EventList",
                    "metadata": {"resourceVersion": "90003"},
                    "items": items,
                },
            )
            return True
        return None

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


@contextmanager
def serving() -> Iterator[KubeAPI]:
    """A KubeAPI served on a free port of 127.0.0.1 for the duration."""
    api = KubeAPI()
    handler = type("Handler", (_Handler,), {"api": api})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    # A short poll: shutdown() waits for the loop's next poll, half a second by default,
    # which every test using the server would pay at teardown.
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def kubeconfig(path: Path, url: str, env: str = "prod") -> Path:
    """A kubeconfig named the way `hpctl kubeconfig --env` names it (the environment's EKS
    cluster ARN), pointing at `url` with a bearer token."""
    config = load_environment(env).config
    arn = f"arn:aws:eks:{config.region}:{config.account}:cluster/{config.names.eks_cluster}"
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": arn, "cluster": {"server": url}}],
        "users": [{"name": arn, "user": {"token": TOKEN}}],
        "contexts": [{"name": arn, "context": {"cluster": arn, "user": arn}}],
        "current-context": arn,
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path
