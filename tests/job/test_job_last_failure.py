"""`hpctl job describe` names the job's last failure and its cause (config.failures): the
newest non-zero container exit of its pods, from the termination message Kubernetes keeps
(with FallbackToLogsOnError, the log's last lines)."""

from __future__ import annotations

import json
from typing import Any

from hpctl.job.last_failure import last_failure
from tests.job.kube_api import KubeAPI
from tests.job.test_job_lifecycle import TEAM, add_job, add_pods, api, aws_clients, ok, run, stubs

__all__ = ["api", "aws_clients", "stubs"]  # the fixtures the describe command runs against

XID_LINE = "NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus."


def _terminated(code: int, at: str, message: str = "", reason: str = "Error") -> dict[str, Any]:
    return {
        "terminated": {"exitCode": code, "reason": reason, "finishedAt": at, "message": message}
    }


def _pod(name: str, node: str, *states: dict[str, Any]) -> dict[str, Any]:
    statuses = [{"name": "trainer", "state": s, "lastState": {}} for s in states]
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node},
        "status": {"containerStatuses": statuses},
    }


def test_the_newest_failed_exit_is_the_last_failure_with_its_cause() -> None:
    pods = [
        _pod("job-pod-0", "node-a", _terminated(2, "2026-03-04T05:00:00Z", "error: bad --lr")),
        _pod("job-pod-1", "node-b", _terminated(1, "2026-03-04T06:00:00Z", XID_LINE)),
        _pod("job-pod-2", "node-c", _terminated(0, "2026-03-04T07:00:00Z")),
    ]
    assert last_failure(pods) == {
        "pod": "job-pod-1",
        "node": "node-b",
        "time": "2026-03-04T06:00:00Z",
        "exit_code": 1,
        "reason": "Error",
        "cause": "gpu",
        "restart_helps": True,
        "evidence": XID_LINE,
    }


def test_an_oom_killed_container_is_out_of_memory_and_no_failure_is_none() -> None:
    killed = _pod("p", "n", _terminated(137, "2026-03-04T05:00:00Z", reason="OOMKilled"))
    failure = last_failure([killed])
    assert failure is not None
    assert (failure["cause"], failure["restart_helps"]) == ("out_of_memory", False)
    assert last_failure([_pod("p", "n", {"running": {}})]) is None


def test_describe_shows_the_last_failure_and_its_cause(api: KubeAPI) -> None:
    job = add_job(api, "llama-8b", "job-status-running.json")
    add_pods(api, job, ["hyperpod-i-0a1"])
    status = api.pods[0]["status"]["containerStatuses"][0]
    status["lastState"] = _terminated(
        2, "2026-03-04T05:09:30Z", "error: data.dtype uint16 does not match shard 0; fix it"
    )
    report = json.loads(ok(run(api, "job", "describe", "llama-8b", "--team", TEAM, "--json")))
    assert report["last_failure"]["cause"] == "bad_input"
    assert report["last_failure"]["restart_helps"] is False
    text = ok(run(api, "job", "describe", "llama-8b", "--team", TEAM))
    assert (
        "Failure:   bad_input (a restart cannot help): llama-8b-pod-0 on hyperpod-i-0a1 exited 2 "
        "at 2026-03-04T05:09:30+00:00; error: data.dtype uint16 does not match shard 0; fix it"
    ) in text.splitlines(), text
