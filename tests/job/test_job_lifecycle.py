"""`hpctl job submit|list|describe|logs|cancel` through the official Kubernetes client
against a local API server (tests/job/kube_api.py) that answers with recorded shapes: the
calls each command makes, what it prints, and every API failure as one line with the fix."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import Result

from config.container_logs import container_log_group
from config.dashboards import JOB_DASHBOARD_UID
from config.schema.observability import GRAFANA_ENDPOINT_OUTPUT
from hpctl.errors import ExitCode
from hpctl.job import lifecycle
from hpctl.job.render import render_job, to_yaml
from tests.cli.conftest import (
    Stubs,
    environment_account,
    error_line,
    fake_aws_env,
    hpctl,
    offline_clients,
    stubbed_clients,
)
from tests.job.conftest import FIXED_NOW, IMAGE, env_spec
from tests.job.kube_api import TOKEN, KubeAPI, kubeconfig, serving, shape
from tests.support import environment_data

TEAM, NAMESPACE = "research", "hyperpod-ns-research"
JOBS_PATH = f"/apis/sagemaker.amazonaws.com/v1/namespaces/{NAMESPACE}/hyperpodpytorchjobs"
WORKLOADS_PATH = f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{NAMESPACE}/workloads"
RENDER_OPTIONS = [
    "--team",
    TEAM,
    "--instance-group",
    "gpu-p5",
    "--nodes",
    "2",
    "--image",
    IMAGE,
    "--name",
    "llama-8b",
]


@pytest.fixture
def api(tmp_path: Path, fixed_clock: Any) -> Iterator[KubeAPI]:
    with serving() as served:
        served.config_path = kubeconfig(tmp_path / "kubeconfig.yaml", served.url)
        yield served


@pytest.fixture(scope="module")
def aws_clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """CloudFormation, CloudWatch Logs and STS clients of prod's Region, built once."""
    return offline_clients(tmp_path_factory, "us-east-1", ("cloudformation", "logs"))


@pytest.fixture
def stubs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, aws_clients: dict[str, Any]
) -> Iterator[Stubs]:
    """Commands get Stubber-backed AWS clients; STS says the credentials are prod's account.
    Every queued response must be used, and nothing else may be called."""
    fake_aws_env(monkeypatch, tmp_path / "aws")
    with stubbed_clients(monkeypatch, aws_clients, environment_account("prod")) as stubbed:
        yield stubbed


def run(api: KubeAPI, *args: str, env: str = "prod") -> Result:
    """`hpctl job <command> --env ENV --kubeconfig <the server's> ARGS` (options first: a
    command's own code follows `--`)."""
    return hpctl(*args[:2], "--env", env, "--kubeconfig", str(api.config_path), *args[2:])


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def failure(result: Result, code: ExitCode = ExitCode.FAILED) -> str:
    line = error_line(result, code)
    assert result.stdout == ""
    return line


def values(job: dict[str, Any], suffix: str = "x7k2p") -> dict[str, str]:
    meta = job["metadata"]
    return {
        "job": meta["name"],
        "uid": meta["uid"],
        "namespace": meta["namespace"],
        "team": meta["namespace"].removeprefix("hyperpod-ns-"),
        "workload": f"hyperpodpytorchjob-{meta['name']}-{suffix}",
        "workload_uid": f"wl-{meta['uid']}",
    }


def add_job(api: KubeAPI, name: str, status: str | None = None, team: str = TEAM) -> dict[str, Any]:
    """A job as the server stores one the renderer made, with a recorded status."""
    job = render_job(env_spec("prod", team=team, name=name, nodes=2))
    job["metadata"].update(
        uid=api.next_uid("c0ffee00"), creationTimestamp="2026-03-04T04:07:07Z", generation=1
    )
    if status:
        job["status"] = shape(status, **values(job))
    api.jobs[(job["metadata"]["namespace"], name)] = job
    return job


def add_workload(api: KubeAPI, job: dict[str, Any], state: str) -> dict[str, Any]:
    workload: dict[str, Any] = shape(f"workload-{state}.json", **values(job))
    api.workloads[(workload["metadata"]["namespace"], workload["metadata"]["name"])] = workload
    return workload


def add_pods(api: KubeAPI, job: dict[str, Any], nodes: list[str]) -> None:
    for index, node in enumerate(nodes):
        name = f"{job['metadata']['name']}-pod-{index}"
        api.pods.append(
            shape("pod.json", **values(job), pod=name, node=node, pod_uid=f"pod-{index}")
        )


def position(api: KubeAPI, job: dict[str, Any]) -> None:
    queue = f"{job['metadata']['namespace']}-localqueue"
    api.positions[(job["metadata"]["namespace"], queue)] = shape(
        "pendingworkloads.json", **values(job)
    )


# ------------------------------------------------------------------ submit


def test_submit_creates_the_job_render_prints(api: KubeAPI) -> None:
    out = ok(run(api, "job", "submit", *RENDER_OPTIONS))
    (post,) = [r for r in api.requests if r.method == "POST"]
    assert post.path == JOBS_PATH
    assert post.body == render_job(env_spec("prod", team=TEAM, name="llama-8b", nodes=2))
    # The kubeconfig's credentials, not another context's, reach the server.
    assert post.authorization == f"Bearer {TOKEN}"
    uid = api.jobs[(NAMESPACE, "llama-8b")]["metadata"]["uid"]
    assert out.splitlines() == [
        f"Created HyperPodPyTorchJob {NAMESPACE}/llama-8b (uid {uid}).",
        "  hpctl job describe llama-8b --env prod --team research",
        "  hpctl job logs llama-8b --env prod --team research --follow",
    ]


def test_submit_takes_a_teams_own_code(api: KubeAPI) -> None:
    ok(run(api, "job", "submit", *RENDER_OPTIONS, "--module", "torchtitan.train", "--", "--x"))
    container = api.requests[-1].body["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][
        0
    ]
    assert container["command"][-2:] == ["-m", "torchtitan.train"]
    assert container["args"] == ["--x"]


def test_submit_a_file_creates_it_as_written(api: KubeAPI, tmp_path: Path) -> None:
    manifest = render_job(env_spec("prod", team=TEAM, name="edited", nodes=2))
    manifest["metadata"]["labels"]["example.com/owner"] = "me"
    path = tmp_path / "job.yaml"
    path.write_text(to_yaml(manifest))
    result = run(api, "job", "submit", "--file", str(path), "--json")
    assert json.loads(ok(result))["name"] == "edited"
    assert [r.body for r in api.requests if r.method == "POST"] == [manifest]


def test_submit_dash_f_still_reads_a_file_with_one_deprecation_line(
    api: KubeAPI, tmp_path: Path
) -> None:
    # -f means --follow (hpctl job logs); submit's old spelling of --file works one release.
    manifest = render_job(env_spec("prod", team=TEAM, name="edited", nodes=2))
    path = tmp_path / "job.yaml"
    path.write_text(to_yaml(manifest))
    result = run(api, "job", "submit", "-f", str(path), "--json")
    assert json.loads(ok(result))["name"] == "edited"
    assert result.stderr == (
        "hpctl job submit: -f is deprecated and goes in the next release; use --file\n"
    )
    assert [r.body for r in api.requests if r.method == "POST"] == [manifest]


def test_submit_a_file_refuses_render_options(api: KubeAPI, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(to_yaml(render_job(env_spec("prod", team=TEAM, name="x", nodes=2))))
    line = failure(run(api, "job", "submit", "--file", str(path), "--nodes", "4"), ExitCode.USAGE)
    assert line == (
        "hpctl job submit: --file: a file is submitted as written; drop --nodes or --file"
    )
    assert api.requests == []


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}},
            "is not a HyperPodPyTorchJob",
        ),
        (
            {
                "apiVersion": "sagemaker.amazonaws.com/v1",
                "kind": "HyperPodPyTorchJob",
                "metadata": {"name": "x", "namespace": "default"},
            },
            "metadata.namespace 'default' is not a team namespace of prod",
        ),
    ],
)
def test_submit_a_file_that_is_not_a_team_job(
    api: KubeAPI, tmp_path: Path, document: dict[str, Any], problem: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    line = failure(run(api, "job", "submit", "--file", str(path)), ExitCode.USAGE)
    assert line.startswith("hpctl job submit: --file: ") and problem in line, line
    assert api.requests == []


def test_submit_wait_prints_progress_until_kueue_admits(api: KubeAPI) -> None:
    def kueue(job: dict[str, Any]) -> None:
        pending = add_workload(api, job, "pending")
        position(api, job)
        api.watch_script.append([("ADDED", pending)])
        # A new watch after the first window: the quota is taken, then admitted.
        admitted = shape("workload-admitted.json", **values(job))
        api.watch_script.append([("MODIFIED", pending), ("MODIFIED", admitted)])

    api.on_create = kueue
    result = run(api, "job", "submit", *RENDER_OPTIONS, "--wait")
    ok(result)
    assert result.stderr.splitlines() == [
        "llama-8b: queued #3: couldn't assign flavors to pod set worker: insufficient unused "
        "quota for nvidia.com/gpu in flavor ml.p5.48xlarge, 16 more needed",
        "llama-8b: admitted to hyperpod-ns-research-clusterqueue",
    ]
    watches = [r for r in api.requests if r.query.get("watch") == "True"]
    uid = api.jobs[(NAMESPACE, "llama-8b")]["metadata"]["uid"]
    assert [w.path for w in watches] == [WORKLOADS_PATH, WORKLOADS_PATH]
    assert {w.query["labelSelector"] for w in watches} == {f"kueue.x-k8s.io/job-uid={uid}"}


def test_submit_wait_json_reports_the_admission(api: KubeAPI) -> None:
    api.on_create = lambda job: add_workload(api, job, "admitted")
    result = run(api, "job", "submit", *RENDER_OPTIONS, "--wait", "--json")
    assert json.loads(ok(result))["admission"] == "admitted to hyperpod-ns-research-clusterqueue"


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (
            "status-already-exists.json",
            f"HyperPodPyTorchJob {NAMESPACE}/llama-8b: already exists; pick another --name, or "
            "cancel it first with hpctl job cancel llama-8b --env prod --team research --yes",
        ),
        (
            "status-forbidden.json",
            f"HyperPodPyTorchJob {NAMESPACE}/llama-8b: create forbidden (hyperpodpytorchjobs."
            'sagemaker.amazonaws.com is forbidden: User "arn:aws:sts::333333333333:assumed-role/'
            'Researcher/me" cannot list resource "hyperpodpytorchjobs" in API group '
            f'"sagemaker.amazonaws.com" in the namespace "{NAMESPACE}"); your IAM identity needs '
            f"Kubernetes access to namespace {NAMESPACE}: ask the platform team for it",
        ),
        (
            "status-quota-exceeded.json",
            f"HyperPodPyTorchJob {NAMESPACE}/llama-8b: create refused: hyperpodpytorchjobs."
            'sagemaker.amazonaws.com "llama-8b" is forbidden: exceeded quota: team-jobs, '
            "requested: count/hyperpodpytorchjobs.sagemaker.amazonaws.com=1, used: "
            "count/hyperpodpytorchjobs.sagemaker.amazonaws.com=20, limited: "
            f"count/hyperpodpytorchjobs.sagemaker.amazonaws.com=20; free quota in {NAMESPACE} "
            "(hpctl job cancel) or ask the platform team to raise it",
        ),
        (
            "status-webhook-denied.json",
            f"HyperPodPyTorchJob {NAMESPACE}/llama-8b: create refused: admission webhook "
            '"vhyperpodpytorchjob.kb.io" denied the request: spec.replicaSpecs[0].template.spec.'
            "containers[0].resources: nvidia.com/gpu requests must equal nprocPerNode; change "
            "what it names and create again",
        ),
        (
            "status-webhook-forbidden.json",
            f"HyperPodPyTorchJob {NAMESPACE}/llama-8b: create refused: admission webhook "
            f'"vworkload.kb.io" denied the request: spec.queueName: the LocalQueue {NAMESPACE}-'
            "localqueue is not active; change what it names and create again",
        ),
        (
            "status-invalid.json",
            f"HyperPodPyTorchJob {NAMESPACE}/llama-8b: create rejected as invalid: "
            "spec.replicaSpecs[0].replicas: Invalid value: 0: spec.replicaSpecs[0].replicas in "
            "body should be greater than or equal to 1; fix those fields (hpctl job render "
            "writes a manifest the operator accepts)",
        ),
        (
            "status-unauthorized.json",
            f"HyperPodPyTorchJob {NAMESPACE}/llama-8b: the API server did not accept your "
            "credentials (Unauthorized); refresh your AWS credentials (aws eks get-token must "
            "work) or rewrite the kubeconfig with hpctl kubeconfig --env prod",
        ),
        (
            "status-no-such-resource.json",
            f"HyperPodPyTorchJob {NAMESPACE}/llama-8b: the cluster does not serve this kind (the "
            "server could not find the requested resource); check that the HyperPod training "
            "operator and task governance add-ons are installed",
        ),
    ],
)
def test_submit_failures_are_one_line_with_the_fix(
    api: KubeAPI, status: str, expected: str
) -> None:
    api.fail("POST", JOBS_PATH, status, job="llama-8b", namespace=NAMESPACE)
    line = failure(run(api, "job", "submit", *RENDER_OPTIONS))
    assert line == f"hpctl job submit: {expected}"


def test_submitting_a_name_twice_is_already_exists_from_the_server(api: KubeAPI) -> None:
    ok(run(api, "job", "submit", *RENDER_OPTIONS))
    line = failure(run(api, "job", "submit", *RENDER_OPTIONS))
    assert ": already exists; pick another --name" in line


# ------------------------------------------------------------------ list


def _arrange(api: KubeAPI) -> dict[str, dict[str, Any]]:
    running = add_job(api, "llama-8b", "job-status-running.json")
    add_workload(api, running, "admitted")
    add_pods(api, running, ["hyperpod-i-0a1", "hyperpod-i-0b2"])
    queued = add_job(api, "llama-70b")
    add_workload(api, queued, "pending")
    position(api, queued)
    done = add_job(api, "llama-1b", "job-status-completed.json")
    other = add_job(api, "eval-1", "job-status-running.json", team="evaluation")
    return {"running": running, "queued": queued, "done": done, "other": other}


def test_list_shows_state_nodes_restarts_admission_and_age(api: KubeAPI) -> None:
    _arrange(api)
    out = ok(run(api, "job", "list", "--team", TEAM))
    assert out.splitlines() == [
        "NAME       NAMESPACE             STATE      NODES  RESTARTS  ADMISSION                                      AGE",
        "llama-1b   hyperpod-ns-research  Completed  0/2    0         no workload                                    59m",
        "llama-70b  hyperpod-ns-research  Queued     0/2    0         queued #3                                      59m",
        "llama-8b   hyperpod-ns-research  Running    2/2    1         admitted to hyperpod-ns-research-clusterqueue  59m",
    ]
    # One list of jobs, workloads and pods (by the operator's label) for the namespace.
    gets = [(r.path, r.query.get("labelSelector")) for r in api.requests if r.method == "GET"]
    assert (JOBS_PATH, None) in gets
    assert (WORKLOADS_PATH, None) in gets
    assert (f"/api/v1/namespaces/{NAMESPACE}/pods", "HPJob") in gets


def test_list_json_and_every_team_without_team(api: KubeAPI) -> None:
    _arrange(api)
    rows = json.loads(ok(run(api, "job", "list", "--json")))
    assert [(r["namespace"], r["name"], r["state"]) for r in rows] == [
        ("hyperpod-ns-evaluation", "eval-1", "Running"),
        ("hyperpod-ns-research", "llama-1b", "Completed"),
        ("hyperpod-ns-research", "llama-70b", "Queued"),
        ("hyperpod-ns-research", "llama-8b", "Running"),
    ]
    assert rows[3] == {
        "name": "llama-8b",
        "namespace": NAMESPACE,
        "state": "Running",
        "nodes": "2/2",
        "restarts": 1,
        "queue": "hyperpod-ns-research-localqueue",
        "admission": "admitted to hyperpod-ns-research-clusterqueue",
        "age": "59m",
    }
    listed = {r.path for r in api.requests if r.path.endswith("/hyperpodpytorchjobs")}
    assert listed == {
        f"/apis/sagemaker.amazonaws.com/v1/namespaces/hyperpod-ns-{team}/hyperpodpytorchjobs"
        for team in ("foundation", "research", "evaluation")
    }


def test_list_without_jobs(api: KubeAPI) -> None:
    assert ok(run(api, "job", "list", "--team", TEAM)) == "No jobs for research in prod.\n"


def test_list_forbidden(api: KubeAPI) -> None:
    api.fail("GET", JOBS_PATH, "status-forbidden.json", namespace=NAMESPACE)
    line = failure(run(api, "job", "list", "--team", TEAM))
    assert line.startswith(f"hpctl job list: HyperPodPyTorchJob in {NAMESPACE}: list forbidden (")
    assert line.endswith(f"access to namespace {NAMESPACE}: ask the platform team for it")


def test_list_an_unknown_team(api: KubeAPI) -> None:
    line = failure(run(api, "job", "list", "--team", "hyperpod-ns-research"), ExitCode.USAGE)
    assert line == (
        "hpctl job list: --team: unknown team 'hyperpod-ns-research' in prod; use one of "
        "evaluation, foundation, research"
    )


# ------------------------------------------------------------------ describe


def test_describe_shows_conditions_admission_pods_and_kueue_events(api: KubeAPI) -> None:
    jobs = _arrange(api)
    job = jobs["running"]
    workload = next(
        iter(
            w
            for w in api.workloads.values()
            if w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == job["metadata"]["uid"]
        )
    )
    api.events += shape("events.json", **values(job))["items"]
    report = json.loads(ok(run(api, "job", "describe", "llama-8b", "--team", TEAM, "--json")))
    assert report["state"] == "Running"
    assert [(c["type"], c["status"]) for c in report["conditions"]] == [
        ("Created", "True"),
        ("Running", "True"),
    ]
    assert report["restart_status"] == {
        "currentEvalPeriod": 1,
        "fullJobRestartCount": 0,
        "restartCount": 1,
    }
    assert report["workload"] == {
        "name": workload["metadata"]["name"],
        "cluster_queue": "hyperpod-ns-research-clusterqueue",
        "admitted": True,
        "preempted": False,
        "waiting": None,
    }
    assert report["pods"] == [
        {"name": "llama-8b-pod-0", "node": "hyperpod-i-0a1", "phase": "Running", "restarts": 1},
        {"name": "llama-8b-pod-1", "node": "hyperpod-i-0b2", "phase": "Running", "restarts": 1},
    ]
    assert [e["reason"] for e in report["events"]] == [
        "JobCreated",
        "Pending",
        "QuotaReserved",
        "Admitted",
        "Preempted",
    ]
    # Events about the job and about its workload, each by its UID.
    selectors = sorted(r.query["fieldSelector"] for r in api.requests if r.path.endswith("/events"))
    assert selectors == sorted(
        [
            f"involvedObject.uid={job['metadata']['uid']}",
            f"involvedObject.uid={workload['metadata']['uid']}",
        ]
    )


def test_describe_a_preempted_job_says_why_it_waits(api: KubeAPI) -> None:
    job = add_job(api, "llama-8b", "job-status-running.json")
    add_workload(api, job, "preempted")
    out = ok(run(api, "job", "describe", "llama-8b", "--team", TEAM))
    lines = out.splitlines()
    assert "State:     Preempted" in lines
    assert "Admission: preempted, queued" in lines
    assert (
        "Waiting:   Preempted to accommodate a workload (UID: 4b1d2f6e-0c55-4c3b-9d0e-2c1f6d7e8a90, JobUID: 9e8f7a6b-5c4d-4e3f-8a2b-1c0d9e8f7a6b) due to prioritization in the ClusterQueue"
        in lines
    )


def test_describe_text_of_a_queued_job(api: KubeAPI) -> None:
    job = add_job(api, "llama-70b")
    add_workload(api, job, "pending")
    position(api, job)
    out = ok(run(api, "job", "describe", "llama-70b", "--team", TEAM))
    assert out.splitlines() == [
        "Name:      llama-70b",
        f"Namespace: {NAMESPACE}",
        "State:     Queued",
        "Nodes:     0/2",
        "Restarts:  0",
        f"Queue:     {NAMESPACE}-localqueue",
        "Admission: queued #3",
        "Age:       59m",
        "Started:   -",
        "Completed: -",
        "Dashboard: unavailable (prod has no Grafana workspace (observability.grafana); open "
        "dashboard hyperpod-job on a Grafana that reads its Prometheus workspace)",
        "Waiting:   couldn't assign flavors to pod set worker: insufficient unused quota for "
        "nvidia.com/gpu in flavor ml.p5.48xlarge, 16 more needed",
        "Conditions:",
        "  none",
        "Pods:",
        "  none",
        "Events:",
        "  none",
    ]


def test_describe_a_missing_job(api: KubeAPI) -> None:
    line = failure(run(api, "job", "describe", "llama-9b", "--team", TEAM))
    assert line == (
        f"hpctl job describe: HyperPodPyTorchJob {NAMESPACE}/llama-9b: not found; list the "
        "team's jobs with hpctl job list --env prod --team research"
    )


GRAFANA = "g-abc123.grafana-workspace.us-east-1.amazonaws.com"
OBSERVABILITY_STACK = "hyperpod-prod-observability"
# add_job's creationTimestamp, 2026-03-04T04:07:07Z, in milliseconds.
JOB_CREATED_MS = 1772597227000


@pytest.fixture
def grafana_prod(config_dir: Callable[[str, Any], None]) -> None:
    """prod as `--env prod` reads it, with a Grafana workspace."""
    data = environment_data("prod")
    data["observability"]["grafana"] = True
    config_dir("prod", data)


def test_describe_without_grafana_names_the_dashboard_and_calls_no_aws(api: KubeAPI) -> None:
    add_job(api, "llama-8b", "job-status-running.json")
    report = json.loads(ok(run(api, "job", "describe", "llama-8b", "--team", TEAM, "--json")))
    assert report["dashboard"] == {
        "uid": JOB_DASHBOARD_UID,
        "url": None,
        "unavailable": "prod has no Grafana workspace (observability.grafana); open dashboard "
        "hyperpod-job on a Grafana that reads its Prometheus workspace",
    }


def test_describe_links_the_jobs_dashboard_on_the_environments_grafana(
    api: KubeAPI, grafana_prod: None, stubs: Stubs
) -> None:
    add_job(api, "llama-8b", "job-status-running.json")
    stubs["cloudformation"].add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": OBSERVABILITY_STACK,
                    "CreationTime": datetime(2026, 1, 1, tzinfo=UTC),
                    "StackStatus": "UPDATE_COMPLETE",
                    "Outputs": [
                        {"OutputKey": "AlarmTopicArn", "OutputValue": "arn:aws:sns:x"},
                        {"OutputKey": GRAFANA_ENDPOINT_OUTPUT, "OutputValue": GRAFANA},
                    ],
                }
            ]
        },
        expected_params={"StackName": OBSERVABILITY_STACK},
    )
    out = ok(run(api, "job", "describe", "llama-8b", "--team", TEAM))
    url = (
        f"https://{GRAFANA}/d/{JOB_DASHBOARD_UID}?var-namespace={NAMESPACE}"
        f"&var-training_job=llama-8b&from={JOB_CREATED_MS}&to=now"
    )
    assert f"Dashboard: {url}" in out.splitlines()
    # Credentials of prod's account, checked with STS, in prod's Region.
    assert stubs.clients == [("sts", "us-east-1"), ("cloudformation", "us-east-1")]


def test_describe_with_aws_out_of_reach_says_why_and_succeeds(
    api: KubeAPI, grafana_prod: None, stubs: Stubs
) -> None:
    add_job(api, "llama-8b", "job-status-running.json")
    stubs["cloudformation"].add_client_error(
        "describe_stacks",
        service_error_code="ValidationError",
        service_message=f"Stack with id {OBSERVABILITY_STACK} does not exist",
        http_status_code=400,
    )
    result = run(api, "job", "describe", "llama-8b", "--team", TEAM)
    assert (
        f"Dashboard: unavailable (cannot read stack {OBSERVABILITY_STACK} (ValidationError: "
        f"Stack with id {OBSERVABILITY_STACK} does not exist))"
    ) in ok(result).splitlines()
    assert result.stderr == ""


def test_describe_with_another_accounts_credentials_says_why_and_succeeds(
    api: KubeAPI, grafana_prod: None, stubs: Stubs
) -> None:
    add_job(api, "llama-8b", "job-status-running.json")
    stubs.caller = "444455556666"
    report = json.loads(ok(run(api, "job", "describe", "llama-8b", "--team", TEAM, "--json")))
    assert report["dashboard"]["url"] is None
    assert report["dashboard"]["unavailable"].startswith(
        "--env: prod deploys into account 333333333333, the credentials are of 444455556666"
    )


# ------------------------------------------------------------------ logs


def test_logs_of_rank_zero_and_another_rank(api: KubeAPI) -> None:
    job = add_job(api, "llama-8b", "job-status-running.json")
    add_pods(api, job, ["n0", "n1"])
    api.logs[(NAMESPACE, "llama-8b-pod-0")] = [
        "HPTRAIN start rank=0 world=16 step=0",
        "HPTRAIN step=1 loss=9.1",
    ]
    api.logs[(NAMESPACE, "llama-8b-pod-1")] = ["HPTRAIN start rank=8 world=16 step=0"]
    assert ok(run(api, "job", "logs", "llama-8b", "--team", TEAM)).splitlines() == [
        "HPTRAIN start rank=0 world=16 step=0",
        "HPTRAIN step=1 loss=9.1",
    ]
    out = ok(run(api, "job", "logs", "llama-8b", "--team", TEAM, "--rank", "1", "--json"))
    assert [json.loads(line) for line in out.splitlines()] == [
        {"pod": "llama-8b-pod-1", "rank": 1, "line": "HPTRAIN start rank=8 world=16 step=0"}
    ]
    (read,) = [r for r in api.requests if r.path.endswith("llama-8b-pod-1/log")]
    assert read.query == {"container": "trainer", "follow": "False"}


def test_logs_follow_asks_the_server_to_follow(api: KubeAPI) -> None:
    job = add_job(api, "llama-8b", "job-status-running.json")
    add_pods(api, job, ["n0"])
    api.logs[(NAMESPACE, "llama-8b-pod-0")] = ["a", "b"]
    assert ok(run(api, "job", "logs", "llama-8b", "--team", TEAM, "--follow")) == "a\nb\n"
    (read,) = [r for r in api.requests if r.path.endswith("/log")]
    assert read.query == {"container": "trainer", "follow": "True"}


def test_logs_of_a_rank_the_job_does_not_have(api: KubeAPI) -> None:
    job = add_job(api, "llama-8b", "job-status-running.json")
    add_pods(api, job, ["n0", "n1"])
    line = failure(run(api, "job", "logs", "llama-8b", "--team", TEAM, "--rank", "5"))
    assert line == (
        "hpctl job logs: --rank: job llama-8b has no pod llama-8b-pod-5 (pods: llama-8b-pod-0, "
        "llama-8b-pod-1); pick a rank below its node count, or wait until Kueue admits it "
        "(hpctl job describe)"
    )


def test_logs_of_a_queued_job_say_why_there_are_none(api: KubeAPI) -> None:
    job = add_job(api, "llama-8b")
    add_workload(api, job, "pending")
    line = failure(run(api, "job", "logs", "llama-8b", "--team", TEAM))
    assert line == (
        "hpctl job logs: job llama-8b has no pods yet (Queued, queued); see why with hpctl job "
        "describe llama-8b --env prod --team research"
    )


def test_logs_of_a_missing_job_point_at_the_archive(api: KubeAPI) -> None:
    line = failure(run(api, "job", "logs", "nope", "--team", TEAM))
    assert line == (
        f"hpctl job logs: HyperPodPyTorchJob {NAMESPACE}/nope: not found; list the team's jobs "
        "with hpctl job list --env prod --team research, or read a deleted job's log with "
        "--archive"
    )


# ------------------------------------------------------------------ archived logs

LOG_GROUP = container_log_group("hyperpod-prod-eks")
NODE = "hyperpod-i-0a1"


def stream_name(pod: str, container: str = "trainer", n: int = 0) -> str:
    """A stream as the CloudWatch Observability add-on's Fluent Bit names it."""
    return f"{NODE}-application.var.log.containers.{pod}_{NAMESPACE}_{container}-{n:064x}.log"


def streams_page(*names: str) -> dict[str, Any]:
    last = JOB_CREATED_MS + 3_600_000
    return {
        "logStreams": [
            {"logStreamName": name, "creationTime": last - 1000, "lastEventTimestamp": last}
            for name in names
        ]
    }


def log_event(stream: str, seconds: int, text: str) -> dict[str, Any]:
    when = JOB_CREATED_MS + seconds * 1000
    return {
        "logStreamName": stream,
        "timestamp": when,
        "message": json.dumps({"log": text + "\n", "stream": "stdout"}),
        "ingestionTime": when + 500,
        "eventId": f"{seconds:056d}",
    }


def describe_streams_params() -> dict[str, Any]:
    return {
        "logGroupName": LOG_GROUP,
        "orderBy": "LastEventTime",
        "descending": True,
        "limit": 50,
    }


def finished(status: str) -> dict[str, Any]:
    """A job status after the run: the recorded completed one, or the running one with the
    operator's terminal Failed condition on top."""
    if status == "Completed":
        return shape("job-status-completed.json", job="llama-8b")
    failed = shape("job-status-running.json", job="llama-8b")
    failed["conditions"].append(
        {
            "type": "Failed",
            "status": "True",
            "reason": "JobFailed",
            "message": "HyperPodPyTorchJob llama-8b failed.",
            "lastTransitionTime": "2026-03-04T09:31:02Z",
        }
    )
    return failed


@pytest.mark.parametrize("state", ["Completed", "Failed"])
def test_logs_of_a_finished_job_without_pods_come_from_the_archive(
    api: KubeAPI, stubs: Stubs, state: str
) -> None:
    job = add_job(api, "llama-8b")
    job["status"] = finished(state)
    rank_0, rank_1 = stream_name("llama-8b-pod-0"), stream_name("llama-8b-pod-1", n=1)
    stubs["logs"].add_response(
        "describe_log_streams",
        streams_page(rank_1, rank_0),
        expected_params=describe_streams_params(),
    )
    stubs["logs"].add_response(
        "filter_log_events",
        {"events": [log_event(rank_0, 5, "HPTRAIN start"), log_event(rank_0, 9, "done")]},
        expected_params={
            "logGroupName": LOG_GROUP,
            "logStreamNames": [rank_0],
            "startTime": JOB_CREATED_MS,
        },
    )
    assert ok(run(api, "job", "logs", "llama-8b", "--team", TEAM)) == "HPTRAIN start\ndone\n"
    assert stubs.clients == [("sts", "us-east-1"), ("logs", "us-east-1")]


@pytest.mark.parametrize(
    ("since", "warning"),
    [
        ("6h", ""),
        ("360m", ""),
        # The previous release's spelling, hours without a unit, for one more release.
        (
            "6",
            "hpctl job logs: --since 6: a number without a unit is deprecated and read as "
            "hours; write 6h\n",
        ),
    ],
)
def test_logs_archive_of_a_deleted_job_reads_every_rank_since_hours_ago(
    api: KubeAPI, stubs: Stubs, since: str, warning: str
) -> None:
    rank_0, rank_1 = stream_name("llama-8b-pod-0"), stream_name("llama-8b-pod-1", n=1)
    # Another job whose name starts with this one's, and a sidecar of rank 1.
    other = stream_name("llama-8b-eval-pod-0", n=2)
    sidecar = stream_name("llama-8b-pod-1", container="log-shipper", n=3)
    stubs["logs"].add_response(
        "describe_log_streams",
        streams_page(other, rank_1, sidecar, rank_0),
        expected_params=describe_streams_params(),
    )
    start = FIXED_NOW - timedelta(hours=6)
    stubs["logs"].add_response(
        "filter_log_events",
        {
            "events": [
                log_event(rank_1, 4, "rank 8 up"),
                log_event(other, 5, "not this job"),
                log_event(rank_0, 6, "rank 0 up"),
                log_event(sidecar, 7, "shipped"),
            ]
        },
        expected_params={
            "logGroupName": LOG_GROUP,
            "logStreamNames": [other, rank_0, sidecar, rank_1],
            "startTime": int(start.timestamp() * 1000),
        },
    )
    result = run(
        api,
        "job",
        "logs",
        "llama-8b",
        "--team",
        TEAM,
        "--archive",
        "--all-ranks",
        "--since",
        since,
        "--json",
    )
    out = ok(result)
    assert result.stderr == warning
    assert [json.loads(line) for line in out.splitlines()] == [
        {
            "pod": "llama-8b-pod-1",
            "rank": 1,
            "line": "rank 8 up",
            "time": "2026-03-04T04:07:11.000Z",
        },
        {
            "pod": "llama-8b-pod-0",
            "rank": 0,
            "line": "rank 0 up",
            "time": "2026-03-04T04:07:13.000Z",
        },
        {"pod": "llama-8b-pod-1", "rank": 1, "line": "shipped", "time": "2026-03-04T04:07:14.000Z"},
    ]
    # The job object is gone: it was looked for, and the pods were not listed.
    assert api.calls() == [("GET", f"{JOBS_PATH}/llama-8b")]


def test_logs_archive_failure_is_one_line(api: KubeAPI, stubs: Stubs) -> None:
    job = add_job(api, "llama-8b")
    job["status"] = finished("Completed")
    stubs["logs"].add_client_error(
        "describe_log_streams",
        service_error_code="AccessDeniedException",
        service_message="User: arn:aws:sts::333333333333:assumed-role/Researcher/me is not "
        "authorized to perform: logs:DescribeLogStreams",
        http_status_code=400,
    )
    line = failure(run(api, "job", "logs", "llama-8b", "--team", TEAM))
    assert line == (
        f"hpctl job logs: cannot read the archived log of job llama-8b from {LOG_GROUP}: "
        "AccessDeniedException: User: arn:aws:sts::333333333333:assumed-role/Researcher/me is "
        "not authorized to perform: logs:DescribeLogStreams; grant logs:DescribeLogStreams"
    )


def test_logs_archive_without_lines_says_where_it_looked(api: KubeAPI, stubs: Stubs) -> None:
    job = add_job(api, "llama-8b")
    job["status"] = finished("Completed")
    stubs["logs"].add_response(
        "describe_log_streams",
        streams_page(stream_name("llama-8b-pod-1")),
        expected_params=describe_streams_params(),
    )
    line = failure(run(api, "job", "logs", "llama-8b", "--team", TEAM))
    assert line == (
        f"hpctl job logs: job llama-8b: no archived log of pod llama-8b-pod-0 in {LOG_GROUP} "
        "since 2026-03-04T04:07:07+00:00; widen --since, or check the job's name and --rank"
    )


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            ["--archive", "--follow"],
            "--follow: an archived log is read once; drop --follow or --archive",
        ),
        (
            ["--all-ranks", "--rank", "1"],
            "--all-ranks: reads every rank; drop --rank or --all-ranks",
        ),
        (
            ["--all-ranks"],
            "--all-ranks: reads the archived log and job llama-8b still has pods; add --archive",
        ),
        (
            ["--since", "2h"],
            "--since: reads the archived log and job llama-8b still has pods; add --archive",
        ),
        (
            ["--since", "2x"],
            "--since: '2x' is not a duration; write a number and a unit, e.g. 30m, 6h, 7d or 2w",
        ),
        (["--since", "0m"], "--since: '0m' reads nothing; use a duration above 0, e.g. 30m"),
    ],
)
def test_logs_archive_options_that_do_not_fit(
    api: KubeAPI, options: list[str], expected: str
) -> None:
    job = add_job(api, "llama-8b", "job-status-running.json")
    add_pods(api, job, ["n0"])
    line = failure(run(api, "job", "logs", "llama-8b", "--team", TEAM, *options), ExitCode.USAGE)
    assert line == f"hpctl job logs: {expected}"


# ------------------------------------------------------------------ cancel


def test_cancel_needs_yes_and_sends_nothing_without_it(api: KubeAPI) -> None:
    add_job(api, "llama-8b", "job-status-running.json")
    line = failure(run(api, "job", "cancel", "llama-8b", "--team", TEAM))
    assert line == (
        f"hpctl job cancel: refusing to cancel HyperPodPyTorchJob {NAMESPACE}/llama-8b without "
        "--yes: its pods stop; re-run with --yes"
    )
    assert api.calls("DELETE") == []


def test_cancel_deletes_in_the_foreground_and_list_shows_it_terminating(api: KubeAPI) -> None:
    add_job(api, "llama-8b", "job-status-running.json")
    result = run(api, "job", "cancel", "llama-8b", "--team", TEAM, "--yes", "--json")
    assert json.loads(ok(result)) == {"name": "llama-8b", "namespace": NAMESPACE, "cancelled": True}
    (delete,) = [r for r in api.requests if r.method == "DELETE"]
    assert delete.path == f"{JOBS_PATH}/llama-8b"
    assert delete.query == {"propagationPolicy": "Foreground"}
    rows = json.loads(ok(run(api, "job", "list", "--team", TEAM, "--json")))
    assert [(r["name"], r["state"]) for r in rows] == [("llama-8b", "Terminating")]


def test_cancel_a_missing_job(api: KubeAPI) -> None:
    line = failure(run(api, "job", "cancel", "nope", "--team", TEAM, "--yes"))
    assert line.startswith(f"hpctl job cancel: HyperPodPyTorchJob {NAMESPACE}/nope: not found;")


def test_cancel_conflict(api: KubeAPI) -> None:
    add_job(api, "llama-8b")
    api.fail("DELETE", f"{JOBS_PATH}/llama-8b", "status-conflict.json", job="llama-8b")
    line = failure(run(api, "job", "cancel", "llama-8b", "--team", TEAM, "--yes"))
    assert line.startswith(
        f"hpctl job cancel: HyperPodPyTorchJob {NAMESPACE}/llama-8b: changed while this ran ("
    )
    assert line.endswith("); run the command again")


# ------------------------------------------------------------------ the kubeconfig


def test_a_kubeconfig_without_an_eks_context_is_refused(api: KubeAPI, tmp_path: Path) -> None:
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "contexts": []}))
    result = hpctl("job", "list", "--env", "prod", "--kubeconfig", str(path))
    assert failure(result, ExitCode.USAGE) == (
        f"hpctl job list: --kubeconfig: {path} has no current context naming an EKS cluster ARN "
        "(want hyperpod-prod-eks in us-east-1, account 333333333333); write one with hpctl "
        "kubeconfig --env prod"
    )


def test_a_missing_kubeconfig_says_how_to_write_one(tmp_path: Path) -> None:
    missing = tmp_path / "none.yaml"
    result = hpctl("job", "list", "--env", "prod", "--kubeconfig", str(missing))
    assert failure(result, ExitCode.USAGE) == (
        f"hpctl job list: --kubeconfig: {missing} does not exist; write it with hpctl "
        "kubeconfig --env prod"
    )


def test_a_kubeconfig_of_another_environment_is_refused(api: KubeAPI, tmp_path: Path) -> None:
    other = kubeconfig(tmp_path / "dev.yaml", api.url, env="dev")
    result = hpctl("job", "list", "--env", "prod", "--kubeconfig", str(other))
    line = failure(result, ExitCode.USAGE)
    assert line.startswith(f"hpctl job list: --kubeconfig: {other} is for cluster hyperpod-dev-eks")
    assert line.endswith("; write one with hpctl kubeconfig --env prod")
    assert api.requests == []


def test_an_unreachable_api_server(tmp_path: Path) -> None:
    with serving() as api:
        url = api.url  # a port nothing listens on once the server is gone
    path = kubeconfig(tmp_path / "k.yaml", url)
    result = hpctl("job", "list", "--env", "prod", "--team", TEAM, "--kubeconfig", str(path))
    line = failure(result)
    assert line.startswith(f"hpctl job list: cannot reach the API server at {url} (")
    assert line.endswith("open the tunnel hpctl kubeconfig --env prod prints, or check the network")


# ------------------------------------------------------------------ the state rules


def test_state_rules() -> None:
    job: dict[str, Any] = {"metadata": {"uid": "u"}, "status": {}}
    assert lifecycle.job_state(job, None) == "Submitted"
    pending = shape(
        "workload-pending.json",
        job="j",
        uid="u",
        namespace="n",
        team="t",
        workload="w",
        workload_uid="wu",
    )
    admitted = shape(
        "workload-admitted.json",
        job="j",
        uid="u",
        namespace="n",
        team="t",
        workload="w",
        workload_uid="wu",
    )
    preempted = shape(
        "workload-preempted.json",
        job="j",
        uid="u",
        namespace="n",
        team="t",
        workload="w",
        workload_uid="wu",
    )
    assert lifecycle.job_state(job, pending) == "Queued"
    assert lifecycle.job_state(job, preempted) == "Preempted"
    assert lifecycle.job_state(job, admitted) == "Submitted"
    running = {**job, "status": shape("job-status-running.json", job="j")}
    assert lifecycle.job_state(running, admitted) == "Running"
    done = {**job, "status": shape("job-status-completed.json", job="j")}
    # A terminal condition stands whatever Kueue says afterwards.
    assert lifecycle.job_state(done, pending) == "Completed"
    deleted = {**running, "metadata": {"uid": "u", "deletionTimestamp": "2026-03-04T10:00:00Z"}}
    assert lifecycle.job_state(deleted, admitted) == "Terminating"


def test_the_latest_condition_that_holds_wins_whatever_the_list_order() -> None:
    status = shape("job-status-running.json", job="j")
    status["conditions"].reverse()
    assert lifecycle.job_condition({"status": status}) == "Running"


@pytest.mark.parametrize(
    ("seconds", "expected"), [(5, "5s"), (59, "59s"), (60, "1m"), (3600, "1h"), (90000, "1d")]
)
def test_age_reads_like_kubectl(seconds: int, expected: str) -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 3, 4, 12, tzinfo=UTC)
    stamp = (now - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert lifecycle.age(stamp, now) == expected
