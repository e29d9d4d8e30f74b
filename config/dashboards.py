"""The per-job Grafana dashboard's address: a fact both the observability stack (which ships
dashboards/job.json) and `hpctl job describe` (which links to it) read."""

from __future__ import annotations

from datetime import datetime
from typing import Final
from urllib.parse import urlencode

# The per-job dashboard (platform_constructs/observability/dashboards/job.json) and the
# variables it is opened with.
JOB_DASHBOARD_UID: Final = "hyperpod-job"
JOB_DASHBOARD_VARIABLES: Final = ("namespace", "training_job")


def job_dashboard_url(
    grafana_url: str, *, namespace: str, job: str, start: datetime | None = None
) -> str:
    """The per-job dashboard of `job` in `namespace` on the Grafana at `grafana_url` (the
    workspace endpoint, with or without a scheme), from `start` (default: the dashboard's
    own range) to now."""
    base = grafana_url if "://" in grafana_url else f"https://{grafana_url}"
    query: list[tuple[str, str]] = [
        (f"var-{name}", value)
        for name, value in zip(JOB_DASHBOARD_VARIABLES, (namespace, job), strict=True)
    ]
    if start is not None:
        query += [("from", str(int(start.timestamp() * 1000))), ("to", "now")]
    return f"{base.rstrip('/')}/d/{JOB_DASHBOARD_UID}?{urlencode(query)}"
