"""A job's last failure as `hpctl job describe` shows it: the newest non-zero exit of any of
its containers (the current state, or the last one before a restart), its exit code, reason
and termination message, classified by `config.failures`. With the container's
`terminationMessagePolicy: FallbackToLogsOnError`, Kubernetes puts the log's last lines in
that message, so the trainer's one `error:` line reaches the classifier."""

from __future__ import annotations

from typing import Any

from config.failures import classify_failure


def _terminations(pod: dict[str, Any]) -> list[dict[str, Any]]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    found = []
    for status in statuses:
        for state in (status.get("state"), status.get("lastState")):
            terminated = (state or {}).get("terminated")
            if terminated and terminated.get("exitCode"):
                name = (pod.get("metadata") or {}).get("name")
                found.append(
                    {**terminated, "pod": name, "node": (pod.get("spec") or {}).get("nodeName")}
                )
    return found


def last_failure(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest failed container exit of the job's pods, with its cause; None when no
    container has failed."""
    failed = [t for pod in pods for t in _terminations(pod)]
    if not failed:
        return None
    newest = max(failed, key=lambda t: (str(t.get("finishedAt") or ""), str(t["pod"])))
    message = str(newest.get("message") or "")
    cause = classify_failure(message.splitlines(), newest["exitCode"], newest.get("reason"))
    return {
        "pod": newest["pod"],
        "node": newest["node"],
        "time": newest.get("finishedAt"),
        "exit_code": newest["exitCode"],
        "reason": newest.get("reason"),
        "cause": cause.cause,
        "restart_helps": cause.restart_helps,
        "evidence": cause.evidence,
    }
