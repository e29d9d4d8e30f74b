"""config.node_model: the kubelet's reservations as the EKS AMI computes them, what each
group's nodes leave a job, and whether the platform's own pods fit on the system nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config.addons import ADDONS
from config.instance_types import lookup
from config.node_model import (
    ADDON_DAEMONSETS,
    SYSTEM_PODS,
    NodeModel,
    PodRequests,
    group_model,
    kube_reserved_cpu_millicores,
    kube_reserved_memory_mib,
    max_pods,
    node_models,
    system_fit_problem,
    vendored_daemonsets,
)
from tests.support import environment, variant_of

ENVIRONMENTS = ("dev", "staging", "prod")


def test_kube_reserved_matches_nodeadm_for_a_two_core_node() -> None:
    # awslabs/amazon-eks-ami nodeadm/test/e2e/cases/kubelet-config-dir/expected-kubelet-config
    # .json: maxPods 58 (an m5.xlarge: 4 ENIs x 14 + 2) and a 2-core host.
    m5 = lookup("ml.m5.xlarge")
    assert max_pods(m5) == 58
    assert kube_reserved_memory_mib(m5) == 893
    assert kube_reserved_cpu_millicores(2) == 70


@pytest.mark.parametrize(
    ("cpus", "millicores"),
    # 60 + 10 + 2 x 5 for the first four cores, 2.5 for every further one.
    [(1, 60), (2, 70), (4, 80), (24, 130), (96, 310), (192, 550)],
)
def test_kube_reserved_cpu_follows_the_bands(cpus: int, millicores: int) -> None:
    assert kube_reserved_cpu_millicores(cpus) == millicores


def test_one_thread_per_core_halves_the_cpus_kubernetes_sees() -> None:
    prod = environment("prod").config
    assert group_model(prod, "gpu-p5").cpus == 96
    two = variant_of(
        "prod", lambda d: d["hyperpod"]["instance_groups"][0].update(threads_per_core=2)
    )
    assert group_model(two.config, "gpu-p5").cpus == 192


def test_p5_job_leaves_room_for_the_kubelet_tiered_storage_and_daemonsets() -> None:
    model = group_model(environment("prod").config, "gpu-p5")
    assert model.tiered_storage_percent == 20
    assert model.tiered_storage_mib == 2048 * 1024 // 5
    names = {d.name for d in model.daemonsets}
    assert {"aws-efa-k8s-device-plugin", "health-monitoring-agent", "aws-node"} <= names
    assert "neuron-device-plugin-daemonset" not in names
    job = model.job
    # Nothing pins coredns, Kueue and the other controllers to the system group.
    assert {p.name for p in model.shared_system_pods} >= {"coredns", "kueue-controller-manager"}
    assert job.cpu_millicores == (
        model.allocatable_cpu_millicores
        - model.daemonset_cpu_millicores
        - model.shared_system_pod_cpu_millicores
    )
    assert job.memory_mib == (
        model.allocatable_memory_mib
        - model.daemonset_memory_mib
        - model.tiered_storage_mib
        - model.shared_system_pod_memory_mib
    )
    assert 0 < job.cpu_millicores < 96_000
    assert job.hugepages_2mi_mib == 0


def test_a_hard_taint_keeps_system_pods_off_an_accelerated_group() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    # Custom taints exclude deep health checks (the schema's rule).
    tainted = variant_of(
        "prod",
        lambda d: d["hyperpod"]["instance_groups"][0].update(taints=[taint], deep_health_checks=[]),
    )
    assert group_model(tainted.config, "gpu-p5").shared_system_pods == ()
    assert group_model(environment("prod").config, "system").shared_system_pods == ()


def test_tiered_storage_raised_leaves_a_job_less_memory() -> None:
    base = group_model(environment("prod").config, "gpu-p5").job
    raised = variant_of("prod", lambda d: d["hyperpod"]["tiered_storage"].update(memory_percent=40))
    assert group_model(raised.config, "gpu-p5").job.memory_mib < base.memory_mib


def test_a_daemonset_added_to_the_table_is_taken_from_every_node() -> None:
    config = environment("dev").config
    extra = PodRequests(name="x", cpu_millicores=100, memory_mib=64, addon="vpc-cni", source="t")
    before = node_models(config)
    after = node_models(config, addon_daemonsets=(*ADDON_DAEMONSETS, extra))
    for old, new in zip(before, after, strict=True):
        assert new.job.cpu_millicores == old.job.cpu_millicores - 100
        assert new.job.memory_mib == old.job.memory_mib - 64


def test_a_vendored_daemonset_without_a_placement_is_refused(tmp_path: Path) -> None:
    (tmp_path / "new.yaml").write_text(
        "kind: DaemonSet\nmetadata: {name: new-agent}\n"
        "spec: {template: {spec: {containers: []}}}\n",
        encoding="utf-8",
    )
    with pytest.raises(KeyError, match="new-agent"):
        vendored_daemonsets(tmp_path)


def test_vendored_requests_are_read_from_the_manifests() -> None:
    requests = {d.name: (d.cpu_millicores, d.memory_mib) for d in vendored_daemonsets()}
    assert requests["health-monitoring-agent"] == (500, 512)
    assert requests["aws-efa-k8s-device-plugin"] == (10, 20)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_environment_runs_its_system_pods_on_its_system_nodes(env: str) -> None:
    assert system_fit_problem(environment(env).config) is None


def test_system_pods_that_outgrow_the_system_nodes_are_named() -> None:
    # dev's one m5.xlarge with one thread per core: 2 CPUs.
    config = environment("dev").config
    heavy = PodRequests(name="big-controller", cpu_millicores=1500, memory_mib=1024,
                        addon="coredns", source="t")  # fmt: skip
    problem = system_fit_problem(config, pods=(*SYSTEM_PODS, heavy))
    assert problem is not None
    field, message = problem
    assert field == "hyperpod.instance_groups[1].instance_type"
    assert "big-controller" in message
    assert "ml.m5.xlarge" in message


def test_every_counted_pod_belongs_to_an_add_on_of_the_table() -> None:
    # A renamed row would silently drop its pods from every node model.
    assert {p.addon for p in (*ADDON_DAEMONSETS, *SYSTEM_PODS)} <= set(ADDONS)


@pytest.mark.parametrize(
    ("env", "group", "cpu_millicores", "memory_mib", "kube_reserved"),
    [
        # 96 CPUs (192 vCPUs, one thread per core) - 310m kube-reserved - 1340m DaemonSets
        # - 1140m system pods; 2048 GiB less 7.5%, 1355 MiB kube-reserved, 100 MiB eviction,
        # 20% tiered storage, 1365 MiB DaemonSets, 1564 MiB system pods.
        ("prod", "gpu-p5", 93_210, 1_516_051, (310, 1_355)),
        ("dev", "gpu-g5", 21_390, 170_471, (130, 8_362)),
    ],
)
def test_the_job_figures_of_the_shipped_groups(
    env: str, group: str, cpu_millicores: int, memory_mib: int, kube_reserved: tuple[int, int]
) -> None:
    # Absolute figures, so a wrong constant anywhere in the model fails here.
    model = group_model(environment(env).config, group)
    assert (model.job.cpu_millicores, model.job.memory_mib) == (cpu_millicores, memory_mib)
    assert (model.kube_reserved_cpu_millicores, model.kube_reserved_memory_mib) == kube_reserved


def _gb200_group(threads_per_core: int) -> NodeModel:
    def mutate(data: dict[str, Any]) -> None:
        group = data["hyperpod"]["instance_groups"][0]
        del group["training_plan"]
        group.update(instance_type="ml.p6e-gb200.36xlarge", threads_per_core=threads_per_core)

    return group_model(variant_of("prod", mutate).config, "gpu-p5")


@pytest.mark.parametrize("threads_per_core", [1, 2])
def test_a_grace_node_shows_each_vcpu_as_a_core(threads_per_core: int) -> None:
    # A GB200 instance's 144 vCPUs are Arm cores of one thread: no setting doubles or halves
    # them, where an x86 type's vCPUs are two threads a core.
    assert lookup("ml.p6e-gb200.36xlarge").threads_per_core == 1
    model = _gb200_group(threads_per_core)
    assert model.cpus == 144


def test_the_job_figures_of_a_gb200_node() -> None:
    model = _gb200_group(1)
    # 144 CPUs - 430m kube-reserved (60 + 10 + 2 x 5 + 140 x 2.5) - 1340m DaemonSets - 1140m
    # system pods; 960 GiB less 7.5% = 909,312 MiB, less 2,433 MiB kube-reserved (11 x 198
    # pods + 255), 100 MiB eviction, 20% tiered storage (196,608 MiB), 1,365 MiB DaemonSets,
    # 1,564 MiB system pods.
    job = model.job
    assert (job.cpu_millicores, job.memory_mib) == (141_090, 707_242)
    assert model.kube_reserved_cpu_millicores == 430


def test_node_model_takes_the_nvidia_device_plugins_figures_from_its_manifest() -> None:
    plugin = next(d for d in vendored_daemonsets() if d.name == "nvidia-device-plugin-daemonset")
    assert (plugin.cpu_millicores, plugin.memory_mib) == (50, 64)
    assert plugin.placement == "nvidia"
