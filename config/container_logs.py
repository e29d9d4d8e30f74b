"""Container logs in CloudWatch Logs: where the Amazon CloudWatch Observability add-on's Fluent
Bit writes them, how it names their streams, and how the platform configures the add-on.

Fluent Bit tails every container's log file on every node and writes it to
`/aws/containerinsights/<EKS cluster>/application`, one stream per container, named
`<node>-application.var.log.containers.<pod>_<namespace>_<container>-<container id>.log`
(its `log_stream_prefix` `${HOST_NAME}-` and the tail input's tag; aws-observability/
helm-charts, charts/amazon-cloudwatch-observability values.yaml `application-log.conf`; the
HyperPod CLI builds the same stream name, aws/sagemaker-hyperpod-cli src/sagemaker/hyperpod/
cli/service/get_logs.py). Each event is the record as JSON: the line under `log`, `stream`
(stdout/stderr) and the Kubernetes filter's `kubernetes` metadata. Node logs go to
`dataplane` (kubelet, containerd) and `host` (dmesg, messages); AWS notes that on Amazon Linux
2023 nodes those two stay empty (journald), application logs are unaffected.

The platform creates these groups itself, with the environment's retention and log key:
Fluent Bit would otherwise create them on first write, unencrypted and kept forever.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

# The log groups Fluent Bit writes (application: containers; dataplane and host: nodes).
CONTAINER_LOG_KINDS: Final = ("application", "dataplane", "host")
APPLICATION_LOGS: Final = "application"

# The CloudWatch Observability add-on runs on Amazon EKS clusters of Kubernetes 1.23 or later
# (CloudWatch User Guide, "Install the CloudWatch agent with the Amazon CloudWatch
# Observability EKS add-on or the Helm chart"); every version config/eks_versions.py lists
# must be one (a test checks it).
ADDON_MIN_KUBERNETES: Final = (1, 23)

# The add-on's configuration values (the chart's values, v5.x). Container logs on; the rest
# off where HyperPod's observability add-on already does it:
# - `agent.config` is the default agent config without `logs.metrics_collected.kubernetes`:
#   no Container Insights metrics (node, pod and GPU figures the observability add-on
#   already writes to managed Prometheus, where the alerts and dashboards read them), so no
#   `performance` log group either. The agent itself stays: Fluent Bit runs under its service
#   account and mounts its certificates. Application Signals stays in its default state; it
#   sends nothing until an application is instrumented, and its permissions are not granted.
# - dcgmExporter and neuronMonitor off: the observability add-on runs the node's DCGM
#   exporter, and two exporters would contend for DCGM's profiling counters.
ADDON_CONFIGURATION: Final[Mapping[str, Any]] = {
    "containerLogs": {"enabled": True},
    "agent": {
        "config": {
            "logs": {"metrics_collected": {"application_signals": {}}},
            "traces": {"traces_collected": {"application_signals": {}}},
        }
    },
    "dcgmExporter": {"enabled": False},
    "neuronMonitor": {"enabled": False},
}

# `<node>-application.var.log.containers.<pod>_<namespace>_<container>-<64 hex id>.log`.
# Pod names and namespaces hold no '_', container names are DNS labels.
APPLICATION_STREAM: Final = re.compile(
    r"^(?P<node>.+)-application\.var\.log\.containers\."
    r"(?P<pod>[^_]+)_(?P<namespace>[^_]+)_(?P<container>[a-z0-9-]+)-(?P<container_id>[0-9a-f]{64})\.log$"
)


def container_log_group(eks_cluster: str, kind: str = APPLICATION_LOGS) -> str:
    """The log group of `kind` (CONTAINER_LOG_KINDS) of the EKS cluster `eks_cluster`."""
    if kind not in CONTAINER_LOG_KINDS:
        raise ValueError(f"{kind!r} is not a container log group; use one of {CONTAINER_LOG_KINDS}")
    return f"/aws/containerinsights/{eks_cluster}/{kind}"
