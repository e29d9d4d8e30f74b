"""What a node of each instance group offers pods, and what a training job may request there.

A node's CPUs are the cores the OS sees (`threads_per_core` 1 halves an x86 type's vCPUs). From
them and its memory the kubelet reserves its share and keeps an eviction threshold; the
rest is allocatable. HyperPod's tiered storage takes its share of memory outside any pod,
and every DaemonSet the platform installs on the group takes its requests. On accelerated
groups a job also leaves room for the platform's Deployments, which nothing keeps off them.
What is left is the job's: `NodeModel.job`. The platform's Deployments must also fit on the
nodes of the groups without accelerators (`system_fit_problem`), and every accelerated
group must leave a job something (`job_fit_problem`); the platform plan (config/plan.py)
checks both, once the schema has passed the environment.

Pure Python and no AWS: figures come from the instance table, the environment's config,
the add-on table's pods (`config.addons`) and the vendored manifests (config/manifests);
each figure names its source.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from config.addons import ADDON_DAEMONSETS, ADDONS, SYSTEM_PODS
from config.instance_types import InstanceType, lookup
from config.manifests import MANIFEST_DIR
from config.pods import Placement, PodRequests, pod_requests

if TYPE_CHECKING:
    from config.schema import EnvironmentConfig
    from config.schema.hyperpod import InstanceGroupConfig

MIB_PER_GIB = 1024

# --------------------------------------------------------------------- kubelet (EKS AMI)
# HyperPod's EKS AMI is built on the EKS-optimized accelerated AMI, whose kubelet config
# nodeadm writes (awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go; AL2's
# bootstrap.sh used the same figures):
# - kube-reserved CPU, `getCPUMillicoresToReserve`: 6% of the first core, 1% of the second,
#   0.5% of the third and fourth, 0.25% of every further one, over the cores the OS sees;
# - kube-reserved memory, `getMemoryMebibytesToReserve`: 11 MiB per pod + 255 MiB, with max
#   pods `CalcMaxPods` (eni_max_pods.go): default-card ENIs x (IPv4 per ENI - 1) + 2;
# - no system-reserved (only its cgroup is set), and evictionHard memory.available 100Mi.
_CPU_RESERVE_BANDS = ((1000, 600), (1000, 100), (2000, 50), (None, 25))  # (millicores, 1/10000)
KUBE_RESERVED_MIB_PER_POD = 11
KUBE_RESERVED_BASE_MIB = 255
SYSTEM_RESERVED_CPU_MILLICORES = 0
SYSTEM_RESERVED_MEMORY_MIB = 0
EVICTION_HARD_MEMORY_MIB = 100
# The kubelet sees MemTotal, below the type's nominal memory (firmware, kernel). AWS's node
# autoscaler sizes nodes with the same allowance: Karpenter's vmMemoryOverheadPercent
# default, 0.075 (aws/karpenter-provider-aws, settings).
VM_MEMORY_OVERHEAD = 0.075
# Hugepages: nodeadm configures none, the EKS AMI installs EFA with `efa_installer.sh
# --minimal` (templates/al2023/provisioners/install-efa.sh) and this project's lifecycle
# scripts (lifecycle/steps) reserve none, so nodes advertise no hugepages-2Mi. AWS's EFA
# job examples request them for nodes that reserve them; a request no node offers would
# keep every pod Pending, so jobs request none.
HUGEPAGES_2MI_MIB = 0


def kube_reserved_cpu_millicores(cpus: int) -> int:
    """nodeadm's `getCPUMillicoresToReserve` for a node whose OS sees `cpus` cores."""
    left, reserved = cpus * 1000, 0
    for band, basis_points in _CPU_RESERVE_BANDS:
        share = left if band is None else min(left, band)
        reserved += share * basis_points // 10000
        left -= share
    return reserved


def max_pods(instance: InstanceType) -> int:
    """nodeadm's `CalcMaxPods` without a custom expression."""
    return instance.default_enis * (instance.ipv4_per_eni - 1) + 2


def kube_reserved_memory_mib(instance: InstanceType) -> int:
    return KUBE_RESERVED_MIB_PER_POD * max_pods(instance) + KUBE_RESERVED_BASE_MIB


# --------------------------------------------------------------------- pods on every node
# Vendored DaemonSets: requests are read from the manifests; where each lands is the rule of
# platform_constructs/hyperpod_dependencies.py `render_components` (device plugins and the
# health agent pinned to the configured types with that device).
VENDORED_PLACEMENT: dict[str, Placement] = {
    "nvidia-device-plugin-daemonset": "nvidia",
    "aws-efa-k8s-device-plugin": "efa",
    "neuron-device-plugin-daemonset": "neuron",
    "health-monitoring-agent": "nvidia",
    "health-monitoring-agent-non-nvidia": "neuron",
}


@functools.cache
def vendored_daemonsets(manifest_dir: Path = MANIFEST_DIR) -> tuple[PodRequests, ...]:
    """Every DaemonSet of the vendored manifests with its requests; KeyError for one whose
    placement `VENDORED_PLACEMENT` does not know (a new DaemonSet needs its rule). Read once
    per process: every node model of every group and job asks for them."""
    found = []
    for path in sorted(manifest_dir.glob("*.yaml")):
        with path.open(encoding="utf-8") as handle:
            docs = [doc for doc in yaml.safe_load_all(handle) if doc]
        for doc in docs:
            if doc["kind"] != "DaemonSet":
                continue
            name = doc["metadata"]["name"]
            if name not in VENDORED_PLACEMENT:
                raise KeyError(
                    f"DaemonSet {name} ({path.name}) has no placement in "
                    "config.node_model.VENDORED_PLACEMENT"
                )
            cpu, memory = pod_requests(doc["spec"]["template"]["spec"])
            found.append(
                PodRequests(
                    name=name,
                    cpu_millicores=cpu,
                    memory_mib=memory,
                    placement=VENDORED_PLACEMENT[name],
                    source=f"config/manifests/{path.name}",
                )
            )
    return tuple(found)


def installed_addons(config: EnvironmentConfig) -> frozenset[str]:
    """The add-ons the environment's stacks create (platform.py: governance and observability
    only with their sections)."""
    skipped = set()
    if config.governance is None:
        skipped |= {a.name for a in ADDONS.values() if a.stack == "governance"}
    if config.observability is None:
        skipped |= {a.name for a in ADDONS.values() if a.stack == "observability"}
    return frozenset(ADDONS) - skipped


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True, kw_only=True)
class JobAllocation:
    """What a training job's pod requests on its node besides its devices."""

    cpu_millicores: int
    memory_mib: int
    hugepages_2mi_mib: int = 0


@dataclass(frozen=True, kw_only=True)
class NodeModel:
    """One node of an instance group, as Kubernetes and a job see it."""

    group: str
    instance: InstanceType
    threads_per_core: int
    count: int
    tiered_storage_percent: int
    daemonsets: tuple[PodRequests, ...]
    # The platform's Deployments that may be scheduled here: nothing pins them to the system
    # groups (the add-ons' configuration sets no node selector), and the scheduler favours
    # the emptiest nodes, so on an accelerated group without a hard taint a job leaves room
    # for all of them; else a coredns replica on the node would keep the job Pending.
    shared_system_pods: tuple[PodRequests, ...] = ()

    @property
    def cpus(self) -> int:
        """CPUs the OS (and the kubelet) sees: the type's cores times the threads per core the
        group runs, at most the hardware's (a GB200's Grace cores have one)."""
        hardware = self.instance.threads_per_core
        return self.instance.vcpus // hardware * min(self.threads_per_core, hardware)

    @property
    def memory_mib(self) -> int:
        """The kubelet's memory capacity: nominal memory less the VM overhead."""
        return int(self.instance.memory_gib * MIB_PER_GIB * (1 - VM_MEMORY_OVERHEAD))

    @property
    def kube_reserved_cpu_millicores(self) -> int:
        return kube_reserved_cpu_millicores(self.cpus)

    @property
    def kube_reserved_memory_mib(self) -> int:
        return kube_reserved_memory_mib(self.instance)

    @property
    def allocatable_cpu_millicores(self) -> int:
        return self.cpus * 1000 - self.kube_reserved_cpu_millicores - SYSTEM_RESERVED_CPU_MILLICORES

    @property
    def allocatable_memory_mib(self) -> int:
        return (
            self.memory_mib
            - self.kube_reserved_memory_mib
            - SYSTEM_RESERVED_MEMORY_MIB
            - EVICTION_HARD_MEMORY_MIB
            - HUGEPAGES_2MI_MIB
        )

    @property
    def tiered_storage_mib(self) -> int:
        """Memory HyperPod's checkpoint memory service takes, outside any pod."""
        return self.instance.memory_gib * MIB_PER_GIB * self.tiered_storage_percent // 100

    @property
    def daemonset_cpu_millicores(self) -> int:
        return sum(d.cpu_millicores for d in self.daemonsets)

    @property
    def daemonset_memory_mib(self) -> int:
        return sum(d.memory_mib for d in self.daemonsets)

    @property
    def free_cpu_millicores(self) -> int:
        """What pods other than the DaemonSets may request on the node."""
        return self.allocatable_cpu_millicores - self.daemonset_cpu_millicores

    @property
    def free_memory_mib(self) -> int:
        return self.allocatable_memory_mib - self.daemonset_memory_mib - self.tiered_storage_mib

    @property
    def shared_system_pod_cpu_millicores(self) -> int:
        return sum(p.cpu_millicores * p.replicas for p in self.shared_system_pods)

    @property
    def shared_system_pod_memory_mib(self) -> int:
        return sum(p.memory_mib * p.replicas for p in self.shared_system_pods)

    @property
    def job(self) -> JobAllocation:
        """What the node has left once the DaemonSets, and the system pods that may share
        it, have theirs."""
        return JobAllocation(
            cpu_millicores=self.free_cpu_millicores - self.shared_system_pod_cpu_millicores,
            memory_mib=self.free_memory_mib - self.shared_system_pod_memory_mib,
            hugepages_2mi_mib=HUGEPAGES_2MI_MIB,
        )


def _lands_on(group: InstanceGroupConfig) -> Callable[[PodRequests], bool]:
    instance = lookup(group.instance_type)
    kinds: set[str] = {"every"}
    if instance.accelerator in ("nvidia", "neuron"):
        kinds.add(instance.accelerator)
    if group.interface is not None:
        kinds.add("efa")
    return lambda pod: pod.placement in kinds


def node_model(
    config: EnvironmentConfig,
    group: InstanceGroupConfig,
    *,
    addon_daemonsets: Iterable[PodRequests] = ADDON_DAEMONSETS,
) -> NodeModel:
    """The model of one node of `group` in the environment `config`."""
    addons = installed_addons(config)
    candidates = (
        *vendored_daemonsets(),
        *(d for d in addon_daemonsets if d.addon in addons),
    )
    tiered = config.hyperpod.tiered_storage
    return NodeModel(
        group=group.name,
        instance=lookup(group.instance_type),
        threads_per_core=group.threads_per_core,
        count=group.count,
        tiered_storage_percent=tiered.memory_percent if tiered.enabled else 0,
        daemonsets=tuple(filter(_lands_on(group), candidates)),
        shared_system_pods=system_pods(config) if _takes_system_pods(group) else (),
    )


def _takes_system_pods(group: InstanceGroupConfig) -> bool:
    """Whether the platform's Deployments may land on an accelerated group's nodes: none
    of them tolerates a hard taint of the group's own."""
    hard = {"NoSchedule", "NoExecute"}
    return lookup(group.instance_type).has_accelerators and not any(
        taint.effect in hard for taint in group.taints
    )


def node_models(config: EnvironmentConfig, **kwargs: Any) -> list[NodeModel]:
    """One model per instance group, in config order."""
    return [node_model(config, g, **kwargs) for g in config.hyperpod.instance_groups]


def group_model(config: EnvironmentConfig, group_name: str) -> NodeModel:
    (group,) = (g for g in config.hyperpod.instance_groups if g.name == group_name)
    return node_model(config, group)


def system_pods(
    config: EnvironmentConfig, *, pods: Iterable[PodRequests] = SYSTEM_PODS
) -> tuple[PodRequests, ...]:
    """The platform's Deployments the environment installs."""
    addons = installed_addons(config)
    return tuple(p for p in pods if p.addon in addons)


def format_cpu(millicores: int) -> str:
    """CPUs as Kubernetes counts them: 94.7, 0.31."""
    return f"{millicores / 1000:g}"


def format_memory(mib: int) -> str:
    """MiB below a GiB, GiB to one decimal above."""
    if abs(mib) < MIB_PER_GIB:
        return f"{mib} MiB"
    return f"{mib / MIB_PER_GIB:.1f} GiB"


def system_fit_problem(
    models: Sequence[NodeModel], pods: Iterable[PodRequests]
) -> tuple[str, str] | None:
    """(field, message) when the platform's Deployments `pods` do not fit on the nodes of
    the groups without accelerators (first fit, largest first); None when they do or when
    the environment declares no such group (then they share the accelerated nodes).
    `models`: every group's, in config order (the field names its index)."""
    system = [(index, m) for index, m in enumerate(models) if not m.instance.has_accelerators]
    if not system:
        return None
    pods = tuple(pods)
    free = [[m.free_cpu_millicores, m.free_memory_mib] for _, m in system for _ in range(m.count)]
    replicas = sorted(
        (p for p in pods for _ in range(p.replicas)),
        key=lambda p: (p.cpu_millicores, p.memory_mib),
        reverse=True,
    )
    unplaced = []
    for pod in replicas:
        node = next(
            (n for n in free if n[0] >= pod.cpu_millicores and n[1] >= pod.memory_mib), None
        )
        if node is None:
            unplaced.append(pod)
            continue
        node[0] -= pod.cpu_millicores
        node[1] -= pod.memory_mib
    if not unplaced:
        return None
    index, model = system[0]
    need_cpu = sum(p.cpu_millicores * p.replicas for p in pods)
    need_memory = sum(p.memory_mib * p.replicas for p in pods)
    have_cpu = sum(m.free_cpu_millicores * m.count for _, m in system)
    have_memory = sum(m.free_memory_mib * m.count for _, m in system)
    names = ", ".join(sorted({p.name for p in unplaced}))
    return (
        f"hyperpod.instance_groups[{index}].instance_type",
        f"the platform's system pods need {format_cpu(need_cpu)} CPU and "
        f"{format_memory(need_memory)}, but the groups without accelerators leave "
        f"{format_cpu(max(have_cpu, 0))} CPU and {format_memory(max(have_memory, 0))} after "
        f"the kubelet's reservations, tiered storage and DaemonSets ({names} would not fit); "
        "use a larger "
        f"type than {model.instance.name}, more nodes, or threads_per_core: 2",
    )


def job_fit_problem(models: Sequence[NodeModel]) -> tuple[str, str] | None:
    """(field, message) for the first group with accelerators whose nodes leave a job no CPU
    or no memory; None when every such group leaves both. `models`: every group's, in
    config order (the field names its index)."""
    for index, model in enumerate(models):
        if not model.instance.has_accelerators:
            continue
        job = model.job
        if job.cpu_millicores > 0 and job.memory_mib > 0:
            continue
        if job.memory_mib <= 0 and model.tiered_storage_percent:
            return (
                "hyperpod.tiered_storage.memory_percent",
                f"{model.tiered_storage_percent}% of {model.group}'s memory for tiered storage "
                f"leaves its jobs {format_memory(job.memory_mib)} after the kubelet's "
                "reservations and DaemonSets; use a lower percentage",
            )
        return (
            f"hyperpod.instance_groups[{index}].instance_type",
            f"{model.instance.name} leaves a job {format_cpu(job.cpu_millicores)} CPU and "
            f"{format_memory(job.memory_mib)} after the kubelet's reservations and DaemonSets; "
            "use a larger type",
        )
    return None
