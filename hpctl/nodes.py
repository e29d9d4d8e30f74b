"""An environment's node model as `hpctl node-model` shows it: per instance group what a node has,
what the kubelet, tiered storage, the platform's DaemonSets and the system pods that may
share the node take, and what is left for a job (`config.node_model`), then the platform's system pods and whether they fit on the
groups without accelerators. Plain data and text tables; the command is in
`hpctl.nodes_cmd`."""

from __future__ import annotations

from typing import Any

from config.node_model import (
    EVICTION_HARD_MEMORY_MIB,
    SYSTEM_RESERVED_CPU_MILLICORES,
    SYSTEM_RESERVED_MEMORY_MIB,
    format_cpu,
    format_memory,
    system_fit_problem,
)
from config.plan import PlatformPlan
from config.plan import plan as plan_of
from config.schema import EnvironmentConfig
from hpctl.options import text_table


def nodes_report(config: EnvironmentConfig, plan: PlatformPlan | None = None) -> dict[str, Any]:
    """The environment's node model as plain data (the `--json` object): CPU in millicores,
    memory in MiB. `plan`: the environment's (config.plan), planned here when not given."""
    plan = plan if plan is not None else plan_of(config)
    models = list(plan.node_models.values())
    groups = [
        {
            "instance_group": m.group,
            "instance_type": m.instance.name,
            "vcpus": m.instance.vcpus,
            "threads_per_core": m.threads_per_core,
            "cpus": m.cpus,
            "memory_mib": m.memory_mib,
            "kube_reserved": {
                "cpu_millicores": m.kube_reserved_cpu_millicores,
                "memory_mib": m.kube_reserved_memory_mib,
            },
            "system_reserved": {
                "cpu_millicores": SYSTEM_RESERVED_CPU_MILLICORES,
                "memory_mib": SYSTEM_RESERVED_MEMORY_MIB,
            },
            "eviction_memory_mib": EVICTION_HARD_MEMORY_MIB,
            "allocatable": {
                "cpu_millicores": m.allocatable_cpu_millicores,
                "memory_mib": m.allocatable_memory_mib,
            },
            "tiered_storage_mib": m.tiered_storage_mib,
            "daemonsets": [
                {"name": d.name, "cpu_millicores": d.cpu_millicores, "memory_mib": d.memory_mib}
                for d in m.daemonsets
            ],
            # The platform's Deployments a job leaves room for (nothing pins them elsewhere).
            "shared_system_pods": {
                "cpu_millicores": m.shared_system_pod_cpu_millicores,
                "memory_mib": m.shared_system_pod_memory_mib,
            },
            "job": {
                "cpu_millicores": m.job.cpu_millicores,
                "memory_mib": m.job.memory_mib,
                "hugepages_2mi_mib": m.job.hugepages_2mi_mib,
            },
        }
        for m in models
    ]
    problem = system_fit_problem(models, plan.system_pods)
    return {
        "environment": config.environment,
        "groups": groups,
        "system_pods": [
            {
                "name": p.name,
                "replicas": p.replicas,
                "cpu_millicores": p.cpu_millicores,
                "memory_mib": p.memory_mib,
            }
            for p in plan.system_pods
        ],
        # The groups the system pods run on; none: they share the accelerated nodes.
        "system_groups": [m.group for m in models if not m.instance.has_accelerators],
        "system_pods_fit": None if problem is None else f"{problem[0]}: {problem[1]}",
    }


def format_report(report: dict[str, Any]) -> str:
    """`nodes_report` as plain-text tables."""
    lines = [f"Environment {report['environment']}: one node of each instance group", ""]
    lines += text_table(
        [
            "instance group",
            "type",
            "vCPUs",
            "threads/core",
            "CPUs",
            "kube-reserved",
            "system-reserved",
            "eviction",
            "tiered storage",
            "DaemonSets",
            "system pods",
            "job",
        ],
        [
            [
                g["instance_group"],
                g["instance_type"],
                str(g["vcpus"]),
                str(g["threads_per_core"]),
                str(g["cpus"]),
                _pair(g["kube_reserved"]),
                _pair(g["system_reserved"]),
                format_memory(g["eviction_memory_mib"]),
                format_memory(g["tiered_storage_mib"]),
                _pair(_sum(g["daemonsets"])),
                _pair(g["shared_system_pods"]),
                _pair(g["job"]),
            ]
            for g in report["groups"]
        ],
    )
    lines += ["", "DaemonSets per node (CPU / memory)"]
    lines += text_table(
        ["instance group", "DaemonSet", "CPU", "memory"],
        [
            [g["instance_group"], d["name"], format_cpu(d["cpu_millicores"]),
             format_memory(d["memory_mib"])]
            for g in report["groups"]
            for d in g["daemonsets"]
        ],
    )  # fmt: skip
    lines += ["", "System pods (on the groups without accelerators)"]
    lines += text_table(
        ["pod", "replicas", "CPU each", "memory each"],
        [
            [p["name"], str(p["replicas"]), format_cpu(p["cpu_millicores"]),
             format_memory(p["memory_mib"])]
            for p in report["system_pods"]
        ],
    )  # fmt: skip
    fit = report["system_pods_fit"]
    if fit is not None:
        verdict = f"System pods do not fit: {fit}"
    elif report["system_groups"]:
        verdict = f"System pods fit on {', '.join(report['system_groups'])}: yes"
    else:
        verdict = "No group without accelerators: system pods share the accelerated nodes"
    lines += ["", verdict]
    return "\n".join(lines) + "\n"


def _sum(pods: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "cpu_millicores": sum(p["cpu_millicores"] for p in pods),
        "memory_mib": sum(p["memory_mib"] for p in pods),
    }


def _pair(figures: dict[str, int]) -> str:
    """`CPU / memory`, e.g. `0.31 CPU / 1.3 GiB`."""
    return f"{format_cpu(figures['cpu_millicores'])} CPU / {format_memory(figures['memory_mib'])}"
