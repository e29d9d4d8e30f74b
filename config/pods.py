"""The requests of the pods the platform runs, and Kubernetes' quantities they are written in.

An add-on's row (config/addons.py) carries its pods; the vendored manifests give theirs
(config/node_model.py reads them); the node model sums both per node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# Which nodes a DaemonSet lands on: all, or the groups with a kind of device.
Placement = Literal["every", "nvidia", "neuron", "efa"]


@dataclass(frozen=True, kw_only=True)
class PodRequests:
    """The requests of one pod (all its containers): a DaemonSet's on each node it lands on,
    or one replica of a Deployment. `addon`: the EKS add-on that installs it (None: a
    manifest the platform applies itself; the add-on table fills it in for its rows).
    `source`: where the figures come from."""

    name: str
    cpu_millicores: int
    memory_mib: int
    source: str
    addon: str | None = None
    placement: Placement = "every"
    replicas: int = 1


def mebibytes(quantity: str) -> int:
    """A Kubernetes memory quantity (Ki, Mi, Gi or bytes) in MiB."""
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(float(quantity.removesuffix(suffix)) * factor)
    return int(quantity) // (1024 * 1024)


def millicores(quantity: str | int) -> int:
    """A Kubernetes CPU quantity (`250m`, `2`, `0.5`) in millicores."""
    text = str(quantity)
    return int(text.removesuffix("m")) if text.endswith("m") else int(float(text) * 1000)


def pod_requests(pod_spec: dict[str, Any]) -> tuple[int, int]:
    """(millicores, MiB) a pod spec requests, all its containers together."""
    cpu = memory = 0
    for container in pod_spec.get("containers", []):
        requests = (container.get("resources") or {}).get("requests") or {}
        cpu += millicores(requests.get("cpu", 0))
        memory += mebibytes(str(requests.get("memory", 0)))
    return cpu, memory
